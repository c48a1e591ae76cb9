//! What the checker asks of each statement a worker sends: a fetch only with room and in
//! turn, a failure's retry time as the backoff says, a give-back of a lost fetch's jobs never
//! beside a fetch nor of a job the worker holds, a chore's pass never beside another nor
//! after a shutdown request.

use crate::life::{Grant, Incarnation};
use formica_core::worker::FetchRequest;
use formica_core::worker::{Statement, TaskOutcome};

/// Check `statement`, sent by the incarnation `inc`, before it is pending.
pub(crate) fn sent(inc: &mut Incarnation, statement: &Statement) -> Result<(), String> {
    match statement {
        Statement::GetJobs(FetchRequest { now, worker_id, limit, .. }) => {
            let want = inc.config.use_local_time.then_some(inc.fed);
            if *now != want || *worker_id != inc.worker_id {
                return Err(format!("fetch with now {now:?} by {worker_id}, expected {want:?}"));
            }
            let asked: Vec<usize> = inc
                .pending
                .values()
                .filter_map(|s| match s {
                    Statement::GetJobs(FetchRequest { limit, .. }) => Some(*limit),
                    _ => None,
                })
                .collect();
            // One fetch at a time in direct mode, two with a local queue; each
            // asks for the free slots only, or for what fits in the queue.
            let (most, room) = match inc.config.local_queue_size {
                None => (1, inc.config.concurrency.saturating_sub(inc.running())),
                Some(size) => (2, size.saturating_sub(inc.queued().count() + asked.iter().sum::<usize>())),
            };
            if asked.len() >= most {
                return Err(format!("a fetch with {} in flight", asked.len()));
            }
            if inc.pending.values().any(|s| matches!(s, Statement::ReturnUnknown { .. })) {
                return Err("a fetch while the jobs of a lost fetch are given back".into());
            }
            if *limit == 0 || *limit > room {
                return Err(format!("a fetch of {limit} jobs with room for {room}"));
            }
            // Idle after a short fetch until something happens.
            if inc.last_fetch_short && !inc.woken_since_fetch {
                return Err("fetched again after a short fetch with nothing new".into());
            }
            inc.woken_since_fetch = false;
            inc.last_fetch_short = false;
        }
        Statement::FailJobs { failures, .. } => {
            for f in failures {
                let Some(Grant::Ended { job, clock, .. }) = inc.grants.get(&f.job_id) else {
                    return Err(format!("failure written for job {} not ended", f.job_id));
                };
                let policy = inc.config.policy(&job.task_identifier);
                let want =
                    inc.config.use_local_time.then(|| policy.next_run_at(*clock, job.run_at, job.attempts));
                if f.delay != policy.custom_delay(job.attempts) {
                    return Err(format!(
                        "job {} retry delay {:?}, its task's curve says otherwise",
                        f.job_id, f.delay
                    ));
                }
                if f.run_at != want {
                    return Err(format!("job {} retry at {:?}, backoff says {want:?}", f.job_id, f.run_at));
                }
            }
        }
        // Giving back what a lost fetch locked: never while a fetch is out (its
        // jobs would look unknown), and never a job the worker holds.
        Statement::ReturnUnknown { known, .. } => {
            if inc.pending.values().any(|s| matches!(s, Statement::GetJobs { .. })) {
                return Err("jobs of a lost fetch given back while a fetch is out".into());
            }
            if let Some(held) = inc.grants.keys().find(|id| !known.contains(id)) {
                return Err(format!("job {held} is held, yet given back as unknown"));
            }
        }
        // A snooze runs again when its task asked: by the worker's clock, from when it ended.
        Statement::SnoozeJobs { snoozes, .. } => {
            for s in snoozes {
                let Some(Grant::Ended { outcome: TaskOutcome::Snoozed(delay), clock, .. }) =
                    inc.grants.get(&s.job_id)
                else {
                    return Err(format!("snooze written for job {} that did not snooze", s.job_id));
                };
                let want = inc.config.use_local_time.then(|| *clock + *delay);
                if s.run_at != want || s.delay != *delay {
                    return Err(format!(
                        "job {} snoozed to {:?}/{}, asked {want:?}/{delay}",
                        s.job_id, s.run_at, s.delay
                    ));
                }
            }
        }
        // The chores' promises: never two passes at once, none once the worker stops.
        Statement::PruneHistory { .. }
        | Statement::ResolveWorkflows
        | Statement::ReindexBloated
        | Statement::VacuumJobs
        | Statement::AgePriorities { .. } => {
            let kind = std::mem::discriminant(statement);
            if inc.pending.values().any(|s| std::mem::discriminant(s) == kind) || inc.shutting_down {
                return Err(format!("{statement:?} sent while another was out or after a shutdown request"));
            }
        }
        Statement::RegisterCrontabs { .. }
        | Statement::ScheduleCron(_)
        | Statement::ReadSchedules
        | Statement::CompleteJobs { .. }
        | Statement::ReturnJobs { .. }
        | Statement::Heartbeat { .. }
        | Statement::RecoverLapsed { .. }
        | Statement::ReadCancels { .. }
        | Statement::ReadFlow
        | Statement::ResetLocked { .. } => {}
    }
    Ok(())
}
