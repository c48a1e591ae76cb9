//! The pruner's pass: its parameters, for the worker's [`Statement::PruneHistory`] (each
//! worker writing history sends one at start and every
//! [`HistoryOptions::prune_every`](super::HistoryOptions::prune_every), as the core's chores
//! schedule them) and for [`WorkerUtils::prune_history`]. Passes never
//! overlap across workers (an advisory lock).

use super::Retention;
use crate::error::Error;
use crate::params::{param, Param};
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use formica_core::worker::{self as core, QueryResult, Statement};
use std::time::Duration;
use tokio_postgres::types::Type;

/// Rows the pruner deletes at most from a default partition each pass and outcome (the
/// rows of days that had no partition yet: few, unless the pruner did not run for days).
const BATCH: i32 = 10_000;
/// The longest a pass's DDL waits for its lock: completions queue behind it meanwhile.
const LOCK_WAIT: &str = "100ms";

/// The shortest time between passes, whatever `prune_every` says (a pass is cheap, but not
/// free: a loop of them would hold the advisory lock and do DDL without pause).
pub(crate) const MIN_PRUNE_EVERY: Duration = Duration::from_secs(1);

/// What a pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pruned {
    /// Day partitions dropped.
    pub dropped: i32,
    /// Rows deleted from the default partitions.
    pub deleted: i64,
}

impl Retention {
    /// As the core's statement carries it.
    pub(crate) fn to_core(&self) -> core::Retention {
        let chrono =
            |d: Option<Duration>| d.map(|d| chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX));
        core::Retention {
            completed: chrono(self.completed),
            failed: chrono(self.failed),
            cancelled: chrono(self.cancelled),
        }
    }
}

/// The parameters of `prune_history` for a pass as of `at` (`None`: the database clock).
pub(crate) fn prune_params(retention: &core::Retention, at: Option<DateTime<Utc>>) -> Vec<Param> {
    let interval = |d: Option<chrono::Duration>| d.map(|d| format!("{} milliseconds", d.num_milliseconds()));
    vec![
        param(at, Type::TIMESTAMPTZ),
        param(interval(retention.completed), Type::TEXT),
        param(interval(retention.failed), Type::TEXT),
        param(interval(retention.cancelled), Type::TEXT),
        param(BATCH, Type::INT4),
        param(LOCK_WAIT, Type::TEXT),
    ]
}

impl WorkerUtils {
    /// One pass of the history pruner as of `at` (`None`: the database clock): create the day
    /// partitions ahead, drop the days past `retention`, delete older rows from the default
    /// partitions (see docs/guide/history.md). Workers writing history run it themselves.
    pub async fn prune_history(
        &self,
        retention: &Retention,
        at: Option<DateTime<Utc>>,
    ) -> Result<Pruned, Error> {
        let statement = Statement::PruneHistory { retention: retention.to_core(), at };
        match self.run_statement(statement).await? {
            QueryResult::Pruned { dropped, deleted } => Ok(Pruned { dropped, deleted }),
            other => Err(Error::Row(format!("prune_history answered {other:?}"))),
        }
    }
}
