//! Bulk actions: retry, reschedule, cancel or delete every job a [`BulkFilter`] picks, as
//! the `formica` command's `retry`/`reschedule`/`cancel`/`delete` and the dashboard's jobs
//! page do, with a dry run that says how many.
//!
//! The filter becomes SQL in one place (`sql/queries/bulk/matching.sql`), used alike by the
//! dry run and by the real run, which walks the jobs in ascending id order up to the newest
//! id at its start, a bounded batch per statement (each its own short transaction), locking
//! a batch's rows with `skip locked`: a million jobs never hold one long lock, no job is
//! changed twice, jobs added meanwhile are left alone, and when nothing else writes
//! meanwhile the real run changes exactly as many jobs as the dry run counted. A job a
//! worker holds (running) is never picked, by any action; cancel a running job by id with
//! [`WorkerUtils::cancel_jobs`]. Each change is made by graphile-worker 0.18's own admin
//! function (`reschedule_jobs`, `permanently_fail_jobs`, `complete_jobs`), so the rows are
//! what graphile-worker's own tools would leave.

use crate::error::Error;
use crate::jobs::{Query, Session};
use crate::params::{param, Param};
use crate::rows::ResultRow;
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use formica_core::job::RescheduleJobOptions;
use formica_sql as sql;
use serde::{Deserialize, Serialize};
use tokio_postgres::types::Type;

/// Jobs a batch changes unless told otherwise: each batch is one short statement.
pub const DEFAULT_BULK_BATCH_SIZE: u32 = 1000;

/// Which jobs a bulk action picks: those meeting every criterion given (`None`, empty or
/// `false`: any). Jobs a worker holds are never picked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BulkFilter {
    /// Only these jobs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<i64>>,
    /// Only jobs of this task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Only jobs of this named queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Only jobs in one of these states (of `formica_sql::JOB_STATES`: `failed` is waiting
    /// to retry, `permanently_failed` out of attempts, `scheduled` waiting for its first
    /// run; `running` matches nothing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
    /// Only jobs that have failed at least once (`last_error` set).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Only jobs whose `last_error` contains this text (case-insensitive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Only jobs added (`created_at`) at or after this. graphile-worker's rows record no
    /// time of failure: neither its workers nor Formica's change a row's dates when a job fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Only jobs added before this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<DateTime<Utc>>,
    /// Only jobs with at least this many attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts_at_least: Option<i16>,
    /// Only jobs with at most this many attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts_at_most: Option<i16>,
    /// Only the job with this key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl BulkFilter {
    /// Whether no criterion is given: the filter picks every job no worker holds.
    pub fn is_everything(&self) -> bool {
        *self == BulkFilter::default()
    }

    /// The filter's parameters of `matching.sql` ($4 to $14), or why it is wrong.
    fn params(&self) -> Result<Vec<Param>, Error> {
        for state in &self.states {
            crate::inspect::check_state(state)?;
        }
        let text = |v: &Option<String>| param(v.clone(), Type::TEXT);
        let int = |v: Option<i16>| param(v.map(i32::from), Type::INT4);
        let states = (!self.states.is_empty()).then(|| self.states.clone());
        Ok(vec![
            param(self.ids.clone(), Type::INT8_ARRAY),
            text(&self.task),
            text(&self.queue),
            param(states, Type::TEXT_ARRAY),
            param(self.failed, Type::BOOL),
            text(&self.error),
            param(self.since, Type::TIMESTAMPTZ),
            param(self.before, Type::TIMESTAMPTZ),
            int(self.attempts_at_least),
            int(self.attempts_at_most),
            text(&self.key),
        ])
    }
}

/// What a bulk action does to each job its filter picks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BulkAction {
    /// Run again now, with a fresh set of attempts: `run_at` now, `attempts` 0 (as
    /// graphile-worker's `reschedule_jobs(ids, now(), null, 0)` leaves it; `max_attempts`
    /// and `last_error` stay). Picks only jobs that have failed (waiting to retry, or failed
    /// for good, cancelled included).
    Retry,
    /// Change when and how the jobs run, as [`WorkerUtils::reschedule_jobs`]. Picks any job.
    Reschedule(RescheduleJobOptions),
    /// Fail for good with `last_error` `cancelled: <reason>`, as
    /// [`WorkerUtils::cancel_jobs`] does to a job no worker holds. Picks only jobs that
    /// would still run (attempts left), so failed jobs keep their error.
    Cancel {
        /// Why.
        reason: String,
    },
    /// Delete the rows, as [`WorkerUtils::complete_jobs`]. Picks any job.
    Delete,
}

