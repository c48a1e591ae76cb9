//! The driver contract: what a driver feeds the machine ([`Input`]) and carries out ([`Effect`]).
//!
//! # The run loop
//!
//! A driver owns one [`Worker`](crate::worker::Worker) and does, until it sees
//! [`Effect::Stopped`]:
//!
//! 1. drain [`Worker::poll_effect`](crate::worker::Worker::poll_effect) until `None`, carrying
//!    out each effect: run a [`Statement`] and later feed [`Input::QueryDone`] with the same
//!    [`QueryId`]; start a task and later feed [`Input::TaskFinished`]; open the listener and
//!    feed [`Input::ListenerUp`], [`Input::Notification`]s and [`Input::ListenerDown`];
//! 2. wait until the earliest of: an answer, a task's end, a notification, a shutdown
//!    request, or the deadline of [`Worker::poll_timeout`](crate::worker::Worker::poll_timeout)
//!    (then feed [`Input::Timeout`]);
//! 3. feed that one input with the time now (a clock that never goes back:
//!    [`FeedClock`](crate::time::FeedClock)), and go to 1.
//!
//! The deadline moves only after an input: read it again after every drain; a `Timeout` fed
//! early or twice does nothing. Failures are data ([`QueryResult::Err`], a failed
//! [`TaskOutcome`]); `handle` returns `Err` only for a driver bug ([`MisuseError`]). Inputs
//! and effects are not `#[non_exhaustive]`: a driver matches them exhaustively.

mod event;

pub use event::Event;

pub use crate::cron::batch::ScheduleRow;
use crate::cron::batch::{CronBatch, KnownCrontab};
use crate::flow::{Control, Controls};
use crate::job::Job;
use crate::time::Timestamp;

/// The channel graphile-worker notifies when jobs are added (payload: [`crate::notify`]).
pub const JOBS_INSERT: &str = "jobs:insert";
/// The channel a migrator notifies after a migration (payload: [`crate::notify`]).
pub const WORKER_MIGRATE: &str = "worker:migrate";
/// The channel `cancel_jobs` notifies after recording cancel requests for jobs that are
/// locked (running or about to): a wake-up only, its payload empty (the requests are rows,
/// read with [`Statement::ReadCancels`]). Formica's own; graphile-worker does not listen to it.
pub const CANCEL: &str = "formica:cancel";
/// The channel notified when a runtime schedule is added, changed or removed: a wake-up
/// only (the schedules are rows, read with [`Statement::ReadSchedules`]). Formica's own.
pub const SCHEDULES: &str = "formica:schedules";
/// The channel `WorkerUtils::pause`/`resume` notify after changing the flow controls: a
/// wake-up only, its payload empty (the controls are rows, read with [`Statement::ReadFlow`]).
pub const FLOW: &str = "formica:flow";
/// Every channel a worker's listener listens on.
pub const CHANNELS: [&str; 5] = [JOBS_INSERT, WORKER_MIGRATE, CANCEL, SCHEDULES, FLOW];

/// Identifies a query so its result can be matched to it.
pub type QueryId = u64;

/// A failed attempt to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The job.
    pub job_id: i64,
    /// The error, stored as `last_error`.
    pub message: String,
    /// When to try again (`None`: the database computes it from its clock).
    pub run_at: Option<Timestamp>,
    /// No attempt is left after this one, whatever `max_attempts` says (a cancelled job).
    pub permanent: bool,
    /// The payload to store instead (`None`: keep it): a batch job keeps its failed items.
    pub payload: Option<serde_json::Value>,
    /// The retry delay of a task with its own curve, counted like graphile-worker's from
    /// the later of now and `run_at` by the database clock (`None`: graphile-worker's curve,
    /// which the statement computes). Ignored when `run_at` is given.
    pub delay: Option<chrono::Duration>,
}

/// A snoozed job to write: it runs again at `run_at` with its attempt refunded and its
/// `last_error` kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snooze {
    /// The job.
    pub job_id: i64,
    /// How long from now (by the database clock, unless `run_at` says).
    pub delay: chrono::Duration,
    /// When to run again by the worker's clock (`None`: the database's `now()` plus `delay`).
    pub run_at: Option<Timestamp>,
}

/// How long the job history keeps each outcome (`None`: for ever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Completed jobs.
    pub completed: Option<chrono::Duration>,
    /// Jobs that failed for good.
    pub failed: Option<chrono::Duration>,
    /// Cancelled jobs.
    pub cancelled: Option<chrono::Duration>,
}

