//! Flow control from an application: pause and resume a task, a named queue or everything
//! (`WorkerUtils::pause`, `resume`, `paused`; guide: docs/guide/flow-control.md).
//!
//! A pause is a row of Formica's records schema. Every Formica worker reads the pauses
//! before its first fetch, when notified on `formica:flow` (sent by these methods, at
//! commit) and every poll interval, and from then on fetches and starts no paused job;
//! running jobs finish. graphile-worker's workers do not read them.

use crate::error::Error;
use crate::params::{param, typed};
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use formica_core::flow::Scope;
pub use formica_core::flow::Pause;
use formica_sql as sql;
use tokio_postgres::types::Type;

/// A pause in force, as [`WorkerUtils::paused`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Paused {
    /// `task`, `queue` or `all`.
    pub scope: String,
    /// The task identifier or queue name (empty for `all`).
    pub name: String,
    /// Why, as given.
    pub reason: Option<String>,
    /// Who paused it (as given, else the database role).
    pub paused_by: String,
    /// When, by the database clock.
    pub paused_at: DateTime<Utc>,
}

impl Paused {
    /// What is paused (`None`: a scope a newer Formica wrote).
    pub fn pause(&self) -> Option<Pause> {
        Some(Pause { scope: Scope::parse(&self.scope)?, name: self.name.clone() })
    }
}

impl WorkerUtils {
    /// Pause `pause` (a task, a named queue, or everything) for `reason`, by `by` (`None`:
    /// the database role). Within a second every running Formica worker starts none of its
    /// jobs (its running jobs finish), and a worker started later obeys it too, until
    /// [`resume`](Self::resume). Pausing what is paused replaces the reason and author and
    /// keeps the time. Returns when the pause began.
    pub async fn pause(&self, pause: &Pause, reason: Option<&str>, by: Option<&str>) -> Result<DateTime<Utc>, Error> {
        let params = vec![
            param(pause.scope.as_str().to_owned(), Type::TEXT),
            param(pause.name.clone(), Type::TEXT),
            param(reason.map(str::to_owned), Type::TEXT),
            param(by.map(str::to_owned), Type::TEXT),
        ];
        let client = self.pool().get().await?;
        let sql = sql::render(sql::flow::PAUSE, self.schema());
        let rows = client.query_typed(&sql, &typed(&params)).await?;
        let row = rows.first().ok_or_else(|| Error::Config("the pause was not recorded".into()))?;
        Ok(row.try_get(0)?)
    }

    /// Lift the pause `pause`: workers start its jobs again within a second. Returns whether
    /// it was paused.
    pub async fn resume(&self, pause: &Pause) -> Result<bool, Error> {
        let params =
            vec![param(pause.scope.as_str().to_owned(), Type::TEXT), param(pause.name.clone(), Type::TEXT)];
        let client = self.pool().get().await?;
        let sql = sql::render(sql::flow::RESUME, self.schema());
        Ok(!client.query_typed(&sql, &typed(&params)).await?.is_empty())
    }

    /// The pauses in force, oldest first.
    pub async fn paused(&self) -> Result<Vec<Paused>, Error> {
        let client = self.pool().get().await?;
        let rows = client.query_typed(&sql::render(sql::flow::PAUSED, self.schema()), &[]).await?;
        let paused = rows.iter().map(|row| {
            Ok(Paused {
                scope: row.try_get(0)?,
                name: row.try_get(1)?,
                reason: row.try_get(2)?,
                paused_by: row.try_get(3)?,
                paused_at: row.try_get(4)?,
            })
        });
        Ok(paused.collect::<Result<_, tokio_postgres::Error>>()?)
    }
}

/// The pauses a worker's read answered: rows (scope, name); a scope this Formica does not
/// know (written by a newer one) is skipped rather than failing every read.
pub(crate) fn read_pauses(rows: &[tokio_postgres::Row]) -> Result<Vec<Pause>, tokio_postgres::Error> {
    let mut pauses = Vec::new();
    for row in rows {
        let (scope, name): (String, String) = (row.try_get(0)?, row.try_get(1)?);
        if let Some(scope) = Scope::parse(&scope) {
            pauses.push(Pause { scope, name });
        }
    }
    Ok(pauses)
}

/// The fetch leaving out the named queues of its parameter `$7`: see
/// [`formica_sql::flow::excluding_queues`].
pub(crate) fn get_jobs_excluding_queues() -> &'static str {
    static FETCH: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| sql::flow::excluding_queues(crate::traces::get_jobs()));
    &FETCH
}
