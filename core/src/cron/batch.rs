//! What the cron runner exchanges with the database: the crontab rows registration returns,
//! and the batches of jobs it schedules. Data of the driver contract, kept apart from the
//! runner so that `protocol` can carry them without importing the runner.

use crate::job::JobSpec;
use chrono::{DateTime, Utc};
use serde_json::Value;

/// A row of `_private_known_crontabs` as registration returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownCrontab {
    /// The cron item's identifier.
    pub identifier: String,
    /// When a worker first registered it.
    pub known_since: DateTime<Utc>,
    /// The latest minute any worker scheduled it for.
    pub last_execution: Option<DateTime<Utc>>,
}

/// One job of a cron batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronJob {
    /// The item's identifier, whose `last_execution` guards the job.
    pub identifier: String,
    /// The task to run.
    pub task: String,
    /// The item's payload with `_cron: { ts, backfilled }`.
    pub payload: Value,
    /// Queue, attempts, priority, key; `run_at` is the minute.
    pub spec: JobSpec,
}

/// The jobs of every item due at one minute, scheduled by one statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronBatch {
    /// The whole minute (UTC) the jobs are for.
    pub at: DateTime<Utc>,
    /// Whether the batch was found by the start-up backfill.
    pub backfilled: bool,
    /// The jobs, in crontab order.
    pub jobs: Vec<CronJob>,
}

/// A runtime schedule as read from Formica's `schedules` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRow {
    /// Its identifier (its `known_crontabs` row's).
    pub identifier: String,
    /// Its canonical line: a crontab line or an `@every` line, with `?id=` its identifier.
    pub line: String,
}
