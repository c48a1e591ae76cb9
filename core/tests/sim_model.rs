//! Random operation sequences run against `core::sim` and, in lockstep, against a naive
//! reference model of the job tables written here from the documented rules (it calls none
//! of the core's functions: no `job_key::decide`, no `backoff`). After every step of the
//! world, the checker below reads the new trace lines and checks:
//!
//! - busy slots never exceed `concurrency`;
//! - a job is started only on a lock a fetch granted to that worker, once per grant;
//! - no fetched job waits while a slot is idle, unless a fetch sent before its own is still
//!   out (or a shutdown began);
//! - every started job ends in exactly one complete, fail or return, matching how its task
//!   ended, and a fetched job that is never started is returned;
//! - the machine's clock never goes back and is the latest `now` it was given (the wall clock, or,
//!   once that went back, the time last fed plus the time elapsed since); fetches and
//!   failures carry it when `use_local_time` is on;
//! - failures follow the backoff curve `run_at = max(now, run_at) + e^min(attempts, 10) s`
//!   (as sent by the machine, and as stored when the database computes it);
//! - the job tables (every column, queue locks included) equal the model's, so job-key
//!   outcomes (all three modes, array merge, detaching), fetch order, flags and named
//!   queues all match;
//! - at most one job of a named queue runs at a time (unless its lock was taken from a live
//!   worker by an admin, a four-hour sweep or a recovery after its lease lapsed);
//! - after `Stopped` nothing is running or in flight, no timer is armed and no input
//!   brings out an effect;
//! - no job is lost: one disappears only when completed by a worker after its task
//!   succeeded, completed by an admin or removed by key.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::{DateTime, Duration, Utc};
use formica_core::job::{Job, JobKeyMode, JobSpec, RawJob, RescheduleJobOptions};
use formica_core::sim::{TaskPlan, TraceEntry, Traced, World, WorldConfig};
use formica_core::worker::{
    Config, Effect, Event, Failure, Input, QueryId, QueryResult, Statement, TaskOutcome,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

// ---------------------------------------------------------------------------------------
// The model: the job tables, naively.

/// A row of the model's job table: a `Job` without its queue id (the model names queues,
/// it does not number them).
type Row = Job;

/// `job` as the model's table holds it.
fn row_of(job: &Job) -> Row {
    Job { job_queue_id: None, ..job.clone() }
}

/// Why a job left the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    Completed,
    AdminCompleted,
    Removed,
}

#[derive(Debug, Default)]
struct Model {
    rows: BTreeMap<i64, Row>,
    /// Queue name -> (locked_at, locked_by).
    queues: BTreeMap<String, (Option<DateTime<Utc>>, Option<String>)>,
    /// Task identifiers; the id is the position plus one.
    tasks: Vec<String>,
    next_id: i64,
    /// Ids of the rows ever inserted.
    created: BTreeSet<i64>,
    /// Crontab identifier -> (known_since, last_execution).
    crontabs: BTreeMap<String, (DateTime<Utc>, Option<DateTime<Utc>>)>,
    gone: BTreeMap<i64, Gone>,
    /// Worker id -> when its lease lapses and since when it is suspected (the database
    /// clock).
    leases: BTreeMap<String, (DateTime<Utc>, Option<DateTime<Utc>>)>,
}

fn four_hours() -> Duration {
    Duration::hours(4)
}

/// e^min(attempts, 10) seconds, to the microsecond.
fn retry_delay(attempts: i16) -> Duration {
    let x = f64::from(attempts.clamp(0, 10));
    Duration::microseconds((x.exp() * 1_000_000.0).round() as i64)
}

impl Model {
    fn task(&mut self, name: &str) {
        if !self.tasks.iter().any(|t| t == name) {
            self.tasks.push(name.to_owned());
        }
    }

    fn queue(&mut self, name: &Option<String>) {
        if let Some(name) = name {
            self.queues.entry(name.clone()).or_insert((None, None));
        }
    }

    fn draw_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    fn holder(&self, key: &Option<String>) -> Option<i64> {
        let key = key.as_ref()?;
        self.rows.values().find(|r| r.key.as_ref() == Some(key)).map(|r| r.id)
    }

    fn fresh(&self, id: i64, now: DateTime<Utc>, add: &RawJob) -> Row {
        Job {
            id,
            job_queue_id: None,
            task_identifier: add.identifier.clone(),
            queue_name: add.spec.queue_name.clone(),
            payload: add.payload.clone(),
            priority: add.spec.priority.unwrap_or(0),
            run_at: add.spec.run_at.unwrap_or(now),
            attempts: 0,
            max_attempts: add.spec.max_attempts.unwrap_or(25),
            last_error: None,
            created_at: now,
            updated_at: now,
            key: add.spec.job_key.clone(),
            locked_at: None,
            locked_by: None,
            revision: 0,
            flags: add.spec.flags.clone().unwrap_or_default().into_iter().collect(),
        }
    }

    fn add_job(&mut self, now: DateTime<Utc>, add: &RawJob) -> Option<Row> {
        let mode = add.spec.job_key_mode.unwrap_or(JobKeyMode::Replace);
        if add.spec.job_key.is_some() && mode == JobKeyMode::UnsafeDedupe {
            self.task(&add.identifier);
            self.queue(&add.spec.queue_name);
            let id = self.draw_id();
            if let Some(holder) = self.holder(&add.spec.job_key) {
                let row = self.rows.get_mut(&holder)?;
                row.revision += 1;
                row.updated_at = now;
                return Some(row.clone());
            }
            let row = self.fresh(id, now, add);
            self.rows.insert(id, row.clone());
            self.created.insert(id);
            return Some(row);
        }
        self.add_jobs(now, std::slice::from_ref(add), mode == JobKeyMode::PreserveRunAt)?.pop()
    }

