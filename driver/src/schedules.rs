//! Runtime schedules through [`WorkerUtils`]: cron and `@every` interval items added,
//! changed and removed while workers run, kept in Formica's `schedules` table (records
//! migration 8) and scheduled by every worker started with
//! [`WorkerOptions::runtime_schedules`](crate::WorkerOptions::runtime_schedules),
//! each slot once across the fleet through graphile-worker's `known_crontabs` ledger, as
//! crontab items are (the core's `cron::runtime` says how workers take them up). Every write
//! notifies `formica:schedules`, so running workers read the change at once; they also
//! read every few seconds, should a notification be lost.

use crate::error::Error;
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use formica_core::cron::{self, Cron, CronItem};
use serde::Serialize;
use tokio_postgres::types::Type;

/// A runtime schedule as [`WorkerUtils::schedules`] lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Schedule {
    /// Its identifier (its row in `known_crontabs`).
    pub identifier: String,
    /// Its canonical line: a crontab line or an `@every` line.
    pub line: String,
    /// When it was first added.
    pub created_at: DateTime<Utc>,
    /// When it was last added or changed.
    pub updated_at: DateTime<Utc>,
    /// The latest slot any worker scheduled it for (graphile-worker's `last_execution`).
    pub last_execution: Option<DateTime<Utc>>,
}

/// A schedule to put: an item, or a [`Cron`] builder, or one line of crontab text.
pub trait IntoSchedule {
    /// The item, or why it is not one.
    fn into_schedule(self) -> Result<CronItem, Error>;
}

impl IntoSchedule for CronItem {
    fn into_schedule(self) -> Result<CronItem, Error> {
        Ok(self)
    }
}

impl IntoSchedule for Cron {
    fn into_schedule(self) -> Result<CronItem, Error> {
        self.build().map_err(invalid)
    }
}

impl IntoSchedule for &str {
    fn into_schedule(self) -> Result<CronItem, Error> {
        let mut items = cron::parse(self).map_err(invalid)?.into_items();
        match (items.pop(), items.is_empty()) {
            (Some(item), true) => Ok(item),
            _ => Err(Error::Crontab {
                origin: "schedule".to_owned(),
                source: "expected exactly one cron or '@every' line".into(),
            }),
        }
    }
}

fn invalid(e: cron::CrontabError) -> Error {
    Error::Crontab { origin: "schedule".to_owned(), source: Box::new(e) }
}

impl WorkerUtils {
    /// Add a runtime schedule, or replace the one with its identifier (its `?id=`, else its
    /// task identifier); `true` if it was new. Running workers that take runtime schedules
    /// schedule it from the moment they read it, each slot once across them; a replaced
    /// schedule keeps its `known_crontabs` row, so no slot it already had runs again.
    pub async fn put_schedule(&self, schedule: impl IntoSchedule) -> Result<bool, Error> {
        let item = schedule.into_schedule()?;
        let client = self.pool().get().await?;
        let sql = formica_sql::render(formica_sql::schedules::PUT, self.schema());
        let (identifier, line) = (item.identifier().to_owned(), item.to_string());
        let row = client.query_typed_one(&sql, &[(&identifier, Type::TEXT), (&line, Type::TEXT)]).await?;
        Ok(row.try_get(0)?)
    }

    /// Remove the runtime schedule `identifier`; `false` if there was none. Running workers
    /// stop scheduling it once they read the change (at once when notified, else within
    /// their poll interval).
    pub async fn remove_schedule(&self, identifier: &str) -> Result<bool, Error> {
        let client = self.pool().get().await?;
        let sql = formica_sql::render(formica_sql::schedules::REMOVE, self.schema());
        let rows = client.query_typed(&sql, &[(&identifier, Type::TEXT)]).await?;
        Ok(!rows.is_empty())
    }

    /// The runtime schedules, by identifier.
    pub async fn schedules(&self) -> Result<Vec<Schedule>, Error> {
        let client = self.pool().get().await?;
        let sql = formica_sql::render(formica_sql::schedules::LIST, self.schema());
        let rows = client.query_typed(&sql, &[]).await?;
        rows.iter()
            .map(|r| {
                Ok(Schedule {
                    identifier: r.try_get(0)?,
                    line: r.try_get(1)?,
                    created_at: r.try_get(2)?,
                    updated_at: r.try_get(3)?,
                    last_execution: r.try_get(4)?,
                })
            })
            .collect()
    }
}