/// What a fetch asks for ([`Statement::GetJobs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// The locker.
    pub worker_id: String,
    /// The tasks whose jobs to fetch, by identifier: the statement looks their ids up
    /// each time, so a task row deleted and added again (`GC_TASK_IDENTIFIERS`, a schema
    /// installed again) is still found.
    pub task_identifiers: Vec<String>,
    /// Flags to refuse.
    pub forbidden_flags: Vec<String>,
    /// If any, only jobs carrying at least one of these flags are taken (a job without
    /// flags is then refused too). Forbidden flags still refuse a job that has both.
    pub accepted_flags: Vec<String>,
    /// Most jobs to lock.
    pub limit: usize,
    /// The time jobs must be due by (`None`: the database clock).
    pub now: Option<Timestamp>,
    /// Named queues whose jobs are not taken (paused: [`crate::flow`]). Empty: the
    /// plain statement, exactly as without flow control.
    pub excluded_queues: Vec<String>,
    /// The caps of the tasks fetched (each a [`Control`] on running jobs): their jobs
    /// are locked only within the room each cap leaves, counting every job of the task
    /// locked by anyone. Empty: no capped fetch (the plain statement).
    pub caps: Vec<Control>,
    /// The rate limits of the tasks fetched (each a [`Control`] on starts): their jobs
    /// are locked only within the starts each limit has left in its period, and each
    /// lock is logged as a start. Empty: no limited fetch.
    pub limits: Vec<Control>,
    /// The fairness of the tasks fetched (each a [`Control`] of kind
    /// [`Fair`](crate::flow::ControlKind::Fair)): their jobs fill the places the fetch has
    /// round robin across the tenants, and each start advances its tenant's pass.
    pub fair: Vec<Control>,
    /// Find the due jobs one priority at a time (an index range each) rather than in one
    /// scan of the index, which reads every job scheduled for later whenever fewer are
    /// due than asked: sent after a short fetch was slow
    /// ([`SLOW_SHORT_FETCH`](crate::worker::SLOW_SHORT_FETCH)). The same jobs either way.
    pub walk_priorities: bool,
}

