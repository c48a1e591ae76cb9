//! An in-memory database with the semantics of Formica's SQL: the `_private_jobs`,
//! `_private_job_queues` and `_private_tasks` tables, the schema functions (`add_job`,
//! `add_jobs`, `remove_job`, `complete_jobs`, `permanently_fail_jobs`, `reschedule_jobs`,
//! `force_unlock_workers`) and the worker's statements ([`Statement`]), each applied
//! atomically as PostgreSQL applies the statement.
//!
//! It mirrors the SQL column by column (the differential test compares it with PostgreSQL
//! after random operations), with one difference that no caller can observe as wrong:
//! jobs with equal `(priority, run_at)` are fetched in id order, where PostgreSQL takes
//! whichever it meets first. Time is the database's own clock ([`Db::set_now`]), which
//! plays `now()`. Workers' leases and cancel requests (the `formica_<schema>.leases` and
//! `cancel_requests` tables) are kept beside the job tables.

use crate::cron::runner::KnownCrontab;
use crate::flow::{Control, ControlKind, Partition, Pause};
use crate::job::{Job, JobKeyMode, RawJob, RescheduleJobOptions, DEFAULT_MAX_ATTEMPTS};
use crate::job_key::{self, Decision, ExistingJob, NewJob};
use crate::protocol::{DbError, JOBS_INSERT};
use crate::rng::SplitMix;
use crate::time::Timestamp;
use crate::worker::STALE_LOCK_AGE;
use std::collections::{BTreeMap, BTreeSet};

/// A named queue's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// Its id (`job_queue_id` of its jobs).
    pub id: i32,
    /// Its name.
    pub name: String,
    /// When a worker took it.
    pub locked_at: Option<Timestamp>,
    /// The worker that holds it.
    pub locked_by: Option<String>,
}

/// A notification sent by a statement, for the listeners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The channel (`jobs:insert`).
    pub channel: String,
    /// The payload (`{"r":<random>,"count":<n>}`).
    pub payload: String,
}

/// The database. Cloning it snapshots it.
#[derive(Debug, Clone)]
pub struct Db {
    pub(super) now: Timestamp,
    pub(super) tasks: BTreeMap<i32, String>,
    pub(super) queues: BTreeMap<i32, Queue>,
    pub(super) jobs: BTreeMap<i64, Job>,
    pub(super) next_task_id: i32,
    pub(super) next_queue_id: i32,
    pub(super) next_job_id: i64,
    pub(super) notifications: Vec<Notification>,
    pub(super) rng: SplitMix,
    pub(super) known_crontabs: BTreeMap<String, KnownCrontab>,
    pub(super) leases: BTreeMap<String, (Timestamp, Option<Timestamp>)>,
    /// `formica_<schema>.cancel_requests`: job id -> reason (see `cancel.rs`).
    pub(super) cancel_requests: BTreeMap<i64, String>,
    /// `formica_<schema>.schedules`: identifier -> canonical line (see `schedules.rs`).
    pub(super) schedules: BTreeMap<String, String>,
    /// `formica_<schema>.pauses` (see `flow.rs`).
    pub(super) pauses: BTreeSet<Pause>,
    /// `formica_<schema>.caps`, `rate_limits` and `fair_shares`, by
    /// [`Control::identity`] (see `flow.rs`).
    pub(super) controls: BTreeMap<(String, ControlKind, Option<Partition>), Control>,
    /// `formica_<schema>.rate_starts`: (task, the limit's partition key, partition, started_at).
    pub(super) rate_starts: Vec<(String, String, String, Timestamp)>,
    /// `formica_<schema>.fair_passes` and `fair_clocks` (see `fair.rs`).
    pub(super) fair: super::fair::FairState,
    /// `formica_<schema>.workflows` and their jobs (see `workflow_rows.rs`).
    pub(super) workflows: super::workflow_rows::Workflows,
    /// `formica_<schema>.job_history`, as its pruner sees it (see `history.rs`).
    pub(super) history: Vec<HistoryRow>,
    /// `formica_<schema>.dead_letters`: task -> the task its jobs failed for good are sent to.
    pub(super) dead_letters: BTreeMap<String, String>,
    /// `formica_<schema>.aging`, by task, with when a pass last went through the task's
    /// jobs (see `aging.rs`).
    pub(super) agings: BTreeMap<String, (crate::aging::Aging, Option<Timestamp>)>,
    /// `formica_<schema>.aged_jobs`: job id -> (its own priority, the one the chore set).
    pub(super) aged: BTreeMap<i64, (i16, i16)>,
}

