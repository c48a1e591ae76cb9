//! Jobs as stored in the `_private_jobs` table, and the spec used to add one.
//!
//! `JobSpec` carries only what the caller chose; anything left `None` is filled in by the
//! database (or, with a local clock, by the caller) exactly as Graphile Worker does, so a
//! job added by Formica is indistinguishable from one added by graphile-worker.

pub use crate::payload::Payload;
use crate::policy::TaskPolicy;
use crate::unique::Unique;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// Longest task identifier the schema accepts (`tasks_identifier_check`).
pub const MAX_IDENTIFIER_LEN: usize = 128;
/// Longest queue name the schema accepts (`job_queues_queue_name_check`).
pub const MAX_QUEUE_NAME_LEN: usize = 128;
/// Longest job key the schema accepts (`jobs_key_check`).
pub const MAX_JOB_KEY_LEN: usize = 512;
/// Attempts a job gets when the spec does not say (the column default).
pub const DEFAULT_MAX_ATTEMPTS: i16 = 25;

/// A kind of job, named by the task identifier stored with it. Implemented by payload
/// types so that adding a job and handling it agree on the name.
pub trait Task {
    /// The task identifier (at most 128 characters).
    const IDENTIFIER: &'static str;
    /// Its retry curve, the attempts its jobs get when added without `max_attempts`, and
    /// how long its jobs may snooze (see [`TaskPolicy`]; default [`TaskPolicy::DEFAULT`]).
    const POLICY: TaskPolicy = TaskPolicy::DEFAULT;
}

/// What happens when a job is added with a `job_key` that an existing job already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKeyMode {
    /// Overwrite the pending job entirely, `run_at` included.
    #[default]
    Replace,
    /// Overwrite the pending job but keep its `run_at` if it has not been attempted yet.
    PreserveRunAt,
    /// Leave the existing job untouched (only its revision is bumped).
    UnsafeDedupe,
    /// As [`Replace`](Self::Replace); and if a worker is running the job that holds the
    /// key, ask it to abort that run (it ends cancelled) and hold the new job until the run
    /// has stopped. Formica's add path only (one job at a time, not in a batch or a crontab).
    ReplaceAndAbort,
}

impl JobKeyMode {
    /// The text the SQL functions take (`job_key_mode` argument).
    pub fn as_str(self) -> &'static str {
        match self {
            JobKeyMode::Replace => "replace",
            JobKeyMode::PreserveRunAt => "preserve_run_at",
            JobKeyMode::UnsafeDedupe => "unsafe_dedupe",
            JobKeyMode::ReplaceAndAbort => "replace_and_abort",
        }
    }
}

impl fmt::Display for JobKeyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobKeyMode {
    type Err = JobSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "replace" => Ok(JobKeyMode::Replace),
            "preserve_run_at" => Ok(JobKeyMode::PreserveRunAt),
            "unsafe_dedupe" => Ok(JobKeyMode::UnsafeDedupe),
            "replace_and_abort" => Ok(JobKeyMode::ReplaceAndAbort),
            other => Err(JobSpecError::InvalidJobKeyMode(other.to_owned())),
        }
    }
}

