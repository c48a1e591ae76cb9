//! Flow control from an application: pause and resume a task, a named queue or everything
//! (`WorkerUtils::pause`, `resume`, `paused`), and set, lift and list the caps, rate
//! limits, fairness and bounds (`WorkerUtils::set_control`, `remove_control`, `controls`);
//! guides: docs/guide/flow-control.md, docs/guide/fairness.md, docs/guide/bounded-queues.md.
//!
//! Each is a row of Formica's records schema. Every Formica worker reads them before its
//! first fetch, when notified on `formica:flow` (sent by these methods, at commit) and
//! every poll interval: from then on it starts no paused job, and fetches a controlled
//! task's jobs with the statement that keeps to the caps and rate limits. Running jobs
//! finish. graphile-worker's workers do not read them.

use crate::error::Error;
use crate::params::{param, typed, Param};
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
pub use formica_core::flow::{
    Control, ControlKind, ControlLimit, Partition, Pause, Scope, UnknownPartition, MAX_WEIGHT,
};
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

/// A cap, rate limit, fairness or bound in force, as [`WorkerUtils::controls`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlSet {
    /// The control.
    pub control: Control,
    /// Who set it (as given, else the database role).
    pub set_by: String,
    /// When, by the database clock.
    pub set_at: DateTime<Utc>,
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

    /// Set `control` on the jobs of `control.task` across every Formica worker (per
    /// partition, if any), replacing the task's control of the same kind and partition
    /// (fairness: the task's fairness); by `by` (`None`: the database role). A task may
    /// have several: a job starts only if every one allows it. Workers obey it within a
    /// second. A cap ([`ControlLimit::Running`]): their fetches of the task lock at most the
    /// room the cap leaves, counting every job of the task locked by anyone; jobs already
    /// running above a lowered cap finish. A rate limit ([`ControlLimit::Starts`]): they
    /// lock at most `max` jobs of the task in any `period_ms` of the database clock.
    /// Fairness ([`ControlLimit::Fair`]): they take the task's ready jobs round robin
    /// across the partition's tenants, weighted (docs/guide/fairness.md). Refused with
    /// [`Error::Control`], nothing stored, if it names no task, allows no job, its
    /// partition names no field or separator, or it is fairness without a partition or with
    /// a weight out of 1 to [`MAX_WEIGHT`](formica_core::flow::MAX_WEIGHT). Returns when it
    /// was set.
    ///
    /// A bound ([`ControlLimit::Waiting`], one per task) is kept by Formica's add path
    /// instead (`add_job`, `add_jobs`, the sqlx functions; not workflows, cron, nor
    /// `graphile_worker.add_job`): an add that would leave more than `max` of the task's jobs
    /// waiting waits up to `wait_ms` for room, then fails with [`Error::QueueFull`], nothing
    /// stored. Setting a bound below the jobs waiting removes none.
    pub async fn set_control(&self, control: &Control, by: Option<&str>) -> Result<DateTime<Utc>, Error> {
        let stored = check_control(control)?;
        let mut params = vec![param(control.task.clone(), Type::TEXT)];
        params.extend(stored.max.map(|max| param(max, Type::INT4)));
        params.extend(stored.duration_ms.map(|ms| param(ms, Type::INT4)));
        params.extend(partition_params(control.partition.as_ref()));
        params.extend(stored.weights.map(|weights| param(weights, Type::TEXT)));
        params.push(param(by.map(str::to_owned), Type::TEXT));
        let kind = control.kind();
        let client = self.pool().get().await?;
        let sql = sql::render(statements(kind).set, self.schema());
        let rows = client.query_typed(&sql, &typed(&params)).await?;
        let row =
            rows.first().ok_or_else(|| Error::Row(format!("the {} was not recorded", kind.as_str())))?;
        Ok(row.try_get(0)?)
    }

    /// Lift the `kind` control of `task` over `partition` (`None`: the whole task's; a
    /// task's fairness or bound whatever its partition). Returns whether there was one.
    pub async fn remove_control(
        &self,
        task: &str,
        kind: ControlKind,
        partition: Option<&Partition>,
    ) -> Result<bool, Error> {
        let mut params = vec![param(task.to_owned(), Type::TEXT)];
        params.extend(partition_params(partition));
        let client = self.pool().get().await?;
        let sql = sql::render(statements(kind).remove, self.schema());
        Ok(!client.query_typed(&sql, &typed(&params)).await?.is_empty())
    }

    /// The controls in force: the caps by task (the whole task's first), then the rate
    /// limits, then fairness, then the bounds. A partition or weights this Formica does not know (written by
    /// a newer one) read as none.
    pub async fn controls(&self) -> Result<Vec<ControlSet>, Error> {
        let client = self.pool().get().await?;
        let mut controls = Vec::new();
        for kind in [ControlKind::Cap, ControlKind::RateLimit, ControlKind::Fair, ControlKind::Bound] {
            let sql = sql::render(statements(kind).list, self.schema());
            for row in &client.query_typed(&sql, &[]).await? {
                // Each list: task, max (fairness: weights), (period_ms,) partition kind and
                // argument, by, at.
                let (limit, next) = match kind {
                    ControlKind::Cap => {
                        (ControlLimit::Running { max: crate::statements::stored(row.try_get(1)?) }, 2)
                    }
                    ControlKind::RateLimit => (
                        ControlLimit::Starts {
                            max: crate::statements::stored(row.try_get(1)?),
                            period_ms: crate::statements::stored(row.try_get(2)?),
                        },
                        3,
                    ),
                    ControlKind::Fair => match crate::statements::weights(row.try_get(1)?) {
                        Some(weights) => (ControlLimit::Fair { weights }, 2),
                        None => continue,
                    },
                    ControlKind::Bound => (
                        ControlLimit::Waiting {
                            max: crate::statements::stored(row.try_get(1)?),
                            wait_ms: crate::statements::stored(row.try_get(2)?),
                        },
                        3,
                    ),
                };
                let partition = crate::statements::partition_at(row, next)?.unwrap_or(None);
                let control = Control { task: row.try_get(0)?, partition, limit };
                controls.push(ControlSet {
                    control,
                    set_by: row.try_get(next + 2)?,
                    set_at: row.try_get(next + 3)?,
                });
            }
        }
        Ok(controls)
    }
}

