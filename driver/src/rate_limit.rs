//! Rate limits from an application: at most N starts of a task per period across every
//! Formica worker (`WorkerUtils::set_rate_limit`, `remove_rate_limit`, `rate_limits`; guide:
//! docs/guide/flow-control.md).
//!
//! A limit is a row of Formica's records schema, read by the workers with the other flow
//! controls (on `formica:flow`, sent by these methods at commit, and every poll interval).
//! A worker whose tasks include a limited one fetches with the limited statement, which
//! logs each lock as a start and locks no more than the period has left.

use crate::error::Error;
use crate::params::{param, typed};
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
pub use formica_core::flow::Limit;
use formica_core::flow::Partition;
use formica_sql as sql;
use tokio_postgres::types::Type;

/// A rate limit in force, as [`WorkerUtils::rate_limits`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitSet {
    /// The limit.
    pub limit: Limit,
    /// Who set it (as given, else the database role).
    pub set_by: String,
    /// When, by the database clock.
    pub set_at: DateTime<Utc>,
}

impl WorkerUtils {
    /// Limit the jobs of `limit.task` started (locked) across every Formica worker to
    /// `max_starts` in any `period_ms` of the database clock (per partition, if any),
    /// replacing its limit; by `by` (`None`: the database role). Workers obey it within a
    /// second. Returns when it was set.
    pub async fn set_rate_limit(&self, limit: &Limit, by: Option<&str>) -> Result<DateTime<Utc>, Error> {
        let partition = limit.partition.as_ref();
        let max_starts =
            crate::flow::check_control("rate limit", &limit.task, ("max", limit.max_starts), partition)?;
        let period_ms =
            crate::flow::check_control("rate limit", &limit.task, ("period_ms", limit.period_ms), None)?;
        let params = vec![
            param(limit.task.clone(), Type::TEXT),
            param(max_starts, Type::INT4),
            param(period_ms, Type::INT4),
            param(limit.partition.as_ref().map(|p| p.kind().to_owned()), Type::TEXT),
            param(limit.partition.as_ref().map(|p| p.argument().to_owned()), Type::TEXT),
            param(by.map(str::to_owned), Type::TEXT),
        ];
        let client = self.pool().get().await?;
        let rows = client.query_typed(&sql::render(sql::flow::LIMIT, self.schema()), &typed(&params)).await?;
        let row = rows.first().ok_or_else(|| Error::Row("the rate limit was not recorded".into()))?;
        Ok(row.try_get(0)?)
    }

    /// Lift the rate limit of `task`. Returns whether it was limited.
    pub async fn remove_rate_limit(&self, task: &str) -> Result<bool, Error> {
        let params = vec![param(task.to_owned(), Type::TEXT)];
        let client = self.pool().get().await?;
        let sql = sql::render(sql::flow::UNLIMIT, self.schema());
        Ok(!client.query_typed(&sql, &typed(&params)).await?.is_empty())
    }

    /// The rate limits in force, by task.
    pub async fn rate_limits(&self) -> Result<Vec<LimitSet>, Error> {
        let client = self.pool().get().await?;
        let rows = client.query_typed(&sql::render(sql::flow::LIMITS, self.schema()), &[]).await?;
        let mut limits = Vec::new();
        for row in &rows {
            let (max_starts, period_ms): (i32, i32) = (row.try_get(1)?, row.try_get(2)?);
            let partition = match (row.try_get::<_, Option<String>>(3)?, row.try_get(4)?) {
                (Some(kind), Some(argument)) => Partition::parse(&kind, argument),
                _ => None,
            };
            let limit = Limit {
                task: row.try_get(0)?,
                max_starts: u32::try_from(max_starts).unwrap_or(1),
                period_ms: u32::try_from(period_ms).unwrap_or(1),
                partition,
            };
            limits.push(LimitSet { limit, set_by: row.try_get(5)?, set_at: row.try_get(6)? });
        }
        Ok(limits)
    }
}
