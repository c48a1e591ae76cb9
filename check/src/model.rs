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

mod statements;

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
            payload: add.payload.clone().into(),
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
                    row.payload = match (row.payload.value(), &new_payload) {
                        (Value::Array(old), Value::Array(new)) => {
                            let mut all = old.clone();
                            all.extend(new.iter().cloned());
                            Value::Array(all)
                        }
                        _ => new_payload,
                    }
                    .into();
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
}

pub(crate) fn same_jobs(got: &[Job], want: &[Job]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| row_of(g) == row_of(w))
}