/// A statement for the driver to run, with its parameters. Each answers with the
/// [`QueryResult`] variant named in its doc, or [`QueryResult::Err`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    /// Lock up to `limit` runnable jobs for `worker_id` (at most one per named queue),
    /// incrementing their attempts. Answer: `Jobs`.
    GetJobs(FetchRequest),
    /// Delete these jobs (still held by `worker_id`) and release their queues. Answer: `Done`,
    /// or `Fenced` naming the jobs it did not delete.
    CompleteJobs {
        /// The locker.
        worker_id: String,
        /// The jobs.
        ids: Vec<i64>,
        /// Some of them are workflow jobs ([`crate::workflow::FLAG`]): the statement settles
        /// them too. Otherwise it is the plain statement.
        settles_workflow_jobs: bool,
    },
    /// Record failed attempts of jobs still held by `worker_id`, unlock the jobs and their
    /// queues. Answer: `Done`, or `Fenced` naming the jobs it did not write.
    FailJobs {
        /// The locker.
        worker_id: String,
        /// The failures.
        failures: Vec<Failure>,
        /// As for `CompleteJobs`.
        settles_workflow_jobs: bool,
    },
    /// Unlock jobs that will not run now, refunding the attempt. Answer: `Done`.
    ReturnJobs {
        /// The locker.
        worker_id: String,
        /// The jobs.
        ids: Vec<i64>,
    },
    /// Give back every job locked by `worker_id` whose id is not in `known` (attempt
    /// refunded, `run_at` kept, named queue released): jobs a fetch locked for this worker
    /// whose answer was lost. Answer: `Done`.
    ReturnUnknown {
        /// The locker.
        worker_id: String,
        /// The jobs the worker knows it holds: running, waiting, or their outcome being written.
        known: Vec<i64>,
    },
    /// Free jobs and queues locked before `locked_before` (`None`: four hours before the
    /// database clock), each job's lost attempt counted and recorded in `last_error`
    /// ([`crate::worker::stale_error`]). Answer: `Done`.
    ResetLocked {
        /// The cut-off.
        locked_before: Option<Timestamp>,
    },
    /// Record that `worker_id` is alive until `lease` from now by the database clock (see
    /// [`crate::worker::LEASE`]). Answer: `Done`.
    Heartbeat {
        /// The worker.
        worker_id: String,
        /// How long the record holds without another heartbeat.
        lease: chrono::Duration,
    },
    /// By the database clock: mark the leases that lapsed as suspected, and free the jobs
    /// and named queues of the workers whose lease was suspected more than `grace` ago and
    /// not renewed since, forgetting those workers; the attempt counts, recorded in
    /// `last_error` ([`crate::worker::lapsed_error`]), and each job keeps its `run_at` (its
    /// place in its queue). Workers that never heartbeat are not touched.
    /// Settles the cancel requests no worker will carry out: a freed job, or one released
    /// since with attempts left, fails for good as cancelled; requests of released and gone
    /// jobs are forgotten. Answer: `Done`.
    RecoverLapsed {
        /// How long a suspected lease has to be renewed.
        grace: chrono::Duration,
    },
    /// The cancel requests recorded for the jobs `worker_id` holds. Answer: `Cancels`.
    ReadCancels {
        /// The holder.
        worker_id: String,
    },
    /// Make the crontab's identifiers known (new ones with `known_since`). Answer:
    /// `KnownCrontabs` with the rows that existed before.
    RegisterCrontabs {
        /// The items' identifiers.
        identifiers: Vec<String>,
        /// When the worker's cron started.
        known_since: Timestamp,
    },
    /// Add the jobs of one cron minute, each only if this statement advances its item's `last_execution`
    /// to that minute (so each minute is scheduled once across workers). Answer: `Done`.
    ScheduleCron(CronBatch),
    /// Snooze jobs still held by `worker_id`: unlock them and their queues, set `run_at`,
    /// refund the attempt and leave `last_error` as it is. Answer: `Done`, or `Fenced`
    /// naming the jobs it did not write.
    SnoozeJobs {
        /// The locker.
        worker_id: String,
        /// The snoozes.
        snoozes: Vec<Snooze>,
    },
    /// Read the runtime schedules (Formica's `schedules` table). Answer: `Schedules`.
    ReadSchedules,
    /// The flow controls in force ([`crate::flow`]). Answer: `Flow`.
    ReadFlow,
    /// One pass of the history pruner as of `at` (`None`: the database clock): create the
    /// day partitions ahead, drop the days past their outcome's retention, delete rows past
    /// it from the default partitions (a batch at most). Does nothing while another pass
    /// runs. Answer: `Pruned`.
    PruneHistory {
        /// What to keep.
        retention: Retention,
        /// The time the retentions count back from.
        at: Option<Timestamp>,
    },
    /// One pass of the workflows' resolver: settle the released workflow jobs that left the
    /// jobs table without a Formica worker's statement saying so ([`crate::workflow`]),
    /// releasing or cancelling their dependents. Does nothing while another pass runs.
    /// Answer: `Resolved`.
    ResolveWorkflows,
    /// One pass of the opt-in reindexing chore: rebuild the most bloated index of the jobs
    /// table concurrently, if one is bloated and no other pass runs. The driver carries it
    /// out (a concurrent rebuild cannot run in a statement's transaction). Answer:
    /// `Reindexed`.
    ReindexBloated,
    /// Vacuum the jobs table (skipping it if another vacuum holds it), when the fetches'
    /// steps over dead index entries have cost as much as the last vacuum
    /// ([`crate::worker::STEP_COST`]). The driver carries it out (a vacuum cannot run in a
    /// statement's transaction); a role that does not own the table vacuums nothing. Answer:
    /// `Done`.
    VacuumJobs,
    /// One pass of the aging chore ([`crate::aging`]): set the priority of at most `batch`
    /// waiting jobs of the aged tasks (never a locked one), oldest ready first, to their
    /// aged priority. Does nothing while another pass runs. Answer: `Aged`.
    AgePriorities {
        /// The most jobs changed.
        batch: usize,
    },
}

/// A locked job whose row could not be read (a payload nested too deep, a number out of range...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    /// The job.
    pub job_id: i64,
    /// What could not be read, naming the column.
    pub error: String,
}

impl QueryResult {
    /// The answer to `GetJobs` when every row was read.
    pub fn jobs(jobs: Vec<Job>) -> Self {
        QueryResult::Jobs { jobs, undecodable: Vec::new() }
    }