/// One row of `job_history`, as the pruner reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRow {
    /// The job.
    pub job_id: i64,
    /// How it ended.
    pub outcome: crate::workflow::Outcome,
    /// When.
    pub finished_at: Timestamp,
}

pub(super) fn constraint(name: &str) -> DbError {
    DbError { message: format!("23514: new row violates check constraint \"{name}\""), retryable: false }
}

impl Db {
    /// An empty, migrated database whose clock reads `now`; `seed` draws the `r` of
    /// notification payloads.
    pub fn new(now: Timestamp, seed: u64) -> Self {
        Db {
            now,
            tasks: BTreeMap::new(),
            queues: BTreeMap::new(),
            jobs: BTreeMap::new(),
            next_task_id: 1,
            next_queue_id: 1,
            next_job_id: 1,
            notifications: Vec::new(),
            rng: SplitMix::new(seed),
            known_crontabs: BTreeMap::new(),
            leases: BTreeMap::new(),
            cancel_requests: BTreeMap::new(),
            schedules: BTreeMap::new(),
            pauses: BTreeSet::new(),
            controls: BTreeMap::new(),
            rate_starts: Vec::new(),
            fair: Default::default(),
            workflows: Default::default(),
            history: Vec::new(),
            dead_letters: BTreeMap::new(),
            agings: BTreeMap::new(),
            aged: BTreeMap::new(),
        }
    }

    /// The database clock (`now()`).
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Set the database clock (it may go back, as a real one may).
    pub fn set_now(&mut self, now: Timestamp) {
        self.now = now;
    }

    /// Every job, by id.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    /// The job `id`, if it exists.
    pub fn job(&self, id: i64) -> Option<&Job> {
        self.jobs.get(&id)
    }

    /// Every named queue, by id.
    pub fn queues(&self) -> impl Iterator<Item = &Queue> {
        self.queues.values()
    }

    /// The queue named `name`.
    pub fn queue(&self, name: &str) -> Option<&Queue> {
        self.queues.values().find(|q| q.name == name)
    }

    /// Every task identifier with its id.
    pub fn tasks(&self) -> impl Iterator<Item = (i32, &str)> {
        self.tasks.iter().map(|(id, name)| (*id, name.as_str()))
    }

    /// Notifications sent since the last call, oldest first.
    pub fn take_notifications(&mut self) -> Vec<Notification> {
        std::mem::take(&mut self.notifications)
    }

    pub(super) fn notify_insert(&mut self, count: i64) {
        let r = self.rng.unit();
        self.notifications.push(Notification {
            channel: JOBS_INSERT.into(),
            payload: format!("{{\"r\":{r},\"count\":{count}}}"),
        });
    }

    /// Not locked, or locked more than four hours ago: what the admin functions may touch.
    pub(super) fn unlocked_for_admin(&self, job: &Job) -> bool {
        job.locked_at.is_none_or(|at| at < self.now - STALE_LOCK_AGE)
    }

    pub(super) fn task_id(&mut self, identifier: &str) -> i32 {
        if let Some((id, _)) = self.tasks.iter().find(|(_, name)| *name == identifier) {
            return *id;
        }
        let id = self.next_task_id;
        self.next_task_id += 1;
        self.tasks.insert(id, identifier.to_owned());
        id
    }

    pub(super) fn queue_id(&mut self, name: &str) -> i32 {
        if let Some(queue) = self.queues.values().find(|q| q.name == name) {
            return queue.id;
        }
        let id = self.next_queue_id;
        self.next_queue_id += 1;
        self.queues.insert(id, Queue { id, name: name.to_owned(), locked_at: None, locked_by: None });
        id
    }

    pub(super) fn job_with_key(&self, key: &str) -> Option<i64> {
        self.jobs.values().find(|j| j.key.as_deref() == Some(key)).map(|j| j.id)
    }

