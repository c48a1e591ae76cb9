//! The worker as a pure state machine.
//!
//! Shaped like quinn-proto and str0m: the caller feeds facts in with
//! [`Worker::handle`]`(input, now)`, drains commands with [`Worker::poll_effect`] after
//! every input, and sleeps until [`Worker::poll_timeout`] (then feeds
//! [`Input::Timeout`]). Nothing here awaits, reads a clock or touches the database, so the
//! same inputs always give the same effects: a trace of `(now, input)` replays a run.
//!
//! What the machine guarantees (and the tests check):
//! - never more running tasks than `concurrency`, and a job is started at most once for
//!   each time it is fetched;
//! - every started job ends in exactly one completion, failure or return, and those
//!   writes are retried until the database takes them: none is dropped;
//! - one fetch at a time without a local queue, at most two with one (a batch each, never
//!   more than the queue size held or asked for; a job never starts while a fetch sent
//!   before its own is out, and held jobs start in (priority, run_at, id) order); once a
//!   fetch came back short, one at a time, and wake-ups (notifications, finished tasks)
//!   during a fetch cause one more fetch after it, not one each; while running, the poll
//!   timer is always armed, so a lost notification delays a job by at most
//!   `poll_interval`;
//! - its clock never goes back: an earlier `now` than seen before is taken as the latest;
//! - after [`Effect::Stopped`] no effect comes out.

use crate::backoff;
use crate::cron::runner::{CronBatch, CronRunner, KnownCrontab};
use crate::cron::CronItem;
use crate::job::Job;
use crate::notify;
use chrono::{DateTime, Duration, Utc};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A point in time, UTC.
pub type Timestamp = DateTime<Utc>;

/// The default most jobs held in the local queue.
pub const DEFAULT_LOCAL_QUEUE_SIZE: usize = 1000;

/// Most fetches in flight at once with a local queue (direct mode: one).
const MAX_PREFETCHES: usize = 2;

/// Locks older than this belong to dead workers (graphile-worker's "4 hour rule").
pub const STALE_LOCK_AGE: Duration = Duration::hours(4);

/// How a worker behaves. `Default` gives Formica's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The id written to `locked_by` (a pool id in graphile-worker's terms).
    pub worker_id: String,
    /// The tasks this worker can run; it fetches only their jobs.
    pub task_identifiers: Vec<String>,
    /// Most tasks running at once.
    pub concurrency: usize,
    /// How long to wait for a notification before looking for jobs anyway.
    pub poll_interval: Duration,
    /// Most jobs held locked but not yet started (`None`: fetch only for free slots).
    ///
    /// Prefetching keeps the slots busy while PostgreSQL locks the next batch, but jobs in
    /// the local queue are held away from other workers. So the batch adapts: it starts at
    /// `concurrency` and doubles (up to a third of the size) only when the slots ran dry and
    /// a full batch arrives to find them idle, and falls back to `concurrency` when no job
    /// is taken from the queue for `local_queue_ttl` (they are given back). The next batch
    /// is asked for once fewer than a batch wait, at most two fetches at a time, and only
    /// for slots about to idle once a fetch came back short. So a worker holds about what
    /// it runs during one or two fetches: a few ms of work under load, a few times
    /// `concurrency` jobs with slow tasks. Default: 1000; the batch grows only if tasks are
    /// quick.
    pub local_queue_size: Option<usize>,
    /// How long the local queue may hand out no job (every slot busy) before its jobs are
    /// given back.
    pub local_queue_ttl: Duration,
    /// How long completions wait to be written together (zero: at once).
    pub complete_batch_delay: Duration,
    /// How long failures wait to be written together (zero: at once).
    pub fail_batch_delay: Duration,
    /// How long a graceful shutdown waits for running tasks before aborting them.
    pub graceful_shutdown_timeout: Duration,
    /// Jobs with any of these flags are not fetched.
    pub forbidden_flags: Vec<String>,
    /// Send this process's clock with fetches and failures instead of using the database's.
    pub use_local_time: bool,
    /// Stop once no job is runnable (no listener, no lock sweep).
    pub run_once: bool,
    /// The longest wait between attempts to reconnect the listener.
    pub max_listener_backoff: Duration,
    /// Seed of the jitter (lock sweep times, listener backoff).
    pub seed: u64,
    /// Recurring jobs this worker schedules (not in `run_once` mode).
    pub crontab: Vec<CronItem>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            worker_id: String::new(),
            task_identifiers: Vec::new(),
            concurrency: 10,
            poll_interval: Duration::seconds(2),
            local_queue_size: Some(DEFAULT_LOCAL_QUEUE_SIZE),
            local_queue_ttl: Duration::minutes(5),
            complete_batch_delay: Duration::milliseconds(1),
            fail_batch_delay: Duration::milliseconds(1),
            graceful_shutdown_timeout: Duration::seconds(5),
            forbidden_flags: Vec::new(),
            use_local_time: false,
            run_once: false,
            max_listener_backoff: Duration::seconds(60),
            seed: 0x5eed,
            crontab: Vec::new(),
        }
    }
}

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
}