    /// A fetch's jobs and how many of its rows could not be read (`None`: another answer).
    pub fn fetched(&self) -> Option<(&[Job], usize)> {
        match self {
            QueryResult::Jobs { jobs, undecodable } => Some((jobs, undecodable.len())),
            QueryResult::KnownCrontabs(_)
            | QueryResult::Cancels(_)
            | QueryResult::Flow(_)
            | QueryResult::Done
            | QueryResult::Fenced(_)
            | QueryResult::Schedules(_)
            | QueryResult::Pruned { .. }
            | QueryResult::Resolved { .. }
            | QueryResult::Reindexed { .. }
            | QueryResult::Aged { .. }
            | QueryResult::Err(_) => None,
        }
    }
}

/// A job whose outcome a write did not record: the writer no longer held it (its lease
/// lapsed and recovery freed it, or a sweep did, or the write had landed before and this is
/// its retry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fenced {
    /// The job.
    pub job_id: i64,
    /// The worker holding it now (`None`: no one, or the job is gone).
    pub holder: Option<String>,
}

/// A database error, as data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbError {
    /// What the database or the connection said.
    pub message: String,
    /// Whether trying again may succeed (a lost connection, a deadlock).
    pub retryable: bool,
}

/// What a statement returned.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryResult {
    /// Locked jobs, for `GetJobs`.
    Jobs {
        /// The jobs, as the statement returned them.
        jobs: Vec<Job>,
        /// Locked rows that could not be read as jobs: the machine fails each, so no lock is left behind.
        undecodable: Vec<Undecodable>,
    },
    /// The crontab identifiers known before registration, for `RegisterCrontabs`.
    KnownCrontabs(Vec<KnownCrontab>),
    /// `(job id, reason)` of each cancel request, for `ReadCancels`.
    Cancels(Vec<(i64, String)>),
    /// The statement ran.
    Done,
    /// `CompleteJobs` or `FailJobs` ran, but these of its jobs were not this worker's to write.
    Fenced(Vec<Fenced>),
    /// The statement failed.
    Err(DbError),
    /// The runtime schedules, for `ReadSchedules`.
    Schedules(Vec<ScheduleRow>),
    /// The flow controls in force, for `ReadFlow`.
    Flow(Controls),
    /// What a `PruneHistory` pass removed.
    Pruned {
        /// Day partitions dropped.
        dropped: i32,
        /// Rows deleted from the default partitions.
        deleted: i64,
    },
    /// The workflow jobs a `ResolveWorkflows` pass settled.
    Resolved {
        /// How many.
        settled: u64,
    },
    /// The index a `ReindexBloated` pass rebuilt (`None`: none was bloated, or another pass
    /// was running).
    Reindexed {
        /// The index's name.
        index: Option<String>,
    },
    /// The jobs an `AgePriorities` pass changed the priority of.
    Aged {
        /// How many.
        raised: u64,
    },
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    /// It succeeded.
    Ok,
    /// It returned an error.
    Err(String),
    /// A middleware layer decided the job needs no run, for this reason. The job is
    /// completed, as after a success: a skip is the application's decision that the work is
    /// moot (a disabled account), not a failure to retry or to alert on. It is reported as
    /// [`Event::JobSkipped`], never silently.
    Skipped(String),
    /// Items of a batch job failed ([`crate::batch`]): the attempt fails as with `Err`, and
    /// the job keeps only the failed `items` (a JSON array) as its payload.
    ItemsFailed {
        /// What failed, item by item.
        error: String,
        /// The failed items.
        items: serde_json::Value,
    },
    /// It panicked (a failure like any other).
    Panicked(String),
    /// It was aborted after [`Effect::AbortTask`]; the job goes back with its attempt
    /// refunded, unless it was cancelled: it then fails for good.
    Aborted,
    /// It was told to abort ([`Effect::AbortTask`]) and did not stop in time: its handler
    /// blocks its thread and never sees the signal. The driver gives up waiting so the
    /// worker goes on; the attempt fails for good, since another attempt would run beside
    /// the one still holding that thread.
    Unstoppable,
    /// It asked to run again after this delay: the attempt is refunded and `last_error`
    /// kept, within its task's snooze window ([`crate::policy::TaskPolicy::snooze`]);
    /// past the window, the attempt fails instead, saying so.
    Snoozed(chrono::Duration),
    /// It succeeded and its job's completion is already written: the handler committed it
    /// in its own transaction (with its writes, fenced as `CompleteJobs` is). Reported as a
    /// success; the machine writes nothing more for the job.
    Committed,
}