    /// The checks the schema makes on a new row.
    pub(super) fn check(job: &RawJob) -> Result<(), DbError> {
        if job.identifier.chars().count() > crate::job::MAX_IDENTIFIER_LEN {
            return Err(constraint("tasks_identifier_check"));
        }
        if job.spec.queue_name.as_ref().is_some_and(|q| q.chars().count() > crate::job::MAX_QUEUE_NAME_LEN) {
            return Err(constraint("job_queues_queue_name_check"));
        }
        if let Some(key) = &job.spec.job_key {
            if key.is_empty() || key.chars().count() > crate::job::MAX_JOB_KEY_LEN {
                return Err(constraint("jobs_key_check"));
            }
        }
        if job.spec.max_attempts.is_some_and(|n| n < 1) {
            return Err(constraint("jobs_max_attempts_check"));
        }
        Ok(())
    }

    /// A fresh row for `job` with id `id` (task and queue registered already).
    pub(super) fn new_row(&mut self, id: i64, job: &RawJob) -> Job {
        let job_queue_id = job.spec.queue_name.as_deref().map(|q| self.queue_id(q));
        self.task_id(&job.identifier);
        Job {
            id,
            job_queue_id,
            queue_name: job.spec.queue_name.clone(),
            task_identifier: job.identifier.clone(),
            payload: job.payload.clone().into(),
            priority: job.spec.priority.unwrap_or(0),
            run_at: job.spec.run_at.unwrap_or(self.now),
            attempts: 0,
            max_attempts: job.spec.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            last_error: None,
            created_at: self.now,
            updated_at: self.now,
            key: job.spec.job_key.clone(),
            locked_at: None,
            locked_by: None,
            revision: 0,
            flags: job.spec.flags.iter().flatten().cloned().collect(),
        }
    }

    pub(super) fn take_id(&mut self) -> i64 {
        let id = self.next_job_id;
        self.next_job_id += 1;
        id
    }

    pub(super) fn existing(job: &Job) -> ExistingJob {
        ExistingJob {
            payload: job.payload.value().clone(),
            run_at: job.run_at,
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            locked: job.locked_at.is_some(),
            revision: job.revision,
        }
    }

    /// `add_job(...)`: one job; its `job_key_mode` decides what a key clash does (see
    /// [`crate::job_key`]). Notifies `jobs:insert` unless an `unsafe_dedupe` found the key.
    pub fn add_job(&mut self, job: &RawJob) -> Result<Job, DbError> {
        let mode = job.spec.job_key_mode.unwrap_or_default();
        if job.spec.job_key.is_none() || mode != JobKeyMode::UnsafeDedupe {
            let mut rows = self.add_jobs(std::slice::from_ref(job), mode == JobKeyMode::PreserveRunAt)?;
            return rows.pop().ok_or_else(|| DbError {
                message: "add_job returned no row (the keyed job was locked concurrently)".into(),
                retryable: true,
            });
        }
        Self::check(job)?;
        self.task_id(&job.identifier);
        if let Some(q) = &job.spec.queue_name {
            self.queue_id(q);
        }
        // The insert draws an id even when it ends as an update.
        let id = self.take_id();
        let existing = job.spec.job_key.as_deref().and_then(|k| self.job_with_key(k));
        let payload = job.payload.clone();
        let decision = job_key::decide(
            existing.and_then(|id| self.jobs.get(&id)).map(Self::existing).as_ref(),
            NewJob { mode, payload: &payload, run_at: job.spec.run_at.unwrap_or(self.now) },
        );
        match (decision, existing) {
            (Decision::Keep { revision }, Some(existing)) => {
                let now = self.now;
                let row = self
                    .jobs
                    .get_mut(&existing)
                    .ok_or_else(|| DbError { message: "job vanished".into(), retryable: false })?;
                row.revision = revision;
                row.updated_at = now;
                Ok(row.clone())
            }
            _ => {
                let row = self.new_row(id, job);
                self.jobs.insert(id, row.clone());
                self.notify_insert(1);
                Ok(row)
            }
        }
    }

