//! The [`World`] and what a test does with it: add workers, move time, inject faults, step.

use super::process::{Due, Life, ListenerState, Next, SimWorker};
use super::{
    Db, Notification, Script, SplitMix, Stepped, TaskPlan, TraceEntry, Traced, WorkerIndex, WorldConfig,
};
use crate::job::Job;
use crate::protocol::{Input, TaskOutcome, TimerKind};
use crate::time::Timestamp;
use crate::worker::{Config, Worker};
use chrono::Duration;
use std::collections::BTreeMap;
use std::fmt;

/// The deterministic world. See the module docs.
pub struct World {
    pub(super) config: WorldConfig,
    pub(super) db: Db,
    pub(super) rng: SplitMix,
    /// Time elapsed since the start (never goes back).
    pub(super) mono: Duration,
    /// Wall clock minus (start + mono): moved by [`World::jump_clock`].
    pub(super) offset: Duration,
    pub(super) workers: Vec<SimWorker>,
    pub(super) agenda: BTreeMap<(i64, u64), Due>,
    pub(super) seq: u64,
    pub(super) tokens: u64,
    pub(super) script: Script,
    pub(super) trace: Vec<TraceEntry>,
    pub(super) steps_at_this_instant: u32,
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

pub(super) const LIVELOCK_STEPS: u32 = 100_000;

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

    pub(super) fn config_of_incarnation(&self, base: &Config, incarnation: u32) -> Config {
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
        self.record(Some(w), Traced::ClockRead);
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

    /// Make the next `n` queries of worker `w` run but lose their answers (a retryable error
    /// instead, as a connection that ends after the statement committed).
    pub fn lose_next_answers(&mut self, w: WorkerIndex, n: u32) {
        self.workers[w].lose_next = n;
    }

    /// The jobs locked by worker `w`'s id that its machine does not know it holds (not
    /// running, waiting, nor being written): a live worker leaves none for long.
    pub fn unknown_locks(&self, w: WorkerIndex) -> Vec<i64> {
        let (id, known) = (self.worker_id(w), self.workers[w].machine.held());
        let locked = self.db.jobs().filter(|j| j.locked_by.as_deref() == Some(id.as_str()));
        locked.map(|j| j.id).filter(|id| !known.contains(id)).collect()
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
        self.commit_in_task(w, job_id, &outcome);
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
}
