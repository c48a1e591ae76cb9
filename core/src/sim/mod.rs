//! A deterministic world for the worker machine: test scheduling without a database, a
//! runtime or a real clock.
//!
//! A [`World`] holds a simulated clock, an in-memory database with the semantics of
//! Formica's SQL ([`Db`]), any number of workers ([`Worker`] machines, each with its own
//! [`Config`]), their tasks and their LISTEN connections. It plays the driver: it runs
//! every [`Effect`] the machines emit (a query is answered by the database after a
//! latency, a task ends as a script says, a listener connects or fails), and feeds the
//! results back as [`Input`]s. [`World::step`] jumps the clock straight to the next thing
//! that happens (an answer, a task's end, a notification, a machine's timer): an hour of
//! polling takes microseconds, and nothing sleeps.
//!
//! Every choice (latencies, failures, the `r` of notification payloads, whatever the task
//! script draws) comes from one seeded generator, so a seed and a sequence of calls give
//! the same [`trace`](World::trace) every time: a failing run replays exactly.
//!
//! The world checks the machine's promises as it goes and panics, naming the worker and
//! job, if one is broken: a job started while it is already running on that worker, more
//! tasks running than `concurrency`, an effect after [`Effect::Stopped`], or a stop while
//! tasks or queries are still out. Everything else is for the caller to check, on the
//! trace or on the database.
//!
//! To test an application's own scheduling under faults, see [`faults`] (faults and
//! scenarios as data, a driver that checks after every step) and, with the `proptest`
//! feature, `strategies` (job specs, crontab items, fault schedules); the crate's front
//! page has a guide.
//!
//! # What the simulation promises, and what it does not
//!
//! Faithful, because it is the same code or checked against the real thing:
//!
//! - The workers are the real [`Worker`] machine that the driver runs in production: same
//!   fetches, batching, local queue, retries, LISTEN fallback, cron runner and shutdown.
//! - The database ([`Db`]) applies Formica's SQL semantics column by column: job keys in
//!   all three modes, named queues and their locks, flags, `run_at`, attempts and the
//!   backoff of failures, `add_jobs` batches, the admin functions. `tests/tests/differential.rs`
//!   runs random sequences of these operations and of the worker's statements (fetch,
//!   complete, fail, return) against PostgreSQL with Formica's migrations and requires the
//!   same rows and results after each one. The cron statements, the heartbeats, the
//!   recovery and the four-hour lock sweep are not in that comparison;
//!   `core/tests/sim_model.rs` checks them against a model written from the documented
//!   rules.
//! - Faults, as the driver meets them: a crashed process keeps its locks until its lease
//!   lapses and a recovery sweep frees them; a paused one ([`World::pause`]) hears nothing
//!   and sends its queries late; a worker whose loop stalls ([`World::stall_loop`]: tasks
//!   blocking every thread, a deadlock) keeps its lease through its keeper, which runs beside
//!   the loop as in the driver, until the stall passes the watchdog's limit; a restart is a new worker id; a failed query is retried;
//!   a dropped listener leaves polling; a clock jump moves the wall clock that the database and the workers read
//!   (a worker's clock, like the driver's, never goes back).
//!
//! Not modelled:
//!
//! - Real task durations and CPU: a task takes what the script says, and the machine's
//!   own work takes no time.
//! - Database contention and the network: each statement runs atomically after a latency
//!   drawn from [`WorldConfig`], never blocked by another; connection pools, pgBouncer,
//!   timeouts and lost connections other than the injected failures are not there.
//!   Jobs of equal `(priority, run_at)` are fetched in id order, where PostgreSQL takes
//!   whichever it meets first.
//! - Clock skew beyond what is injected: there is one wall clock, shared by the database
//!   and every worker, that moves only by [`World::jump_clock`]; a worker added with
//!   [`World::add_skewed_worker`] reads it a fixed amount off. Clocks do not drift.
//! - Other processes: graphile-worker in Node, or admin SQL the test does not run.
//!
//! So a property that holds here holds for the decisions and the schedule; confirm
//! timing-sensitive conclusions against PostgreSQL through `formica-tokio`.
//!
//! ```
//! use formica_core::job::RawJob;
//! use formica_core::sim::{TaskPlan, World, WorldConfig};
//! use formica_core::job::JobSpec;
//! use formica_core::worker::{Config, TaskOutcome};
//! use chrono::Duration;
//!
//! let mut world = World::new(WorldConfig::default());
//! world.set_script(|job, _rng| match job.payload["fail"].as_bool() {
//!     Some(true) => TaskPlan::finish(Duration::seconds(1), TaskOutcome::Err("no".into())),
//!     _ => TaskPlan::finish(Duration::seconds(1), TaskOutcome::Ok),
//! });
//! let config = Config { worker_id: "w".into(), task_identifiers: vec!["email".into()], ..Config::default() };
//! let w = world.add_worker(config);
//! world.db_mut().add_job(&RawJob::new("email", serde_json::json!({"fail": false}), JobSpec::default())).unwrap();
//! world.db_mut().add_job(&RawJob::new("email", serde_json::json!({"fail": true}), JobSpec::default())).unwrap();
//! world.run_for(Duration::seconds(3)); // one attempt each; the retry is due after e^1 s
//! let left: Vec<_> = world.db().jobs().collect();
//! assert_eq!(left.len(), 1, "the good job was completed");
//! assert_eq!(left[0].attempts, 1);
//! assert_eq!(left[0].last_error.as_deref(), Some("no"));
//! world.shutdown(w, true);
//! assert!(world.run_until_stopped(Duration::minutes(1)));
//! ```

