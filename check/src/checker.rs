//! The trace checker: the machine's promises, read off a [`World`]'s trace line by line,
//! with every statement answered checked against the lockstep [`Model`](crate::model).

use crate::life::{written_ids, Grant, Incarnation};
use crate::model::{four_hours, row_of, same_jobs, Model, Row};
use crate::sending::sent;
use chrono::{DateTime, Utc};
use formica_core::sim::faults::LOST_ANSWER;
use formica_core::sim::{TraceEntry, Traced, World};
use formica_core::time::FeedClock;
use formica_core::worker::FetchRequest;
use formica_core::worker::{Config, Effect, Event, Input, QueryId, QueryResult, Statement, TaskOutcome};
use std::collections::{BTreeMap, BTreeSet};

/// Reads a [`World`]'s trace as it grows and checks each line against the machine's
/// promises and the model; the model also answers for the database the operations change.
#[derive(Debug)]
pub struct Checker {
    pub(crate) model: Model,
    lives: Vec<Incarnation>,
    /// Current incarnation of each worker.
    current: BTreeMap<usize, usize>,
    cursor: usize,
    /// The last clock seen for each incarnation's machine.
    seen_clock: BTreeMap<usize, DateTime<Utc>>,
}

impl Default for Checker {
    fn default() -> Self {
        Self::new()
    }
}

impl Checker {
    /// A checker that has read nothing, over an empty model.
    pub fn new() -> Checker {
        Checker {
            model: Model::default(),
            lives: Vec::new(),
            current: BTreeMap::new(),
            cursor: 0,
            seen_clock: BTreeMap::new(),
        }
    }

    /// Reads the lines `world` traced since the last call (`configs`: each worker's
    /// configuration, by index), then checks the tables against the model and each live
    /// machine's slots and clock; the first broken promise is the error.
    pub fn consume(&mut self, world: &World, configs: &[Config]) -> Result<(), String> {
        let trace = world.trace();
        while self.cursor < trace.len() {
            let entry = trace[self.cursor].clone();
            self.cursor += 1;
            self.line(&entry, configs)
                .map_err(|e| format!("{e}\n  at trace line {}: {entry:?}", self.cursor - 1))?;
        }
        self.compare(world)?;
        // The machine's clock is the latest `now` it was fed and never goes back.
        for (&worker, &life) in &self.current {
            let inc = &self.lives[life];
            if !inc.alive || inc.stopped {
                continue;
            }
            // No job waits here while a slot is idle, unless a fetch sent before its own is
            // still out (it may bring jobs that come first).
            if !inc.shutting_down && inc.running() < inc.config.concurrency {
                // A job whose return is being written is no longer the worker's to start.
                let ready = inc.grants.iter().find(|(id, g)| {
                    matches!(g, Grant::Waiting { fetch, .. } if inc.fetches_before(*fetch) == 0)
                        && !inc.in_write.contains(*id)
                });
                if let Some((id, _)) = ready {
                    return Err(format!(
                        "worker {}: job {id} waits while {} of {} slots run",
                        inc.worker_id,
                        inc.running(),
                        inc.config.concurrency
                    ));
                }
            }
            let now = world.machine(worker).now();
            if now != inc.fed {
                return Err(format!(
                    "worker {}: machine clock {now}, latest input {}",
                    inc.worker_id, inc.fed
                ));
            }
            if let Some(before) = self.seen_clock.insert(life, now) {
                if now < before {
                    return Err(format!("worker {}: clock went back from {before} to {now}", inc.worker_id));
                }
            }
        }
        Ok(())
    }

    /// The worker ids of every process that crashed so far.
    pub(crate) fn crashed(&self) -> Vec<String> {
        self.lives.iter().filter(|l| !l.alive).map(|l| l.worker_id.clone()).collect()
    }

    fn compare(&self, world: &World) -> Result<(), String> {
        let sim: Vec<Row> = world.db().jobs().map(row_of).collect();
        let model: Vec<Row> = self.model.rows.values().cloned().collect();
        if sim != model {
            let sim_ids: BTreeSet<i64> = sim.iter().map(|r| r.id).collect();
            let model_ids: BTreeSet<i64> = model.iter().map(|r| r.id).collect();
            let diff: Vec<(Option<&Row>, Option<&Row>)> = sim_ids
                .union(&model_ids)
                .map(|id| (sim.iter().find(|r| r.id == *id), model.iter().find(|r| r.id == *id)))
                .filter(|(a, b)| a != b)
                .collect();
            return Err(format!("tables differ (sim, model): {diff:#?}"));
        }
        self.model.same_requests(world.db())?;
        for queue in world.db().queues() {
            let model = self.model.queues.get(&queue.name).cloned().unwrap_or((None, None));
            if (queue.locked_at, queue.locked_by.clone()) != model {
                return Err(format!("queue {} lock {:?} vs model {model:?}", queue.name, queue));
            }
        }
        Ok(())
    }