/// The statements that set, lift and list the controls of one kind.
struct Statements {
    set: &'static str,
    remove: &'static str,
    list: &'static str,
}

fn statements(kind: ControlKind) -> Statements {
    match kind {
        ControlKind::Cap => {
            Statements { set: sql::flow::CAP, remove: sql::flow::UNCAP, list: sql::flow::CAPS }
        }
        ControlKind::RateLimit => {
            Statements { set: sql::flow::LIMIT, remove: sql::flow::UNLIMIT, list: sql::flow::LIMITS }
        }
        ControlKind::Fair => {
            Statements { set: sql::flow::FAIR, remove: sql::flow::UNFAIR, list: sql::flow::FAIRS }
        }
        ControlKind::Bound => {
            Statements { set: sql::flow::BOUND, remove: sql::flow::UNBOUND, list: sql::flow::BOUNDS_LIST }
        }
    }
}

/// A partition's kind and argument as two text parameters (nulls: none).
fn partition_params(partition: Option<&Partition>) -> [Param; 2] {
    [
        param(partition.map(|p| p.kind().to_owned()), Type::TEXT),
        param(partition.map(|p| p.argument().to_owned()), Type::TEXT),
    ]
}

/// A control's values as its table stores them.
struct Stored {
    /// A cap's, rate limit's or bound's max.
    max: Option<i32>,
    /// A rate limit's period or a bound's wait.
    duration_ms: Option<i32>,
    /// Fairness' weights, as JSON.
    weights: Option<String>,
}

/// Refuse a control that names no task, whose max or period allows no job or exceeds the
/// column (or whose wait exceeds it), whose partition names no field or separator, or
/// fairness without a partition or with a weight out of bounds; else its values as stored. Each message names the value
/// refused.
fn check_control(control: &Control) -> Result<Stored, Error> {
    let (kind, task) = (control.kind().as_str(), &control.task);
    if task.trim().is_empty() {
        return Err(Error::Control(format!("a {kind} needs a task identifier, not {task:?}")));
    }
    let column = |name: &str, value: u32| {
        i32::try_from(value).ok().filter(|n| *n > 0).ok_or_else(|| {
            Error::Control(format!("{name} {value}: the {kind} of {task:?} takes 1 to {}", i32::MAX))
        })
    };
    if let Some(partition) = control.partition.as_ref().filter(|p| p.argument().is_empty()) {
        let needs = match partition {
            Partition::Field(_) => "payload field",
            Partition::KeyPrefix(_) => "separator",
        };
        return Err(Error::Control(format!(
            "the {kind} of {task:?} per {} needs its {needs}, not \"\"",
            partition.kind()
        )));
    }
    match &control.limit {
        ControlLimit::Running { max } => {
            Ok(Stored { max: Some(column("max", *max)?), duration_ms: None, weights: None })
        }
        ControlLimit::Starts { max, period_ms } => Ok(Stored {
            max: Some(column("max", *max)?),
            duration_ms: Some(column("period_ms", *period_ms)?),
            weights: None,
        }),
        ControlLimit::Waiting { max, wait_ms } => Ok(Stored {
            max: Some(column("max", *max)?),
            duration_ms: Some(i32::try_from(*wait_ms).map_err(|_| {
                Error::Control(format!("wait_ms {wait_ms}: the {kind} of {task:?} takes 0 to {}", i32::MAX))
            })?),
            weights: None,
        }),
        ControlLimit::Fair { weights } => {
            if control.partition.is_none() {
                return Err(Error::Control(format!(
                    "the fairness of {task:?} needs a partition (a payload field or a key prefix) to tell its tenants apart"
                )));
            }
            if let Some((tenant, weight)) = weights.iter().find(|(_, w)| !(1..=MAX_WEIGHT).contains(*w)) {
                return Err(Error::Control(format!(
                    "weight {weight} of tenant {tenant:?}: the fairness of {task:?} takes 1 to {MAX_WEIGHT}"
                )));
            }
            let json = serde_json::to_string(weights).map_err(|e| Error::Control(e.to_string()))?;
            Ok(Stored { max: None, duration_ms: None, weights: Some(json) })
        }
    }
}