    /// `add_jobs(specs, job_key_preserve_run_at)`: many jobs in one statement. A key clash
    /// is resolved as `preserve_run_at` if the flag is set, else as `replace` (the specs'
    /// own modes are not read). Two specs with one key fail the whole statement, as in
    /// PostgreSQL. Returns the rows inserted or updated, by id.
    pub fn add_jobs(&mut self, specs: &[RawJob], preserve_run_at: bool) -> Result<Vec<Job>, DbError> {
        if specs.is_empty() {
            return Ok(Vec::new());
        }
        for spec in specs {
            Self::check(spec)?;
        }
        let mut keys = BTreeSet::new();
        for key in specs.iter().filter_map(|s| s.spec.job_key.as_deref()) {
            if !keys.insert(key) {
                return Err(DbError {
                    message: "21000: ON CONFLICT DO UPDATE command cannot affect row a second time".into(),
                    retryable: false,
                });
            }
        }
        for spec in specs {
            self.task_id(&spec.identifier);
        }
        for spec in specs {
            if let Some(q) = &spec.spec.queue_name {
                self.queue_id(q);
            }
        }
        let mode = if preserve_run_at { JobKeyMode::PreserveRunAt } else { JobKeyMode::Replace };
        // Decide on the state before the statement (keys are distinct, so each decision
        // sees only its own holder), then apply in the SQL's order: detach, notify, upsert.
        let decisions: Vec<(Option<i64>, Decision)> = specs
            .iter()
            .map(|spec| {
                let holder = spec.spec.job_key.as_deref().and_then(|k| self.job_with_key(k));
                let payload = spec.payload.clone();
                let new = NewJob { mode, payload: &payload, run_at: spec.spec.run_at.unwrap_or(self.now) };
                let existing = holder.and_then(|id| self.jobs.get(&id)).map(Self::existing);
                (holder, job_key::decide(existing.as_ref(), new))
            })
            .collect();
        let now = self.now;
        for (holder, decision) in &decisions {
            if let (Some(holder), Decision::DetachAndInsert { attempts }) = (holder, decision) {
                if let Some(row) = self.jobs.get_mut(holder) {
                    row.key = None;
                    row.attempts = *attempts;
                    row.updated_at = now;
                }
            }
        }
        self.notify_insert(specs.len() as i64);
        let mut out = Vec::new();
        for (spec, (holder, decision)) in specs.iter().zip(decisions) {
            let id = self.take_id();
            match (decision, holder) {
                (Decision::Update { payload, run_at, revision }, Some(holder)) => {
                    let job_queue_id = spec.spec.queue_name.as_deref().map(|q| self.queue_id(q));
                    let Some(row) = self.jobs.get_mut(&holder) else { continue };
                    if row.locked_at.is_some() {
                        continue;
                    }
                    row.job_queue_id = job_queue_id;
                    row.queue_name = spec.spec.queue_name.clone();
                    row.task_identifier = spec.identifier.clone();
                    row.payload = payload.into();
                    row.max_attempts = spec.spec.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
                    row.run_at = run_at;
                    row.priority = spec.spec.priority.unwrap_or(0);
                    row.revision = revision;
                    row.flags = spec.spec.flags.iter().flatten().cloned().collect();
                    row.attempts = 0;
                    row.last_error = None;
                    row.updated_at = now;
                    out.push(row.clone());
                }
                (Decision::Insert | Decision::DetachAndInsert { .. } | Decision::Update { .. }, _)
                | (Decision::Keep { .. }, _) => {
                    let row = self.new_row(id, spec);
                    self.jobs.insert(id, row.clone());
                    out.push(row);
                }
            }
        }
        out.sort_by_key(|j| j.id);
        Ok(out)
    }

    /// `remove_job(key)`: delete the job holding `key` unless a live worker holds it (then it
    /// loses its key and its remaining attempts instead). Notifies a count of -1 on delete.
    pub fn remove_job(&mut self, key: &str) -> Option<Job> {
        let id = self.job_with_key(key)?;
        let job = self.jobs.get(&id)?;
        if self.unlocked_for_admin(job) {
            let job = self.jobs.remove(&id)?;
            self.notify_insert(-1);
            return Some(job);
        }
        let now = self.now;
        let row = self.jobs.get_mut(&id)?;
        row.key = None;
        row.attempts = row.max_attempts;
        row.updated_at = now;
        Some(row.clone())
    }

    pub(super) fn admin_targets(&self, ids: &[i64]) -> Vec<i64> {
        let wanted: BTreeSet<i64> = ids.iter().copied().collect();
        self.jobs
            .values()
            .filter(|j| wanted.contains(&j.id) && self.unlocked_for_admin(j))
            .map(|j| j.id)
            .collect()
    }

