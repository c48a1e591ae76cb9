//! [`Slots`]: the tasks a worker runs, never more than `concurrency`, which of them were
//! told to abort, when each must end (its task's timeout), and how long a graceful shutdown
//! waits for them.
//!
//! Promises: a job holds at most one slot; a task is told to abort at most once; a task
//! with a timeout is due to abort that long after it started; once the grace deadline
//! passes, every running task is told to abort. A slot remembers when its task started, so
//! the outcome events carry how long it ran.

use crate::job::Job;
use crate::protocol::Event;
use crate::time::Timestamp;
use chrono::Duration;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

/// What the outcome of a running job needs (the job itself goes to the driver).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Started {
    pub job_id: i64,
    pub task: String,
    pub queue: Option<String>,
    pub attempts: i16,
    pub max_attempts: i16,
    pub run_at: Timestamp,
    pub created_at: Timestamp,
    pub started_at: Timestamp,
    /// When the task must have ended, and its timeout, if it has one.
    pub deadline: Option<(Timestamp, Duration)>,
    /// A workflow released the job ([`crate::workflow::FLAG`]): its outcome settles it.
    pub in_workflow: bool,
}

impl Started {
    /// The task started.
    pub fn started(&self) -> Event {
        let Started { job_id, task, queue, attempts: attempt, .. } = self.clone();
        Event::JobStart { job_id, task, queue, attempt }
    }

    /// The task succeeded at `now`.
    pub fn success(&self, now: Timestamp) -> Event {
        let Started { job_id, task, queue, attempts: attempt, .. } = self.clone();
        Event::JobSuccess { job_id, task, queue, attempt, duration: now - self.started_at }
    }

    /// A middleware layer skipped the task, for `reason`.
    pub fn skipped(&self, reason: String) -> Event {
        let Started { job_id, task, queue, attempts: attempt, .. } = self.clone();
        Event::JobSkipped { job_id, task, queue, attempt, reason }
    }

    /// The task failed at `now`; it runs again at `retry_at` (`None`: it will not).
    pub fn error(&self, error: &str, now: Timestamp, retry_at: Option<Timestamp>) -> Event {
        let Started { job_id, task, queue, attempts: attempt, max_attempts, .. } = self.clone();
        let (error, duration) = (error.to_owned(), now - self.started_at);
        Event::JobError { job_id, error, attempt, max_attempts, task, queue, duration, retry_at }
    }

    /// The task failed its last attempt at `now`.
    pub fn permanently_failed(&self, error: &str, now: Timestamp) -> Event {
        let Started { job_id, task, queue, attempts: attempt, .. } = self.clone();
        let (error, duration) = (error.to_owned(), now - self.started_at);
        Event::JobPermanentlyFailed { job_id, error, task, queue, attempt, duration }
    }

    /// The task was aborted at `now`.
    pub fn returned(&self, now: Timestamp) -> Event {
        let Started { job_id, task, queue, attempts: attempt, .. } = self.clone();
        Event::JobReturned { job_id, task, queue, attempt, duration: now - self.started_at }
    }

    /// The task snoozed: it runs again at `until`.
    pub fn snoozed(&self, until: Timestamp) -> Event {
        let Started { job_id, task, queue, attempts: attempt, .. } = self.clone();
        Event::JobSnoozed { job_id, task, queue, attempt, until }
    }

    /// The attempt that ran was the last allowed.
    pub fn out_of_attempts(&self) -> bool {
        self.attempts >= self.max_attempts
    }
}

/// The concurrency slots of a worker.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    concurrency: usize,
    running: BTreeMap<i64, Started>,
    /// Tasks told to abort.
    aborting: BTreeSet<i64>,
    /// When a graceful shutdown stops waiting for the running tasks.
    grace_at: Option<Timestamp>,
}

