//! The worker as a pure state machine.
//!
//! The caller feeds facts in with [`Worker::handle`]`(input, now)`, drains commands with
//! [`Worker::poll_effect`], and sleeps until [`Worker::poll_timeout`] ([`crate::protocol`]
//! is the contract). Nothing here awaits, reads a clock or touches the database: a trace of
//! `(now, input)` replays a run.
//!
//! What the machine guarantees (and the tests check):
//! - never more running tasks than `concurrency`, and a job is started at most once for
//!   each time it is fetched;
//! - every started job ends in exactly one completion, failure or return, and those
//!   writes are retried until the database takes them: none is dropped;
//! - fetching follows `fetch`'s promises (one fetch out at a time by default, a batch each; start order;
//!   one fetch after a short one; the poll always armed while running);
//! - its clock never goes back: an earlier `now` than seen before is taken as the latest;
//! - after [`Effect::Stopped`] no effect comes out and no deadline is armed.
//!
//! The machine composes small parts, each owning its state and its deadline and knowing no
//! effect: `fetch` (when and how much to fetch, the local queue), `writes` (outcomes on
//! their way to the database), `link` (the LISTEN connection), `lease` (whether the lease
//! that [`crate::lease::Keeper`] renews holds, and the recovery of dead workers' jobs), `sweep` (the four-hour rule),
//! `chores` (the history pruner's and the workflows' resolver's passes), `vacuum` (when the
//! jobs table is vacuumed, weighed against what the fetches step over), `cancel`
//! (cancelled and timed out tasks, and the read of cancel requests), `slots` and the cron runner; `answers` routes each
//! database answer to its part (`part`), `deadlines` reads their deadlines. Only the
//! worker makes [`Effect`]s.

mod answers;
mod cancel;
mod chores;
mod config;
mod deadlines;
mod fetch;
mod flow;
mod lease;
mod link;
mod notifications;
mod observe;
mod part;
mod refetch;
mod slots;
mod snooze;
mod sweep;
mod task_limits;
mod vacuum;
mod writes;

pub use self::chores::{Pruning, CHORE_BACKOFF_LIMIT, FIRST_PASS_WITHIN, MAX_CHORE_PERIOD};
pub use self::config::{Config, DEFAULT_LOCAL_QUEUE_SIZE, MIN_POLL_INTERVAL};
pub use self::fetch::SLOW_SHORT_FETCH;
pub use self::lease::{lapsed_error, HEARTBEAT_INTERVAL, LEASE, RECOVERY_PERIOD, SUSPICION_GRACE};
pub use self::refetch::RefetchDelay;
pub use self::sweep::{stale_error, FIRST_SWEEP_WITHIN, LOCK_SWEEP_INTERVAL, STALE_LOCK_AGE};
pub use self::vacuum::{LEAST_PASS_COST, MOST_PASS_COST, STEP_COST};
pub use self::writes::WRITES_GRACE;
pub use crate::protocol::{
    DbError, Effect, Event, Failure, Fenced, FetchRequest, Input, MisuseError, QueryId, QueryResult,
    Retention, Snooze, Statement, TaskOutcome, TimerKind, Undecodable,
};
pub use crate::time::Timestamp;

use self::cancel::Cancels;
use self::chores::Chore;
use self::fetch::Fetcher;
use self::flow::{FetchPlan, Flow};
use self::lease::Lease;
use self::link::Link;
use self::part::Part;
use self::slots::{Slots, Started};
use self::sweep::Sweeper;
use self::vacuum::Vacuum;
use self::writes::Writes;
use crate::cron::runner::CronRunner;
use crate::job::Job;
use crate::rng::SplitMix;
use crate::text;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// No new fetch; waiting for running tasks, then for the writes.
    Draining,
    Stopped,
}

