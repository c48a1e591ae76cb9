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
pub use formica_core::flow::{Cap, Partition, Pause};
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
    pub async fn pause(
        &self,
        pause: &Pause,
        reason: Option<&str>,
        by: Option<&str>,
    ) -> Result<DateTime<Utc>, Error> {
        if pause.scope != Scope::All && pause.name.trim().is_empty() {
            let scope = pause.scope.as_str();
            return Err(Error::Control(format!("a pause of a {scope} needs its name, not {:?}", pause.name)));
        }
        let params = vec![
            param(pause.scope.as_str().to_owned(), Type::TEXT),
            param(pause.name.clone(), Type::TEXT),
            param(reason.map(str::to_owned), Type::TEXT),
            param(by.map(str::to_owned), Type::TEXT),
        ];
        let client = self.pool().get().await?;
        let sql = sql::render(sql::flow::PAUSE, self.schema());
        let rows = client.query_typed(&sql, &typed(&params)).await?;
        let row = rows.first().ok_or_else(|| Error::Row("the pause was not recorded".into()))?;
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

/// Refuse a cap or rate limit (`kind`) that names no task, whose `count` (its name and
/// value) allows no job or exceeds the column, or whose partition names no field or
/// separator; else the count as stored. Each message names the value refused.
pub(crate) fn check_control(
    kind: &str,
    task: &str,
    count: (&str, u32),
    partition: Option<&Partition>,
) -> Result<i32, Error> {
    if task.trim().is_empty() {
        return Err(Error::Control(format!("a {kind} needs a task identifier, not {task:?}")));
    }
    let (name, value) = count;
    let Some(stored) = i32::try_from(value).ok().filter(|n| *n > 0) else {
        return Err(Error::Control(format!(
            "{name} {value}: the {kind} of {task:?} takes 1 to {}",
            i32::MAX
        )));
    };
    if let Some(partition) = partition.filter(|p| p.argument().is_empty()) {
        return Err(Error::Control(format!(
            "the {kind} of {task:?} per {} needs its {}, not \"\"",
            partition.kind(),
            match partition {
                Partition::Field(_) => "payload field",
                Partition::KeyPrefix(_) => "separator",
            }
        )));
    }
    Ok(stored)
}

/// A cap in force, as [`WorkerUtils::caps`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapSet {
    /// The cap.
    pub cap: Cap,
    /// Who set it (as given, else the database role).
    pub set_by: String,
    /// When, by the database clock.
    pub set_at: DateTime<Utc>,
}

impl WorkerUtils {
    /// Cap the jobs of `cap.task` locked at once across every Formica worker (per partition,
    /// if any), replacing its cap; by `by` (`None`: the database role). Workers obey it
    /// within a second: their fetches of the task then lock at most the room the cap leaves,
    /// counting every job of the task locked by anyone. Jobs already running above a
    /// lowered cap finish. Returns when it was set.
    pub async fn set_cap(&self, cap: &Cap, by: Option<&str>) -> Result<DateTime<Utc>, Error> {
        let max_running = check_control("cap", &cap.task, ("max", cap.max_running), cap.partition.as_ref())?;
        let params = vec![
            param(cap.task.clone(), Type::TEXT),
            param(max_running, Type::INT4),
            param(cap.partition.as_ref().map(|p| p.kind().to_owned()), Type::TEXT),
            param(cap.partition.as_ref().map(|p| p.argument().to_owned()), Type::TEXT),
            param(by.map(str::to_owned), Type::TEXT),
        ];
        let client = self.pool().get().await?;
        let rows = client.query_typed(&sql::render(sql::flow::CAP, self.schema()), &typed(&params)).await?;
        let row = rows.first().ok_or_else(|| Error::Row("the cap was not recorded".into()))?;
        Ok(row.try_get(0)?)
    }

    /// Lift the cap of `task`. Returns whether it was capped.
    pub async fn remove_cap(&self, task: &str) -> Result<bool, Error> {
        let params = vec![param(task.to_owned(), Type::TEXT)];
        let client = self.pool().get().await?;
        let sql = sql::render(sql::flow::UNCAP, self.schema());
        Ok(!client.query_typed(&sql, &typed(&params)).await?.is_empty())
    }

    /// The caps in force, by task.
    pub async fn caps(&self) -> Result<Vec<CapSet>, Error> {
        let client = self.pool().get().await?;
        let rows = client.query_typed(&sql::render(sql::flow::CAPS, self.schema()), &[]).await?;
        let mut caps = Vec::new();
        for row in &rows {
            let max_running: i32 = row.try_get(1)?;
            let partition = match (row.try_get::<_, Option<String>>(2)?, row.try_get(3)?) {
                (Some(kind), Some(argument)) => Partition::parse(&kind, argument),
                _ => None,
            };
            let cap = Cap {
                task: row.try_get(0)?,
                max_running: u32::try_from(max_running).unwrap_or(1),
                partition,
            };
            caps.push(CapSet { cap, set_by: row.try_get(4)?, set_at: row.try_get(5)? });
        }
        Ok(caps)
    }
}