mod db;
pub mod faults;
#[cfg(feature = "proptest")]
pub mod strategies;

pub use crate::rng::SplitMix;
pub use db::{Db, Notification, Queue};
pub use faults::{App, Fault, Op};

use crate::job::Job;
use crate::lease::{Keeper, KeeperEffect, KeeperInput};
use crate::protocol::{
    DbError, Effect, Event, Input, QueryId, QueryResult, Statement, TaskOutcome, TimerKind,
};
use crate::time::{FeedClock, Timestamp};
use crate::worker::{Config, Worker};
use chrono::Duration;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A worker's place in the world (stable across restarts).
pub type WorkerIndex = usize;

/// How a started task behaves, chosen by the script when it starts.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskPlan {
    /// End `after` this long with `outcome` (unless aborted first).
    Finish {
        /// How long the task runs.
        after: Duration,
        /// How it ends.
        outcome: TaskOutcome,
    },
    /// Run until aborted.
    Hang,
    /// Run until [`World::finish_task`] ends it (or an abort does).
    Manual,
}

impl TaskPlan {
    /// End after `after` with `outcome`.
    pub fn finish(after: Duration, outcome: TaskOutcome) -> Self {
        TaskPlan::Finish { after, outcome }
    }
}

/// How the world's plumbing behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct WorldConfig {
    /// Seed of every choice.
    pub seed: u64,
    /// The wall clock at the start.
    pub start: Timestamp,
    /// Shortest and longest time from a query to its answer.
    pub query_latency: (Duration, Duration),
    /// Shortest and longest time to connect a listener.
    pub listener_latency: (Duration, Duration),
    /// Shortest and longest time for a notification to reach a listener.
    pub notification_latency: (Duration, Duration),
    /// Time from an abort to the task reporting `Aborted`.
    pub abort_latency: Duration,
    /// Chance, in thousandths, that a query fails (retryable) without running.
    pub query_failure_per_mille: u32,
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig {
            seed: 0,
            start: Timestamp::from_timestamp(1_704_067_200, 0).unwrap_or_default(),
            query_latency: (Duration::milliseconds(1), Duration::milliseconds(5)),
            listener_latency: (Duration::milliseconds(5), Duration::milliseconds(20)),
            notification_latency: (Duration::milliseconds(1), Duration::milliseconds(3)),
            abort_latency: Duration::milliseconds(1),
            query_failure_per_mille: 0,
        }
    }
}

/// One line of the trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEntry {
    /// The wall clock when it happened.
    pub at: Timestamp,
    /// Time elapsed since the start, whatever the wall clock did.
    pub elapsed: Duration,
    /// The worker concerned, if one is.
    pub worker: Option<WorkerIndex>,
    /// What happened.
    pub what: Traced,
}

/// What a trace line records.
// Lines are written once and read by matching: unboxed variants keep the patterns plain.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Traced {
    /// A machine was created with this `worker_id` (at the start, or by a restart).
    Started {
        /// The id it locks jobs with.
        worker_id: String,
    },
    /// An input fed to the machine (with `at` as its `now`).
    Input(Input),
    /// An effect the machine emitted.
    Effect(Effect),
    /// The worker's process died: its tasks, queries and listener are gone, its locks stay.
    Crashed,
    /// The wall clock was moved by this much (forward or back).
    ClockJumped(Duration),
    /// A heartbeat of the worker's lease keeper ran (or failed) in the database.
    Heartbeat {
        /// The statement.
        statement: Statement,
        /// Its result.
        result: QueryResult,
    },
    /// What the worker's lease keeper reported ([`Event::LoopWedged`], [`Event::LoopResumed`]).
    Lease(Event),
}

