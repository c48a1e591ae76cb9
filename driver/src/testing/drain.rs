//! [`drain`]: run the due jobs of some tasks with a real worker, then say how each ended.

use crate::error::Error;
use crate::worker::WorkerOptions;
use chrono::{DateTime, Utc};
use formica_core::worker::Event;
use std::sync::{Arc, Mutex, PoisonError};

/// A job a [`drain`] ran, and how its attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Drained {
    /// The job.
    pub job_id: i64,
    /// Its task.
    pub task: String,
    /// The attempt that ran (1 for the first).
    pub attempt: i16,
    /// How it ended.
    pub outcome: Ended,
}

/// How a drained job's attempt ended.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Ended {
    /// It succeeded: the job is completed (deleted).
    Completed,
    /// It failed with `error`; the job runs again at `retry_at` (by the worker's clock).
    Failed {
        /// The error, the job's `last_error`.
        error: String,
        /// When the job is due again.
        retry_at: DateTime<Utc>,
    },
    /// It failed its last attempt with `error`: the job will not run again.
    PermanentlyFailed {
        /// The error, the job's `last_error`.
        error: String,
    },
    /// A run layer skipped it with `reason`: the job is completed unrun.
    Skipped {
        /// Why.
        reason: String,
    },
    /// It was aborted and the job given back, its attempt refunded.
    Returned,
    /// It snoozed: the job runs again at `until` (by the worker's clock), its attempt
    /// refunded.
    Snoozed {
        /// When the job is due again.
        until: DateTime<Utc>,
    },
}

impl Drained {
    /// The end of a job's attempt that `event` reports, if it reports one.
    fn of(event: &Event) -> Option<Drained> {
        let drained = |job_id: &i64, task: &String, attempt: &i16, outcome| {
            Some(Drained { job_id: *job_id, task: task.clone(), attempt: *attempt, outcome })
        };
        match event {
            Event::JobSuccess { job_id, task, attempt, .. } => {
                drained(job_id, task, attempt, Ended::Completed)
            }
            Event::JobError { job_id, task, attempt, error, retry_at, .. } => {
                let error = error.clone();
                let outcome = match *retry_at {
                    Some(retry_at) => Ended::Failed { error, retry_at },
                    None => Ended::PermanentlyFailed { error },
                };
                drained(job_id, task, attempt, outcome)
            }
            Event::JobSkipped { job_id, task, attempt, reason, .. } => {
                drained(job_id, task, attempt, Ended::Skipped { reason: reason.clone() })
            }
            Event::JobReturned { job_id, task, attempt, .. } => {
                drained(job_id, task, attempt, Ended::Returned)
            }
            Event::JobSnoozed { job_id, task, attempt, until, .. } => {
                drained(job_id, task, attempt, Ended::Snoozed { until: *until })
            }
            _ => None,
        }
    }
}

/// Run every job of `tasks` that is due, with the worker `options` build (its handlers of
/// the other tasks left out), until none is due, then return how each attempt ended, in
/// the order they ended. It is [`Worker::run_once`](crate::Worker::run_once): a job that
/// fails is due again only after its backoff, so each job runs once; a due job of `tasks`
/// that a drained job adds runs too. Jobs of other tasks, and jobs not yet due, stay.
///
/// `options` need the handlers of `tasks` (an [`Error::Options`] names one missing) and
/// the database (for a test, [`TestSchema::worker_options`](super::TestSchema::worker_options)).
pub async fn drain<R>(mut options: WorkerOptions<R>, tasks: &[&str]) -> Result<Vec<Drained>, Error> {
    let handlers = &mut options.handlers_mut().0;
    if tasks.is_empty() {
        return Err(Error::Options("drain: no task given".into()));
    }
    if let Some(missing) = tasks.iter().find(|task| !handlers.contains_key(**task)) {
        return Err(Error::Options(format!("drain: the options define no handler for task {missing:?}")));
    }
    handlers.retain(|task, _| tasks.contains(&task.as_str()));
    let ended = Arc::new(Mutex::new(Vec::new()));
    let seen = ended.clone();
    let options = options.on_event(move |event| {
        if let Some(drained) = Drained::of(event) {
            seen.lock().unwrap_or_else(PoisonError::into_inner).push(drained);
        }
    });
    options.init().await?.run_once().await?;
    let drained = std::mem::take(&mut *ended.lock().unwrap_or_else(PoisonError::into_inner));
    Ok(drained)
}
