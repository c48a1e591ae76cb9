//! The worker's events as log lines: one per job outcome at INFO or above, with the
//! fields an operator filters on.

use formica_core::worker::Event;
use std::sync::Arc;

/// A subscriber to worker events (job start, success, failure, completion, worker start
/// and stop, ...), called in the loop: keep it quick (count, send to a channel).
pub type Hook = Arc<dyn Fn(&Event) + Send + Sync>;

/// One line per job outcome at INFO or above (the start at DEBUG), with the fields an
/// operator filters on; `duration_ms` is how long the task ran.
pub(crate) fn log_event(event: &Event, worker_id: &str) {
    match event {
        Event::WorkerStart { .. } => tracing::info!(worker_id, "worker started"),
        Event::WorkerStop { .. } => tracing::info!(worker_id, "worker stopped"),
        Event::JobStart { job_id, task, queue, attempt } => {
            tracing::debug!(worker_id, job_id, task, queue, attempt, "job started")
        }
        Event::OutcomesAbandoned { job_ids } => tracing::error!(
            worker_id,
            ?job_ids,
            "stopping without recording these jobs' outcomes: the database did not take them in time; \
             they stay locked until a sweep frees them, then run again"
        ),
        Event::JobUndecodable { job_id, error } => {
            tracing::error!(
                worker_id,
                job_id,
                "the job's row could not be read, failing this attempt: {error}"
            )
        }
        Event::JobSuccess { job_id, task, queue, attempt, duration } => {
            let duration_ms = millis(duration);
            // The job is completed once that is written (unless `OutcomeFenced` says otherwise).
            tracing::info!(worker_id, job_id, task, queue, attempt, duration_ms, "task succeeded")
        }
        Event::JobSkipped { job_id, task, queue, attempt, reason } => {
            // Completed unrun, by a run layer's decision (see `crate::middleware`).
            tracing::info!(worker_id, job_id, task, queue, attempt, reason, "job skipped by middleware")
        }
        Event::OutcomeFenced { job_id, holder } => match holder {
            Some(holder) => tracing::warn!(
                worker_id,
                job_id,
                holder,
                "outcome not written: the job was taken from this worker (its lease lapsed) and \
                 {holder} holds it now; its run settles the job"
            ),
            None => tracing::warn!(
                worker_id,
                job_id,
                "outcome not written: the job is no longer this worker's (its lease lapsed, or \
                 the write had landed before this retry); no worker holds it now"
            ),
        },
        Event::JobError { job_id, error, attempt, max_attempts, task, queue, duration, retry_at } => {
            // The last attempt's failure is logged once, as `JobPermanentlyFailed`.
            let Some(retry_at) = retry_at.map(|at| at.to_rfc3339()) else { return };
            let duration_ms = millis(duration);
            tracing::warn!(
                worker_id,
                job_id,
                task,
                queue,
                attempt,
                max_attempts,
                duration_ms,
                retry_at,
                error,
                "job failed, will retry"
            )
        }
        Event::JobPermanentlyFailed { job_id, error, task, queue, attempt, duration } => {
            let duration_ms = millis(duration);
            tracing::error!(
                worker_id,
                job_id,
                task,
                queue,
                attempt,
                duration_ms,
                error,
                "job failed permanently (out of attempts)"
            )
        }
        Event::JobReturned { job_id, task, queue, attempt, duration } => {
            let duration_ms = millis(duration);
            tracing::info!(
                worker_id,
                job_id,
                task,
                queue,
                attempt,
                duration_ms,
                "job aborted on shutdown and returned to the queue"
            )
        }
        Event::Shutdown { graceful, running } => match graceful {
            true => tracing::info!(worker_id, running, "stopping: running jobs may finish"),
            false => tracing::warn!(worker_id, running, "stopping now: running jobs are aborted"),
        },
        Event::DatabaseError { statement, error } => {
            tracing::warn!(worker_id, statement, error, "database error, will retry")
        }
        Event::ListenerDown { error, retry_at } => {
            let retry_at = retry_at.to_rfc3339();
            tracing::warn!(worker_id, retry_at, error, "LISTEN connection down, polling meanwhile")
        }
        Event::GaveUp { statement, error } => {
            tracing::error!(worker_id, statement, error, "giving up, retrying cannot help")
        }
        Event::BreakingMigration { migration } => tracing::error!(
            worker_id,
            migration,
            "the database got a breaking migration newer than this Formica knows: stopping"
        ),
        Event::SchemaReinstalled { migration } => tracing::warn!(
            worker_id,
            migration,
            "a breaking migration this Formica knows was applied again (the schema, or another \
             one in this database, was installed anew): going on"
        ),
        Event::LeaseLapsing => tracing::warn!(
            worker_id,
            "no heartbeat landed for a lease: fetching and starting nothing until one does"
        ),
        Event::LeaseRenewed => tracing::info!(worker_id, "heartbeat landed: lease renewed, going on"),
        Event::LoopWedged { since, limit } => {
            let (since, limit_s) = (since.to_rfc3339(), limit.num_seconds());
            tracing::error!(
                worker_id,
                since,
                limit_s,
                "the worker's loop has not turned for the watchdog's limit (a deadlock, or a hook or \
                 flags function that never returns): its lease is no longer renewed, so its jobs will \
                 run on other workers"
            )
        }
        Event::LoopResumed => tracing::warn!(worker_id, "the worker's loop turns again: renewing its lease"),
        Event::ListenerUp => tracing::debug!(worker_id, "LISTEN connection up"),
        Event::FlowChanged { paused, capped } if paused.is_empty() => {
            let capped = capped.join(", ");
            // Every start reads the flow controls: only a pause is news at INFO.
            tracing::debug!(worker_id, capped, "nothing paused: fetching every task this worker runs")
        }
        Event::FlowChanged { paused, capped } => {
            let (paused, capped) = (paused.join(", "), capped.join(", "));
            tracing::warn!(worker_id, paused, capped, "paused: starting none of these jobs until resumed")
        }
        Event::ScheduleUnreadable { identifier, line, error } => tracing::warn!(
            worker_id,
            schedule = identifier,
            line,
            error,
            "runtime schedule '{identifier}' cannot be read, not scheduling it (put it again): {error}"
        ),
        Event::JobsGivenBack { count } => tracing::debug!(worker_id, count, "giving jobs back unrun"),
        Event::LockSweep { .. } => tracing::debug!(worker_id, "freeing locks of dead workers"),
        Event::CronSchedule { at, backfilled, jobs } => {
            let at = at.to_rfc3339();
            tracing::debug!(worker_id, at, backfilled, jobs, "adding the jobs of a cron minute")
        }
        Event::JobComplete { .. } | Event::FetchStart { .. } | Event::FetchEmpty => {
            tracing::trace!(worker_id, ?event, "worker event")
        }
        Event::JobSnoozed { job_id, task, queue, attempt, until } => {
            let until = until.to_rfc3339();
            tracing::info!(worker_id, job_id, task, queue, attempt, until, "job snoozed (attempt refunded)")
        }
        // Events added after this driver was written.
        _ => tracing::debug!(worker_id, ?event, "worker event"),
    }
}

/// Milliseconds, fractional (a task may take less than one).
fn millis(duration: &chrono::Duration) -> f64 {
    duration.num_microseconds().map_or(f64::MAX, |us| us as f64 / 1000.0)
}