/// A statement for the driver to run, with its parameters. Each answers with the
/// [`QueryResult`] variant named in its doc, or [`QueryResult::Err`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Statement {
    /// Look up (registering the missing ones) the ids of task identifiers. Answer: `Tasks`.
    RegisterTasks {
        /// The identifiers.
        identifiers: Vec<String>,
    },
    /// Lock up to `limit` runnable jobs for `worker_id` (at most one per named queue),
    /// incrementing their attempts. Answer: `Jobs`.
    GetJobs {
        /// The locker.
        worker_id: String,
        /// Task ids to fetch.
        task_ids: Vec<i32>,
        /// Flags to refuse.
        forbidden_flags: Vec<String>,
        /// Most jobs to lock.
        limit: usize,
        /// The time jobs must be due by (`None`: the database clock).
        now: Option<Timestamp>,
    },
    /// Delete these jobs (still held by `worker_id`) and release their queues. Answer: `Done`.
    CompleteJobs {
        /// The locker.
        worker_id: String,
        /// The jobs.
        ids: Vec<i64>,
    },
    /// Record failed attempts, unlock the jobs and their queues. Answer: `Done`.
    FailJobs {
        /// The locker.
        worker_id: String,
        /// The failures.
        failures: Vec<Failure>,
    },
    /// Unlock jobs that will not run now, refunding the attempt. Answer: `Done`.
    ReturnJobs {
        /// The locker.
        worker_id: String,
        /// The jobs.
        ids: Vec<i64>,
    },
    /// Free jobs and queues locked before `locked_before` (`None`: four hours before the
    /// database clock). Answer: `Done`.
    ResetLocked {
        /// The cut-off.
        locked_before: Option<Timestamp>,
    },
    /// Make the crontab's identifiers known (new ones with `known_since`). Answer:
    /// `KnownCrontabs` with the rows that existed before.
    RegisterCrontabs {
        /// The items' identifiers.
        identifiers: Vec<String>,
        /// When the worker's cron started.
        known_since: Timestamp,
    },
    /// Add the jobs of one cron minute, each only if this statement advances its item's
    /// `last_execution` to that minute (so each minute is scheduled once across workers).
    /// Answer: `Done`.
    ScheduleCron(CronBatch),
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
    /// `(id, identifier)` pairs, for `RegisterTasks`.
    Tasks(Vec<(i32, String)>),
    /// Locked jobs, for `GetJobs`.
    Jobs(Vec<Job>),
    /// The crontab identifiers known before registration, for `RegisterCrontabs`.
    KnownCrontabs(Vec<KnownCrontab>),
    /// The statement ran.
    Done,
    /// The statement failed.
    Err(DbError),
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    /// It succeeded.
    Ok,
    /// It returned an error.
    Err(String),
    /// It panicked (a failure like any other).
    Panicked(String),
    /// It was aborted after [`Effect::AbortTask`]; the job goes back with its attempt refunded.
    Aborted,
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
    /// The deadline from [`Worker::poll_timeout`] passed (early or spurious ones are harmless).
    Timeout,
}

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
        /// The attempt (1 for the first).
        attempt: i16,
    },
    /// A task succeeded.
    JobSuccess {
        /// The job.
        job_id: i64,
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
    },
    /// A task failed its last attempt: the job will not run again.
    JobPermanentlyFailed {
        /// The job.
        job_id: i64,
        /// The error.
        error: String,
    },
    /// A task ended, whichever way (its outcome is being written).
    JobComplete {
        /// The job.
        job_id: i64,
    },
    /// A fetch found no job.
    FetchEmpty,
    /// A statement failed; it is retried.
    DatabaseError {
        /// What failed.
        statement: &'static str,
        /// The error.
        error: String,
    },
    /// `run_once` only: finding jobs failed in a way retrying cannot fix (a missing
    /// table, a permission); the worker stops.
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
    /// The database got a breaking migration this worker may not know: it stops.
    BreakingMigration {
        /// The notification's payload.
        payload: String,
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
    /// Open the listener (LISTEN `jobs:insert` and `worker:migrate`) and report
    /// `ListenerUp`, `Notification`s and `ListenerDown`.
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
    /// Free locks left by dead workers.
    LockSweep,
    /// Give back prefetched jobs that waited too long.
    LocalQueueTtl,
    /// Abort running tasks: the graceful shutdown took too long.
    ShutdownGrace,
    /// Try a failed fetch or task registration again.
    Retry,
    /// The next cron minute, or a cron statement to try again.
    Cron,
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

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pending {
    Register,
    Fetch { limit: usize },
    Write(Write),
    Sweep,
    Cron,
}

/// Writes that must reach the database: retried until they do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Write {
    Complete(Vec<i64>),
    Fail(Vec<Failure>),
    Return(Vec<i64>),
}

