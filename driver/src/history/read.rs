//! Reading the history for people: filtered rows, and counts over time (the dashboard's).

use super::outcome::JobOutcome;
use crate::error::Error;
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use std::time::Duration;
use tokio_postgres::types::Type;

/// Which history rows to read; every field `None` is any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryFilter {
    /// Of this task.
    pub task: Option<String>,
    /// In this named queue.
    pub queue: Option<String>,
    /// With this outcome (`completed`, `failed`, `cancelled`).
    pub outcome: Option<String>,
    /// Whose error contains this text.
    pub error: Option<String>,
    /// Of this job.
    pub job_id: Option<i64>,
}

/// The jobs that ended in one time bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryBucket {
    /// Its start.
    pub start: DateTime<Utc>,
    /// Jobs completed.
    pub completed: i64,
    /// Jobs failed for good.
    pub failed: i64,
    /// Jobs cancelled.
    pub cancelled: i64,
    /// Mean seconds from a job's add to the start of its last attempt.
    pub wait_seconds: Option<f64>,
}

impl WorkerUtils {
    /// The `limit` history rows matching `filter` of the newest jobs (by id; a job's runs
    /// newest first).
    pub async fn history(&self, filter: &HistoryFilter, limit: u32) -> Result<Vec<JobOutcome>, Error> {
        let client = self.pool().get().await?;
        let sql = formica_sql::render(formica_sql::history::LIST, self.schema());
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let rows = client
            .query_typed(
                &sql,
                &[
                    (&filter.task, Type::TEXT),
                    (&filter.queue, Type::TEXT),
                    (&filter.outcome, Type::TEXT),
                    (&filter.error, Type::TEXT),
                    (&filter.job_id, Type::INT8),
                    (&limit, Type::INT4),
                ],
            )
            .await
            .map_err(super::read_refused(self.schema()))?;
        rows.iter().map(JobOutcome::from_row).collect()
    }

    /// The jobs that ended over the last `span`, in buckets of `bucket` (by the database
    /// clock); buckets where none ended are left out.
    pub async fn history_buckets(
        &self,
        span: Duration,
        bucket: Duration,
    ) -> Result<Vec<HistoryBucket>, Error> {
        let client = self.pool().get().await?;
        let sql = formica_sql::render(formica_sql::history::BUCKETS, self.schema());
        let seconds = |d: Duration| i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX);
        let (span, bucket) = (seconds(span), seconds(bucket));
        let rows = client
            .query_typed(&sql, &[(&span, Type::INT4), (&bucket, Type::INT4)])
            .await
            .map_err(super::read_refused(self.schema()))?;
        rows.iter()
            .map(|r| {
                Ok(HistoryBucket {
                    start: r.try_get("start")?,
                    completed: r.try_get("completed")?,
                    failed: r.try_get("failed")?,
                    cancelled: r.try_get("cancelled")?,
                    wait_seconds: r.try_get("wait_seconds")?,
                })
            })
            .collect()
    }
}