/// A spec that cannot be stored, caught before the database is asked. The codes are the
/// SQLSTATEs graphile-worker's `add_job` used for the same mistakes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JobSpecError {
    /// GWBID: the task identifier is empty or longer than 128 characters.
    #[error("GWBID: task identifier must be 1 to {MAX_IDENTIFIER_LEN} characters, got {0}")]
    Identifier(usize),
    /// GWBQN: the queue name is longer than 128 characters.
    #[error("GWBQN: queue name must be at most {MAX_QUEUE_NAME_LEN} characters, got {0}")]
    QueueName(usize),
    /// GWBJK: the job key is empty or longer than 512 characters.
    #[error("GWBJK: job key must be 1 to {MAX_JOB_KEY_LEN} characters, got {0}")]
    JobKey(usize),
    /// GWBMA: `max_attempts` is below 1.
    #[error("GWBMA: max_attempts must be at least 1, got {0}")]
    MaxAttempts(i16),
    /// GWBKM: the job key mode is not one of the three known ones.
    #[error("GWBKM: invalid job_key_mode {0:?}, expected 'replace', 'preserve_run_at' or 'unsafe_dedupe'")]
    InvalidJobKeyMode(String),
    /// `unsafe_dedupe` was asked of a batch (`add_jobs` supports only the other two modes).
    #[error("GWBKM: job_key_mode 'unsafe_dedupe' is not supported when adding jobs in a batch")]
    UnsafeDedupeInBatch,
    /// `replace_and_abort` was asked of a batch: it stops one run and holds one job, so it
    /// is taken one job at a time.
    #[error("GWBKM: job_key_mode 'replace_and_abort' is not supported when adding jobs in a batch: add such a job alone")]
    ReplaceAndAbortInBatch,
    /// A unique job's period is zero (or too long to count in microseconds).
    #[error("GWBJK: a unique job's period must be positive")]
    UniquePeriod,
    /// A spec asks for a unique job and names its own job key: the key is derived, so one or the other.
    #[error("GWBJK: a unique job derives its job key: give `unique` or `job_key`, not both")]
    UniqueWithKey,
    /// A unique job with a period has no `run_at` and no clock to bucket by (an add on the
    /// caller's sqlx connection without a `run_at`).
    #[error("GWBJK: a unique job with a period needs a run_at here, to know its bucket")]
    UniqueWithoutTime,
    /// A unique job `within` a period was asked of a batch (`add_jobs` does not claim keys).
    #[error("GWBJK: a unique job within a period cannot be added in a batch")]
    UniqueWithinInBatch,
}

impl JobSpecError {
    /// Graphile Worker's five-letter code for this mistake.
    pub fn code(&self) -> &'static str {
        match self {
            JobSpecError::Identifier(_) => "GWBID",
            JobSpecError::QueueName(_) => "GWBQN",
            JobSpecError::JobKey(_)
            | JobSpecError::UniquePeriod
            | JobSpecError::UniqueWithKey
            | JobSpecError::UniqueWithoutTime
            | JobSpecError::UniqueWithinInBatch => "GWBJK",
            JobSpecError::MaxAttempts(_) => "GWBMA",
            JobSpecError::InvalidJobKeyMode(_)
            | JobSpecError::UnsafeDedupeInBatch
            | JobSpecError::ReplaceAndAbortInBatch => "GWBKM",
        }
    }
}

/// Scheduling options for a new job. Every `None` takes the database default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Jobs sharing a queue name run one at a time, in order.
    pub queue_name: Option<String>,
    /// Earliest time the job may run (default: now).
    pub run_at: Option<DateTime<Utc>>,
    /// Attempts before the job fails permanently (default 25).
    pub max_attempts: Option<i16>,
    /// De-duplication key; see [`JobKeyMode`].
    pub job_key: Option<String>,
    /// How a clash on `job_key` is resolved (default [`JobKeyMode::Replace`]).
    pub job_key_mode: Option<JobKeyMode>,
    /// Lower runs first (default 0).
    pub priority: Option<i16>,
    /// Flags a worker may refuse with its forbidden flags.
    pub flags: Option<Vec<String>>,
    /// Derive `job_key` from the task, chosen payload fields and/or a time bucket (see
    /// [`crate::unique`]); `job_key` must then be `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<Unique>,
}

impl JobSpec {
    /// Start a builder.
    pub fn builder() -> JobSpecBuilder {
        JobSpecBuilder::default()
    }