/// What the machine keeps of a running job: what a failure needs (the job itself goes to
/// the driver, uncloned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Started {
    attempts: i16,
    max_attempts: i16,
    run_at: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// No new fetch; waiting for running tasks, then for the writes.
    Draining,
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listener {
    Off,
    /// Connecting after `failures` failed attempts in a row.
    Connecting {
        failures: u32,
    },
    Up,
    Down {
        failures: u32,
    },
}

/// The worker machine. See the module docs.
#[derive(Debug, Clone)]
pub struct Worker {
    config: Config,
    now: Timestamp,
    phase: Phase,
    task_ids: Option<Vec<i32>>,
    next_query: QueryId,
    pending: BTreeMap<QueryId, Pending>,
    running: BTreeMap<i64, Started>,
    prefetched: VecDeque<Job>,
    /// Tasks told to abort (so each is told once).
    aborting: BTreeSet<i64>,
    /// The local queue gave its jobs back after waiting too long: do not prefetch again
    /// until a slot frees, or the same jobs would go round in circles.
    ttl_expired: bool,
    /// Jobs of a fetch that came back before an earlier one: they join `prefetched` (in
    /// order) once the earlier one is back, so a fetch racing ahead never starts later jobs
    /// first.
    early: Vec<Job>,
    fetch_again: bool,
    /// Jobs per fetch with a local queue (adapts; see `Config::local_queue_size`).
    batch: usize,
    /// A slot freed with no job waiting since the last batch came: a bigger batch may help.
    ran_dry: bool,
    /// The last fetch found fewer jobs than it asked for, and nothing since may have made a
    /// job runnable.
    drained: bool,
    /// The last fetch found fewer jobs than it asked for (wake-ups do not clear this).
    short: bool,
    completions: Vec<i64>,
    failures: Vec<Failure>,
    returns: Vec<i64>,
    /// Consecutive failed writes, for their retry backoff.
    write_failures: u32,
    listener: Listener,
    timers: BTreeMap<TimerKind, Timestamp>,
    effects: VecDeque<Effect>,
    rng: u64,
    /// Present when the worker schedules a crontab.
    cron: Option<CronRunner>,
}

impl Worker {
    /// A worker that starts at `now`: it registers its tasks, connects its listener (unless
    /// `run_once`) and then fetches.
    pub fn new(config: Config, now: Timestamp) -> Self {
        let mut worker = Worker {
            rng: config.seed,
            config,
            now,
            phase: Phase::Running,
            task_ids: None,
            next_query: 0,
            pending: BTreeMap::new(),
            running: BTreeMap::new(),
            prefetched: VecDeque::new(),
            aborting: BTreeSet::new(),
            ttl_expired: false,
            early: Vec::new(),
            fetch_again: false,
            batch: 1,
            ran_dry: false,
            drained: false,
            short: false,
            completions: Vec::new(),
            failures: Vec::new(),
            returns: Vec::new(),
            write_failures: 0,
            listener: Listener::Off,
            timers: BTreeMap::new(),
            effects: VecDeque::new(),
            cron: None,
        };
        worker.emit(Event::WorkerStart { worker_id: worker.config.worker_id.clone() });
        let identifiers = worker.config.task_identifiers.clone();
        worker.query(Pending::Register, Statement::RegisterTasks { identifiers });
        if !worker.config.run_once && !worker.config.crontab.is_empty() {
            worker.cron = Some(CronRunner::new(worker.config.crontab.clone(), now));
        }
        if !worker.config.run_once {
            worker.listener = Listener::Connecting { failures: 0 };
            worker.effects.push_back(Effect::ConnectListener);
            let first_sweep = worker.sweep_delay();
            worker.timers.insert(TimerKind::LockSweep, now + first_sweep);
        }
        // Armed from the start, so a worker whose first fetch never comes back still polls.
        worker.arm_poll();
        worker
    }