/// What one [`World::step`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stepped {
    /// A query was answered.
    Answered {
        /// The worker.
        worker: WorkerIndex,
        /// The query.
        id: QueryId,
    },
    /// A task ended.
    TaskEnded {
        /// The worker.
        worker: WorkerIndex,
        /// The job.
        job_id: i64,
    },
    /// A listener connected or failed to.
    Listener {
        /// The worker.
        worker: WorkerIndex,
    },
    /// A notification reached a listener.
    Notified {
        /// The worker.
        worker: WorkerIndex,
    },
    /// A machine's timer fired.
    Timer {
        /// The worker.
        worker: WorkerIndex,
        /// Which timer.
        kind: TimerKind,
    },
    /// Something was due but no longer concerned anyone (an answer for a crashed worker).
    Nothing,
}

/// The task script: called when a task starts.
pub type Script = Box<dyn FnMut(&Job, &mut SplitMix) -> TaskPlan>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Running,
    Stopped,
    Crashed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListenerState {
    Off,
    Connecting(u64),
    Up(u64),
}

#[derive(Debug, Clone)]
struct RunningTask {
    job: Job,
    token: u64,
    aborting: bool,
}

#[derive(Debug, Clone)]
struct SimWorker {
    base: Config,
    incarnation: u32,
    machine: Worker,
    life: Life,
    tasks: BTreeMap<i64, RunningTask>,
    listener: ListenerState,
    listener_available: bool,
    fail_next: u32,
    in_flight: BTreeSet<QueryId>,
    /// The machine gave up on the database at shutdown: it may stop with queries out.
    gave_up: bool,
    /// Like the driver, the world feeds a clock that never goes back and moves on with
    /// elapsed time, so a wall clock set back does not stall the machine's timers.
    clock: FeedClock,
    /// How far this worker's clock is off the wall clock ([`World::skew_clock`]).
    skew: Duration,
    /// Elapsed time until which the process is paused ([`World::pause`]).
    paused_until: Duration,
    /// The lease's keeper, beside the loop.
    keeper: Keeper,
    /// Elapsed time until which the loop alone stalls ([`World::stall_loop`]).
    stalled_until: Duration,
    /// The worker's clock when the current stall began: the loop's last turn.
    stalled_since: Timestamp,
}

impl SimWorker {
    fn new(
        config: Config,
        incarnation: u32,
        base: Config,
        now: Timestamp,
        mono: Duration,
        skew: Duration,
    ) -> Self {
        SimWorker {
            keeper: Keeper::new(config.worker_id.clone(), config.watchdog, now),
            machine: Worker::new(config, now),
            clock: FeedClock::new(now, mono),
            base,
            incarnation,
            life: Life::Running,
            tasks: BTreeMap::new(),
            listener: ListenerState::Off,
            listener_available: true,
            fail_next: 0,
            in_flight: BTreeSet::new(),
            gave_up: false,
            skew,
            paused_until: Duration::zero(),
            stalled_until: Duration::zero(),
            stalled_since: now,
        }
    }

    /// Until when nothing reaches the machine: its process is paused or its loop stalls.
    fn loop_blocked_until(&self) -> Duration {
        self.paused_until.max(self.stalled_until)
    }
}

#[derive(Debug, Clone)]
enum Due {
    Answer {
        worker: WorkerIndex,
        incarnation: u32,
        id: QueryId,
        statement: Statement,
    },
    TaskEnd {
        worker: WorkerIndex,
        token: u64,
        job_id: i64,
        outcome: TaskOutcome,
    },
    Listener {
        worker: WorkerIndex,
        token: u64,
        up: bool,
    },
    Notify {
        worker: WorkerIndex,
        token: u64,
        notification: Notification,
    },
    /// The answer to a heartbeat of the worker's lease keeper.
    Beat {
        worker: WorkerIndex,
        incarnation: u32,
        id: QueryId,
        statement: Statement,
    },
    /// A heartbeat's result on its way from the keeper to the machine.
    Heartbeat {
        worker: WorkerIndex,
        incarnation: u32,
        sent: Timestamp,
        result: Result<(), DbError>,
    },
}

/// The deterministic world. See the module docs.
pub struct World {
    config: WorldConfig,
    db: Db,
    rng: SplitMix,
    /// Time elapsed since the start (never goes back).
    mono: Duration,
    /// Wall clock minus (start + mono): moved by [`World::jump_clock`].
    offset: Duration,
    workers: Vec<SimWorker>,
    agenda: BTreeMap<(i64, u64), Due>,
    seq: u64,
    tokens: u64,
    script: Script,
    trace: Vec<TraceEntry>,
    steps_at_this_instant: u32,
}

impl fmt::Debug for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("World")
            .field("now", &self.now())
            .field("workers", &self.workers.len())
            .field("agenda", &self.agenda.len())
            .field("jobs", &self.db.jobs().count())
            .finish_non_exhaustive()
    }
}

const LIVELOCK_STEPS: u32 = 100_000;

