//! [`Slots`]: the tasks a worker runs, never more than `concurrency`, which of them were
//! told to abort, and how long a graceful shutdown waits for them.
//!
//! Promises: a job holds at most one slot; a task is told to abort at most once; once the
//! grace deadline passes, every running task is told to abort.

use crate::job::Job;
use crate::time::Timestamp;
use std::collections::{BTreeMap, BTreeSet};

/// What a failure of a running job needs (the job itself goes to the driver, uncloned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Started {
    pub attempts: i16,
    pub max_attempts: i16,
    pub run_at: Timestamp,
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

    /// `job`'s task takes a slot.
    pub fn start(&mut self, job: &Job) {
        let started = Started { attempts: job.attempts, max_attempts: job.max_attempts, run_at: job.run_at };
        self.running.insert(job.id, started);
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
    pub fn deadline(&self) -> Option<Timestamp> {
        self.grace_at
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
}