    fn life(&mut self, worker: usize) -> Result<&mut Incarnation, String> {
        let index = *self.current.get(&worker).ok_or("no incarnation")?;
        Ok(&mut self.lives[index])
    }

    fn line(&mut self, entry: &TraceEntry, configs: &[Config]) -> Result<(), String> {
        let Some(worker) = entry.worker else { return Ok(()) };
        match &entry.what {
            Traced::Started { worker_id } => {
                let mut config = configs[worker].clone();
                config.worker_id = worker_id.clone();
                self.current.insert(worker, self.lives.len());
                self.lives.push(Incarnation {
                    worker,
                    worker_id: worker_id.clone(),
                    config,
                    alive: true,
                    stopped: false,
                    clock: FeedClock::new(entry.at, entry.elapsed),
                    fed: entry.at,
                    pending: BTreeMap::new(),
                    grants: BTreeMap::new(),
                    in_write: BTreeSet::new(),
                    relocked: BTreeSet::new(),
                    cancelled: BTreeMap::new(),
                    last_fetch_short: false,
                    woken_since_fetch: false,
                    shutting_down: false,
                    gave_up: false,
                });
                Ok(())
            }
            Traced::Crashed => {
                self.life(worker)?.alive = false;
                Ok(())
            }
            Traced::ClockJumped(_) | Traced::Lease(_) => Ok(()),
            Traced::ClockRead => {
                self.life(worker)?.clock.now(entry.at, entry.elapsed);
                Ok(())
            }
            // The keeper's heartbeats run on a connection of their own, beside the machine;
            // the keeper reads the worker's clock as it takes the answer.
            Traced::Heartbeat { statement, result } => {
                if let Ok(inc) = self.life(worker) {
                    inc.clock.now(entry.at, entry.elapsed);
                }
                if let QueryResult::Err(_) = result {
                    return Ok(());
                }
                let (want, _) = self.model.execute(entry.at, statement);
                match &want == result {
                    true => Ok(()),
                    false => Err(format!("{statement:?} answered {result:?}, model says {want:?}")),
                }
            }
            Traced::Input(input) => self.input(worker, entry, input),
            Traced::Effect(effect) => self.effect(worker, entry.at, effect),
        }
    }

    fn input(&mut self, worker: usize, entry: &TraceEntry, input: &Input) -> Result<(), String> {
        let at = entry.at;
        let inc = self.life(worker)?;
        if inc.stopped {
            return Err("input fed after Stopped".into());
        }
        let clock = inc.clock.now(entry.at, entry.elapsed);
        inc.fed = clock;
        // Anything but the answer to a fetch may make a job runnable or free a slot.
        let fetch_answer = matches!(input, Input::QueryDone { id, result: QueryResult::Jobs { .. } } if inc.pending.contains_key(id));
        if !fetch_answer {
            inc.woken_since_fetch = true;
        }
        match input {
            Input::QueryDone { id, result } => {
                let statement = inc.pending.remove(id).ok_or(format!("answer to unknown query {id}"))?;
                let worker_id = inc.worker_id.clone();
                if let QueryResult::Err(error) = result {
                    for id in written_ids(&statement) {
                        inc.in_write.remove(&id);
                    }
                    if error.message == LOST_ANSWER {
                        // The statement ran; only its answer was lost.
                        self.model.execute(at, &statement);
                    }
                    return Ok(());
                }
                let (want, released) = self.model.execute(at, &statement);
                let same = match (&want, result) {
                    (QueryResult::Jobs { jobs: want, .. }, QueryResult::Jobs { jobs: got, .. }) => {
                        same_jobs(got, want)
                    }
                    (want, got) => want == got,
                };
                if !same {
                    return Err(format!("{statement:?} answered {result:?}, model says {want:?}"));
                }
                self.after_statement(worker, &worker_id, (*id, &statement), result, &released)
            }
            Input::TaskFinished { job_id, outcome } => {
                let inc = self.life(worker)?;
                match inc.grants.remove(job_id) {
                    // The task completed its job in its own transaction: no write follows.
                    Some(Grant::Running { .. }) if *outcome == TaskOutcome::Committed => Ok(()),
                    Some(Grant::Running { job }) => {
                        inc.grants.insert(*job_id, Grant::Ended { outcome: outcome.clone(), job, clock });
                        Ok(())
                    }
                    other => Err(format!("task of job {job_id} finished in state {other:?}")),
                }
            }
            Input::ShutdownRequested { .. } => {
                self.life(worker)?.shutting_down = true;
                Ok(())
            }
            Input::Notification { .. }
            | Input::ListenerUp
            | Input::ListenerDown { .. }
            | Input::Timeout
            | Input::Heartbeat { .. } => Ok(()),
        }
    }

