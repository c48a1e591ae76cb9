//! The lockstep reference model: the job tables, written naively from the documented rules.
//! It calls none of the core's functions (no `job_key::decide`, no `backoff`), so an
//! agreement between it and `core::sim`'s database means two independent readings of the
//! rules agree.

use chrono::{DateTime, Duration, Utc};
use formica_core::job::{Job, JobKeyMode};
use formica_core::job::{RawJob, RescheduleJobOptions};
use formica_core::worker::{Failure, QueryResult, Statement};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A row of the model's job table: a `Job` without its queue id (the model names queues,
/// it does not number them).
pub(crate) type Row = Job;

/// `job` as the model's table holds it.
pub(crate) fn row_of(job: &Job) -> Row {
    Job { job_queue_id: None, ..job.clone() }
}

/// Why a job left the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    Completed,
    AdminCompleted,
    Removed,
}

/// The job tables (jobs, queues, crontabs, leases) as the documented rules
/// change them, and what left them, and why.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) rows: BTreeMap<i64, Row>,
    /// Queue name -> (locked_at, locked_by).
    pub(crate) queues: BTreeMap<String, (Option<DateTime<Utc>>, Option<String>)>,
    next_id: i64,
    /// Ids of the rows ever inserted.
    pub(crate) created: BTreeSet<i64>,
    /// Crontab identifier -> (known_since, last_execution).
    crontabs: BTreeMap<String, (DateTime<Utc>, Option<DateTime<Utc>>)>,
    pub(crate) gone: BTreeMap<i64, Gone>,
    /// Worker id -> when its lease lapses and since when it is suspected (the database
    /// clock).
    pub(crate) leases: BTreeMap<String, (DateTime<Utc>, Option<DateTime<Utc>>)>,
    /// Job id -> reason of its cancel request (see `cancels.rs`).
    pub(crate) cancel_requests: BTreeMap<i64, String>,
}

pub(crate) fn four_hours() -> Duration {
    Duration::hours(4)
}

/// e^min(attempts, 10) seconds, to the microsecond.
pub(crate) fn retry_delay(attempts: i16) -> Duration {
    let x = f64::from(attempts.clamp(0, 10));
    Duration::microseconds((x.exp() * 1_000_000.0).round() as i64)
}

impl Model {
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