    /// The only mutator. Database and task failures arrive as data, never as `Err`; an
    /// `Err` means the driver sent something that cannot be (a bug), and nothing changed.
    pub fn handle(&mut self, input: Input, now: Timestamp) -> Result<(), MisuseError> {
        if self.phase == Phase::Stopped {
            return Ok(());
        }
        self.now = self.now.max(now);
        match input {
            Input::QueryDone { id, result } => self.query_done(id, result)?,
            Input::TaskFinished { job_id, outcome } => self.task_finished(job_id, outcome)?,
            Input::Notification { channel, payload } => self.notification(&channel, payload),
            Input::ListenerUp => {
                if self.listener != Listener::Off {
                    self.listener = Listener::Up;
                    self.emit(Event::ListenerUp);
                    // Jobs may have been added while it was down.
                    self.wake();
                }
            }
            Input::ListenerDown { error } => self.listener_down(error),
            Input::ShutdownRequested { graceful } => self.shutdown(graceful),
            Input::Timeout => self.timeout(),
        }
        self.progress();
        Ok(())
    }

    /// The next command, if any. Drain until `None` after every `handle`.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The earliest deadline and why; feed [`Input::Timeout`] then.
    pub fn poll_timeout(&self) -> Option<(Timestamp, TimerKind)> {
        self.timers.iter().map(|(kind, at)| (*at, *kind)).min()
    }

    /// Tasks running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Whether the worker has stopped.
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// The machine's clock: the latest `now` it was given (it never goes back).
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// When the timer `kind` is due, if it is armed.
    pub fn deadline(&self, kind: TimerKind) -> Option<Timestamp> {
        self.timers.get(&kind).copied()
    }

    fn emit(&mut self, event: Event) {
        self.effects.push_back(Effect::Emit(event));
    }

    fn query(&mut self, pending: Pending, statement: Statement) {
        let id = self.next_query;
        self.next_query += 1;
        self.pending.insert(id, pending);
        self.effects.push_back(Effect::Query { id, statement });
    }

    fn fetching(&self) -> bool {
        self.pending.values().any(|p| matches!(p, Pending::Fetch { .. }))
    }

    /// The jobs running, waiting locally, or with an outcome not yet written.
    fn held(&self) -> BTreeSet<i64> {
        let written = self.pending.values().flat_map(|p| match p {
            Pending::Write(Write::Complete(ids) | Write::Return(ids)) => ids.clone(),
            Pending::Write(Write::Fail(failures)) => failures.iter().map(|f| f.job_id).collect(),
            Pending::Register | Pending::Fetch { .. } | Pending::Sweep | Pending::Cron => Vec::new(),
        });
        (self.running.keys().copied())
            .chain(self.prefetched.iter().chain(&self.early).map(|j| j.id))
            .chain(self.completions.iter().chain(&self.returns).copied())
            .chain(self.failures.iter().map(|f| f.job_id))
            .chain(written)
            .collect()
    }

    fn writing(&self) -> bool {
        self.pending.values().any(|p| matches!(p, Pending::Write(_)))
    }

    fn local_now(&self) -> Option<Timestamp> {
        self.config.use_local_time.then_some(self.now)
    }