    /// This spec with its unique key derived (see [`crate::unique`]) for a job of task
    /// `identifier` with `payload`, bucketed by its `run_at` or else `now` (`None`: no clock,
    /// so a period needs a `run_at`), with how long the add must claim the key
    /// ([`Unique::within`]). A spec that is not unique is returned as it is.
    pub fn with_unique_key(
        mut self,
        identifier: &str,
        payload: &Value,
        now: Option<DateTime<Utc>>,
    ) -> Result<(Self, Option<std::time::Duration>), JobSpecError> {
        let Some(unique) = self.unique.take() else { return Ok((self, None)) };
        if unique.within.is_some_and(|within| within.is_zero()) {
            return Err(JobSpecError::UniquePeriod);
        }
        if self.job_key.is_some() {
            return Err(JobSpecError::UniqueWithKey);
        }
        let at = match (self.run_at.or(now), unique.period) {
            (Some(at), _) => at,
            (None, None) => DateTime::<Utc>::UNIX_EPOCH,
            (None, Some(_)) => return Err(JobSpecError::UniqueWithoutTime),
        };
        let key =
            crate::unique::key(identifier, payload, &unique, at).map_err(|_| JobSpecError::UniquePeriod)?;
        self.job_key = Some(key);
        Ok((self, unique.within))
    }

    /// This spec with `policy`'s attempts if it names none.
    pub fn with_policy(mut self, policy: &TaskPolicy) -> Self {
        self.max_attempts = self.max_attempts.or(policy.max_attempts);
        self
    }

    /// Check the spec for a job of task `identifier` against the schema's limits, with the
    /// error graphile-worker would give, before any database round trip.
    pub fn validate(&self, identifier: &str) -> Result<(), JobSpecError> {
        let chars = |s: &str| s.chars().count();
        if identifier.is_empty() || chars(identifier) > MAX_IDENTIFIER_LEN {
            return Err(JobSpecError::Identifier(chars(identifier)));
        }
        if let Some(q) = &self.queue_name {
            if chars(q) > MAX_QUEUE_NAME_LEN {
                return Err(JobSpecError::QueueName(chars(q)));
            }
        }
        if let Some(k) = &self.job_key {
            if k.is_empty() || chars(k) > MAX_JOB_KEY_LEN {
                return Err(JobSpecError::JobKey(chars(k)));
            }
        }
        match self.max_attempts {
            Some(n) if n < 1 => Err(JobSpecError::MaxAttempts(n)),
            _ => Ok(()),
        }
    }
}

/// Builder for [`JobSpec`].
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct JobSpecBuilder(JobSpec);

impl JobSpecBuilder {
    /// A builder with every option unset.
    pub fn new() -> Self {
        Self::default()
    }
    /// See [`JobSpec::queue_name`].
    pub fn queue_name(mut self, name: impl Into<String>) -> Self {
        self.0.queue_name = Some(name.into());
        self
    }
    /// See [`JobSpec::run_at`].
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.0.run_at = Some(at);
        self
    }
    /// See [`JobSpec::max_attempts`].
    pub fn max_attempts(mut self, n: i16) -> Self {
        self.0.max_attempts = Some(n);
        self
    }
    /// See [`JobSpec::job_key`].
    pub fn job_key(mut self, key: impl Into<String>) -> Self {
        self.0.job_key = Some(key.into());
        self
    }
    /// See [`JobSpec::job_key_mode`].
    pub fn job_key_mode(mut self, mode: JobKeyMode) -> Self {
        self.0.job_key_mode = Some(mode);
        self
    }
    /// See [`JobSpec::priority`].
    pub fn priority(mut self, p: i16) -> Self {
        self.0.priority = Some(p);
        self
    }
    /// See [`JobSpec::unique`].
    pub fn unique(mut self, unique: Unique) -> Self {
        self.0.unique = Some(unique);
        self
    }
    /// See [`JobSpec::flags`].
    pub fn flags<I, S>(mut self, flags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.0.flags = Some(flags.into_iter().map(Into::into).collect());
        self
    }
    /// The finished spec.
    pub fn build(self) -> JobSpec {
        self.0
    }
}

