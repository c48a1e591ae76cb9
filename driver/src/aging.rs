//! Priority aging from an application: set, lift and list how a task's waiting jobs age
//! (`WorkerUtils::set_aging`, `remove_aging`, `agings`), and one pass of the chore by hand
//! (`age_priorities`); guide: docs/guide/priority-aging.md.
//!
//! Each aging is a row of Formica's records schema. Every Formica worker runs the aging
//! chore (every [`WorkerOptions::age_priorities_every`](crate::WorkerOptions::age_priorities_every),
//! one pass at a time across the schema's workers): it lowers the `priority` number of the
//! aged tasks' waiting jobs, which graphile-worker's workers fetch by too.

use crate::error::Error;
use crate::params::{param, typed};
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
pub use formica_core::aging::{Aging, AGING_BATCH};
use formica_core::worker::{QueryResult, Statement};
use formica_sql as sql;
use std::time::Duration;
use tokio_postgres::types::Type;

/// How often a worker runs the aging chore unless told otherwise: agings count in minutes,
/// and every worker sends the pass, aging set or not, so an idle fleet's queries stay few.
pub(crate) const DEFAULT_AGE_EVERY: Duration = Duration::from_secs(10);
/// The shortest period the chore takes.
pub(crate) const MIN_AGE_EVERY: Duration = Duration::from_millis(100);

/// An aging in force, as [`WorkerUtils::agings`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgingSet {
    /// The aging.
    pub aging: Aging,
    /// Who set it (as given, else the database role).
    pub set_by: String,
    /// When, by the database clock.
    pub set_at: DateTime<Utc>,
}

impl WorkerUtils {
    /// Age the waiting jobs of `aging.task` (replacing the task's aging, if any), by `by`
    /// (`None`: the database role): from the next pass of any worker's chore, a job ready
    /// for `every_ms` milliseconds has its priority number lowered by `step`, and so on
    /// each period, down to `best`. Refused with [`Error::Control`], nothing stored, if it
    /// names no task, or its period or step is 0 or past the column. Returns when it was set.
    pub async fn set_aging(&self, aging: &Aging, by: Option<&str>) -> Result<DateTime<Utc>, Error> {
        let task = &aging.task;
        if task.trim().is_empty() {
            return Err(Error::Control(format!("an aging needs a task identifier, not {task:?}")));
        }
        let every_ms = i32::try_from(aging.every_ms).ok().filter(|ms| *ms > 0).ok_or_else(|| {
            Error::Control(format!(
                "every_ms {}: the aging of {task:?} takes 1 to {}",
                aging.every_ms,
                i32::MAX
            ))
        })?;
        let step = i16::try_from(aging.step).ok().filter(|s| *s > 0).ok_or_else(|| {
            Error::Control(format!("step {}: the aging of {task:?} takes 1 to {}", aging.step, i16::MAX))
        })?;
        let params = vec![
            param(task.clone(), Type::TEXT),
            param(every_ms, Type::INT4),
            param(step, Type::INT2),
            param(aging.best, Type::INT2),
            param(by.map(str::to_owned), Type::TEXT),
        ];
        let client = self.pool().get().await?;
        let rows = client.query_typed(&sql::render(sql::aging::SET, self.schema()), &typed(&params)).await?;
        let row = rows.first().ok_or_else(|| Error::Row("the aging was not recorded".into()))?;
        Ok(row.try_get(0)?)
    }

    /// Lift the aging of `task`: its waiting jobs the chore changed get their own priority
    /// back at once (a running job keeps the one it has). Returns whether there was one.
    pub async fn remove_aging(&self, task: &str) -> Result<bool, Error> {
        let params = vec![param(task.to_owned(), Type::TEXT)];
        let client = self.pool().get().await?;
        let sql = sql::render(sql::aging::REMOVE, self.schema());
        Ok(!client.query_typed(&sql, &typed(&params)).await?.is_empty())
    }

    /// The agings in force, by task.
    pub async fn agings(&self) -> Result<Vec<AgingSet>, Error> {
        let client = self.pool().get().await?;
        let rows = client.query_typed(&sql::render(sql::aging::LIST, self.schema()), &[]).await?;
        let agings = rows.iter().map(|row| {
            let every_ms: i32 = row.try_get(1)?;
            let step: i16 = row.try_get(2)?;
            let aging = Aging {
                task: row.try_get(0)?,
                every_ms: crate::statements::stored(every_ms),
                step: u16::try_from(step).unwrap_or_default(),
                best: row.try_get(3)?,
            };
            Ok(AgingSet { aging, set_by: row.try_get(4)?, set_at: row.try_get(5)? })
        });
        Ok(agings.collect::<Result<_, tokio_postgres::Error>>()?)
    }

    /// Run one pass of the aging chore now, as a worker does: the jobs whose priority it
    /// changed (at most [`AGING_BATCH`]; 0 if another worker's pass was running).
    pub async fn age_priorities(&self) -> Result<u64, Error> {
        let statement = Statement::AgePriorities { batch: AGING_BATCH };
        match crate::statements::run_by_hand(self.pool(), self.schema(), statement).await? {
            QueryResult::Aged { raised } => Ok(raised),
            other => Err(Error::Row(format!("age_priorities answered {other:?}"))),
        }
    }
}
