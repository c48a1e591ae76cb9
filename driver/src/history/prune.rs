//! The pruner: each worker writing history runs a pass at start and every
//! [`HistoryOptions::prune_every`]; passes never overlap across workers (an advisory lock).

use super::{HistoryOptions, Retention};
use crate::error::Error;
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use futures::future::{AbortHandle, Abortable, FutureExt};
use std::time::Duration;
use tokio_postgres::types::Type;

/// Rows the pruner deletes at most from a default partition each pass and outcome (the
/// rows of days that had no partition yet: few, unless the pruner did not run for days).
const BATCH: i32 = 10_000;
/// The longest a pass's DDL waits for its lock: completions queue behind it meanwhile.
const LOCK_WAIT: &str = "100ms";

/// The shortest time between passes, whatever `prune_every` says (a pass is cheap, but not
/// free: a loop of them would hold the advisory lock and do DDL without pause).
const MIN_PRUNE_EVERY: Duration = Duration::from_secs(1);

/// What a pass removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pruned {
    /// Day partitions dropped.
    pub dropped: i32,
    /// Rows deleted from the default partitions.
    pub deleted: i64,
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
        let interval = |d: Option<Duration>| d.map(|d| format!("{} milliseconds", d.as_millis()));
        let (completed, failed, cancelled) =
            (interval(retention.completed), interval(retention.failed), interval(retention.cancelled));
        let client = self.pool().get().await?;
        let sql = formica_sql::render(formica_sql::history::PRUNE, self.schema());
        let row = client
            .query_typed(
                &sql,
                &[
                    (&at, Type::TIMESTAMPTZ),
                    (&completed, Type::TEXT),
                    (&failed, Type::TEXT),
                    (&cancelled, Type::TEXT),
                    (&BATCH, Type::INT4),
                    (&LOCK_WAIT, Type::TEXT),
                ],
            )
            .await?;
        let row = row.first().ok_or_else(|| Error::Row("prune_history returned no row".into()))?;
        Ok(Pruned { dropped: row.try_get(0)?, deleted: row.try_get(1)? })
    }
}

/// Run the pruner of `utils` beside the worker until aborted.
pub(crate) fn spawn_pruner(utils: &WorkerUtils, options: &HistoryOptions) -> Option<AbortHandle> {
    if !options.enabled {
        return None;
    }
    let (handle, registration) = AbortHandle::new_pair();
    let (utils, options) = (utils.clone(), options.clone());
    let runtime = utils.pool().runtime().clone();
    let pruning = async move {
        loop {
            match utils.prune_history(&options.retention, None).await {
                Ok(pruned) => tracing::debug!(?pruned, "pruned the job history"),
                Err(e) => {
                    tracing::warn!(error = %e, "could not prune the job history; trying again next pass")
                }
            }
            utils.pool().runtime().sleep(options.prune_every.max(MIN_PRUNE_EVERY)).await;
        }
    };
    runtime.spawn(Box::pin(Abortable::new(pruning, registration).map(|_| ())));
    Some(handle)
}
