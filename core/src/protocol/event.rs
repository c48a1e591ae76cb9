//! [`Event`]: what the worker reports, for logs, metrics and hooks.

use crate::time::Timestamp;
use chrono::Duration;

/// Something the worker reports, for logs, metrics and hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The worker started.
    WorkerStart {
        /// Its id.
        worker_id: String,
    },
    /// The worker stopped: nothing of it is running or pending any more.
    WorkerStop {
        /// Its id.
        worker_id: String,
    },
    /// A task started.
    JobStart {
        /// The job.
        job_id: i64,
        /// Its task.
        task: String,
        /// Its named queue, if any.
        queue: Option<String>,
        /// The attempt (1 for the first).
        attempt: i16,
    },
    /// A task succeeded (the job is completed once that is written: see [`Event::OutcomeFenced`]).
    JobSuccess {
        /// The job.
        job_id: i64,
        /// Its task.
        task: String,
        /// Its named queue, if any.
        queue: Option<String>,
        /// The attempt that succeeded.
        attempt: i16,
        /// How long the task ran (by the machine's clock).
        duration: Duration,
    },
    /// A middleware layer skipped the task without running it (or turned its outcome into a
    /// skip): the job is completed, as after a success, and `reason` says why.
    JobSkipped {
        /// The job.
        job_id: i64,
        /// Its task.
        task: String,
        /// Its named queue, if any.
        queue: Option<String>,
        /// The attempt that was skipped.
        attempt: i16,
        /// Why, in the layer's words.
        reason: String,
    },
    /// A task failed (it will be retried unless out of attempts).
    JobError {
        /// The job.
        job_id: i64,
        /// The error.
        error: String,
        /// The attempt that failed.
        attempt: i16,
        /// Attempts allowed.
        max_attempts: i16,
        /// Its task.
        task: String,
        /// Its named queue, if any.
        queue: Option<String>,
        /// How long the task ran.
        duration: Duration,
        /// When it runs again by this worker's clock (the database computes the stored
        /// time from its own unless `use_local_time`); `None`: out of attempts.
        retry_at: Option<Timestamp>,
    },
    /// A task failed its last attempt: the job will not run again.
    JobPermanentlyFailed {
        /// The job.
        job_id: i64,
        /// The error.
        error: String,
        /// Its task.
        task: String,
        /// Its named queue, if any.
        queue: Option<String>,
        /// The last attempt.
        attempt: i16,
        /// How long the task ran.
        duration: Duration,
    },
    /// A running task was aborted (a forced or timed-out shutdown): the job goes back, attempt refunded.
    JobReturned {
        /// The job.
        job_id: i64,
        /// Its task.
        task: String,
        /// Its named queue, if any.
        queue: Option<String>,
        /// The attempt that was cut short (it is refunded).
        attempt: i16,
        /// How long the task ran.
        duration: Duration,
    },
    /// A locked job's row could not be read: the job is failed with `error` (the rest of its batch runs).
    JobUndecodable {
        /// The job.
        job_id: i64,
        /// What could not be read, naming the column.
        error: String,
    },
    /// A task ended, whichever way (its outcome is being written).
    JobComplete {
        /// The job.
        job_id: i64,
    },
    /// The outcome of `job_id` was not written: this worker no longer held the job (its lease
    /// lapsed and the job was freed, maybe taken by `holder`), so the run that holds it now
    /// settles it.
    OutcomeFenced {
        /// The job.
        job_id: i64,
        /// The worker holding it now (`None`: no one, or the job is gone).
        holder: Option<String>,
    },
    /// A fetch is sent (its answer: the jobs, `FetchEmpty`, or a `DatabaseError`).
    FetchStart {
        /// Most jobs it may lock.
        limit: usize,
    },
    /// A fetch found no job.
    FetchEmpty,
    /// Jobs locked by this worker and not run (prefetched ones at shutdown or after waiting
    /// too long in the local queue, aborted ones) are being given back.
    JobsGivenBack {
        /// How many.
        count: usize,
    },
    /// No heartbeat sent in the last [`LEASE`](crate::worker::LEASE) has landed: the lease
    /// may have lapsed, and other workers may free this worker's jobs. Until one lands, the
    /// worker fetches and starts nothing; its prefetched jobs are given back.
    LeaseLapsing,
    /// A heartbeat landed after [`Event::LeaseLapsing`]: the worker goes on.
    LeaseRenewed,
    /// The worker's loop has not turned since `since`, `limit` ago or more (a deadlock, a
    /// hook that never returns): its lease is no longer renewed, so its jobs will be
    /// recovered by other workers (from the lease's keeper, [`crate::lease`]).
    LoopWedged {
        /// The loop's latest turn.
        since: Timestamp,
        /// The watchdog's limit.
        limit: Duration,
    },
    /// The loop turned again after [`Event::LoopWedged`]: the lease is renewed again.
    LoopResumed,
    /// The sweep that frees jobs and queues locked by workers that died is sent.
    LockSweep {
        /// Locks older than this are freed (`None`: the database clock's four hours ago).
        locked_before: Option<Timestamp>,
    },
    /// The jobs of one cron minute are being added (once across every worker).
    CronSchedule {
        /// The minute.
        at: Timestamp,
        /// Found by the start-up backfill of missed minutes.
        backfilled: bool,
        /// How many items are due that minute.
        jobs: usize,
    },
    /// A runtime schedule's stored row cannot be taken (its line does not parse, or is not
    /// one item with the row's identifier): the worker does not schedule it. Reported once
    /// per row and text; a put with a valid line replaces it.
    ScheduleUnreadable {
        /// The row's identifier.
        identifier: String,
        /// Its stored line.
        line: String,
        /// Why it cannot be taken.
        error: String,
    },
    /// A pass of the history pruner removed something.
    HistoryPruned {
        /// Day partitions dropped.
        dropped: i32,
        /// Rows deleted from the default partitions.
        deleted: i64,
    },
    /// A pass of the workflows' resolver settled workflow jobs other workers ran.
    WorkflowsResolved {
        /// How many.
        settled: u64,
    },
    /// A pass of the reindexing chore rebuilt a bloated index of the jobs table.
    IndexRebuilt {
        /// The index.
        index: String,
    },
    /// A pass of the aging chore raised the priority of waiting jobs.
    PrioritiesAged {
        /// How many.
        raised: u64,
    },
    /// A statement failed; it is retried.
    DatabaseError {
        /// What failed.
        statement: &'static str,
        /// The error.
        error: String,
    },
    /// `run_once` only: finding jobs failed in a way retrying cannot fix (no table, no right): it stops.
    GaveUp {
        /// What failed.
        statement: &'static str,
        /// The error.
        error: String,
    },
    /// The listener is up.
    ListenerUp,
    /// The listener is down; the worker polls until it is back.
    ListenerDown {
        /// Why.
        error: String,
        /// When the next connection attempt is due.
        retry_at: Timestamp,
    },
    /// The worker stopped without waiting for the database any longer: the shutdown's bound
    /// passed with statements still out or outcomes unwritten. These jobs' outcomes were not
    /// recorded: they stay locked by this worker until a sweep frees them, then run again.
    OutcomesAbandoned {
        /// The jobs.
        job_ids: Vec<i64>,
    },
    /// The worker was asked to stop (or stops by itself, after `GaveUp` or `BreakingMigration`):
    /// gracefully, letting running tasks finish, or forcefully, aborting them.
    Shutdown {
        /// Whether running tasks may finish.
        graceful: bool,
        /// Tasks running when it was asked.
        running: usize,
    },
    /// The database got a breaking migration newer than this worker knows
    /// ([`Config::latest_migration`](crate::worker::Config::latest_migration)): running on
    /// could corrupt jobs, so it stops.
    BreakingMigration {
        /// The migration's number.
        migration: i64,
    },
    /// A breaking migration this worker knows was applied again: the schema was installed
    /// anew (dropped and migrated) under it. It goes on: it finds its tasks by identifier, and
    /// registers its crontab again.
    SchemaReinstalled {
        /// The migration's number.
        migration: i64,
    },
    /// The task snoozed: the job runs again at `until` (by the worker's clock), its attempt
    /// refunded and `last_error` kept.
    JobSnoozed {
        /// The job.
        job_id: i64,
        /// Its task.
        task: String,
        /// Its named queue, if any.
        queue: Option<String>,
        /// The attempt that snoozed (it is refunded).
        attempt: i16,
        /// When it runs again.
        until: Timestamp,
    },
    /// The flow controls this worker obeys changed (read at start, then on each change):
    /// what is paused now, as `all`, `task:<name>`, `queue:<name>` (empty: nothing), and
    /// the caps and rate limits, as labels ([`crate::flow::Control::label`]).
    FlowChanged {
        /// The pauses in force.
        paused: Vec<String>,
        /// The caps and rate limits in force.
        capped: Vec<String>,
    },
}