    /// `None`: the statement fails (two specs with one key).
    fn add_jobs(&mut self, now: DateTime<Utc>, adds: &[RawJob], preserve: bool) -> Option<Vec<Row>> {
        let keys: Vec<&String> = adds.iter().filter_map(|a| a.spec.job_key.as_ref()).collect();
        let distinct: BTreeSet<&String> = keys.iter().copied().collect();
        if distinct.len() != keys.len() {
            return None;
        }
        for add in adds {
            self.task(&add.identifier);
        }
        for add in adds {
            self.queue(&add.spec.queue_name);
        }
        // Holders that are running or out of attempts give up their key for good.
        for add in adds {
            if let Some(holder) = self.holder(&add.spec.job_key) {
                let row = self.rows.get_mut(&holder)?;
                if row.locked_at.is_some() || row.attempts >= row.max_attempts {
                    row.key = None;
                    row.attempts = row.max_attempts;
                    row.updated_at = now;
                }
            }
        }
        let mut out = Vec::new();
        for add in adds {
            let id = self.draw_id();
            match self.holder(&add.spec.job_key) {
                Some(holder) => {
                    let new_payload = add.payload.clone();
                    let row = self.rows.get_mut(&holder)?;
                    row.payload = match (&row.payload, &new_payload) {
                        (Value::Array(old), Value::Array(new)) => {
                            let mut all = old.clone();
                            all.extend(new.iter().cloned());
                            Value::Array(all)
                        }
                        _ => new_payload,
                    };
                    if !(preserve && row.attempts == 0) {
                        row.run_at = add.spec.run_at.unwrap_or(now);
                    }
                    row.task_identifier = add.identifier.clone();
                    row.queue_name = add.spec.queue_name.clone();
                    row.max_attempts = add.spec.max_attempts.unwrap_or(25);
                    row.priority = add.spec.priority.unwrap_or(0);
                    row.flags = add.spec.flags.clone().unwrap_or_default().into_iter().collect();
                    row.revision += 1;
                    row.attempts = 0;
                    row.last_error = None;
                    row.updated_at = now;
                    out.push(row.clone());
                }
                None => {
                    let row = self.fresh(id, now, add);
                    self.rows.insert(id, row.clone());
                    self.created.insert(id);
                    out.push(row);
                }
            }
        }
        out.sort_by_key(|r| r.id);
        Some(out)
    }

    fn admin_may_touch(row: &Row, now: DateTime<Utc>) -> bool {
        match row.locked_at {
            None => true,
            Some(at) => at < now - four_hours(),
        }
    }

    fn remove_job(&mut self, now: DateTime<Utc>, key: &str) -> Option<Row> {
        let holder = self.holder(&Some(key.to_owned()))?;
        if Self::admin_may_touch(&self.rows[&holder], now) {
            self.gone.insert(holder, Gone::Removed);
            return self.rows.remove(&holder);
        }
        let row = self.rows.get_mut(&holder)?;
        row.key = None;
        row.attempts = row.max_attempts;
        row.updated_at = now;
        Some(row.clone())
    }

    fn touchable(&self, now: DateTime<Utc>, ids: &[i64]) -> Vec<i64> {
        let ids: BTreeSet<i64> = ids.iter().copied().collect();
        ids.into_iter()
            .filter(|id| self.rows.get(id).is_some_and(|r| Self::admin_may_touch(r, now)))
            .collect()
    }

    fn complete_jobs(&mut self, now: DateTime<Utc>, ids: &[i64]) -> Vec<Row> {
        let mut out = Vec::new();
        for id in self.touchable(now, ids) {
            self.gone.insert(id, Gone::AdminCompleted);
            out.extend(self.rows.remove(&id));
        }
        out
    }

    fn permanently_fail_jobs(&mut self, now: DateTime<Utc>, ids: &[i64], message: Option<&str>) -> Vec<Row> {
        let mut out = Vec::new();
        for id in self.touchable(now, ids) {
            let Some(row) = self.rows.get_mut(&id) else { continue };
            row.last_error = Some(message.unwrap_or("Manually marked as failed").to_owned());
            row.attempts = row.max_attempts;
            row.updated_at = now;
            out.push(row.clone());
        }
        out
    }

    fn reschedule_jobs(&mut self, now: DateTime<Utc>, ids: &[i64], r: &RescheduleJobOptions) -> Vec<Row> {
        let mut out = Vec::new();
        for id in self.touchable(now, ids) {
            let Some(row) = self.rows.get_mut(&id) else { continue };
            if let Some(v) = r.run_at {
                row.run_at = v;
            }
            if let Some(v) = r.priority {
                row.priority = v;
            }
            if let Some(v) = r.attempts {
                row.attempts = v;
            }
            if let Some(v) = r.max_attempts {
                row.max_attempts = v;
            }
            row.updated_at = now;
            out.push(row.clone());
        }
        out
    }

    /// Releases every lock of `workers`; returns the jobs released.
    fn force_unlock(&mut self, workers: &[String]) -> Vec<i64> {
        let mut released = Vec::new();
        for row in self.rows.values_mut() {
            if row.locked_by.as_ref().is_some_and(|w| workers.contains(w)) {
                row.locked_at = None;
                row.locked_by = None;
                released.push(row.id);
            }
        }
        for lock in self.queues.values_mut() {
            if lock.1.as_ref().is_some_and(|w| workers.contains(w)) {
                *lock = (None, None);
            }
        }
        released
    }

    fn unlock_queue(&mut self, queue: &Option<String>, worker: &str) {
        if let Some(lock) = queue.as_ref().and_then(|q| self.queues.get_mut(q)) {
            if lock.1.as_deref() == Some(worker) {
                *lock = (None, None);
            }
        }
    }