    fn after_statement(
        &mut self,
        worker: usize,
        worker_id: &str,
        (fetch, statement): (QueryId, &Statement),
        result: &QueryResult,
        released: &[i64],
    ) -> Result<(), String> {
        // Locks a sweep freed under running tasks (theirs are taken by the four-hour rule).
        let _ = released;
        let inc = self.life(worker)?;
        match (statement, result) {
            (Statement::GetJobs(FetchRequest { limit, .. }), QueryResult::Jobs { jobs, .. }) => {
                inc.last_fetch_short = jobs.len() < *limit;
                for job in jobs {
                    let releasing = inc.pending.values().any(|s| match s {
                        Statement::ReturnJobs { ids, .. } => ids.contains(&job.id),
                        Statement::FailJobs { failures, .. } => failures.iter().any(|f| f.job_id == job.id),
                        Statement::SnoozeJobs { snoozes, .. } => snoozes.iter().any(|s| s.job_id == job.id),
                        _ => false,
                    });
                    match inc.grants.get(&job.id) {
                        Some(_) if releasing => {
                            inc.relocked.insert(job.id);
                        }
                        // A new lock on a job this worker still holds: absorbed (never started).
                        Some(_) => {}
                        // A new hold: a cancel read in an earlier one (which ended it) is spent.
                        None => {
                            inc.cancelled.remove(&job.id);
                            let key = (job.priority, job.run_at, job.id);
                            inc.grants.insert(job.id, Grant::Waiting { fetch, key });
                        }
                    }
                }
                let _ = worker_id;
                Ok(())
            }
            (Statement::CompleteJobs { ids, .. }, QueryResult::Done | QueryResult::Fenced(_)) => {
                for id in ids {
                    inc.in_write.remove(id);
                    match inc.grants.remove(id) {
                        Some(Grant::Ended { outcome: TaskOutcome::Ok | TaskOutcome::Skipped(_), .. }) => {}
                        other => return Err(format!("job {id} completed in state {other:?}")),
                    }
                }
                Ok(())
            }
            (Statement::ReadCancels { .. }, QueryResult::Cancels(requests)) => {
                for (id, reason) in requests {
                    inc.cancelled.entry(*id).or_insert_with(|| reason.clone());
                }
                Ok(())
            }
            (Statement::FailJobs { failures, .. }, QueryResult::Done | QueryResult::Fenced(_)) => {
                for f in failures {
                    inc.in_write.remove(&f.job_id);
                    let as_cancelled = inc.cancelled_failure(f);
                    match inc.grants.remove(&f.job_id) {
                        Some(Grant::Ended {
                            outcome:
                                TaskOutcome::Err(_)
                                | TaskOutcome::Panicked(_)
                                | TaskOutcome::Aborted
                                | TaskOutcome::Snoozed(_),
                            ..
                        }) if as_cancelled => {}
                        // A snooze past its task's window fails the attempt, saying so.
                        Some(Grant::Ended { outcome: TaskOutcome::Snoozed(_), .. })
                            if f.message.starts_with("snoozed past its limit") => {}
                        Some(Grant::Ended { outcome: TaskOutcome::ItemsFailed { items, .. }, .. })
                            if as_cancelled && f.payload.as_ref() == Some(&items) => {}
                        Some(Grant::Ended {
                            outcome: TaskOutcome::Err(m) | TaskOutcome::Panicked(m),
                            ..
                        }) if m == f.message => {}
                        // A batch job keeps the items that failed as its payload.
                        Some(Grant::Ended { outcome: TaskOutcome::ItemsFailed { error, items }, .. })
                            if *error == f.message && f.payload.as_ref() == Some(&items) => {}
                        other => return Err(format!("job {} failed in state {other:?}", f.job_id)),
                    }
                    if inc.relocked.remove(&f.job_id) {
                        inc.grants.insert(f.job_id, Grant::Returning);
                    }
                }
                Ok(())
            }
            (Statement::SnoozeJobs { snoozes, .. }, QueryResult::Done | QueryResult::Fenced(_)) => {
                for s in snoozes {
                    inc.in_write.remove(&s.job_id);
                    match inc.grants.remove(&s.job_id) {
                        Some(Grant::Ended { outcome: TaskOutcome::Snoozed(_), .. }) => {}
                        other => return Err(format!("job {} snoozed in state {other:?}", s.job_id)),
                    }
                    if inc.relocked.remove(&s.job_id) {
                        inc.grants.insert(s.job_id, Grant::Returning);
                    }
                }
                Ok(())
            }
            (Statement::ReturnJobs { ids, .. }, QueryResult::Done) => {
                for id in ids {
                    inc.in_write.remove(id);
                    match inc.grants.remove(id) {
                        Some(
                            Grant::Waiting { .. }
                            | Grant::Returning
                            | Grant::Ended { outcome: TaskOutcome::Aborted, .. },
                        ) => {}
                        other => return Err(format!("job {id} returned in state {other:?}")),
                    }
                    if inc.relocked.remove(id) {
                        inc.grants.insert(*id, Grant::Returning);
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn effect(&mut self, worker: usize, at: DateTime<Utc>, effect: &Effect) -> Result<(), String> {
        let life = *self.current.get(&worker).ok_or("no incarnation")?;
        let inc = &mut self.lives[life];
        if inc.stopped {
            return Err(format!("effect after Stopped: {effect:?}"));
        }
        match effect {
            Effect::Query { id, statement } => {
                sent(inc, statement)?;
                for job_id in written_ids(statement) {
                    if !inc.in_write.insert(job_id) {
                        return Err(format!("job {job_id} in two writes at once"));
                    }
                    match (statement, inc.grants.get(&job_id)) {
                        (Statement::ReturnJobs { .. }, Some(Grant::Waiting { .. } | Grant::Returning)) => {
                            inc.grants.insert(job_id, Grant::Returning);
                        }
                        (_, Some(Grant::Ended { .. })) => {}
                        (_, other) => {
                            return Err(format!("write {statement:?} for job {job_id} in state {other:?}"))
                        }
                    }
                }
                inc.pending.insert(*id, statement.clone());
                Ok(())
            }
            Effect::StartTask { job } => {
                let Some(&Grant::Waiting { fetch, key }) = inc.grants.get(&job.id) else {
                    return Err(format!(
                        "job {} started without a fresh lock: {:?}",
                        job.id,
                        inc.grants.get(&job.id)
                    ));
                };
                // PostgreSQL may run two fetches in either order: a job waits for the fetches
                // sent before its own, and the jobs that may start, start in key order.
                if inc.fetches_before(fetch) > 0 {
                    return Err(format!("job {} started while an earlier fetch is out", job.id));
                }
                if let Some((_, first)) =
                    inc.queued().filter(|(f, _)| inc.fetches_before(*f) == 0).min_by_key(|(_, k)| *k)
                {
                    if first < key {
                        return Err(format!(
                            "job {} started before job {} that comes first",
                            job.id, first.2
                        ));
                    }
                }
                if inc.running() >= inc.config.concurrency {
                    return Err(format!("job {} started with {} slots busy", job.id, inc.running()));
                }
                inc.grants.insert(job.id, Grant::Running { job: job.clone() });
                // Named queues: no other live task of the queue whose lock is still held: the
                // lock it started with, neither reset nor older than four hours (get_jobs
                // takes such locks as abandoned).
                if let Some(queue) = &job.queue_name {
                    for other in self.lives.iter().filter(|l| l.alive && !l.stopped) {
                        for (id, grant) in &other.grants {
                            if *id == job.id && other.worker == worker {
                                continue;
                            }
                            let Grant::Running { job: running } = grant else { continue };
                            let still_locked = self.model.rows.get(id).is_some_and(|r| {
                                r.locked_by.as_ref() == Some(&other.worker_id)
                                    && r.locked_at == running.locked_at
                                    && r.locked_at.is_some_and(|t| t > at - four_hours())
                            });
                            if running.queue_name.as_ref() == Some(queue) && still_locked {
                                return Err(format!("queue {queue}: job {} started while {id} runs", job.id));
                            }
                        }
                    }
                }
                Ok(())
            }
            Effect::AbortTask { job_id } => match inc.grants.get(job_id) {
                Some(Grant::Running { .. } | Grant::Ended { .. }) => Ok(()),
                other => Err(format!("abort of job {job_id} in state {other:?}")),
            },
            Effect::Emit(Event::GaveUp { .. } | Event::BreakingMigration { .. }) => {
                inc.shutting_down = true;
                Ok(())
            }
            Effect::Emit(Event::OutcomesAbandoned { .. }) => {
                inc.gave_up = true;
                Ok(())
            }
            Effect::ConnectListener | Effect::Emit(_) => Ok(()),
            Effect::Stopped => {
                inc.stopped = true;
                if inc.gave_up {
                    return Ok(());
                }
                if !inc.pending.is_empty() {
                    return Err(format!("stopped with queries pending: {:?}", inc.pending));
                }
                if !inc.grants.is_empty() {
                    return Err(format!("stopped with jobs unsettled: {:?}", inc.grants));
                }
                Ok(())
            }
        }
    }
}