/// A fact for the machine, in the past tense.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The query `id` ended with `result`.
    QueryDone {
        /// The query.
        id: QueryId,
        /// Its result.
        result: QueryResult,
    },
    /// The task of `job_id` (started by [`Effect::StartTask`]) ended.
    TaskFinished {
        /// The job.
        job_id: i64,
        /// How.
        outcome: TaskOutcome,
    },
    /// A notification arrived on the listener.
    Notification {
        /// Its channel.
        channel: String,
        /// Its payload.
        payload: String,
    },
    /// The listener is connected and listening.
    ListenerUp,
    /// The listener's connection ended or could not be made.
    ListenerDown {
        /// Why.
        error: String,
    },
    /// Someone asked the worker to stop (forcefully if not `graceful`).
    ShutdownRequested {
        /// Let running tasks finish first.
        graceful: bool,
    },
    /// The deadline from [`crate::worker::Worker::poll_timeout`] passed (early or spurious ones are harmless).
    Timeout,
    /// A heartbeat of this worker's lease ended (reported by its
    /// [`Keeper`](crate::lease::Keeper), which renews the lease beside the loop).
    Heartbeat {
        /// When it was sent: a landed one holds the lease until [`LEASE`](crate::lease::LEASE) after.
        sent: Timestamp,
        /// Whether the database took it.
        result: Result<(), DbError>,
    },
}

/// A command for the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Run `statement` and answer [`Input::QueryDone`] with the same `id`.
    Query {
        /// Match the answer with this.
        id: QueryId,
        /// What to run.
        statement: Statement,
    },
    /// Run the task for `job` and answer [`Input::TaskFinished`] when it ends.
    StartTask {
        /// The job, as fetched (attempts counts this attempt).
        job: Job,
    },
    /// Abort the task of `job_id` (it answers `TaskFinished` with `Aborted`).
    AbortTask {
        /// The job.
        job_id: i64,
    },
    /// Open the listener (LISTEN on [`CHANNELS`]); report `ListenerUp`, `Notification`s, `ListenerDown`.
    ConnectListener,
    /// Report an event.
    Emit(Event),
    /// The worker has stopped: nothing is running or pending. Nothing follows.
    Stopped,
}

/// Why a deadline is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimerKind {
    /// Look for jobs even though no notification came.
    Poll,
    /// Write batched completions, failures and returns.
    Flush,
    /// Reconnect the listener.
    Listener,
    /// Free locks left by dead workers (the four-hour rule).
    LockSweep,
    /// Renew this worker's lease.
    Heartbeat,
    /// Free the jobs of workers whose lease lapsed.
    Recovery,
    /// Give back prefetched jobs that waited too long.
    LocalQueueTtl,
    /// Abort a task that ran past its timeout.
    TaskTimeout,
    /// Abort running tasks: the graceful shutdown took too long.
    ShutdownGrace,
    /// Try a failed fetch again.
    Retry,
    /// The next cron minute, or a cron statement to try again.
    Cron,
    /// Stop waiting for outcomes the database does not take: the shutdown has waited long enough.
    GiveUpWrites,
    /// Read the flow controls again: the fallback when their notification is lost.
    Flow,
    /// Prune the job history.
    PruneHistory,
    /// Settle the workflow jobs that other workers ran.
    ResolveWorkflows,
    /// Rebuild a bloated index of the jobs table.
    ReindexBloated,
    /// Age the priorities of waiting jobs.
    AgePriorities,
}

impl TimerKind {
    /// Every kind, in the order ties between deadlines are broken.
    pub const ALL: [TimerKind; 17] = [
        TimerKind::Poll,
        TimerKind::Flush,
        TimerKind::Listener,
        TimerKind::LockSweep,
        TimerKind::Heartbeat,
        TimerKind::Recovery,
        TimerKind::LocalQueueTtl,
        TimerKind::TaskTimeout,
        TimerKind::ShutdownGrace,
        TimerKind::Retry,
        TimerKind::Cron,
        TimerKind::GiveUpWrites,
        TimerKind::Flow,
        TimerKind::PruneHistory,
        TimerKind::ResolveWorkflows,
        TimerKind::ReindexBloated,
        TimerKind::AgePriorities,
    ];
}

/// An input the machine cannot make sense of: a bug in the driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MisuseError {
    /// A result for a query that is not pending.
    #[error("result for unknown query {0}")]
    UnknownQuery(QueryId),
    /// A result of the wrong kind for its statement.
    #[error("query {0} answered with a result of the wrong kind")]
    WrongResult(QueryId),
    /// A task ended that was not running.
    #[error("task of job {0} finished but was not running")]
    UnknownTask(i64),
}