    /// `complete_jobs(ids)`: delete those jobs (skipping jobs a live worker holds; queues
    /// are left as they are). Returns the deleted rows.
    pub fn complete_jobs(&mut self, ids: &[i64]) -> Vec<Job> {
        self.admin_targets(ids).into_iter().filter_map(|id| self.jobs.remove(&id)).collect()
    }

    /// `permanently_fail_jobs(ids, message)`: use up their attempts with `message` as the
    /// error (default "Manually marked as failed"). Returns the changed rows.
    pub fn permanently_fail_jobs(&mut self, ids: &[i64], message: Option<&str>) -> Vec<Job> {
        let now = self.now;
        let mut out = Vec::new();
        for id in self.admin_targets(ids) {
            if let Some(row) = self.jobs.get_mut(&id) {
                row.last_error = Some(message.unwrap_or("Manually marked as failed").to_owned());
                row.attempts = row.max_attempts;
                row.updated_at = now;
                out.push(row.clone());
            }
        }
        out
    }

    /// `reschedule_jobs(ids, ...)`: change the given columns. Fails as a whole if it would
    /// leave a `max_attempts` below 1.
    pub fn reschedule_jobs(&mut self, ids: &[i64], with: &RescheduleJobOptions) -> Result<Vec<Job>, DbError> {
        if with.max_attempts.is_some_and(|n| n < 1) && !self.admin_targets(ids).is_empty() {
            return Err(constraint("jobs_max_attempts_check"));
        }
        let now = self.now;
        let mut out = Vec::new();
        for id in self.admin_targets(ids) {
            if let Some(row) = self.jobs.get_mut(&id) {
                row.run_at = with.run_at.unwrap_or(row.run_at);
                row.priority = with.priority.unwrap_or(row.priority);
                row.attempts = with.attempts.unwrap_or(row.attempts);
                row.max_attempts = with.max_attempts.unwrap_or(row.max_attempts);
                row.updated_at = now;
                out.push(row.clone());
            }
        }
        Ok(out)
    }

    /// `force_unlock_workers(ids)`: release every job and queue they hold, whatever the
    /// lock's age. Attempts and `run_at` stay.
    pub fn force_unlock_workers(&mut self, worker_ids: &[&str]) {
        let held = |by: &Option<String>| by.as_deref().is_some_and(|b| worker_ids.contains(&b));
        for job in self.jobs.values_mut().filter(|j| held(&j.locked_by)) {
            job.locked_at = None;
            job.locked_by = None;
        }
        for queue in self.queues.values_mut().filter(|q| held(&q.locked_by)) {
            queue.locked_at = None;
            queue.locked_by = None;
        }
    }

    /// The rows of `_private_known_crontabs`, by identifier.
    pub fn known_crontabs(&self) -> &BTreeMap<String, KnownCrontab> {
        &self.known_crontabs
    }

    /// The workers' leases: worker id -> when it lapses, and since when it is suspected.
    pub fn leases(&self) -> &BTreeMap<String, (Timestamp, Option<Timestamp>)> {
        &self.leases
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff;
    use crate::job::JobSpec;
    use crate::protocol::{Failure, FetchRequest, Statement};
    use serde_json::{json, Value};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_timestamp(1_700_000_000 + s, 0).unwrap_or_default()
    }

    fn add(db: &mut Db, task: &str, payload: Value, spec: JobSpec) -> Job {
        db.add_job(&RawJob::new(task, payload, spec)).expect("add_job")
    }

    fn fetch(db: &mut Db, worker: &str, limit: usize) -> Vec<Job> {
        let task_identifiers = db.tasks().map(|(_, identifier)| identifier.to_owned()).collect();
        let result = db.execute(&Statement::GetJobs(FetchRequest {
            worker_id: worker.into(),
            task_identifiers,
            forbidden_flags: vec!["no".into()],
            accepted_flags: vec![],
            limit,
            now: None,
            excluded_queues: vec![],
            caps: vec![],
            limits: vec![],
            fair: vec![],
            walk_priorities: false,
        }));
        result.fetched().unwrap_or_else(|| panic!("{result:?}")).0.to_vec()
    }