impl BulkAction {
    /// Its name, as the command's verb: `retry`, `reschedule`, `cancel`, `delete`.
    pub fn name(&self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Reschedule(_) => "reschedule",
            BulkAction::Cancel { .. } => "cancel",
            BulkAction::Delete => "delete",
        }
    }

    /// Its SQL and its own parameters (after the filter's), or why it is wrong.
    fn sql(&self) -> Result<(sql::bulk::Action, Vec<Param>), Error> {
        Ok(match self {
            BulkAction::Retry => (sql::bulk::RETRY, Vec::new()),
            BulkAction::Reschedule(options) => {
                if *options == RescheduleJobOptions::default() {
                    return Err(Error::Filter(
                        "a reschedule needs at least one of run_at, priority, attempts, max_attempts".into(),
                    ));
                }
                let int = |v: Option<i16>| param(v.map(i32::from), Type::INT4);
                let params = vec![
                    param(options.run_at, Type::TIMESTAMPTZ),
                    int(options.priority),
                    int(options.attempts),
                    int(options.max_attempts),
                ];
                (sql::bulk::RESCHEDULE, params)
            }
            BulkAction::Cancel { reason } => (sql::bulk::CANCEL, vec![param(reason.clone(), Type::TEXT)]),
            BulkAction::Delete => (sql::bulk::DELETE, Vec::new()),
        })
    }
}

/// The statement `template` over ids in (`after`, `up_to`], at most `limit` (`None`: all).
fn statement(
    schema: &str,
    template: String,
    range: (i64, i64, Option<i64>),
    filter: Vec<Param>,
    own: Vec<Param>,
) -> Query {
    let (after, up_to, limit) = range;
    let mut params = vec![param(after, Type::INT8), param(up_to, Type::INT8), param(limit, Type::INT8)];
    params.extend(filter);
    params.extend(own);
    Query { sql: sql::render(&template, schema), params }
}

/// How many jobs `action` would change now (a plain read, locking nothing).
pub(crate) async fn count(
    schema: &str,
    mut session: impl Session,
    action: &BulkAction,
    filter: &BulkFilter,
) -> Result<u64, Error> {
    let (sql_action, _) = action.sql()?;
    let query = statement(
        schema,
        sql::bulk::count(sql_action),
        (i64::MIN, i64::MAX, None),
        filter.params()?,
        Vec::new(),
    );
    let rows = Session::query(&mut session, query).await?;
    let row = rows.first().ok_or_else(|| Error::Row("the bulk count answered no row".into()))?;
    Ok(u64::try_from(row.read::<i64>(0)?).unwrap_or_default())
}

impl WorkerUtils {
    /// How many jobs [`Self::bulk`] would change now with `action` and `filter`: the dry
    /// run. It reads only; the real run changes as many when nothing else writes meanwhile.
    pub async fn bulk_dry_run(&self, action: &BulkAction, filter: &BulkFilter) -> Result<u64, Error> {
        let client = self.pool().get().await?;
        count(self.schema(), &*client, action, filter).await
    }

    /// Apply `action` to every job `filter` picks, in batches of [`DEFAULT_BULK_BATCH_SIZE`]:
    /// see [`Self::bulk_in_batches_of`]. Returns how many jobs it changed.
    pub async fn bulk(&self, action: &BulkAction, filter: &BulkFilter) -> Result<u64, Error> {
        self.bulk_in_batches_of(action, filter, DEFAULT_BULK_BATCH_SIZE).await
    }

    /// Apply `action` to every job `filter` picks, walking the ids in ascending order up to
    /// the newest at the start, `batch_size` jobs (at least 1) per statement, each its own
    /// transaction that locks only its batch and skips rows another transaction holds. Jobs
    /// a worker holds are never picked; jobs added meanwhile are left alone; no job is
    /// changed twice. An error stops the walk: the batches before it stay done (run it
    /// again for the rest). Returns how many jobs it changed.
    pub async fn bulk_in_batches_of(
        &self,
        action: &BulkAction,
        filter: &BulkFilter,
        batch_size: u32,
    ) -> Result<u64, Error> {
        // Parameters are boxed values: made again for each batch (checked once here).
        let (sql_action, _) = action.sql()?;
        filter.params()?;
        let batch_sql = sql::bulk::batch(sql_action);
        let limit = i64::from(batch_size.max(1));
        let client = self.pool().get().await?;
        let last_id = Query { sql: sql::render(sql::bulk::LAST_ID, self.schema()), params: Vec::new() };
        let mut session = &*client;
        let rows = Session::query(&mut session, last_id).await?;
        let up_to: i64 = rows.first().map(|row| row.read(0)).transpose()?.unwrap_or(0);
        let (mut after, mut changed) = (i64::MIN, 0_u64);
        loop {
            let query = statement(
                self.schema(),
                batch_sql.clone(),
                (after, up_to, Some(limit)),
                filter.params()?,
                action.sql()?.1,
            );
            let rows = Session::query(&mut session, query).await?;
            let row = rows.first().ok_or_else(|| Error::Row("a bulk batch answered no row".into()))?;
            changed += u64::try_from(row.read::<i64>(row.column("changed")?)?).unwrap_or_default();
            match row.read::<Option<i64>>(row.column("last")?)? {
                Some(last) => after = last,
                None => return Ok(changed),
            }
        }
    }
}
