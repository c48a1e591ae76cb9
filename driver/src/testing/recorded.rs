//! The database of a [`TestJob`](super::TestJob)'s context: none. What the handler adds
//! through its context is recorded here, as the job the database would have stored.

use crate::error::Error;
use chrono::{DateTime, Utc};
use formica_core::job::{Job, JobSpec, DEFAULT_MAX_ATTEMPTS};
use serde_json::Value;
use std::sync::{Mutex, PoisonError};

/// Why a [`TestJob`](super::TestJob)'s context cannot reach a database.
pub(crate) const NO_DATABASE: &str = "this JobContext comes from formica::testing::TestJob and has no \
    database: the jobs it adds are recorded (Ran::added); test what needs the database with a worker on a \
    TestSchema";

/// The jobs added through one test context, in order.
pub(crate) struct Recorder {
    /// The time of the run: what a job added without `run_at` is due at.
    now: DateTime<Utc>,
    added: Mutex<Vec<Job>>,
}

impl Recorder {
    pub(crate) fn new(now: DateTime<Utc>) -> Self {
        Recorder { now, added: Mutex::new(Vec::new()) }
    }

    /// Record a job as `add_job` would store it, with ids from 1 in the order added. The
    /// spec is checked as the database path checks it; a job key replaces nothing here.
    pub(crate) fn add(&self, task: &str, payload: Value, spec: JobSpec) -> Result<Job, Error> {
        let (spec, _) = spec.with_unique_key(task, &payload, Some(self.now))?;
        spec.validate(task)?;
        let mut added = self.added.lock().unwrap_or_else(PoisonError::into_inner);
        let job = Job {
            id: added.len() as i64 + 1,
            job_queue_id: None,
            queue_name: spec.queue_name,
            task_identifier: task.to_owned(),
            payload: payload.into(),
            priority: spec.priority.unwrap_or(0),
            run_at: spec.run_at.unwrap_or(self.now),
            attempts: 0,
            max_attempts: spec.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            last_error: None,
            created_at: self.now,
            updated_at: self.now,
            key: spec.job_key,
            locked_at: None,
            locked_by: None,
            revision: 0,
            flags: spec.flags.unwrap_or_default().into_iter().collect(),
        };
        added.push(job.clone());
        Ok(job)
    }

    /// The jobs recorded so far.
    pub(crate) fn take(&self) -> Vec<Job> {
        std::mem::take(&mut *self.added.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