    /// The worker statements; `db_now` is the database clock. Returns the expected result
    /// and the jobs whose locks a sweep released.
    fn execute(&mut self, db_now: DateTime<Utc>, statement: &Statement) -> (QueryResult, Vec<i64>) {
        match statement {
            Statement::RegisterCrontabs { identifiers, known_since } => {
                let mut before = Vec::new();
                for identifier in identifiers {
                    if let Some((since, last)) = self.crontabs.get(identifier) {
                        before.push(formica_core::cron::runner::KnownCrontab {
                            identifier: identifier.clone(),
                            known_since: *since,
                            last_execution: *last,
                        });
                    }
                }
                for identifier in identifiers {
                    self.crontabs.entry(identifier.clone()).or_insert((*known_since, None));
                }
                (QueryResult::KnownCrontabs(before), vec![])
            }
            Statement::ScheduleCron(batch) => {
                for job in &batch.jobs {
                    let entry = self.crontabs.entry(job.identifier.clone()).or_insert((batch.at, None));
                    if entry.1.is_some_and(|last| last >= batch.at) {
                        continue;
                    }
                    entry.1 = Some(batch.at);
                    let mut spec = job.spec.clone();
                    spec.run_at = Some(batch.at);
                    let add = RawJob { identifier: job.task.clone(), payload: job.payload.clone(), spec };
                    self.add_job(db_now, &add);
                }
                (QueryResult::Done, vec![])
            }
            Statement::RegisterTasks { identifiers } => {
                let mut out = Vec::new();
                for name in identifiers {
                    self.task(name);
                    let id = self.tasks.iter().position(|t| t == name).map_or(0, |p| p as i32 + 1);
                    if !out.iter().any(|(_, n): &(i32, String)| n == name) {
                        out.push((id, name.clone()));
                    }
                }
                (QueryResult::Tasks(out), vec![])
            }
            Statement::GetJobs { worker_id, task_ids, forbidden_flags, limit, now } => {
                let now = now.unwrap_or(db_now);
                let names: Vec<&String> =
                    task_ids.iter().filter_map(|id| self.tasks.get((*id - 1).max(0) as usize)).collect();
                let mut candidates: Vec<&Row> = self
                    .rows
                    .values()
                    .filter(|r| r.locked_at.is_none() && r.attempts < r.max_attempts && r.run_at <= now)
                    .filter(|r| names.contains(&&r.task_identifier))
                    .filter(|r| {
                        r.queue_name
                            .as_ref()
                            .is_none_or(|q| self.queues.get(q).is_some_and(|l| l.0.is_none()))
                    })
                    .filter(|r| forbidden_flags.iter().all(|f| !r.flags.contains(f)))
                    .collect();
                candidates.sort_by_key(|r| (r.priority, r.run_at, r.id));
                let mut seen_queues = BTreeSet::new();
                let chosen: Vec<i64> = candidates
                    .iter()
                    .take(*limit)
                    .filter(|r| r.queue_name.as_ref().is_none_or(|q| seen_queues.insert(q.clone())))
                    .map(|r| r.id)
                    .collect();
                let mut jobs = Vec::new();
                for id in chosen {
                    let Some(row) = self.rows.get_mut(&id) else { continue };
                    row.attempts += 1;
                    row.locked_at = Some(now);
                    row.locked_by = Some(worker_id.clone());
                    let (queue, snapshot) = (row.queue_name.clone(), row.clone());
                    if let Some(q) = queue {
                        self.queues.insert(q, (Some(now), Some(worker_id.clone())));
                    }
                    jobs.push(snapshot);
                }
                // Compared without queue ids by the caller.
                (QueryResult::jobs(jobs), vec![])
            }
            Statement::CompleteJobs { worker_id, ids } => {
                for id in ids {
                    if self.rows.get(id).is_some_and(|r| r.locked_by.as_ref() == Some(worker_id)) {
                        let row = self.rows.remove(id).expect("present");
                        self.gone.insert(*id, Gone::Completed);
                        self.unlock_queue(&row.queue_name, worker_id);
                    }
                }
                (QueryResult::Done, vec![])
            }
            Statement::FailJobs { worker_id, failures } => {
                for Failure { job_id, message, run_at, permanent, payload } in failures {
                    let Some(row) = self.rows.get_mut(job_id) else { continue };
                    if row.locked_by.as_ref() != Some(worker_id) {
                        continue;
                    }
                    row.last_error = Some(message.clone());
                    row.payload = payload.clone().unwrap_or_else(|| row.payload.clone());
                    // A cancelled job has no attempt left.
                    if *permanent {
                        row.attempts = row.max_attempts;
                    }
                    row.run_at = run_at.unwrap_or_else(|| db_now.max(row.run_at) + retry_delay(row.attempts));
                    row.locked_at = None;
                    row.locked_by = None;
                    let queue = row.queue_name.clone();
                    self.unlock_queue(&queue, worker_id);
                }
                (QueryResult::Done, vec![])
            }
            Statement::ReturnJobs { worker_id, ids } => {
                for id in ids {
                    let Some(row) = self.rows.get_mut(id) else { continue };
                    if row.locked_by.as_ref() != Some(worker_id) {
                        continue;
                    }
                    row.attempts = (row.attempts - 1).max(0);
                    row.locked_at = None;
                    row.locked_by = None;
                    let queue = row.queue_name.clone();
                    self.unlock_queue(&queue, worker_id);
                }
                (QueryResult::Done, vec![])
            }
            // A heartbeat: alive until `lease` from now, and not suspected.
            Statement::Heartbeat { worker_id, lease } => {
                self.leases.insert(worker_id.clone(), (db_now + *lease, None));
                (QueryResult::Done, vec![])
            }
            // Recovery: a lapsed lease becomes suspected; every lock of a worker suspected
            // for more than `grace` is freed, the job due at once with its attempt counted,
            // and the worker forgotten.
            Statement::RecoverLapsed { grace } => {
                let lapsed: Vec<String> = self
                    .leases
                    .iter()
                    .filter(|(_, (until, since))| {
                        *until < db_now && since.is_some_and(|s| s < db_now - *grace)
                    })
                    .map(|(w, _)| w.clone())
                    .collect();
                for (until, since) in self.leases.values_mut() {
                    if *until < db_now && since.is_none() {
                        *since = Some(db_now);
                    }
                }
                for worker in &lapsed {
                    self.leases.remove(worker);
                }
                let released = self.force_unlock(&lapsed);
                for id in &released {
                    if let Some(row) = self.rows.get_mut(id) {
                        row.run_at = row.run_at.max(db_now);
                    }
                }
                (QueryResult::Done, released)
            }
            Statement::ResetLocked { locked_before } => {
                let cutoff = locked_before.unwrap_or(db_now - four_hours());
                let mut released = Vec::new();
                for row in self.rows.values_mut() {
                    if row.locked_at.is_some_and(|at| at < cutoff) {
                        row.locked_at = None;
                        row.locked_by = None;
                        row.run_at = row.run_at.max(db_now);
                        released.push(row.id);
                    }
                }
                for lock in self.queues.values_mut() {
                    if lock.0.is_some_and(|at| at < cutoff) {
                        *lock = (None, None);
                    }
                }
                (QueryResult::Done, released)
            }
        }
    }
}