impl World {
    /// An empty world: no workers, an empty database. Tasks succeed after one second until
    /// [`World::set_script`] says otherwise.
    pub fn new(config: WorldConfig) -> Self {
        World {
            db: Db::new(config.start, config.seed ^ 0xdb),
            rng: SplitMix::new(config.seed),
            mono: Duration::zero(),
            offset: Duration::zero(),
            workers: Vec::new(),
            agenda: BTreeMap::new(),
            seq: 0,
            tokens: 0,
            script: Box::new(|_, _| TaskPlan::finish(Duration::seconds(1), TaskOutcome::Ok)),
            trace: Vec::new(),
            steps_at_this_instant: 0,
            config,
        }
    }

    /// The wall clock.
    pub fn now(&self) -> Timestamp {
        self.config.start + self.mono + self.offset
    }

    /// Time elapsed since the start, whatever the wall clock did.
    pub fn elapsed(&self) -> Duration {
        self.mono
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The database, to add or manage jobs as an application would (its clock is set to
    /// the wall clock first; notifications it sends are delivered from the next step on).
    pub fn db_mut(&mut self) -> &mut Db {
        let now = self.now();
        self.db.set_now(now);
        &mut self.db
    }

    /// Decide how tasks behave: `script` is called with each job as its task starts.
    pub fn set_script(&mut self, script: impl FnMut(&Job, &mut SplitMix) -> TaskPlan + 'static) {
        self.script = Box::new(script);
    }

    /// Everything that happened, in order.
    pub fn trace(&self) -> &[TraceEntry] {
        &self.trace
    }

    /// Start a worker with `config` now; returns its index.
    pub fn add_worker(&mut self, config: Config) -> WorkerIndex {
        self.add_skewed_worker(config, Duration::zero())
    }

    /// Start a worker whose clock is `skew` off the wall clock (and the database's), as on
    /// a machine whose clock is wrong: it reads `wall + skew`, restarts included.
    pub fn add_skewed_worker(&mut self, config: Config, skew: Duration) -> WorkerIndex {
        let index = self.workers.len();
        let worker = SimWorker::new(config.clone(), 0, config.clone(), self.now() + skew, self.mono, skew);
        self.workers.push(worker);
        self.record(Some(index), Traced::Started { worker_id: config.worker_id });
        self.drain(index);
        index
    }

    /// The number of workers ever added.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// The machine of worker `w` (its current incarnation).
    pub fn machine(&self, w: WorkerIndex) -> &Worker {
        &self.workers[w].machine
    }

    /// The id worker `w` locks jobs with now (a restart gives a new one).
    pub fn worker_id(&self, w: WorkerIndex) -> String {
        self.config_of(w).worker_id
    }

    /// The configuration of worker `w`'s current incarnation.
    pub fn config_of(&self, w: WorkerIndex) -> Config {
        let worker = &self.workers[w];
        self.config_of_incarnation(&worker.base, worker.incarnation)
    }

    fn config_of_incarnation(&self, base: &Config, incarnation: u32) -> Config {
        let mut config = base.clone();
        if incarnation > 0 {
            config.worker_id = format!("{}~{}", config.worker_id, incarnation);
            config.seed = config.seed.wrapping_add(u64::from(incarnation));
        }
        config
    }

    /// Whether worker `w` has stopped (and not crashed).
    pub fn is_stopped(&self, w: WorkerIndex) -> bool {
        self.workers[w].life == Life::Stopped
    }

    /// Whether worker `w` crashed (and was not restarted).
    pub fn is_crashed(&self, w: WorkerIndex) -> bool {
        self.workers[w].life == Life::Crashed
    }

    /// The jobs whose tasks run on worker `w`, by id.
    pub fn running(&self, w: WorkerIndex) -> impl Iterator<Item = &Job> {
        self.workers[w].tasks.values().map(|t| &t.job)
    }

    /// Queries of worker `w` waiting for their answer.
    pub fn in_flight(&self, w: WorkerIndex) -> usize {
        self.workers[w].in_flight.len()
    }

    /// Whether worker `w`'s listener is connected.
    pub fn listening(&self, w: WorkerIndex) -> bool {
        matches!(self.workers[w].listener, ListenerState::Up(_))
    }

    /// Move the wall clock by `by` (back if negative). Elapsed time, and so the order of
    /// what is scheduled, is untouched; the machines see the new time from their next input.
    pub fn jump_clock(&mut self, by: Duration) {
        self.offset += by;
        self.record(None, Traced::ClockJumped(by));
    }

    /// Pause worker `w`'s process for `by` (SIGSTOP, a long stall, a partition): nothing
    /// reaches it until then. Its timers, task ends, notifications and the answers to its
    /// queries wait, and its queries in flight reach the database only when it resumes
    /// (late, as a write stalled in a partition would). Its tasks keep running. Pauses are
    /// not traced.
    pub fn pause(&mut self, w: WorkerIndex, by: Duration) {
        let worker = &mut self.workers[w];
        worker.paused_until = worker.paused_until.max(self.mono + by);
    }

    /// Stall worker `w`'s loop for `by`, as tasks that block every thread of its runtime
    /// would if the loop ran there, or a deadlock that ends: the machine hears nothing until
    /// then (its timers, task ends, answers and notifications wait), while its tasks and
    /// its lease's keeper go on. A stall longer than `Config::watchdog` costs the lease.
    pub fn stall_loop(&mut self, w: WorkerIndex, by: Duration) {
        let now = self.worker_now(w);
        let worker = &mut self.workers[w];
        if worker.stalled_until <= self.mono {
            worker.stalled_since = now;
        }
        worker.stalled_until = worker.stalled_until.max(self.mono + by);
    }

    /// Whether worker `w`'s keeper gave its lease up because its loop stalled too long.
    pub fn is_wedged(&self, w: WorkerIndex) -> bool {
        self.workers[w].keeper.is_wedged()
    }

    /// Ask worker `w` to stop (forcefully if not `graceful`).
    pub fn shutdown(&mut self, w: WorkerIndex, graceful: bool) {
        self.feed(w, Input::ShutdownRequested { graceful });
    }

    /// Kill worker `w`'s process: tasks, queries in flight and its listener vanish; the
    /// jobs and queues it holds stay locked.
    pub fn crash(&mut self, w: WorkerIndex) {
        if self.workers[w].life != Life::Running {
            return;
        }
        let worker = &mut self.workers[w];
        worker.life = Life::Crashed;
        worker.tasks.clear();
        worker.in_flight.clear();
        worker.listener = ListenerState::Off;
        self.record(Some(w), Traced::Crashed);
    }

    /// Start worker `w` again (crashing it first if it runs) with the same configuration
    /// but a new worker id (`<id>~<n>`), as a new process would.
    pub fn restart(&mut self, w: WorkerIndex) {
        self.crash(w);
        let worker = &self.workers[w];
        let (incarnation, base, skew) = (worker.incarnation + 1, worker.base.clone(), worker.skew);
        let config = self.config_of_incarnation(&base, incarnation);
        let mut worker =
            SimWorker::new(config.clone(), incarnation, base, self.now() + skew, self.mono, skew);
        worker.listener_available = self.workers[w].listener_available;
        self.workers[w] = worker;
        self.record(Some(w), Traced::Started { worker_id: config.worker_id });
        self.drain(w);
    }

    /// Drop worker `w`'s listener connection (it reports `ListenerDown` now).
    pub fn drop_listener(&mut self, w: WorkerIndex) {
        if self.workers[w].life != Life::Running {
            return;
        }
        match self.workers[w].listener {
            ListenerState::Up(_) | ListenerState::Connecting(_) => {
                self.workers[w].listener = ListenerState::Off;
                self.feed(w, Input::ListenerDown { error: "simulated: connection lost".into() });
            }
            ListenerState::Off => {}
        }
    }

    /// Whether worker `w`'s listener connections succeed from now on (they do at first).
    pub fn set_listener_available(&mut self, w: WorkerIndex, available: bool) {
        self.workers[w].listener_available = available;
    }

    /// Make the next `n` queries of worker `w` fail (retryable) without running.
    pub fn fail_next_queries(&mut self, w: WorkerIndex, n: u32) {
        self.workers[w].fail_next = n;
    }

    /// Send a notification, as `NOTIFY channel, payload` would, to every listener that is up.
    pub fn notify(&mut self, channel: &str, payload: &str) {
        let notification = Notification { channel: channel.into(), payload: payload.into() };
        self.broadcast(vec![notification]);
    }

    /// End the task of `job_id` on worker `w` now with `outcome` (for [`TaskPlan::Manual`]
    /// tasks, though any running task may be ended). False if no such task runs.
    pub fn finish_task(&mut self, w: WorkerIndex, job_id: i64, outcome: TaskOutcome) -> bool {
        if self.workers[w].life != Life::Running || self.workers[w].tasks.remove(&job_id).is_none() {
            return false;
        }
        self.feed(w, Input::TaskFinished { job_id, outcome });
        true
    }

    /// When the next step happens, in elapsed time (`None`: nothing will ever happen).
    pub fn next_at(&self) -> Option<Duration> {
        self.next().map(|(at, _)| at)
    }

    /// Do the next thing that happens, moving the clock to it. `None` if nothing is
    /// scheduled (every worker stopped or crashed, nothing in flight).
    pub fn step(&mut self) -> Option<Stepped> {
        self.deliver_notifications();
        let (at, next) = self.next()?;
        if at > self.mono {
            self.mono = at;
            self.steps_at_this_instant = 0;
        } else {
            self.steps_at_this_instant += 1;
            assert!(
                self.steps_at_this_instant < LIVELOCK_STEPS,
                "livelock: {LIVELOCK_STEPS} steps without time passing at {}",
                self.now()
            );
        }
        Some(match next {
            Next::Agenda(key) => match self.agenda.remove(&key) {
                Some(due) => self.run_due(due),
                None => Stepped::Nothing,
            },
            Next::Timer(worker, kind) => {
                self.feed(worker, Input::Timeout);
                Stepped::Timer { worker, kind }
            }
            Next::Keeper(worker) => {
                self.keeper_timeout(worker);
                Stepped::Timer { worker, kind: TimerKind::Heartbeat }
            }
        })
    }

    /// Step until `by` has elapsed, then move the clock to that point.
    pub fn run_for(&mut self, by: Duration) {
        let until = self.mono + by;
        while self.next_at().is_some_and(|at| at <= until) {
            self.step();
        }
        self.mono = self.mono.max(until);
        self.deliver_notifications();
    }

    /// Step until `done(self)` holds, for at most `limit` of elapsed time; whether it held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&World) -> bool) -> bool {
        let until = self.mono + limit;
        loop {
            if done(self) {
                return true;
            }
            match self.next_at() {
                Some(at) if at <= until => {
                    self.step();
                }
                _ => {
                    self.mono = self.mono.max(until);
                    return done(self);
                }
            }
        }
    }

    /// Step until every worker has stopped or crashed (at most `limit`); whether they did.
    pub fn run_until_stopped(&mut self, limit: Duration) -> bool {
        self.run_until(limit, |w| w.workers.iter().all(|w| w.life != Life::Running))
    }

    fn next(&self) -> Option<(Duration, Next)> {
        let agenda =
            self.agenda.keys().next().map(|&(at, seq)| (Duration::microseconds(at), Next::Agenda((at, seq))));
        // Due when either the fed clock or the wall clock reaches the deadline (and the
        // process, or for the machine its loop, runs).
        let due_at = |w: &SimWorker, deadline: Timestamp, blocked_until: Duration| {
            let wall = deadline - self.config.start - self.offset - w.skew;
            w.clock.mono_at(deadline).min(wall).max(self.mono).max(blocked_until)
        };
        let running = self.workers.iter().enumerate().filter(|(_, w)| w.life == Life::Running);
        let timers = running.clone().filter_map(|(i, w)| {
            let (deadline, kind) = w.machine.poll_timeout()?;
            Some((due_at(w, deadline, w.loop_blocked_until()), Next::Timer(i, kind)))
        });
        let keepers = running.filter_map(|(i, w)| {
            let (deadline, _) = w.keeper.poll_timeout()?;
            Some((due_at(w, deadline, w.paused_until), Next::Keeper(i)))
        });
        // Agenda items first at equal times, then workers in index order, keepers last.
        agenda.into_iter().chain(timers).chain(keepers).min_by_key(|(at, next)| {
            let rank = match next {
                Next::Agenda(_) => 0,
                Next::Timer(..) => 1,
                Next::Keeper(_) => 2,
            };
            (*at, rank)
        })
    }

    fn schedule(&mut self, after: Duration, due: Due) {
        let at = (self.mono + after.max(Duration::zero())).num_microseconds().unwrap_or(i64::MAX);
        self.seq += 1;
        self.agenda.insert((at, self.seq), due);
    }

    fn latency(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        let lo_us = lo.num_microseconds().unwrap_or(0);
        let hi_us = hi.num_microseconds().unwrap_or(0);
        Duration::microseconds(self.rng.between(lo_us, hi_us))
    }

    fn token(&mut self) -> u64 {
        self.tokens += 1;
        self.tokens
    }

    fn record(&mut self, worker: Option<WorkerIndex>, what: Traced) {
        let (at, elapsed) = (self.now(), self.mono);
        self.trace.push(TraceEntry { at, elapsed, worker, what });
    }

    fn run_due(&mut self, due: Due) -> Stepped {
        let (Due::Answer { worker, .. }
        | Due::TaskEnd { worker, .. }
        | Due::Listener { worker, .. }
        | Due::Notify { worker, .. }
        | Due::Beat { worker, .. }
        | Due::Heartbeat { worker, .. }) = &due;
        // The keeper's answers wait only for a paused process; the rest is the loop's.
        let w = &self.workers[*worker];
        let blocked_until =
            if matches!(due, Due::Beat { .. }) { w.paused_until } else { w.loop_blocked_until() };
        if blocked_until > self.mono {
            self.schedule(blocked_until - self.mono, due);
            return Stepped::Nothing;
        }
        match due {
            Due::Answer { worker, incarnation, id, statement } => {
                let w = &mut self.workers[worker];
                if w.incarnation != incarnation || w.life != Life::Running || !w.in_flight.remove(&id) {
                    return Stepped::Nothing;
                }
                let fail = if w.fail_next > 0 {
                    w.fail_next -= 1;
                    true
                } else {
                    self.rng.chance(self.config.query_failure_per_mille)
                };
                let result = self.run_statement(&statement, fail);
                self.deliver_notifications();
                self.feed(worker, Input::QueryDone { id, result });
                Stepped::Answered { worker, id }
            }
            Due::TaskEnd { worker, token, job_id, outcome } => {
                let w = &mut self.workers[worker];
                if w.life != Life::Running || w.tasks.get(&job_id).is_none_or(|t| t.token != token) {
                    return Stepped::Nothing;
                }
                w.tasks.remove(&job_id);
                self.feed(worker, Input::TaskFinished { job_id, outcome });
                Stepped::TaskEnded { worker, job_id }
            }
            Due::Listener { worker, token, up } => {
                let w = &mut self.workers[worker];
                if w.life != Life::Running || w.listener != ListenerState::Connecting(token) {
                    return Stepped::Nothing;
                }
                if up {
                    w.listener = ListenerState::Up(token);
                    self.feed(worker, Input::ListenerUp);
                } else {
                    w.listener = ListenerState::Off;
                    self.feed(worker, Input::ListenerDown { error: "simulated: connection refused".into() });
                }
                Stepped::Listener { worker }
            }
            Due::Notify { worker, token, notification } => {
                let w = &self.workers[worker];
                if w.life != Life::Running || w.listener != ListenerState::Up(token) {
                    return Stepped::Nothing;
                }
                let Notification { channel, payload } = notification;
                self.feed(worker, Input::Notification { channel, payload });
                Stepped::Notified { worker }
            }
            Due::Beat { worker, incarnation, id, statement } => {
                let w = &self.workers[worker];
                if w.incarnation != incarnation || w.life != Life::Running {
                    return Stepped::Nothing;
                }
                let fail = self.rng.chance(self.config.query_failure_per_mille);
                let answer = self.run_statement(&statement, fail);
                let result = match &answer {
                    QueryResult::Err(e) => Err(e.clone()),
                    QueryResult::Done
                    | QueryResult::Tasks(_)
                    | QueryResult::Jobs { .. }
                    | QueryResult::KnownCrontabs(_) => Ok(()),
                };
                self.record(Some(worker), Traced::Heartbeat { statement, result: answer });
                let now = self.worker_now(worker);
                let keeper = &mut self.workers[worker].keeper;
                if let Err(e) = keeper.handle(KeeperInput::HeartbeatDone { id, result }, now) {
                    panic!("worker {worker}: the sim fed its keeper an input it refused: {e}");
                }
                self.drain_keeper(worker);
                Stepped::Answered { worker, id }
            }
            Due::Heartbeat { worker, incarnation, sent, result } => {
                if self.workers[worker].incarnation != incarnation {
                    return Stepped::Nothing;
                }
                self.feed(worker, Input::Heartbeat { sent, result });
                Stepped::Nothing
            }
        }
    }

    /// `statement`'s answer from the database now, or the lost connection of a `fail`ed one.
    fn run_statement(&mut self, statement: &Statement, fail: bool) -> QueryResult {
        if fail {
            return QueryResult::Err(DbError {
                message: "simulated: connection lost".into(),
                retryable: true,
            });
        }
        let now = self.now();
        self.db.set_now(now);
        self.db.execute(statement)
    }

    fn deliver_notifications(&mut self) {
        let notifications = self.db.take_notifications();
        if !notifications.is_empty() {
            self.broadcast(notifications);
        }
    }

    fn broadcast(&mut self, notifications: Vec<Notification>) {
        for notification in notifications {
            for worker in 0..self.workers.len() {
                let w = &self.workers[worker];
                if let (Life::Running, ListenerState::Up(token)) = (w.life, w.listener) {
                    let after = self.latency(self.config.notification_latency);
                    self.schedule(after, Due::Notify { worker, token, notification: notification.clone() });
                }
            }
        }
    }

    /// Worker `w`'s clock now (fed, so it never goes back).
    fn worker_now(&mut self, w: WorkerIndex) -> Timestamp {
        let (wall, mono) = (self.now() + self.workers[w].skew, self.mono);
        self.workers[w].clock.now(wall, mono)
    }

    /// Fire worker `w`'s keeper timer, telling it first when the loop last turned: now, as
    /// the driver's loop turns at least once a second, unless it stalls.
    fn keeper_timeout(&mut self, w: WorkerIndex) {
        let now = self.worker_now(w);
        let worker = &mut self.workers[w];
        let turned = if worker.stalled_until > self.mono { worker.stalled_since } else { now };
        let inputs = [KeeperInput::LoopTurned { at: turned }, KeeperInput::Timeout];
        for input in inputs {
            if let Err(e) = worker.keeper.handle(input, now) {
                panic!("worker {w}: the sim fed its keeper an input it refused: {e}");
            }
        }
        self.drain_keeper(w);
    }

    /// Carry out what worker `w`'s keeper says: heartbeats go to the database, results to
    /// the machine (waiting while its loop stalls).
    fn drain_keeper(&mut self, w: WorkerIndex) {
        while let Some(effect) = self.workers[w].keeper.poll_effect() {
            let incarnation = self.workers[w].incarnation;
            match effect {
                KeeperEffect::Heartbeat { id, statement } => {
                    let after = self.latency(self.config.query_latency);
                    self.schedule(after, Due::Beat { worker: w, incarnation, id, statement });
                }
                KeeperEffect::Report { sent, result } => {
                    self.schedule(Duration::zero(), Due::Heartbeat { worker: w, incarnation, sent, result });
                }
                KeeperEffect::Emit(event) => self.record(Some(w), Traced::Lease(event)),
            }
        }
    }

    /// Feed `input` to worker `w` at the wall clock and carry out what it says.
    fn feed(&mut self, w: WorkerIndex, input: Input) {
        if self.workers[w].life != Life::Running {
            return;
        }
        self.record(Some(w), Traced::Input(input.clone()));
        let now = self.worker_now(w);
        let worker_id = self.worker_id(w);
        if let Err(e) = self.workers[w].machine.handle(input, now) {
            panic!("worker {worker_id}: the sim fed an input the machine refused: {e}");
        }
        self.drain(w);
    }

    fn drain(&mut self, w: WorkerIndex) {
        let worker_id = self.worker_id(w);
        while let Some(effect) = self.workers[w].machine.poll_effect() {
            assert!(
                self.workers[w].life == Life::Running,
                "worker {worker_id}: effect {effect:?} after Stopped"
            );
            self.record(Some(w), Traced::Effect(effect.clone()));
            match effect {
                Effect::Query { id, statement } => {
                    self.workers[w].in_flight.insert(id);
                    let incarnation = self.workers[w].incarnation;
                    let after = self.latency(self.config.query_latency);
                    self.schedule(after, Due::Answer { worker: w, incarnation, id, statement });
                }
                Effect::StartTask { job } => {
                    let concurrency = self.workers[w].base.concurrency;
                    let tasks = &self.workers[w].tasks;
                    assert!(!tasks.contains_key(&job.id), "worker {worker_id}: job {} started twice", job.id);
                    assert!(
                        tasks.len() < concurrency,
                        "worker {worker_id}: job {} started with {} of {concurrency} slots busy",
                        job.id,
                        tasks.len()
                    );
                    let token = self.token();
                    let plan = (self.script)(&job, &mut self.rng);
                    let job_id = job.id;
                    self.workers[w].tasks.insert(job_id, RunningTask { job, token, aborting: false });
                    match plan {
                        TaskPlan::Finish { after, outcome } => {
                            self.schedule(after, Due::TaskEnd { worker: w, token, job_id, outcome })
                        }
                        TaskPlan::Hang | TaskPlan::Manual => {}
                    }
                }
                Effect::AbortTask { job_id } => {
                    let latency = self.config.abort_latency;
                    if let Some(task) = self.workers[w].tasks.get_mut(&job_id) {
                        if !task.aborting {
                            task.aborting = true;
                            let token = task.token;
                            let outcome = TaskOutcome::Aborted;
                            self.schedule(latency, Due::TaskEnd { worker: w, token, job_id, outcome });
                        }
                    }
                }
                Effect::ConnectListener => {
                    let token = self.token();
                    self.workers[w].listener = ListenerState::Connecting(token);
                    let up = self.workers[w].listener_available;
                    let after = self.latency(self.config.listener_latency);
                    self.schedule(after, Due::Listener { worker: w, token, up });
                }
                Effect::Emit(Event::OutcomesAbandoned { .. }) => self.workers[w].gave_up = true,
                Effect::Emit(_) => {}
                Effect::Stopped => {
                    let worker = &mut self.workers[w];
                    assert!(
                        worker.tasks.is_empty(),
                        "worker {worker_id}: stopped with tasks running: {:?}",
                        worker.tasks.keys().collect::<Vec<_>>()
                    );
                    assert!(
                        worker.in_flight.is_empty() || worker.gave_up,
                        "worker {worker_id}: stopped with queries in flight: {:?}",
                        worker.in_flight
                    );
                    worker.life = Life::Stopped;
                    worker.listener = ListenerState::Off;
                    let _ = worker.keeper.handle(KeeperInput::Stop, worker.machine.now());
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Agenda((i64, u64)),
    Timer(WorkerIndex, TimerKind),
    Keeper(WorkerIndex),
}