    fn next_random(&mut self) -> u64 {
        // splitmix64: small, good enough for jitter, and ours (no RNG reads).
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// 8 to 10 minutes, jittered so that workers started together spread their sweeps.
    fn sweep_delay(&mut self) -> Duration {
        Duration::milliseconds(480_000 + (self.next_random() % 120_001) as i64)
    }

    /// A notification or a freed slot: look for jobs now (or right after the fetch in flight).
    fn wake(&mut self) {
        self.drained = false;
        if self.fetching() {
            self.fetch_again = true;
        }
    }

    /// Start what can start and fetch what should be fetched; stop when all is done.
    fn progress(&mut self) {
        let mut claimed = false;
        while self.running.len() < self.config.concurrency && self.phase == Phase::Running {
            let Some(job) = self.prefetched.pop_front() else { break };
            self.start(job);
            claimed = true;
        }
        // The TTL counts from the last job the queue handed out: it gives jobs back only
        // while every slot stays busy, not every `local_queue_ttl` under steady load.
        if self.prefetched.is_empty() {
            self.timers.remove(&TimerKind::LocalQueueTtl);
        } else if claimed || !self.timers.contains_key(&TimerKind::LocalQueueTtl) {
            self.timers.insert(TimerKind::LocalQueueTtl, self.now + self.config.local_queue_ttl);
        }
        for _ in 0..MAX_PREFETCHES {
            self.maybe_fetch();
        }
        self.maybe_flush();
        self.drive_cron();
        // Run-once stops when a fetch found nothing and nothing it did is still being
        // written: a completion being written may free a named queue's next job.
        if self.phase == Phase::Running
            && self.config.run_once
            && self.drained
            && self.idle()
            && !self.fetching()
            // A write in flight or waiting may free a named queue: fetch once more after it.
            && !self.writing()
            && self.nothing_to_write()
        {
            self.phase = Phase::Draining;
        }
        if self.phase == Phase::Draining && self.idle() && self.pending.is_empty() && self.nothing_to_write()
        {
            self.phase = Phase::Stopped;
            self.timers.clear();
            self.emit(Event::WorkerStop { worker_id: self.config.worker_id.clone() });
            self.effects.push_back(Effect::Stopped);
        }
    }

    fn idle(&self) -> bool {
        self.running.is_empty() && self.prefetched.is_empty() && self.early.is_empty()
    }

    fn nothing_to_write(&self) -> bool {
        self.completions.is_empty() && self.failures.is_empty() && self.returns.is_empty()
    }

    fn maybe_fetch(&mut self) {
        let (in_flight, asked) = self.fetches();
        let most = if self.config.local_queue_size.is_some() { MAX_PREFETCHES } else { 1 };
        if self.phase != Phase::Running || in_flight >= most {
            return;
        }
        let Some(task_ids) = self.task_ids.clone() else { return };
        if task_ids.is_empty() {
            return;
        }
        let free = self.config.concurrency.saturating_sub(self.running.len());
        let limit = match self.config.local_queue_size {
            Some(_) if self.ttl_expired && free == 0 => 0,
            // A batch (adaptive: at least `concurrency`, at most a third of the queue) at a
            // time; the queue never holds or asks for more than `size` jobs.
            Some(size) => {
                let least = self.config.concurrency.clamp(1, size);
                let batch = self.batch.clamp(least, size.div_ceil(3).max(least));
                let queued = self.prefetched.len() + self.early.len();
                let wanted = if self.short {
                    // Nothing more was runnable: fetch only for slots about to idle, one
                    // fetch at a time, so a flood of wake-ups is not a flood of fetches.
                    in_flight == 0 && queued < free
                } else {
                    // More is runnable: fetch the next batch before this one runs out, so
                    // PostgreSQL locks it while this one runs. A second fetch only while
                    // jobs wait here (with idle slots it would only race the first).
                    queued < batch && (in_flight == 0 || !self.prefetched.is_empty())
                };
                if wanted && queued + asked + batch <= size {
                    batch
                } else {
                    0
                }
            }
            None => free,
        };
        if limit == 0 || (self.drained && !self.fetch_again) || self.timers.contains_key(&TimerKind::Retry) {
            return;
        }
        self.fetch_again = false;
        let statement = Statement::GetJobs {
            worker_id: self.config.worker_id.clone(),
            task_ids,
            forbidden_flags: self.config.forbidden_flags.clone(),
            limit,
            now: self.local_now(),
        };
        self.query(Pending::Fetch { limit }, statement);
    }

    /// Fetches in flight, and how many jobs they asked for.
    fn fetches(&self) -> (usize, usize) {
        self.pending.values().fold((0, 0), |(n, asked), p| match p {
            Pending::Fetch { limit } => (n + 1, asked + limit),
            _ => (n, asked),
        })
    }

    fn start(&mut self, job: Job) {
        self.emit(Event::JobStart {
            job_id: job.id,
            task: job.task_identifier.clone(),
            attempt: job.attempts,
        });
        let started = Started { attempts: job.attempts, max_attempts: job.max_attempts, run_at: job.run_at };
        self.running.insert(job.id, started);
        self.effects.push_back(Effect::StartTask { job });
    }

    fn query_done(&mut self, id: QueryId, result: QueryResult) -> Result<(), MisuseError> {
        let pending = self.pending.remove(&id).ok_or(MisuseError::UnknownQuery(id))?;
        match (pending, result) {
            (pending, QueryResult::Err(error)) => {
                if matches!(pending, Pending::Fetch { .. }) && !self.earlier_fetch_out(id) {
                    // Nothing of this fetch will come: the jobs of later ones need not wait.
                    self.enqueue(Vec::new());
                }
                self.query_failed(pending, error);
            }
            (Pending::Register, QueryResult::Tasks(tasks)) => {
                let mut ids: Vec<i32> = tasks.into_iter().map(|(id, _)| id).collect();
                ids.sort_unstable();
                ids.dedup();
                if ids.len() < self.config.task_identifiers.len() {
                    // Registered concurrently by someone else after our snapshot: ask again.
                    let identifiers = self.config.task_identifiers.clone();
                    self.query(Pending::Register, Statement::RegisterTasks { identifiers });
                } else {
                    self.task_ids = Some(ids);
                    if self.config.task_identifiers.is_empty() {
                        self.drained = true;
                    }
                }
            }
            (Pending::Fetch { limit }, QueryResult::Jobs(jobs)) => {
                self.fetched(id, limit, jobs);
            }
            (Pending::Write(_), QueryResult::Done) => {
                self.write_failures = 0;
                // Finished jobs released their named queues: the next job of a queue may
                // be runnable now.
                self.wake();
            }
            (Pending::Sweep, QueryResult::Done) => {}
            (Pending::Cron, QueryResult::KnownCrontabs(known)) => {
                if let Some(cron) = &mut self.cron {
                    cron.registered(&known);
                }
            }
            (Pending::Cron, QueryResult::Done) => {
                if let Some(cron) = &mut self.cron {
                    cron.batch_done();
                }
                // Its jobs may be due now.
                self.wake();
            }
            (
                pending @ (Pending::Register
                | Pending::Fetch { .. }
                | Pending::Write(_)
                | Pending::Sweep
                | Pending::Cron),
                _,
            ) => {
                // Nothing changed: the query is still pending.
                self.pending.insert(id, pending);
                return Err(MisuseError::WrongResult(id));
            }
        }
        Ok(())
    }

    /// Every failure is retried: a write (put back and flushed again with a growing delay,
    /// never dropped), a fetch or a registration after `poll_interval`, a sweep at the next
    /// sweep.
    fn query_failed(&mut self, pending: Pending, error: DbError) {
        let statement = match pending {
            Pending::Register => "register tasks",
            Pending::Fetch { .. } => "fetch jobs",
            Pending::Sweep => "reset stale locks",
            Pending::Cron => "schedule cron jobs",
            Pending::Write(Write::Complete(_)) => "complete jobs",
            Pending::Write(Write::Fail(_)) => "fail jobs",
            Pending::Write(Write::Return(_)) => "return jobs",
        };
        if self.config.run_once
            && !error.retryable
            && matches!(pending, Pending::Register | Pending::Fetch { .. })
        {
            // Waiting cannot fix a missing table or a permission: say so and stop, rather
            // than never returning.
            self.emit(Event::GaveUp { statement, error: error.message });
            self.shutdown(true);
            return;
        }
        self.emit(Event::DatabaseError { statement, error: error.message });
        match pending {
            Pending::Register | Pending::Fetch { .. } => {
                // Nothing is known about what is runnable: the retry fetches.
                self.drained = false;
                self.timers.insert(TimerKind::Retry, self.now + self.config.poll_interval);
            }
            Pending::Sweep => {}
            Pending::Cron => {
                if let Some(cron) = &mut self.cron {
                    cron.failed(self.now, self.config.poll_interval);
                }
            }
            Pending::Write(write) => {
                match write {
                    Write::Complete(ids) => self.completions.splice(0..0, ids).for_each(drop),
                    Write::Fail(failures) => self.failures.splice(0..0, failures).for_each(drop),
                    Write::Return(ids) => self.returns.splice(0..0, ids).for_each(drop),
                }
                self.write_failures += 1;
                let delay_ms = (100_i64 << self.write_failures.min(8)).min(30_000);
                let at = self.now + Duration::milliseconds(delay_ms);
                let due = self.timers.get(&TimerKind::Flush).map_or(at, |&t| t.max(at));
                self.timers.insert(TimerKind::Flush, due);
            }
        }
    }

    fn fetched(&mut self, id: QueryId, limit: usize, mut jobs: Vec<Job>) {
        let got = jobs.len();
        self.drained = got < limit;
        self.short = got < limit;
        if got == 0 {
            self.emit(Event::FetchEmpty);
        }
        // A job this worker already runs, holds or is writing the outcome of can come back
        // only if its lock looked dead (older than four hours) and a sweep freed it: it is
        // not started again; the lock is ours again, and the outcome this worker has or will
        // have settles the job.
        if !jobs.is_empty() {
            let held = self.held();
            jobs.retain(|job| !held.contains(&job.id));
        }
        if self.phase != Phase::Running {
            // Fetched while a shutdown began: give them back untouched.
            if !jobs.is_empty() {
                self.returns.extend(jobs.iter().map(|j| j.id));
                self.schedule_flush(Duration::zero());
            }
        } else if self.earlier_fetch_out(id) {
            // An earlier fetch is still out, and PostgreSQL may have run it after this one:
            // its jobs may come first.
            self.early.extend(jobs);
        } else {
            // The slots ran dry, and a full batch finds them still idle: fetch more at a time.
            let idle = self.prefetched.is_empty() && self.running.len() < self.config.concurrency;
            if let Some(size) = self.config.local_queue_size {
                if std::mem::take(&mut self.ran_dry) && idle && got >= limit {
                    self.batch = limit.saturating_mul(2).min(size.div_ceil(3));
                }
            }
            self.enqueue(jobs);
        }
        if self.drained && self.fetch_again {
            self.drained = false;
        }
        self.arm_poll();
    }

    /// Whether a fetch sent before fetch `id` is still out.
    fn earlier_fetch_out(&self, id: QueryId) -> bool {
        self.pending.range(..id).any(|(_, p)| matches!(p, Pending::Fetch { .. }))
    }

    /// `jobs` join the local queue, and so do the jobs of later fetches that came back
    /// first. Each batch comes sorted, but two in flight may have been locked in either
    /// order: start in (priority, run_at, id) order all the same.
    fn enqueue(&mut self, jobs: Vec<Job>) {
        self.prefetched.extend(jobs);
        self.prefetched.extend(self.early.drain(..));
        let key = |j: &Job| (j.priority, j.run_at, j.id);
        if !self.prefetched.iter().is_sorted_by_key(key) {
            self.prefetched.make_contiguous().sort_by_key(key);
        }
    }

    fn arm_poll(&mut self) {
        if self.phase == Phase::Running && !self.config.run_once {
            self.timers.insert(TimerKind::Poll, self.now + self.config.poll_interval);
        }
    }

    fn task_finished(&mut self, job_id: i64, outcome: TaskOutcome) -> Result<(), MisuseError> {
        let job = self.running.remove(&job_id).ok_or(MisuseError::UnknownTask(job_id))?;
        self.aborting.remove(&job_id);
        self.ttl_expired = false;
        match outcome {
            TaskOutcome::Ok => {
                self.emit(Event::JobSuccess { job_id });
                self.completions.push(job_id);
                self.schedule_flush(self.config.complete_batch_delay);
            }
            TaskOutcome::Err(error) | TaskOutcome::Panicked(error) => {
                self.emit(Event::JobError {
                    job_id,
                    error: error.clone(),
                    attempt: job.attempts,
                    max_attempts: job.max_attempts,
                });
                if job.attempts >= job.max_attempts {
                    self.emit(Event::JobPermanentlyFailed { job_id, error: error.clone() });
                }
                let run_at = self.local_now().map(|now| backoff::next_run_at(now, job.run_at, job.attempts));
                self.failures.push(Failure { job_id, message: error, run_at });
                self.schedule_flush(self.config.fail_batch_delay);
            }
            TaskOutcome::Aborted => {
                self.returns.push(job_id);
                self.schedule_flush(Duration::zero());
            }
        }
        self.emit(Event::JobComplete { job_id });
        self.ran_dry |= self.prefetched.is_empty();
        // A free slot: in direct mode it wants a job.
        if self.config.local_queue_size.is_none() || self.prefetched.is_empty() {
            self.drained &= !self.config.run_once;
            self.fetch_again |= self.fetching();
        }
        Ok(())
    }

    fn schedule_flush(&mut self, delay: Duration) {
        let at = self.now + delay.max(Duration::zero());
        let due = self.timers.get(&TimerKind::Flush).map_or(at, |&t| t.min(at));
        self.timers.insert(TimerKind::Flush, due);
    }

    fn maybe_flush(&mut self) {
        let due = self.timers.get(&TimerKind::Flush).is_some_and(|&at| at <= self.now);
        if !due {
            return;
        }
        self.timers.remove(&TimerKind::Flush);
        let worker_id = self.config.worker_id.clone();
        if !self.completions.is_empty() {
            let ids = std::mem::take(&mut self.completions);
            let statement = Statement::CompleteJobs { worker_id: worker_id.clone(), ids: ids.clone() };
            self.query(Pending::Write(Write::Complete(ids)), statement);
        }
        if !self.failures.is_empty() {
            let failures = std::mem::take(&mut self.failures);
            let statement = Statement::FailJobs { worker_id: worker_id.clone(), failures: failures.clone() };
            self.query(Pending::Write(Write::Fail(failures)), statement);
        }
        if !self.returns.is_empty() {
            let ids = std::mem::take(&mut self.returns);
            let statement = Statement::ReturnJobs { worker_id, ids: ids.clone() };
            self.query(Pending::Write(Write::Return(ids)), statement);
        }
    }

    fn notification(&mut self, channel: &str, payload: String) {
        match channel {
            "jobs:insert" if notify::parse_insert_count(&payload) > 0 => self.wake(),
            "worker:migrate" if payload.contains("\"breaking\":true") => {
                self.emit(Event::BreakingMigration { payload });
                self.shutdown(true);
            }
            _ => {}
        }
    }

    fn listener_down(&mut self, error: String) {
        if self.listener == Listener::Off {
            return;
        }
        let failures = match self.listener {
            // A failed reconnection attempt counts on: the backoff grows until one succeeds.
            Listener::Down { failures } | Listener::Connecting { failures } => failures + 1,
            Listener::Off | Listener::Up => 1,
        };
        // 50 ms * e^failures, capped, with jitter in [50%, 100%].
        let base_ms = (50.0 * f64::from(failures.min(20)).exp())
            .min(self.config.max_listener_backoff.num_milliseconds() as f64);
        let jitter = 0.5 + (self.next_random() % 1000) as f64 / 2000.0;
        let retry_at = self.now + Duration::milliseconds((base_ms * jitter).ceil() as i64);
        self.listener = Listener::Down { failures };
        self.emit(Event::ListenerDown { error, retry_at });
        if self.phase == Phase::Running {
            self.timers.insert(TimerKind::Listener, retry_at);
        }
    }

    fn shutdown(&mut self, graceful: bool) {
        if self.phase == Phase::Stopped {
            return;
        }
        if self.phase == Phase::Running {
            self.phase = Phase::Draining;
            self.listener = Listener::Off;
            for kind in [TimerKind::Poll, TimerKind::Listener, TimerKind::LockSweep, TimerKind::LocalQueueTtl]
            {
                self.timers.remove(&kind);
            }
            // Prefetched jobs never started: back without using an attempt.
            let early = std::mem::take(&mut self.early);
            let unstarted: Vec<i64> = self.prefetched.drain(..).chain(early).map(|j| j.id).collect();
            if !unstarted.is_empty() {
                self.returns.extend(unstarted);
                self.schedule_flush(Duration::zero());
            }
            if graceful {
                self.timers
                    .insert(TimerKind::ShutdownGrace, self.now + self.config.graceful_shutdown_timeout);
            }
        }
        if !graceful {
            self.abort_running();
        }
    }

    /// Send what the cron runner has ready (its registration, then one minute's batch at a
    /// time) and arm its timer; on shutdown, drop what it has not sent.
    fn drive_cron(&mut self) {
        let Some(cron) = &mut self.cron else { return };
        if self.phase != Phase::Running {
            cron.stop();
            self.timers.remove(&TimerKind::Cron);
            return;
        }
        let now = self.now;
        let mut statements = Vec::new();
        if let Some((identifiers, known_since)) = cron.registration(now) {
            statements.push(Statement::RegisterCrontabs { identifiers, known_since });
        }
        cron.tick(now);
        if let Some(batch) = cron.poll_batch(now) {
            statements.push(Statement::ScheduleCron(batch));
        }
        match cron.deadline() {
            Some(at) => self.timers.insert(TimerKind::Cron, at),
            None => self.timers.remove(&TimerKind::Cron),
        };
        for statement in statements {
            self.query(Pending::Cron, statement);
        }
    }

    fn abort_running(&mut self) {
        self.timers.remove(&TimerKind::ShutdownGrace);
        let ids: Vec<i64> = self.running.keys().copied().filter(|id| !self.aborting.contains(id)).collect();
        for job_id in ids {
            self.aborting.insert(job_id);
            self.effects.push_back(Effect::AbortTask { job_id });
        }
    }

    fn timeout(&mut self) {
        let due: Vec<TimerKind> =
            self.timers.iter().filter(|(_, &at)| at <= self.now).map(|(kind, _)| *kind).collect();
        for kind in due {
            match kind {
                // Handled in `progress`.
                TimerKind::Flush => {}
                TimerKind::Poll => {
                    self.timers.remove(&kind);
                    self.drained = false;
                    self.fetch_again |= self.fetching();
                    self.arm_poll();
                }
                TimerKind::Listener => {
                    self.timers.remove(&kind);
                    let failures = match self.listener {
                        Listener::Down { failures } | Listener::Connecting { failures } => failures,
                        Listener::Off | Listener::Up => 0,
                    };
                    self.listener = Listener::Connecting { failures };
                    self.effects.push_back(Effect::ConnectListener);
                }
                TimerKind::LockSweep => {
                    let next = self.sweep_delay();
                    self.timers.insert(kind, self.now + next);
                    if !self.pending.values().any(|p| *p == Pending::Sweep) {
                        let locked_before = self.local_now().map(|now| now - STALE_LOCK_AGE);
                        self.query(Pending::Sweep, Statement::ResetLocked { locked_before });
                    }
                }
                TimerKind::LocalQueueTtl => {
                    self.timers.remove(&kind);
                    // Held too long: give them back, and fetch less at a time from now on.
                    let early = std::mem::take(&mut self.early);
                    let expired: Vec<i64> = self.prefetched.drain(..).chain(early).map(|j| j.id).collect();
                    self.batch = 1;
                    if !expired.is_empty() {
                        self.ttl_expired = true;
                        self.returns.extend(expired);
                        self.schedule_flush(Duration::zero());
                    }
                }
                TimerKind::ShutdownGrace => self.abort_running(),
                // Re-armed by `drive_cron`.
                TimerKind::Cron => {
                    self.timers.remove(&kind);
                }
                TimerKind::Retry => {
                    self.timers.remove(&kind);
                    let registering = self.pending.values().any(|p| *p == Pending::Register);
                    if self.task_ids.is_none() && !registering && self.phase == Phase::Running {
                        let identifiers = self.config.task_identifiers.clone();
                        self.query(Pending::Register, Statement::RegisterTasks { identifiers });
                    }
                }
            }
        }
    }
}