fn same_jobs(got: &[Job], want: &[Job]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| row_of(g) == row_of(w))
}

// ---------------------------------------------------------------------------------------
// The checker: the machine's promises, read off the trace.

#[derive(Debug, Clone, PartialEq)]
enum Grant {
    /// Locked for this worker by fetch `fetch`, not started; `key` is the job's
    /// (priority, run_at, id) as fetched.
    Waiting { fetch: QueryId, key: (i16, DateTime<Utc>, i64) },
    /// Its task runs.
    Running { job: Job },
    /// Its task ended this way; the outcome is not written yet.
    Ended { outcome: TaskOutcome, job: Job, clock: DateTime<Utc> },
    /// Given back (or to be, once the return or failure being written about it is done, if
    /// a fetch locked it again meanwhile): never started here again.
    Returning,
}

#[derive(Debug)]
struct Incarnation {
    worker: usize,
    worker_id: String,
    config: Config,
    alive: bool,
    stopped: bool,
    clock: (DateTime<Utc>, Duration),
    pending: BTreeMap<QueryId, Statement>,
    grants: BTreeMap<i64, Grant>,
    in_write: BTreeSet<i64>,
    /// Jobs a fetch locked again while their return or failure was out.
    relocked: BTreeSet<i64>,
    /// The last fetch came back with fewer jobs than it asked for.
    last_fetch_short: bool,
    /// Something that may make a job runnable happened since the last fetch was sent.
    woken_since_fetch: bool,
    /// A shutdown was asked for or begun by the machine.
    shutting_down: bool,
    /// The machine stopped waiting for the database (its shutdown's bound passed): it may
    /// stop with statements out and jobs unsettled, which stay locked for a sweep.
    gave_up: bool,
}

impl Incarnation {
    fn running(&self) -> usize {
        self.grants.values().filter(|g| matches!(g, Grant::Running { .. })).count()
    }

    /// Fetches in flight that were sent before `fetch`.
    fn fetches_before(&self, fetch: QueryId) -> usize {
        self.pending.range(..fetch).filter(|(_, s)| matches!(s, Statement::GetJobs { .. })).count()
    }

    /// Jobs fetched, not started and not being given back: the local queue.
    fn queued(&self) -> impl Iterator<Item = (QueryId, (i16, DateTime<Utc>, i64))> + '_ {
        self.grants.iter().filter(|(id, _)| !self.in_write.contains(id)).filter_map(|(_, g)| match g {
            Grant::Waiting { fetch, key } => Some((*fetch, *key)),
            _ => None,
        })
    }
}

struct Checker {
    model: Model,
    lives: Vec<Incarnation>,
    /// Current incarnation of each worker.
    current: BTreeMap<usize, usize>,
    cursor: usize,
    /// The last clock seen for each incarnation's machine.
    seen_clock: BTreeMap<usize, DateTime<Utc>>,
}

impl Checker {
    fn new() -> Checker {
        Checker {
            model: Model::default(),
            lives: Vec::new(),
            current: BTreeMap::new(),
            cursor: 0,
            seen_clock: BTreeMap::new(),
        }
    }