/// A job row: the columns of the `jobs` view plus the payload and the internal queue id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Primary key.
    pub id: i64,
    /// Internal id of the job's named queue, if any.
    pub job_queue_id: Option<i32>,
    /// Name of the job's queue, if any (resolved by the reader where it is needed).
    pub queue_name: Option<String>,
    /// The task that runs this job.
    pub task_identifier: String,
    /// The payload, as stored: its text, read as a `serde_json::Value` through `Deref`
    /// (parsed then, once), or parsed straight into a type with [`Payload::parse`].
    pub payload: Payload,
    /// Lower runs first.
    pub priority: i16,
    /// Earliest time the job may run.
    pub run_at: DateTime<Utc>,
    /// Attempts made so far, the running one included.
    pub attempts: i16,
    /// Attempts allowed.
    pub max_attempts: i16,
    /// The error of the last failed attempt.
    pub last_error: Option<String>,
    /// When the row was inserted.
    pub created_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
    /// De-duplication key.
    pub key: Option<String>,
    /// When a worker took the job, if one holds it.
    pub locked_at: Option<DateTime<Utc>>,
    /// Which worker (pool) holds the job.
    pub locked_by: Option<String>,
    /// Times the job was replaced through its key.
    pub revision: i32,
    /// Flags set on the job.
    pub flags: BTreeSet<String>,
}

impl Job {
    /// Attempts are used up: the job will not run again unless rescheduled.
    pub fn is_permanently_failed(&self) -> bool {
        self.attempts >= self.max_attempts
    }
}

/// A job to add: a task, its payload and how to schedule it (the arguments of `add_job`,
/// or one job of a batch). The driver adds it to PostgreSQL, the simulation to its own
/// database, so a decision written once serves both.
#[derive(Debug, Clone, PartialEq)]
pub struct RawJob {
    /// The task identifier.
    pub identifier: String,
    /// The payload.
    pub payload: Value,
    /// Scheduling options.
    pub spec: JobSpec,
}

impl RawJob {
    /// A job of task `identifier` with `payload` and `spec`.
    pub fn new(identifier: impl Into<String>, payload: Value, spec: JobSpec) -> Self {
        RawJob { identifier: identifier.into(), payload, spec }
    }
}

/// New values for jobs to reschedule (`reschedule_jobs`); `None` leaves a column as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RescheduleJobOptions {
    /// New earliest run time.
    pub run_at: Option<DateTime<Utc>>,
    /// New priority.
    pub priority: Option<i16>,
    /// New attempt count.
    pub attempts: Option<i16>,
    /// New attempt limit.
    pub max_attempts: Option<i16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_gives_graphile_codes_at_the_limits() {
        let ok = JobSpec::default();
        assert_eq!(ok.validate(&"t".repeat(128)), Ok(()));
        assert_eq!(ok.validate(&"t".repeat(129)).unwrap_err().code(), "GWBID");
        assert_eq!(ok.validate("").unwrap_err().code(), "GWBID");
        let q = JobSpec::builder().queue_name("q".repeat(129)).build();
        assert_eq!(q.validate("t"), Err(JobSpecError::QueueName(129)));
        let k = JobSpec::builder().job_key("k".repeat(512)).build();
        assert_eq!(k.validate("t"), Ok(()));
        let k = JobSpec::builder().job_key("k".repeat(513)).build();
        assert_eq!(k.validate("t"), Err(JobSpecError::JobKey(513)));
        let k = JobSpec::builder().job_key("").build();
        assert_eq!(k.validate("t"), Err(JobSpecError::JobKey(0)));
        let m = JobSpec::builder().max_attempts(0).build();
        assert_eq!(m.validate("t").unwrap_err().code(), "GWBMA");
    }

    #[test]
    fn job_key_mode_round_trips_through_text() {
        for m in [JobKeyMode::Replace, JobKeyMode::PreserveRunAt, JobKeyMode::UnsafeDedupe] {
            assert_eq!(m.as_str().parse::<JobKeyMode>(), Ok(m));
        }
        assert_eq!("merge".parse::<JobKeyMode>().unwrap_err().code(), "GWBKM");
    }
}