    #[test]
    fn fetch_orders_by_priority_run_at_and_takes_one_job_per_queue() {
        let mut db = Db::new(t(0), 1);
        let a = add(&mut db, "t", json!(1), JobSpec::builder().run_at(t(-5)).build());
        let b = add(&mut db, "t", json!(2), JobSpec::builder().priority(-1).build());
        let q1 = add(&mut db, "t", json!(3), JobSpec::builder().queue_name("q").run_at(t(-9)).build());
        let _q2 = add(&mut db, "t", json!(4), JobSpec::builder().queue_name("q").run_at(t(-8)).build());
        let _later = add(&mut db, "t", json!(5), JobSpec::builder().run_at(t(60)).build());
        let _flagged = add(&mut db, "t", json!(6), JobSpec::builder().flags(["no"]).build());
        let got = fetch(&mut db, "w", 10);
        assert_eq!(got.iter().map(|j| j.id).collect::<Vec<_>>(), vec![b.id, q1.id, a.id]);
        assert!(got.iter().all(|j| j.attempts == 1 && j.locked_by.as_deref() == Some("w")));
        assert_eq!(db.queue("q").and_then(|q| q.locked_by.clone()).as_deref(), Some("w"));
        assert!(fetch(&mut db, "v", 10).is_empty(), "the queue is held, the rest is not due");
        db.execute(&Statement::CompleteJobs {
            worker_id: "w".into(),
            ids: vec![q1.id],
            settles_workflow_jobs: false,
        });
        assert_eq!(db.queue("q").and_then(|q| q.locked_by.clone()), None);
        assert_eq!(fetch(&mut db, "v", 10).len(), 1, "the queue's next job");
    }

    #[test]
    fn failing_backs_off_from_the_database_clock_and_returning_refunds() {
        let mut db = Db::new(t(0), 1);
        let a = add(&mut db, "t", json!(1), JobSpec::default());
        let b = add(&mut db, "t", json!(2), JobSpec::default());
        fetch(&mut db, "w", 2);
        db.set_now(t(10));
        let failures = vec![Failure {
            job_id: a.id,
            message: "boom".into(),
            run_at: None,
            permanent: false,
            payload: None,
            delay: None,
        }];
        db.execute(&Statement::FailJobs {
            worker_id: "other".into(),
            failures: failures.clone(),
            settles_workflow_jobs: false,
        });
        assert_eq!(db.job(a.id).and_then(|j| j.locked_by.clone()).as_deref(), Some("w"), "not ours");
        db.execute(&Statement::FailJobs { worker_id: "w".into(), failures, settles_workflow_jobs: false });
        let a = db.job(a.id).cloned().expect("a");
        assert_eq!((a.attempts, a.last_error.as_deref(), a.locked_at), (1, Some("boom"), None));
        assert_eq!(a.run_at, t(10) + backoff::delay(1));
        db.execute(&Statement::ReturnJobs { worker_id: "w".into(), ids: vec![b.id] });
        assert_eq!(db.job(b.id).map(|j| (j.attempts, j.locked_at)), Some((0, None)));
    }

    #[test]
    fn a_failure_with_a_payload_replaces_it_and_one_without_keeps_it() {
        let mut db = Db::new(t(0), 1);
        let a = add(&mut db, "t", json!([1, 2, 3]), JobSpec::default());
        let b = add(&mut db, "t", json!([4, 5]), JobSpec::default());
        fetch(&mut db, "w", 2);
        let fail = |job_id, payload| Failure {
            job_id,
            message: "x".into(),
            run_at: None,
            permanent: false,
            payload,
            delay: None,
        };
        let failures = vec![fail(a.id, Some(json!([2]))), fail(b.id, None)];
        db.execute(&Statement::FailJobs { worker_id: "w".into(), failures, settles_workflow_jobs: false });
        assert_eq!(db.job(a.id).map(|j| j.payload.value().clone()), Some(json!([2])));
        assert_eq!(db.job(b.id).map(|j| j.payload.value().clone()), Some(json!([4, 5])));
    }