    fn consume(&mut self, world: &World, configs: &[Config]) -> Result<(), String> {
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
            if now != inc.clock.0 {
                return Err(format!(
                    "worker {}: machine clock {now}, latest input {}",
                    inc.worker_id, inc.clock.0
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
                    clock: (entry.at, entry.elapsed),
                    pending: BTreeMap::new(),
                    grants: BTreeMap::new(),
                    in_write: BTreeSet::new(),
                    relocked: BTreeSet::new(),
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
            // The keeper's heartbeats run on a connection of their own, beside the machine.
            Traced::Heartbeat { statement, result } => {
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
        // The machine's clock: the wall clock, unless it went back; then the time last fed
        // plus the time elapsed since (as the driver does).
        let (fed, fed_at) = inc.clock;
        inc.clock = (at.max(fed + (entry.elapsed - fed_at)), entry.elapsed);
        let clock = inc.clock.0;
        // Anything but the answer to a fetch may make a job runnable or free a slot.
        let fetch_answer = matches!(input, Input::QueryDone { id, result: QueryResult::Jobs { .. } } if inc.pending.contains_key(id));
        if !fetch_answer {
            inc.woken_since_fetch = true;
        }
        match input {
            Input::QueryDone { id, result } => {
                let statement = inc.pending.remove(id).ok_or(format!("answer to unknown query {id}"))?;
                let worker_id = inc.worker_id.clone();
                if let QueryResult::Err(_) = result {
                    for id in written_ids(&statement) {
                        inc.in_write.remove(&id);
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
            (Statement::GetJobs { limit, .. }, QueryResult::Jobs { jobs, .. }) => {
                inc.last_fetch_short = jobs.len() < *limit;
                for job in jobs {
                    let releasing = inc.pending.values().any(|s| match s {
                        Statement::ReturnJobs { ids, .. } => ids.contains(&job.id),
                        Statement::FailJobs { failures, .. } => failures.iter().any(|f| f.job_id == job.id),
                        _ => false,
                    });
                    match inc.grants.get(&job.id) {
                        Some(_) if releasing => {
                            inc.relocked.insert(job.id);
                        }
                        // A new lock on a job this worker still holds: absorbed (never started).
                        Some(_) => {}
                        None => {
                            let key = (job.priority, job.run_at, job.id);
                            inc.grants.insert(job.id, Grant::Waiting { fetch, key });
                        }
                    }
                }
                let _ = worker_id;
                Ok(())
            }
            (Statement::CompleteJobs { ids, .. }, QueryResult::Done) => {
                for id in ids {
                    inc.in_write.remove(id);
                    match inc.grants.remove(id) {
                        Some(Grant::Ended { outcome: TaskOutcome::Ok, .. }) => {}
                        other => return Err(format!("job {id} completed in state {other:?}")),
                    }
                }
                Ok(())
            }
            (Statement::FailJobs { failures, .. }, QueryResult::Done) => {
                for f in failures {
                    inc.in_write.remove(&f.job_id);
                    match inc.grants.remove(&f.job_id) {
                        Some(Grant::Ended {
                            outcome: TaskOutcome::Err(m) | TaskOutcome::Panicked(m),
                            ..
                        }) if m == f.message => {}
                        other => return Err(format!("job {} failed in state {other:?}", f.job_id)),
                    }
                    if inc.relocked.remove(&f.job_id) {
                        inc.grants.insert(f.job_id, Grant::Returning);
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
                match statement {
                    Statement::GetJobs { now, worker_id, limit, .. } => {
                        let want = inc.config.use_local_time.then_some(inc.clock.0);
                        if *now != want || *worker_id != inc.worker_id {
                            return Err(format!("fetch with now {now:?} by {worker_id}, expected {want:?}"));
                        }
                        let asked: Vec<usize> = inc
                            .pending
                            .values()
                            .filter_map(|s| match s {
                                Statement::GetJobs { limit, .. } => Some(*limit),
                                _ => None,
                            })
                            .collect();
                        // One fetch at a time in direct mode, two with a local queue; each
                        // asks for the free slots only, or for what fits in the queue.
                        let (most, room) = match inc.config.local_queue_size {
                            None => (1, inc.config.concurrency.saturating_sub(inc.running())),
                            Some(size) => {
                                (2, size.saturating_sub(inc.queued().count() + asked.iter().sum::<usize>()))
                            }
                        };
                        if asked.len() >= most {
                            return Err(format!("a fetch with {} in flight", asked.len()));
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
                            let want = inc
                                .config
                                .use_local_time
                                .then(|| (*clock).max(job.run_at) + retry_delay(job.attempts));
                            if f.run_at != want {
                                return Err(format!(
                                    "job {} retry at {:?}, backoff says {want:?}",
                                    f.job_id, f.run_at
                                ));
                            }
                        }
                    }
                    Statement::RegisterTasks { .. }
                    | Statement::RegisterCrontabs { .. }
                    | Statement::ScheduleCron(_)
                    | Statement::CompleteJobs { .. }
                    | Statement::ReturnJobs { .. }
                    | Statement::Heartbeat { .. }
                    | Statement::RecoverLapsed { .. }
                    | Statement::ResetLocked { .. } => {}
                }
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

fn written_ids(statement: &Statement) -> Vec<i64> {
    match statement {
        Statement::CompleteJobs { ids, .. } | Statement::ReturnJobs { ids, .. } => ids.clone(),
        Statement::FailJobs { failures, .. } => failures.iter().map(|f| f.job_id).collect(),
        Statement::RegisterTasks { .. }
        | Statement::GetJobs { .. }
        | Statement::ResetLocked { .. }
        | Statement::Heartbeat { .. }
        | Statement::RecoverLapsed { .. }
        | Statement::RegisterCrontabs { .. }
        | Statement::ScheduleCron(_) => vec![],
    }
}

// ---------------------------------------------------------------------------------------
// Operations.

const TASKS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
struct NewJob {
    task: u8,
    queue: Option<u8>,
    key: Option<u8>,
    delay_s: i16,
    priority: i16,
    max_attempts: i16,
    flags: u8,
    array: bool,
}

#[derive(Debug, Clone)]
enum Op {
    Add { job: NewJob, mode: u8 },
    AddBatch { jobs: Vec<NewJob>, preserve: bool },
    Remove { key: u8 },
    AdminComplete { pick: u8 },
    AdminFail { pick: u8 },
    Reschedule { pick: u8, delay_s: Option<i16>, attempts: Option<i16>, max_attempts: Option<i16> },
    ForceUnlockDead,
    Run { ms: u32 },
    Steps { n: u8 },
    Finish { worker: u8, nth: u8, outcome: u8 },
    DropListener { worker: u8 },
    ListenerAvailable { worker: u8, up: bool },
    Notify { count: i8 },
    JumpClock { secs: i32 },
    Restart { worker: u8 },
    Crash { worker: u8 },
    Shutdown { worker: u8, graceful: bool },
    FailQueries { worker: u8, n: u8 },
}

#[derive(Debug, Clone)]
struct Case {
    seed: u64,
    workers: Vec<Config>,
    /// Weights of ok, err, panic, hang, manual outcomes.
    mix: [u8; 5],
    max_task_ms: u32,
    query_failure_per_mille: u32,
    ops: Vec<Op>,
}

fn new_job() -> impl Strategy<Value = NewJob> {
    (
        0..3u8,
        prop::option::weighted(0.4, 0..2u8),
        prop::option::weighted(0.5, 0..4u8),
        prop_oneof![2 => Just(0i16), 1 => -10..30i16],
        -1..=1i16,
        1..=4i16,
        prop_oneof![3 => Just(0u8), 1 => 0..4u8],
        prop::bool::weighted(0.3),
    )
        .prop_map(|(task, queue, key, delay_s, priority, max_attempts, flags, array)| NewJob {
            task,
            queue,
            key,
            delay_s,
            priority,
            max_attempts,
            flags,
            array,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        25 => (new_job(), 0..3u8).prop_map(|(job, mode)| Op::Add { job, mode }),
        4 => (prop::collection::vec(new_job(), 0..4), any::<bool>()).prop_map(|(jobs, preserve)| Op::AddBatch { jobs, preserve }),
        4 => (0..4u8).prop_map(|key| Op::Remove { key }),
        2 => any::<u8>().prop_map(|pick| Op::AdminComplete { pick }),
        2 => any::<u8>().prop_map(|pick| Op::AdminFail { pick }),
        2 => (any::<u8>(), prop::option::of(-5..30i16), prop::option::of(0..3i16), prop::option::of(1..4i16))
            .prop_map(|(pick, delay_s, attempts, max_attempts)| Op::Reschedule { pick, delay_s, attempts, max_attempts }),
        1 => Just(Op::ForceUnlockDead),
        25 => prop_oneof![0..3_000u32, 0..30_000u32].prop_map(|ms| Op::Run { ms }),
        8 => (1..20u8).prop_map(|n| Op::Steps { n }),
        5 => (0..3u8, any::<u8>(), 0..4u8).prop_map(|(worker, nth, outcome)| Op::Finish { worker, nth, outcome }),
        3 => (0..3u8).prop_map(|worker| Op::DropListener { worker }),
        2 => (0..3u8, any::<bool>()).prop_map(|(worker, up)| Op::ListenerAvailable { worker, up }),
        2 => (-1..3i8).prop_map(|count| Op::Notify { count }),
        3 => prop_oneof![-3600..3600i32, Just(5 * 3600)].prop_map(|secs| Op::JumpClock { secs }),
        1 => (0..3u8).prop_map(|worker| Op::Restart { worker }),
        1 => (0..3u8).prop_map(|worker| Op::Crash { worker }),
        2 => (0..3u8, any::<bool>()).prop_map(|(worker, graceful)| Op::Shutdown { worker, graceful }),
        1 => (0..3u8, 1..4u8).prop_map(|(worker, n)| Op::FailQueries { worker, n }),
    ]
}

fn worker_config(index: usize) -> impl Strategy<Value = Config> {
    (
        1..=4usize,
        prop::option::weighted(0.6, 1..=12usize),
        prop_oneof![Just(0i64), Just(1), Just(50)],
        prop_oneof![Just(0i64), Just(1), Just(50)],
        any::<bool>(),
        prop_oneof![4 => Just(TASKS.to_vec()), 2 => prop::sample::subsequence(TASKS.to_vec(), 1..=3), 1 => Just(vec![])],
        prop::sample::subsequence(vec!["x", "y"], 0..=2),
        500..3000i64,
        prop::bool::weighted(0.1),
        any::<u64>(),
        prop_oneof![Just(None), (1..=60i64).prop_map(Some)],
    )
        .prop_map(
            move |(concurrency, local, complete_ms, fail_ms, local_time, tasks, flags, poll_ms, once, seed, ttl)| {
                Config {
                    worker_id: format!("w{index}"),
                    task_identifiers: tasks.into_iter().map(str::to_owned).collect(),
                    concurrency,
                    poll_interval: Duration::milliseconds(poll_ms),
                    local_queue_size: local,
                    local_queue_ttl: ttl.map_or(Duration::minutes(5), Duration::seconds),
                    lock_sweep_interval: formica_core::worker::LOCK_SWEEP_INTERVAL,
                    recovery_interval: formica_core::worker::RECOVERY_PERIOD,
                    watchdog: formica_core::lease::DEFAULT_WATCHDOG,
                    complete_batch_delay: Duration::milliseconds(complete_ms),
                    fail_batch_delay: Duration::milliseconds(fail_ms),
                    graceful_shutdown_timeout: Duration::seconds(3),
                    forbidden_flags: flags.into_iter().map(str::to_owned).collect(),
                    use_local_time: local_time,
                    run_once: once,
                    max_listener_backoff: Duration::seconds(10),
                    seed,
                    crontab: Vec::new(),
                    task_timeouts: Default::default(),
                    refetch_delay: seed.is_multiple_of(3).then(|| formica_core::worker::RefetchDelay {
                        duration: Duration::milliseconds(poll_ms / 4),
                        threshold: (seed % 2) as usize,
                        max_abort_threshold: (seed % 5) as usize,
                    }),
                }
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        (1..=3usize).prop_flat_map(|n| (0..n).map(worker_config).collect::<Vec<_>>()),
        [1..10u8, 0..5u8, 0..3u8, 0..2u8, 0..3u8],
        prop_oneof![Just(0u32), Just(100), Just(3000)],
        prop_oneof![3 => Just(0u32), 1 => Just(50)],
        prop::collection::vec(op(), 1..80),
    )
        .prop_map(|(seed, workers, mix, max_task_ms, query_failure_per_mille, ops)| Case {
            seed,
            workers,
            mix,
            max_task_ms,
            query_failure_per_mille,
            ops,
        })
}

// ---------------------------------------------------------------------------------------
// Running a case.

fn add_job_of(new: &NewJob, now: DateTime<Utc>, serial: u64, mode: Option<JobKeyMode>) -> RawJob {
    let payload = if new.array { json!([{ "n": serial }]) } else { json!({ "n": serial }) };
    let flags: Vec<&str> =
        [("x", 1u8), ("y", 2u8)].iter().filter(|(_, bit)| new.flags & bit != 0).map(|(f, _)| *f).collect();
    let spec = JobSpec {
        queue_name: new.queue.map(|q| format!("q{q}")),
        run_at: (new.delay_s != 0).then(|| now + Duration::seconds(i64::from(new.delay_s))),
        max_attempts: Some(new.max_attempts),
        job_key: new.key.map(|k| format!("k{k}")),
        job_key_mode: mode,
        priority: Some(new.priority),
        flags: (!flags.is_empty()).then(|| flags.into_iter().map(str::to_owned).collect()),
    };
    RawJob { identifier: TASKS[new.task as usize].to_owned(), payload, spec }
}

struct Run {
    world: World,
    checker: Checker,
    configs: Vec<Config>,
    serial: u64,
}

impl Run {
    fn new(case: &Case) -> Run {
        let config = WorldConfig {
            seed: case.seed,
            query_failure_per_mille: case.query_failure_per_mille,
            ..WorldConfig::default()
        };
        let mut world = World::new(config);
        let mix = case.mix;
        let max_ms = i64::from(case.max_task_ms);
        world.set_script(move |_job, rng| {
            let total: u64 = mix.iter().map(|w| u64::from(*w)).sum();
            let mut pick = rng.below(total.max(1));
            let after = Duration::milliseconds(rng.between(0, max_ms));
            for (i, w) in mix.iter().enumerate() {
                if pick < u64::from(*w) {
                    return match i {
                        0 => TaskPlan::finish(after, TaskOutcome::Ok),
                        1 => TaskPlan::finish(after, TaskOutcome::Err("boom".into())),
                        2 => TaskPlan::finish(after, TaskOutcome::Panicked("task panicked: p".into())),
                        3 => TaskPlan::Hang,
                        _ => TaskPlan::Manual,
                    };
                }
                pick -= u64::from(*w);
            }
            TaskPlan::finish(after, TaskOutcome::Ok)
        });
        let mut run = Run { world, checker: Checker::new(), configs: case.workers.clone(), serial: 0 };
        for config in &case.workers {
            run.world.add_worker(config.clone());
        }
        run
    }

    fn check(&mut self) -> Result<(), String> {
        self.checker.consume(&self.world, &self.configs)
    }

    fn step(&mut self) -> Result<bool, String> {
        let stepped = self.world.step().is_some();
        self.check()?;
        Ok(stepped)
    }

    fn run_for(&mut self, by: Duration) -> Result<(), String> {
        let until = self.world.elapsed() + by;
        while self.world.next_at().is_some_and(|at| at <= until) {
            self.step()?;
        }
        // Nothing is due before `until`: this only moves the clock.
        self.world.run_for(until - self.world.elapsed());
        self.check()
    }

    fn pick(&self, pick: u8) -> Vec<i64> {
        let ids: Vec<i64> = self.world.db().jobs().map(|j| j.id).collect();
        if ids.is_empty() {
            return vec![];
        }
        vec![ids[pick as usize % ids.len()]]
    }

    fn op(&mut self, op: &Op) -> Result<(), String> {
        let now = self.world.now();
        let workers = self.configs.len();
        match op {
            Op::Add { job, mode } => {
                self.serial += 1;
                let mode = [JobKeyMode::Replace, JobKeyMode::PreserveRunAt, JobKeyMode::UnsafeDedupe]
                    [*mode as usize % 3];
                let add = add_job_of(job, now, self.serial, Some(mode));
                let got = self.world.db_mut().add_job(&add).map(|j| row_of(&j)).ok();
                let want = self.checker.model.add_job(now, &add);
                if got != want {
                    return Err(format!("add_job {add:?}: sim {got:?}, model {want:?}"));
                }
            }
            Op::AddBatch { jobs, preserve } => {
                let adds: Vec<RawJob> = jobs
                    .iter()
                    .map(|j| {
                        self.serial += 1;
                        add_job_of(j, now, self.serial, None)
                    })
                    .collect();
                let got = self
                    .world
                    .db_mut()
                    .add_jobs(&adds, *preserve)
                    .map(|v| v.iter().map(row_of).collect::<Vec<_>>())
                    .ok();
                let want = self.checker.model.add_jobs(now, &adds, *preserve);
                if got != want {
                    return Err(format!("add_jobs: sim {got:?}, model {want:?}"));
                }
            }
            Op::Remove { key } => {
                let key = format!("k{key}");
                let got = self.world.db_mut().remove_job(&key).map(|j| row_of(&j));
                let want = self.checker.model.remove_job(now, &key);
                if got != want {
                    return Err(format!("remove_job {key}: sim {got:?}, model {want:?}"));
                }
            }
            Op::AdminComplete { pick } => {
                let ids = self.pick(*pick);
                let got: Vec<Row> = self.world.db_mut().complete_jobs(&ids).iter().map(row_of).collect();
                let want = self.checker.model.complete_jobs(now, &ids);
                if got != want {
                    return Err(format!("complete_jobs: sim {got:?}, model {want:?}"));
                }
            }
            Op::AdminFail { pick } => {
                let ids = self.pick(*pick);
                let got: Vec<Row> =
                    self.world.db_mut().permanently_fail_jobs(&ids, None).iter().map(row_of).collect();
                let want = self.checker.model.permanently_fail_jobs(now, &ids, None);
                if got != want {
                    return Err(format!("permanently_fail_jobs: sim {got:?}, model {want:?}"));
                }
            }
            Op::Reschedule { pick, delay_s, attempts, max_attempts } => {
                let ids = self.pick(*pick);
                let with = RescheduleJobOptions {
                    run_at: delay_s.map(|s| now + Duration::seconds(i64::from(s))),
                    priority: None,
                    attempts: *attempts,
                    max_attempts: *max_attempts,
                };
                let got: Vec<Row> = self
                    .world
                    .db_mut()
                    .reschedule_jobs(&ids, &with)
                    .map_err(|e| format!("reschedule: {e:?}"))?
                    .iter()
                    .map(row_of)
                    .collect();
                let want = self.checker.model.reschedule_jobs(now, &ids, &with);
                if got != want {
                    return Err(format!("reschedule_jobs: sim {got:?}, model {want:?}"));
                }
            }
            Op::ForceUnlockDead => {
                let dead: Vec<String> =
                    self.checker.lives.iter().filter(|l| !l.alive).map(|l| l.worker_id.clone()).collect();
                let refs: Vec<&str> = dead.iter().map(String::as_str).collect();
                self.world.db_mut().force_unlock_workers(&refs);
                self.checker.model.force_unlock(&dead);
            }
            Op::Run { ms } => self.run_for(Duration::milliseconds(i64::from(*ms)))?,
            Op::Steps { n } => {
                for _ in 0..*n {
                    if !self.step()? {
                        break;
                    }
                }
            }
            Op::Finish { worker, nth, outcome } => {
                let w = *worker as usize % workers;
                let running: Vec<i64> = self.world.running(w).map(|j| j.id).collect();
                if !running.is_empty() {
                    let job_id = running[*nth as usize % running.len()];
                    let outcome = match outcome {
                        0 => TaskOutcome::Ok,
                        1 => TaskOutcome::Err("manual error".into()),
                        2 => TaskOutcome::Panicked("task panicked: manual".into()),
                        _ => TaskOutcome::Aborted,
                    };
                    self.world.finish_task(w, job_id, outcome);
                }
            }
            Op::DropListener { worker } => self.world.drop_listener(*worker as usize % workers),
            Op::ListenerAvailable { worker, up } => {
                self.world.set_listener_available(*worker as usize % workers, *up)
            }
            Op::Notify { count } => {
                self.world.notify("jobs:insert", &format!("{{\"r\":0.5,\"count\":{count}}}"))
            }
            Op::JumpClock { secs } => self.world.jump_clock(Duration::seconds(i64::from(*secs))),
            Op::Restart { worker } => self.world.restart(*worker as usize % workers),
            Op::Crash { worker } => self.world.crash(*worker as usize % workers),
            Op::Shutdown { worker, graceful } => self.world.shutdown(*worker as usize % workers, *graceful),
            Op::FailQueries { worker, n } => {
                self.world.fail_next_queries(*worker as usize % workers, u32::from(*n))
            }
        }
        self.check()
    }

    /// Let the workers work a while, stop everyone gracefully and check what is left.
    fn finish(&mut self) -> Result<(), String> {
        self.run_for(Duration::seconds(90))?;
        for w in 0..self.configs.len() {
            self.world.set_listener_available(w, true);
            self.world.shutdown(w, true);
        }
        self.check()?;
        let limit = self.world.elapsed() + Duration::days(1);
        while !(0..self.configs.len()).all(|w| self.world.is_stopped(w) || self.world.is_crashed(w)) {
            if self.world.next_at().is_none_or(|at| at > limit) {
                return Err("workers did not stop within a day".into());
            }
            self.step()?;
        }
        for w in 0..self.configs.len() {
            if !self.world.is_stopped(w) {
                continue;
            }
            let id = self.world.worker_id(w);
            // A machine that gave up on a refusing database stops with statements out, and
            // the jobs it names stay locked for a sweep.
            let abandoned: Vec<&Vec<i64>> = (self.world.trace().iter())
                .filter(|e| e.worker == Some(w))
                .filter_map(|e| match &e.what {
                    Traced::Effect(Effect::Emit(Event::OutcomesAbandoned { job_ids })) => Some(job_ids),
                    _ => None,
                })
                .collect();
            let gave_up = !abandoned.is_empty();
            if (self.world.in_flight(w) != 0 && !gave_up) || self.world.running(w).count() != 0 {
                return Err(format!("{id}: stopped with work out"));
            }
            if self.world.machine(w).poll_timeout().is_some() {
                return Err(format!("{id}: a timer is armed after Stopped"));
            }
            let held = |j: &&Job| {
                j.locked_by.as_deref() == Some(id.as_str()) && !abandoned.iter().any(|a| a.contains(&j.id))
            };
            if let Some(job) = self.world.db().jobs().find(held) {
                return Err(format!("{id}: stopped but still holds job {}", job.id));
            }
            let mut machine = self.world.machine(w).clone();
            for input in [Input::Timeout, Input::ListenerUp, Input::ShutdownRequested { graceful: false }] {
                machine.handle(input, self.world.now()).map_err(|e| e.to_string())?;
                if let Some(effect) = machine.poll_effect() {
                    return Err(format!("{id}: effect {effect:?} after Stopped"));
                }
            }
        }
        // No job lost: every id ever handed out is in the table or left for a reason.
        let model = &self.checker.model;
        for &id in &model.created {
            let in_table = self.world.db().job(id).is_some();
            if !in_table && !model.gone.contains_key(&id) {
                return Err(format!("job {id} vanished"));
            }
            if in_table && model.gone.contains_key(&id) {
                return Err(format!("job {id} came back"));
            }
        }
        Ok(())
    }
}

fn run_case(case: &Case) -> Result<World, String> {
    let mut run = Run::new(case);
    run.check()?;
    for (i, op) in case.ops.iter().enumerate() {
        run.op(op).map_err(|e| format!("op {i} {op:?}: {e}"))?;
    }
    if let Err(e) = run.finish() {
        // To read what led there: FORMICA_SIM_TRACE=<file> keeps the failing run's trace.
        if let Some(path) = std::env::var_os("FORMICA_SIM_TRACE") {
            let lines: Vec<String> = run.world.trace().iter().map(|e| format!("{e:?}")).collect();
            std::fs::write(path, lines.join("\n")).expect("writing FORMICA_SIM_TRACE");
        }
        return Err(e);
    }
    Ok(run.world)
}

proptest! {
    // Failures are kept in core/proptest-regressions/ (the working directory of a test is
    // the package's), and replayed first on the next run.
    #![proptest_config(ProptestConfig {
        cases: 256,
        max_shrink_iters: 2000,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/sim_model.txt"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn sim_and_model_agree_and_the_machine_keeps_its_promises(case in case()) {
        if let Err(e) = run_case(&case) {
            prop_assert!(false, "{}", e);
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_trace(case in case()) {
        let a = run_case(&case).map_err(TestCaseError::fail)?;
        let b = run_case(&case).map_err(TestCaseError::fail)?;
        prop_assert_eq!(a.trace(), b.trace());
        let rows = |w: &World| w.db().jobs().cloned().collect::<Vec<_>>();
        prop_assert_eq!(rows(&a), rows(&b));
    }
}