/// The worker machine. See the module docs.
#[derive(Debug, Clone)]
pub struct Worker {
    config: Config,
    now: Timestamp,
    phase: Phase,
    next_query: QueryId,
    pending: BTreeMap<QueryId, Part>,
    slots: Slots,
    fetcher: Fetcher,
    writes: Writes,
    link: Link,
    /// Present when the worker schedules a crontab.
    cron: Option<CronRunner>,
    sweeper: Sweeper,
    pruner: Chore,
    resolver: Chore,
    reindexer: Chore,
    ager: Chore,
    vacuum: Vacuum,
    lease: Lease,
    cancels: Cancels,
    /// The pauses this worker obeys.
    flow: Flow,
    /// When a failed fetch is tried again (no fetch before).
    retry_at: Option<Timestamp>,
    effects: VecDeque<Effect>,
    rng: SplitMix,
}

impl Worker {
    /// A worker that starts at `now`: it connects its listener (unless `run_once`) and
    /// fetches once its lease holds.
    pub fn new(config: Config, now: Timestamp) -> Self {
        let mut worker = Worker {
            rng: SplitMix::new(config.seed),
            lease: Lease::start(now, !config.run_once, config.recovery_interval),
            fetcher: Fetcher::new(&config, now),
            flow: Flow::new(config.flow_control, config.poll_interval),
            slots: Slots::new(config.concurrency),
            link: Link::new(config.max_listener_backoff),
            cron: (!config.run_once && (!config.crontab.is_empty() || config.runtime_schedules.is_some()))
                .then(|| {
                    CronRunner::new(config.crontab.clone(), now)
                        .with_runtime_schedules(config.runtime_schedules)
                }),
            vacuum: Vacuum::new(config.vacuum_jobs),
            config,
            now,
            phase: Phase::Running,
            next_query: 0,
            pending: BTreeMap::new(),
            writes: Writes::default(),
            sweeper: Sweeper::default(),
            pruner: Chore::default(),
            resolver: Chore::default(),
            reindexer: Chore::default(),
            ager: Chore::default(),
            cancels: Cancels::default(),
            retry_at: None,
            effects: VecDeque::new(),
        };
        worker.emit(Event::WorkerStart { worker_id: worker.config.worker_id.clone() });
        if worker.config.task_identifiers.is_empty() {
            worker.fetcher.nothing_to_fetch();
        }
        if !worker.config.run_once {
            worker.link.connect();
            worker.effects.push_back(Effect::ConnectListener);
            worker.sweeper = Sweeper::start(now, worker.config.lock_sweep_interval, &mut worker.rng);
            worker.pruner = Chore::start(now, worker.config.prune_history.map(|p| p.every), &mut worker.rng);
            worker.resolver = Chore::start(now, worker.config.resolve_workflows, &mut worker.rng).paced();
            worker.reindexer = Chore::start(now, worker.config.reindex_bloated, &mut worker.rng);
            worker.ager = Chore::start(now, worker.config.age_priorities, &mut worker.rng);
        }
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
                if self.link.up() {
                    self.emit(Event::ListenerUp);
                    // Jobs may have been added, pauses and schedules changed, and its jobs
                    // asked to cancel while it was down (or before it first came up: a change
                    // made then is otherwise read only at the schedules' next poll, a cancel
                    // request at the next heartbeat).
                    self.fetcher.wake();
                    self.flow.want();
                    self.read_cancels();
                    if let Some(cron) = &mut self.cron {
                        cron.schedules_changed(self.now);
                    }
                }
            }
            Input::ListenerDown { error } => {
                if let Some(retry_at) = self.link.down(self.now, &mut self.rng) {
                    self.emit(Event::ListenerDown { error, retry_at });
                }
            }
            Input::ShutdownRequested { graceful } => self.shutdown(graceful),
            Input::Timeout => self.timeout(),
            Input::Heartbeat { sent, result } => self.heartbeat(sent, result),
        }
        self.progress();
        Ok(())
    }

    /// The next command, if any. Drain until `None` after every `handle`.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    fn emit(&mut self, event: Event) {
        self.effects.push_back(Effect::Emit(event));
    }

    fn query(&mut self, part: Part, statement: Statement) -> QueryId {
        let id = self.next_query;
        self.next_query += 1;
        self.pending.insert(id, part);
        self.effects.extend(observe::sending(&statement).map(Effect::Emit));
        self.effects.push_back(Effect::Query { id, statement });
        id
    }

    /// The jobs it knows it holds: running, waiting locally, or with an outcome not yet written.
    pub fn held(&self) -> BTreeSet<i64> {
        self.slots.ids().chain(self.fetcher.ids()).chain(self.writes.ids()).collect()
    }

    /// The jobs a cancel request may abort: running or waiting locally.
    fn cancellable(&self) -> BTreeSet<i64> {
        self.slots.ids().chain(self.fetcher.ids()).collect()
    }

    /// Read this worker's cancel requests, if it holds a job one may name (see `cancel`).
    fn read_cancels(&mut self) {
        if !self.cancellable().is_empty() && self.cancels.read_wanted() {
            let worker_id = self.config.worker_id.clone();
            self.query(Part::Cancels, Statement::ReadCancels { worker_id });
        }
    }

    /// The cancel requests read: abort the tasks they name; read again if that was wanted
    /// meanwhile.
    fn cancels_read(&mut self, requests: Vec<(i64, String)>) {
        let held = self.cancellable();
        for job_id in self.cancels.request(requests, &held) {
            self.abort(job_id);
        }
        if self.cancels.read_ended() {
            self.read_cancels();
        }
    }

    fn local_now(&self) -> Option<Timestamp> {
        self.config.use_local_time.then_some(self.now)
    }

    /// Start what can start, send what is due; stop when all is done.
    fn progress(&mut self) {
        let accepting = self.phase == Phase::Running;
        if self.phase != Phase::Stopped && self.lease.lapsing(self.now) {
            // Other workers may soon free the jobs waiting here: give them back now.
            self.emit(Event::LeaseLapsing);
            let queued = self.fetcher.give_back();
            self.writes.give_back(queued, self.now);
        }
        if accepting && self.flow.read_due() {
            self.query(Part::Flow, Statement::ReadFlow);
        }
        let slots = if self.taking_jobs() { self.slots.free() } else { 0 };
        let limits = &self.config.task_concurrency;
        for job in task_limits::take(&mut self.fetcher, &self.slots, limits, slots, self.now) {
            self.start(job);
        }
        self.maybe_reclaim();
        for _ in 0..self.config.fetches_in_flight.max(1) {
            self.maybe_fetch();
        }
        for write in self.writes.due(self.now) {
            let id = self.query(Part::Write, self.writes.statement(&write, &self.config.worker_id));
            self.writes.sent(id, write);
        }
        self.drive_cron();
        let idle = self.slots.is_empty() && self.fetcher.is_empty();
        let written = !self.writes.writing() && self.writes.nothing_waiting();
        // Run-once stops when a fetch found nothing and nothing it did is still being
        // written: a completion being written may free a named queue's next job.
        let found_all = self.fetcher.is_drained() && !self.fetcher.fetching();
        if accepting && self.config.run_once && found_all && idle && written {
            self.phase = Phase::Draining;
        }
        let settled = self.pending.is_empty() && written && !self.fetcher.reclaiming();
        if self.phase == Phase::Draining && idle && (settled || self.writes.gave_up()) {
            self.phase = Phase::Stopped;
            self.lease.stop_recovery();
            self.retry_at = None;
            self.slots.stopped();
            let job_ids = self.writes.abandon();
            (!settled).then(|| self.emit(Event::OutcomesAbandoned { job_ids }));
            self.emit(Event::WorkerStop { worker_id: self.config.worker_id.clone() });
            self.effects.push_back(Effect::Stopped);
        }
    }

    /// Whether the worker locks and starts jobs now: running, and its lease holds (so a job
    /// it locks can be recovered, and other workers cannot have freed the ones it has).
    fn taking_jobs(&self) -> bool {
        self.phase == Phase::Running && self.lease.holds(self.now)
    }

    fn maybe_fetch(&mut self) {
        let idle = self.retry_at.is_some() || self.config.task_identifiers.is_empty() || !self.flow.known();
        if !self.taking_jobs() || idle {
            return;
        }
        let Some(FetchPlan { task_identifiers, excluded_queues, caps, limits: rate_limits, fair }) =
            self.flow.plan(&self.config.task_identifiers)
        else {
            // All paused: nothing to look for until a resume wakes the fetcher.
            self.fetcher.nothing_to_fetch();
            return;
        };
        let limits = &self.config.task_concurrency;
        let task_identifiers = task_limits::fetchable(task_identifiers, &self.fetcher, &self.slots, limits);
        if task_identifiers.is_empty() {
            return; // every task at its limit: a task's end fetches again
        }
        let Some(limit) = self.fetcher.want(self.slots.len()) else { return };
        let statement = Statement::GetJobs(FetchRequest {
            worker_id: self.config.worker_id.clone(),
            task_identifiers,
            forbidden_flags: self.config.forbidden_flags.clone(),
            accepted_flags: self.config.accepted_flags.clone(),
            limit,
            now: self.local_now(),
            excluded_queues,
            caps,
            limits: rate_limits,
            fair,
            walk_priorities: self.fetcher.walks(),
        });
        let id = self.query(Part::Fetch, statement);
        self.fetcher.sent(id, limit, self.now);
        if self.vacuum.fetch_sent(self.now) {
            self.query(Part::Vacuum, Statement::VacuumJobs);
        }
    }

    /// Give back, unstarted, the waiting jobs a pause now holds back (fetched before this
    /// worker read the pause): once, when the pauses read change.
    fn hold_back_paused(&mut self) {
        let flow = self.flow.state();
        if flow.pauses_nothing() {
            return;
        }
        let held_back =
            self.fetcher.withdraw(|job| flow.holds_back(&job.task_identifier, job.queue_name.as_deref()));
        self.writes.give_back(held_back, self.now);
    }

    /// After a fetch whose answer was lost, once no fetch is out (so none is locking jobs
    /// for this worker meanwhile): give back every job locked for it that it does not know of.
    fn maybe_reclaim(&mut self) {
        if self.phase == Phase::Stopped || self.retry_at.is_some() || !self.fetcher.reclaim_due() {
            return;
        }
        let known = self.held().into_iter().collect();
        let statement = Statement::ReturnUnknown { worker_id: self.config.worker_id.clone(), known };
        self.query(Part::Reclaim, statement);
        self.fetcher.reclaim_sent();
    }

    fn start(&mut self, job: Job) {
        let (job_id, timeout) = (job.id, self.config.task_timeouts.get(&job.task_identifier).copied());
        let started = self.slots.start(&job, timeout, self.now).started();
        self.emit(started);
        self.effects.push_back(Effect::StartTask { job });
        if self.cancels.contains(job_id) {
            self.abort(job_id);
        }
    }

    fn task_finished(&mut self, job_id: i64, outcome: TaskOutcome) -> Result<(), MisuseError> {
        let job = self.slots.finish(job_id).ok_or(MisuseError::UnknownTask(job_id))?;
        let (outcome, permanent) = self.cancels.ended(job_id, outcome);
        if job.in_workflow && outcome != TaskOutcome::Committed {
            self.writes.settles_workflow(job_id);
        }
        match outcome {
            TaskOutcome::Ok => {
                self.emit(job.success(self.now));
                self.writes.complete(job_id, self.now, self.config.complete_batch_delay);
            }
            TaskOutcome::Skipped(reason) => {
                self.emit(job.skipped(reason));
                self.writes.complete(job_id, self.now, self.config.complete_batch_delay);
            }
            // Written with the handler's own transaction: nothing left to write.
            TaskOutcome::Committed => self.emit(job.success(self.now)),
            TaskOutcome::Err(error) | TaskOutcome::Panicked(error) => {
                self.failed(&job, error, None, permanent)
            }
            TaskOutcome::ItemsFailed { error, items } => self.failed(&job, error, Some(items), permanent),
            // `Cancels::ended` words it as an error.
            TaskOutcome::Unstoppable => self.failed(&job, "did not stop".into(), None, true),
            TaskOutcome::Aborted => {
                self.emit(job.returned(self.now));
                self.writes.give_back(vec![job_id], self.now);
            }
            TaskOutcome::Snoozed(delay) => self.snoozed(&job, delay),
        }
        self.emit(Event::JobComplete { job_id });
        self.fetcher.slot_freed();
        Ok(())
    }

    /// The attempt of `job` failed with `error`: report it and record it, with the payload
    /// the job keeps from now on if that changes. Every failure message passes here, so here
    /// it is made storable, once: drivers hand a task's text over as it is.
    fn failed(&mut self, job: &Started, error: String, payload: Option<serde_json::Value>, permanent: bool) {
        let error = text::into_storable(error);
        let last = permanent || job.out_of_attempts();
        let policy = self.config.policy(&job.task);
        let next_run_at = policy.next_run_at(self.now, job.run_at, job.attempts);
        self.emit(job.error(&error, self.now, (!last).then_some(next_run_at)));
        if last {
            self.emit(job.permanently_failed(&error, self.now));
        }
        let run_at = self.config.use_local_time.then_some(next_run_at);
        let delay = policy.custom_delay(job.attempts);
        let failure = Failure { job_id: job.job_id, message: error, run_at, permanent, payload, delay };
        self.writes.fail(failure, self.now, self.config.fail_batch_delay);
    }

    fn shutdown(&mut self, graceful: bool) {
        if self.phase == Phase::Stopped {
            return;
        }
        self.emit(Event::Shutdown { graceful, running: self.slots.len() });
        if self.phase == Phase::Running {
            self.phase = Phase::Draining;
            self.link.off();
            self.sweeper.stop();
            self.pruner.stop();
            self.resolver.stop();
            self.reindexer.stop();
            self.ager.stop();
            self.vacuum.stop();
            self.lease.stop_recovery();
            self.flow.stop();
            // Prefetched jobs never started: back without using an attempt.
            let unstarted = self.fetcher.stop();
            self.writes.give_back(unstarted, self.now);
            let grace = self.config.graceful_shutdown_timeout;
            self.slots.wait_until(self.now + grace);
            self.writes.give_up_at(self.now + grace + WRITES_GRACE);
        }
        if !graceful {
            self.abort_running();
            self.writes.give_up_at(self.now + WRITES_GRACE);
        }
    }

    /// Send what the cron runner has ready (its registration, then one minute's batch at a
    /// time); on shutdown, drop what it has not sent.
    fn drive_cron(&mut self) {
        let Some(cron) = &mut self.cron else { return };
        if self.phase != Phase::Running {
            cron.stop();
            return;
        }
        for statement in cron.due_statements(self.now) {
            self.query(Part::Cron, statement);
        }
    }

    fn abort_running(&mut self) {
        let ids = self.slots.abort_all();
        self.effects.extend(ids.into_iter().map(|job_id| Effect::AbortTask { job_id }));
    }

    /// Tell the task of `job_id` to abort, unless it was told or does not run.
    fn abort(&mut self, job_id: i64) {
        if self.slots.abort(job_id) {
            self.effects.push_back(Effect::AbortTask { job_id });
        }
    }

    /// Each part handles its own deadlines; the flush and cron are driven by `progress`.
    fn timeout(&mut self) {
        let now = self.now;
        let expired = self.fetcher.handle_timeout(now, self.phase == Phase::Running);
        if self.link.handle_timeout(now) {
            self.effects.push_back(Effect::ConnectListener);
        }
        if self.sweeper.handle_timeout(now, &mut self.rng) {
            let locked_before = self.local_now().map(|now| now - STALE_LOCK_AGE);
            self.query(Part::Sweep, Statement::ResetLocked { locked_before });
        }
        if let (true, Some(Pruning { retention, .. })) =
            (self.pruner.handle_timeout(now), self.config.prune_history)
        {
            self.query(Part::Prune, Statement::PruneHistory { retention, at: None });
        }
        if self.resolver.handle_timeout(now) {
            self.query(Part::Resolve, Statement::ResolveWorkflows);
        }
        if self.reindexer.handle_timeout(now) {
            self.query(Part::Reindex, Statement::ReindexBloated);
        }
        if self.ager.handle_timeout(now) {
            self.query(Part::Age, Statement::AgePriorities { batch: crate::aging::AGING_BATCH });
        }
        for (job_id, timeout) in self.slots.expired(now) {
            self.cancels.timed_out(job_id, timeout);
            self.effects.push_back(Effect::AbortTask { job_id });
        }
        if self.lease.handle_timeout(now, &mut self.rng) {
            self.query(Part::Recovery, Statement::RecoverLapsed { grace: SUSPICION_GRACE });
        }
        self.writes.give_back(expired, now);
        if self.writes.handle_timeout(now) {
            self.abort_running();
        }
        let overdue = self.slots.handle_timeout(now);
        self.effects.extend(overdue.into_iter().map(|job_id| Effect::AbortTask { job_id }));
        if self.retry_at.is_some_and(|at| at <= now) {
            self.retry_at = None;
        }
        if self.flow.handle_timeout(now) {
            self.fetcher.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Config, TaskOutcome};
    use crate::job::{JobSpec, RawJob};
    use crate::sim::{TaskPlan, World, WorldConfig};
    use chrono::Duration;

    /// What `last_error` holds after the one job's attempt ends with `outcome`.
    fn stored_error(outcome: TaskOutcome) -> Option<String> {
        let mut world = World::new(WorldConfig::default());
        world.set_script(move |_, _| TaskPlan::finish(Duration::milliseconds(10), outcome.clone()));
        world.add_worker(Config { task_identifiers: vec!["t".into()], ..Config::default() });
        let job = world.db_mut().add_job(&RawJob::new("t", serde_json::json!([1, 2]), JobSpec::default()));
        let id = job.map(|j| j.id).unwrap_or_default();
        world.run_for(Duration::seconds(2));
        world.db().job(id).and_then(|j| j.last_error.clone())
    }

    #[test]
    fn the_text_of_a_failure_is_stored_escaped_whatever_the_door() {
        let nul = "disk \0 full";
        assert_eq!(stored_error(TaskOutcome::Err(nul.into())).as_deref(), Some("disk \\0 full"));
        assert_eq!(stored_error(TaskOutcome::Panicked(nul.into())).as_deref(), Some("disk \\0 full"));
        let items = TaskOutcome::ItemsFailed { error: nul.into(), items: serde_json::json!([2]) };
        assert_eq!(stored_error(items).as_deref(), Some("disk \\0 full"));
        // Bytes that are not text reach the core already written as `\xNN` by the driver.
        let bytes = crate::text::from_bytes(b"bad \xff\0").into_owned();
        assert_eq!(stored_error(TaskOutcome::Err(bytes)).as_deref(), Some("bad \\xFF\\0"));
        // Text already storable is stored as it came: nothing is escaped twice.
        assert_eq!(stored_error(TaskOutcome::Err("a \\0 b".into())).as_deref(), Some("a \\0 b"));
    }
}
