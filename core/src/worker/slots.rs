//! [`Slots`]: the tasks a worker runs, never more than `concurrency`, which of them were
//! told to abort, and when each must end (its task's timeout).
//!
//! Promises: a job holds at most one slot; a task is told to abort at most once; a task
//! with a timeout is due to abort that long after it started.

use crate::job::Job;
use crate::time::Timestamp;
use chrono::Duration;
use std::collections::{BTreeMap, BTreeSet};

/// What a failure of a running job needs (the job itself goes to the driver, uncloned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Started {
    pub attempts: i16,
    pub max_attempts: i16,
    pub run_at: Timestamp,
    /// When the task must have ended, and its timeout, if it has one.
    pub deadline: Option<(Timestamp, Duration)>,
}

/// The concurrency slots of a worker.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    concurrency: usize,
    running: BTreeMap<i64, Started>,
    /// Tasks told to abort.
    aborting: BTreeSet<i64>,
}

impl Slots {
    /// `concurrency` free slots.
    pub fn new(concurrency: usize) -> Self {
        Slots { concurrency, running: BTreeMap::new(), aborting: BTreeSet::new() }
    }

    /// How many more tasks may start.
    pub fn free(&self) -> usize {
        self.concurrency.saturating_sub(self.running.len())
    }

    /// `job`'s task takes a slot.
    /// With a `timeout`, it is due to abort that long after `now`.
    pub fn start(&mut self, job: &Job, timeout: Option<Duration>, now: Timestamp) {
        let deadline = timeout.map(|timeout| (now + timeout, timeout));
        let started =
            Started { attempts: job.attempts, max_attempts: job.max_attempts, run_at: job.run_at, deadline };
        self.running.insert(job.id, started);
    }

    /// The task of `job_id` ended: its slot is free. `None` if it was not running.
    pub fn finish(&mut self, job_id: i64) -> Option<Started> {
        self.aborting.remove(&job_id);
        self.running.remove(&job_id)
    }

    /// Whether the task of `job_id` runs and was not yet told to abort; from now on it
    /// counts as told.
    pub fn abort(&mut self, job_id: i64) -> bool {
        self.running.contains_key(&job_id) && self.aborting.insert(job_id)
    }

    /// The earliest timeout of a task not yet told to abort.
    pub fn deadline(&self) -> Option<Timestamp> {
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

    /// The running tasks not yet told to abort; from now on they count as told.
    pub fn abort_all(&mut self) -> Vec<i64> {
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
}