    pub(crate) fn add_job(&mut self, now: DateTime<Utc>, add: &RawJob) -> Option<Row> {
        let mode = add.spec.job_key_mode.unwrap_or(JobKeyMode::Replace);
        if add.spec.job_key.is_some() && mode == JobKeyMode::UnsafeDedupe {
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
    pub(crate) fn add_jobs(
        &mut self,
        now: DateTime<Utc>,
        adds: &[RawJob],
        preserve: bool,
    ) -> Option<Vec<Row>> {
        let keys: Vec<&String> = adds.iter().filter_map(|a| a.spec.job_key.as_ref()).collect();
        let distinct: BTreeSet<&String> = keys.iter().copied().collect();
        if distinct.len() != keys.len() {
            return None;
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

    pub(crate) fn remove_job(&mut self, now: DateTime<Utc>, key: &str) -> Option<Row> {
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

    pub(crate) fn complete_jobs(&mut self, now: DateTime<Utc>, ids: &[i64]) -> Vec<Row> {
        let mut out = Vec::new();
        for id in self.touchable(now, ids) {
            self.gone.insert(id, Gone::AdminCompleted);
            out.extend(self.rows.remove(&id));
        }
        out
    }

    pub(crate) fn permanently_fail_jobs(
        &mut self,
        now: DateTime<Utc>,
        ids: &[i64],
        message: Option<&str>,
    ) -> Vec<Row> {
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

    pub(crate) fn reschedule_jobs(
        &mut self,
        now: DateTime<Utc>,
        ids: &[i64],
        r: &RescheduleJobOptions,
    ) -> Vec<Row> {
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
    pub(crate) fn force_unlock(&mut self, workers: &[String]) -> Vec<i64> {
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
    pub(crate) fn execute(
        &mut self,
        db_now: DateTime<Utc>,
        statement: &Statement,
    ) -> (QueryResult, Vec<i64>) {
        match statement {
            // No operation of the checked runs writes runtime schedules.
            Statement::ReadSchedules => (QueryResult::Schedules(Vec::new()), vec![]),
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
            Statement::GetJobs {
                worker_id,
                task_identifiers,
                forbidden_flags,
                accepted_flags,
                limit,
                now,
                excluded_queues,
                // Caps and limits come from `ReadFlow`, which answers none here.
                ..
            } => {
                let now = now.unwrap_or(db_now);
                let mut candidates: Vec<&Row> = self
                    .rows
                    .values()
                    .filter(|r| r.locked_at.is_none() && r.attempts < r.max_attempts && r.run_at <= now)
                    .filter(|r| task_identifiers.contains(&r.task_identifier))
                    .filter(|r| {
                        r.queue_name
                            .as_ref()
                            .is_none_or(|q| self.queues.get(q).is_some_and(|l| l.0.is_none()))
                    })
                    .filter(|r| r.queue_name.as_ref().is_none_or(|q| !excluded_queues.contains(q)))
                    .filter(|r| forbidden_flags.iter().all(|f| !r.flags.contains(f)))
                    .filter(|r| {
                        accepted_flags.is_empty() || accepted_flags.iter().any(|f| r.flags.contains(f))
                    })
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
                let fenced = self.not_held(ids.iter().copied(), worker_id);
                for id in ids {
                    if self.rows.get(id).is_some_and(|r| r.locked_by.as_ref() == Some(worker_id)) {
                        let row = self.rows.remove(id).expect("present");
                        self.gone.insert(*id, Gone::Completed);
                        self.unlock_queue(&row.queue_name, worker_id);
                    }
                }
                (fenced, vec![])
            }
            Statement::FailJobs { worker_id, failures } => {
                let fenced = self.not_held(failures.iter().map(|f| f.job_id), worker_id);
                for Failure { job_id, message, run_at, permanent, payload, delay } in failures {
                    let Some(row) = self.rows.get_mut(job_id) else { continue };
                    if row.locked_by.as_ref() != Some(worker_id) {
                        continue;
                    }
                    row.last_error = Some(message.clone());
                    row.payload = payload.clone().unwrap_or_else(|| row.payload.clone());
                    // The backoff counts the attempts made; a cancelled job has none left.
                    let delay = delay.unwrap_or_else(|| retry_delay(row.attempts));
                    row.run_at = run_at.unwrap_or(db_now.max(row.run_at) + delay);
                    if *permanent {
                        row.attempts = row.max_attempts;
                    }
                    row.locked_at = None;
                    row.locked_by = None;
                    let queue = row.queue_name.clone();
                    self.unlock_queue(&queue, worker_id);
                }
                (fenced, vec![])
            }
            // Every job locked by the worker and not in `known`, returned.
            Statement::ReturnUnknown { worker_id, known } => {
                let ids = self
                    .rows
                    .values()
                    .filter(|r| r.locked_by.as_ref() == Some(worker_id) && !known.contains(&r.id))
                    .map(|r| r.id)
                    .collect();
                self.execute(db_now, &Statement::ReturnJobs { worker_id: worker_id.clone(), ids })
            }
            Statement::SnoozeJobs { worker_id, snoozes } => {
                let fenced = self.not_held(snoozes.iter().map(|s| s.job_id), worker_id);
                for s in snoozes {
                    let mine =
                        self.rows.get_mut(&s.job_id).filter(|r| r.locked_by.as_ref() == Some(worker_id));
                    mine.into_iter().for_each(|row| row.run_at = s.run_at.unwrap_or(db_now + s.delay));
                }
                let ids = snoozes.iter().map(|s| s.job_id).collect(); // returned: attempt refunded
                self.execute(db_now, &Statement::ReturnJobs { worker_id: worker_id.clone(), ids });
                (fenced, vec![])
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
            // for more than `grace` is freed, keeping its run_at with its attempt counted,
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
                self.settle_cancels(&lapsed);
                let released = self.force_unlock(&lapsed);
                (QueryResult::Done, released)
            }
            // The model keeps no pauses.
            Statement::ReadFlow => (QueryResult::Flow(Default::default()), vec![]),
            Statement::ReadCancels { worker_id } => {
                (QueryResult::Cancels(self.read_cancels(worker_id)), vec![])
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

pub(crate) fn same_jobs(got: &[Job], want: &[Job]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| row_of(g) == row_of(w))
}
