//! How the world runs: what is due next, and carrying it out (answers, task ends, listener
//! events, heartbeats), feeding each machine and draining its effects.

use super::process::{Due, Life, ListenerState, Next, RunningTask, SimWorker};
use super::world::World;
use super::{Notification, Stepped, TaskPlan, TraceEntry, Traced, WorkerIndex};
use crate::lease::{KeeperEffect, KeeperInput};
use crate::protocol::{DbError, Effect, Event, Input, QueryResult, Statement, TaskOutcome};
use crate::time::Timestamp;
use chrono::Duration;

impl World {
    pub(super) fn next(&self) -> Option<(Duration, Next)> {
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

    pub(super) fn schedule(&mut self, after: Duration, due: Due) {
        let at = (self.mono + after.max(Duration::zero())).num_microseconds().unwrap_or(i64::MAX);
        self.seq += 1;
        self.agenda.insert((at, self.seq), due);
    }

    pub(super) fn latency(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        let lo_us = lo.num_microseconds().unwrap_or(0);
        let hi_us = hi.num_microseconds().unwrap_or(0);
        Duration::microseconds(self.rng.between(lo_us, hi_us))
    }

    pub(super) fn token(&mut self) -> u64 {
        self.tokens += 1;
        self.tokens
    }

    pub(super) fn record(&mut self, worker: Option<WorkerIndex>, what: Traced) {
        let (at, elapsed) = (self.now(), self.mono);
        self.trace.push(TraceEntry { at, elapsed, worker, what });
    }

    pub(super) fn run_due(&mut self, due: Due) -> Stepped {
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
                let lose = !fail && w.lose_next > 0;
                w.lose_next -= u32::from(lose);
                let mut result = self.run_statement(&statement, fail);
                if lose {
                    result = QueryResult::Err(DbError {
                        message: super::faults::LOST_ANSWER.into(),
                        retryable: true,
                    });
                }
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
                self.commit_in_task(worker, job_id, &outcome);
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
                    | QueryResult::Fenced(_)
                    | QueryResult::Jobs { .. }
                    | QueryResult::KnownCrontabs(_)
                    | QueryResult::Cancels(_)
                    | QueryResult::Schedules(_)
                    | QueryResult::Flow(_)
                    | QueryResult::Pruned { .. }
                    | QueryResult::Resolved { .. }
                    | QueryResult::Reindexed { .. }
                    | QueryResult::Aged { .. } => Ok(()),
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
    /// A task that ended [`TaskOutcome::Committed`] completed its job in its own transaction
    /// before it ended: the database holds that completion (fenced, and settling the job if a
    /// workflow's, as the driver's is) by the time the machine hears of the end.
    pub(super) fn commit_in_task(&mut self, worker: WorkerIndex, job_id: i64, outcome: &TaskOutcome) {
        if *outcome == TaskOutcome::Committed {
            let worker_id = self.worker_id(worker);
            let completion =
                Statement::CompleteJobs { worker_id, ids: vec![job_id], settles_workflow_jobs: true };
            self.run_statement(&completion, false);
            self.deliver_notifications();
        }
    }

    pub(super) fn run_statement(&mut self, statement: &Statement, fail: bool) -> QueryResult {
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

    pub(super) fn deliver_notifications(&mut self) {
        let notifications = self.db.take_notifications();
        if !notifications.is_empty() {
            self.broadcast(notifications);
        }
    }

    pub(super) fn broadcast(&mut self, notifications: Vec<Notification>) {
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
    pub(super) fn worker_now(&mut self, w: WorkerIndex) -> Timestamp {
        let (wall, mono) = (self.now() + self.workers[w].skew, self.mono);
        self.workers[w].clock.now(wall, mono)
    }

    /// Fire worker `w`'s keeper timer, telling it first when the loop last turned: now, as
    /// the driver's loop turns at least once a second, unless it stalls.
    pub(super) fn keeper_timeout(&mut self, w: WorkerIndex) {
        self.record(Some(w), Traced::ClockRead);
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
    pub(super) fn drain_keeper(&mut self, w: WorkerIndex) {
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
    pub(super) fn feed(&mut self, w: WorkerIndex, input: Input) {
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

    pub(super) fn drain(&mut self, w: WorkerIndex) {
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