    #[test]
    fn keys_follow_job_key_decide() {
        let mut db = Db::new(t(0), 1);
        let keyed =
            |key: &str, mode| JobSpec::builder().job_key(key).job_key_mode(mode).run_at(t(100)).build();
        let first = add(&mut db, "t", json!([1]), keyed("k", JobKeyMode::Replace));
        let merged = add(&mut db, "u", json!([2]), keyed("k", JobKeyMode::Replace));
        assert_eq!(
            (merged.id, merged.revision, merged.payload.value().clone()),
            (first.id, 1, json!([1, 2]))
        );
        assert_eq!(merged.task_identifier, "u");
        let kept = add(&mut db, "t", json!({"x": 1}), keyed("k", JobKeyMode::UnsafeDedupe));
        assert_eq!((kept.revision, kept.payload.into_value()), (2, json!([1, 2])));
        db.set_now(t(200));
        fetch(&mut db, "w", 1);
        let replacement = add(&mut db, "t", json!(3), keyed("k", JobKeyMode::PreserveRunAt));
        assert_ne!(replacement.id, first.id);
        let old = db.job(first.id).cloned().expect("old job stays");
        assert_eq!((old.key, old.attempts, old.locked_by.as_deref()), (None, 25, Some("w")));
        let removed = db.remove_job("k").expect("removed");
        assert_eq!(removed.id, replacement.id);
        assert!(db.job(replacement.id).is_none());
        let notes = db.take_notifications();
        assert_eq!(notes.len(), 4, "two adds, one add after the dedupe, one removal: {notes:?}");
        assert!(notes[3].payload.ends_with(",\"count\":-1}"));
    }

    #[test]
    fn a_job_failing_its_last_attempt_is_sent_to_its_dead_letter_and_no_other() {
        let mut db = Db::new(t(0), 1);
        db.set_dead_letter("charge", "charge_failed");
        let once = JobSpec { max_attempts: Some(1), ..JobSpec::default() };
        let last = add(&mut db, "charge", json!({"order": 7}), once.clone());
        let retried = add(&mut db, "charge", json!({}), JobSpec::default());
        let cancelled = add(&mut db, "charge", json!({}), JobSpec::default());
        let other = add(&mut db, "refund", json!({}), once);
        fetch(&mut db, "w", 4);
        let fail = |job_id, message: &str, permanent| Failure {
            job_id,
            message: message.into(),
            run_at: None,
            permanent,
            payload: None,
            delay: None,
        };
        let failures = vec![
            fail(last.id, "declined", false),
            fail(retried.id, "declined", false),
            fail(cancelled.id, "cancelled: by request", true),
            fail(other.id, "no", false),
        ];
        db.execute(&Statement::FailJobs { worker_id: "w".into(), failures, settles_workflow_jobs: false });
        let sent: Vec<Job> =
            db.jobs.values().filter(|j| j.task_identifier == "charge_failed").cloned().collect();
        assert_eq!(sent.len(), 1, "only the job out of attempts, not cancelled, with a dead letter");
        assert_eq!(
            sent[0].payload.clone().into_value(),
            json!({"job_id": last.id, "task": "charge", "payload": {"order": 7}, "last_error": "declined", "attempts": 1})
        );
    }

    #[test]
    fn add_jobs_refuses_a_key_twice_and_changes_nothing() {
        let mut db = Db::new(t(0), 1);
        let spec = JobSpec::builder().job_key("k").build();
        let jobs = [RawJob::new("t", json!(1), spec.clone()), RawJob::new("t", json!(2), spec)];
        assert!(db.add_jobs(&jobs, false).is_err());
        assert_eq!(db.jobs().count(), 0);
        assert!(db.take_notifications().is_empty());
    }

    #[test]
    fn admin_functions_skip_live_locks_but_not_stale_ones() {
        let mut db = Db::new(t(0), 1);
        let a = add(&mut db, "t", json!(1), JobSpec::builder().queue_name("q").build());
        fetch(&mut db, "w", 1);
        assert!(db.complete_jobs(&[a.id]).is_empty());
        assert!(db.permanently_fail_jobs(&[a.id], None).is_empty());
        db.set_now(t(5 * 3600));
        assert_eq!(db.permanently_fail_jobs(&[a.id], None)[0].attempts, 25);
        db.execute(&Statement::ResetLocked { locked_before: None });
        let row = db.job(a.id).cloned().expect("a");
        assert_eq!((row.locked_at, row.run_at), (None, t(5 * 3600)));
        assert_eq!(db.queue("q").map(|q| q.locked_at), Some(None));
        db.force_unlock_workers(&["w"]);
        assert_eq!(
            db.reschedule_jobs(&[a.id], &RescheduleJobOptions { attempts: Some(0), ..Default::default() })
                .map(|v| v.len()),
            Ok(1)
        );
        assert!(db
            .reschedule_jobs(&[a.id], &RescheduleJobOptions { max_attempts: Some(0), ..Default::default() })
            .is_err());
    }
}
