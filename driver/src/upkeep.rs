//! The upkeep of the jobs table by the workers: vacuuming it while they drain it
//! ([`WorkerUtils::vacuum_jobs`], when the core's `Vacuum` weighs it due), and rebuilding a
//! bloated index ([`WorkerUtils::reindex_bloated`], one pass of the opt-in maintenance chore
//! ([`WorkerOptions::reindex_bloated`](crate::WorkerOptions::reindex_bloated)) and a call an
//! operator may make by hand).
//!
//! A vacuum skips the table when another vacuum holds it (autovacuum's, or another
//! worker's), leaves index cleanup on (a drain's dead entries are what the fetches step
//! over, and PostgreSQL would leave them when they are few next to the table) and truncates
//! nothing (the truncation's exclusive lock would hold up every fetch and completion).
//!
//! A rebuild is bounded: it rebuilds at most one index (the most bloated past the
//! [`Thresholds`]' warning), with `REINDEX INDEX CONCURRENTLY`, which takes no lock that
//! stops the workers' fetches and completions, within [`REINDEX_TIMEOUT`]. One pass runs at
//! a time per schema: each holds a session advisory lock for its length, and a pass that
//! finds it taken does nothing. A rebuild that fails, times out or is killed leaves an
//! invalid copy (`<index>_ccnew`): the pass drops it when the rebuild fails, and the next
//! pass of that index drops what a killed one left.

use crate::inspect::{bloated_indexes, Thresholds};
use crate::utils::WorkerUtils;
use crate::Error;
use formica_sql as sql;
use std::time::Duration;
use tokio_postgres::types::Type;

/// The shortest time between a worker's passes, whatever the option says (a pass reads the
/// catalogs; a rebuild may take minutes).
pub(crate) const MIN_REINDEX_EVERY: Duration = Duration::from_secs(60);

/// The longest one rebuild may take before it is cancelled (its copy then dropped).
pub const REINDEX_TIMEOUT: Duration = Duration::from_secs(30 * 60);

impl WorkerUtils {
    /// Vacuum the jobs table, unless another vacuum holds it. Returns whether this role may:
    /// `false` (nothing done) when it does not own the table (or hold its owner's role).
    pub async fn vacuum_jobs(&self) -> Result<bool, Error> {
        let client = self.pool().get().await?;
        let owns = client.query_typed(sql::health::OWNS_JOBS, &[(&self.schema(), Type::TEXT)]).await?;
        if !owns.first().map(|row| row.try_get::<_, bool>("owns")).transpose()?.unwrap_or(false) {
            return Ok(false);
        }
        let table = format!("{}._private_jobs", sql::quote_ident(self.schema()));
        // Alone in its string: several statements make a transaction block, which a vacuum refuses.
        client
            .batch_execute(&format!("vacuum (skip_locked, index_cleanup on, truncate off) {table}"))
            .await?;
        Ok(true)
    }

    /// Rebuild the most bloated index of the jobs table, if one is past `thresholds`'
    /// warning (see `formica::inspect::health`'s `bloat` check), with `REINDEX INDEX
    /// CONCURRENTLY`. Returns the index rebuilt; `None` when none is bloated or another pass
    /// holds the schema's reindexing lock. Needs the owner of the table (or a role with
    /// `MAINTAIN`), and a session of its own: not behind a pooler in transaction mode.
    pub async fn reindex_bloated(&self, thresholds: &Thresholds) -> Result<Option<String>, Error> {
        let client = self.pool().get().await?;
        let lock = sql::render(sql::health::REINDEX_LOCK, self.schema());
        let held = client.query_typed(&lock, &[(&true, Type::BOOL)]).await?;
        if !held.first().map(|row| row.try_get::<_, bool>("held")).transpose()?.unwrap_or(false) {
            return Ok(None);
        }
        let rebuilt = self.rebuild_most_bloated(&client, thresholds).await;
        // Given back even when the pass failed; a connection that broke gave it back itself.
        let _ = client.query_typed(&lock, &[(&false, Type::BOOL)]).await;
        rebuilt
    }

    /// The rebuild of a pass that holds the lock, on its connection `client`.
    async fn rebuild_most_bloated(
        &self,
        client: &tokio_postgres::Client,
        thresholds: &Thresholds,
    ) -> Result<Option<String>, Error> {
        let Some(index) = bloated_indexes(self, thresholds).await?.into_iter().next() else {
            return Ok(None);
        };
        let name = format!("{}.{}", sql::quote_ident(self.schema()), sql::quote_ident(&index));
        // A rebuild killed part way (its worker gone) left its copy: drop it first.
        self.drop_leftovers(client, &index).await?;
        client.batch_execute(&format!("set statement_timeout = {}", REINDEX_TIMEOUT.as_millis())).await?;
        // Alone in its string: several statements would make a transaction block, which a
        // concurrent rebuild refuses.
        let done = client.batch_execute(&format!("reindex index concurrently {name}")).await;
        client.batch_execute("reset statement_timeout").await?;
        if let Err(e) = done {
            self.drop_leftovers(client, &index).await?;
            return Err(e.into());
        }
        tracing::info!(index = %name, "rebuilt a bloated index of the jobs table");
        Ok(Some(index))
    }

    /// Drop the invalid copies a failed rebuild of `index` left.
    async fn drop_leftovers(&self, client: &tokio_postgres::Client, index: &str) -> Result<(), Error> {
        let rows = client
            .query_typed(
                sql::health::REINDEX_LEFTOVERS,
                &[(&self.schema(), Type::TEXT), (&index, Type::TEXT)],
            )
            .await?;
        for row in rows {
            let leftover: String = row.try_get("name")?;
            let name = format!("{}.{}", sql::quote_ident(self.schema()), sql::quote_ident(&leftover));
            tracing::warn!(index = %name, "dropping what a failed rebuild left");
            client.batch_execute(&format!("drop index concurrently if exists {name}")).await?;
        }
        Ok(())
    }
}
