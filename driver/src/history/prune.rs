//! The history pruner's pass by hand ([`WorkerUtils::prune_history`]), and what a worker's
//! own passes keep: each worker writing history sends a [`Statement::PruneHistory`] within a
//! second of its start and every
//! [`HistoryOptions::prune_every`](super::HistoryOptions::prune_every), as the core's chores
//! schedule them (its SQL and parameters: `crate::statements`). Passes never overlap across
//! workers (an advisory lock).

use super::Retention;
use crate::error::Error;
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use formica_core::worker::{self as core, QueryResult, Statement};
use std::time::Duration;

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
        match crate::statements::bind(statement).run_unnamed(self.pool(), self.schema()).await? {
            QueryResult::Pruned { dropped, deleted } => Ok(Pruned { dropped, deleted }),
            other => Err(Error::Row(format!("prune_history answered {other:?}"))),
        }
    }
}