impl Slots {
    /// `concurrency` free slots.
    pub fn new(concurrency: usize) -> Self {
        Slots { concurrency, running: BTreeMap::new(), aborting: BTreeSet::new(), grace_at: None }
    }

    /// How many more tasks may start.
    pub fn free(&self) -> usize {
        self.concurrency.saturating_sub(self.running.len())
    }

    /// `job`'s task takes a slot at `now`; with a `timeout`, it is due to abort that long
    /// after.
    pub fn start(&mut self, job: &Job, timeout: Option<Duration>, now: Timestamp) -> &Started {
        let started = Started {
            job_id: job.id,
            task: job.task_identifier.clone(),
            queue: job.queue_name.clone(),
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            run_at: job.run_at,
            created_at: job.created_at,
            started_at: now,
            deadline: timeout.map(|timeout| (now + timeout, timeout)),
            in_workflow: job.flags.contains(crate::workflow::FLAG),
        };
        match self.running.entry(job.id) {
            Entry::Occupied(mut slot) => {
                slot.insert(started);
                slot.into_mut()
            }
            Entry::Vacant(slot) => slot.insert(started),
        }
    }

    /// The task of `job_id` ended: its slot is free. `None` if it was not running.
    pub fn finish(&mut self, job_id: i64) -> Option<Started> {
        self.aborting.remove(&job_id);
        self.running.remove(&job_id)
    }

    /// Wait for the running tasks until `at`, then abort them.
    pub fn wait_until(&mut self, at: Timestamp) {
        self.grace_at = Some(at);
    }

    /// The tasks to abort now: all of them once the grace deadline passed.
    pub fn handle_timeout(&mut self, now: Timestamp) -> Vec<i64> {
        match self.grace_at {
            Some(at) if at <= now => self.abort_all(),
            Some(_) | None => Vec::new(),
        }
    }

    /// The worker stopped: nothing is waited for any more.
    pub fn stopped(&mut self) {
        self.grace_at = None;
    }

    /// When running tasks are aborted unless they ended.
    pub fn grace_deadline(&self) -> Option<Timestamp> {
        self.grace_at
    }

    /// Whether the task of `job_id` runs and was not yet told to abort; from now on it
    /// counts as told.
    pub fn abort(&mut self, job_id: i64) -> bool {
        self.running.contains_key(&job_id) && self.aborting.insert(job_id)
    }

    /// The earliest timeout of a task not yet told to abort.
    pub fn timeout_deadline(&self) -> Option<Timestamp> {
        self.timed().map(|(_, (at, _))| at).min()
    }

    /// The tasks whose timeout passed at `now` and were not yet told to abort; from now on
    /// they count as told. Each comes with its timeout.
    pub fn expired(&mut self, now: Timestamp) -> Vec<(i64, Duration)> {
        let expired: Vec<(i64, Duration)> =
            self.timed().filter(|(_, (at, _))| *at <= now).map(|(id, (_, timeout))| (id, timeout)).collect();
        self.aborting.extend(expired.iter().map(|(id, _)| id));
        expired
    }

    fn timed(&self) -> impl Iterator<Item = (i64, (Timestamp, Duration))> + '_ {
        self.running
            .iter()
            .filter(|(id, _)| !self.aborting.contains(id))
            .filter_map(|(id, s)| Some((*id, s.deadline?)))
    }

    /// The running tasks not yet told to abort; from now on they count as told (and no
    /// grace deadline is left).
    pub fn abort_all(&mut self) -> Vec<i64> {
        self.grace_at = None;
        let ids: Vec<i64> = self.running.keys().copied().filter(|id| !self.aborting.contains(id)).collect();
        self.aborting.extend(&ids);
        ids
    }

    /// Tasks running.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether no task runs.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// The jobs running.
    pub fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.running.keys().copied()
    }

    /// How many jobs of `task` run.
    pub fn running_of(&self, task: &str) -> usize {
        self.running.values().filter(|s| s.task == task).count()
    }
}
