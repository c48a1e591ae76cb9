//! A deterministic world for the worker machine: test scheduling without a database, a
//! runtime or a real clock.
//!
//! A [`World`] holds a simulated clock, an in-memory database with the semantics of
//! Formica's SQL ([`Db`]), any number of workers ([`Worker`](crate::worker::Worker)
//! machines, each with its own [`Config`](crate::worker::Config)), their tasks and their
//! LISTEN connections. It plays the driver: it runs every [`Effect`] the machines emit (a
//! query is answered by the database after a latency, a task ends as a script says, a
//! listener connects or fails), and feeds the results back as [`Input`]s. [`World::step`] jumps the clock straight to the next thing
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
//! - The workers are the real [`Worker`](crate::worker::Worker) machine that the driver runs in production: same
//!   fetches, batching, local queue, retries, LISTEN fallback, cron runner and shutdown.
//! - The database ([`Db`]) applies Formica's SQL semantics column by column: job keys in
//!   all three modes, named queues and their locks, flags, `run_at`, attempts and the
//!   backoff of failures, `add_jobs` batches, the admin functions. `tests/tests/differential.rs`
//!   runs random sequences of these operations and of the worker's statements (fetch,
//!   complete, fail, return, snooze; `cancel_jobs`, the read of cancel requests and the recovery's
//!   settling of them) against PostgreSQL with Formica's migrations and requires the
//!   same rows and results after each one. The cron statements, the heartbeats, the
//!   recovery of leases and the four-hour lock sweep are not in that comparison; the lockstep model
//!   of the `check/` crate (`core/tests/sim_model.rs`) checks them against the documented
//!   rules.
//! - Faults, as the driver meets them: a crashed process keeps its locks until its lease
//!   lapses and a recovery sweep frees them; a paused one ([`World::pause`]) hears nothing
//!   and sends its queries late; a worker whose loop stalls ([`World::stall_loop`]: tasks
//!   blocking every thread, a deadlock) keeps its lease through its keeper, which runs
//!   beside the loop as in the driver, until the stall passes the watchdog's limit; a
//!   restart is a new worker id; a failed query is retried; a dropped listener leaves
//!   polling; a clock jump moves the wall clock that the database and the workers read (a
//!   worker's clock, like the driver's, never goes back).
//!
//! - Workflows ([`World::add_workflow`], records migration 11): a workflow's jobs wait
//!   beside the jobs table and [`crate::workflow`]'s rules (the same code the differential
//!   test `tests/tests/workflow_differential.rs` holds the SQL to) decide what is released.
//!   A worker's completion, a failure that leaves no attempt and `cancel_jobs` failing a job
//!   settle its workflow job in the same statement, which adds the dependents it releases
//!   (a callback with its batch's counts; outputs are not kept, so `batch.outputs` is
//!   empty); a job that leaves the jobs table any other way (graphile-worker's workers, its
//!   `complete_jobs` or `remove_job`: counted as completed) or is failed for good by the
//!   recovery is settled by the resolver's pass, [`Db::resolve_workflows`], which runs when
//!   the test calls it, not on a timer. [`Db::cancel_workflow`] and [`Db::retry_workflow`]
//!   apply rules 4 and 6; the log of every job added for a workflow job ([`Db::releases`])
//!   is what a test judges releases by (`core/tests/workflow_sim.rs`). The workflow tables
//!   themselves are not in `differential.rs`'s comparison: the rules are shared code, their
//!   bookkeeping here is the sim's own.
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

mod aging;
mod cancel;
mod db;
mod fair;
pub mod faults;
mod flow;
mod history;
mod process;
mod rate;
mod run;
mod schedules;
mod statements;
#[cfg(feature = "proptest")]
pub mod strategies;
mod workflow;
mod workflow_rows;
mod world;

pub use crate::rng::SplitMix;
pub use cancel::CancelOutcome;
pub use db::{Db, HistoryRow, Notification, Queue};
pub use faults::{App, Fault, Op};
pub use workflow_rows::{Release, SimWorkflow, WorkflowJob};
pub use world::World;

use crate::job::Job;
use crate::protocol::{Effect, Event, Input, QueryId, QueryResult, Statement, TaskOutcome, TimerKind};
use crate::time::Timestamp;
use chrono::Duration;

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
    /// The worker's clock was read outside an input (its lease keeper's timer, a stall's
    /// start): the loop and the keeper share it, so the time its next input is fed moves on
    /// from this reading.
    ClockRead,
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
