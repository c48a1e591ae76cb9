//! Running the worker's statements on the pool: each bound by [`bind`] from the worker's
//! [`Catalog`], a fetch begun in its turn, and which failures are worth trying again.

use super::{bind, Catalog, FlagsFn};
use crate::db::Pool;
use crate::error::Error;
use formica_core::worker::FetchRequest;
use formica_core::worker::{DbError, QueryResult, Statement};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What running the worker's statements needs: the pool, the catalog, whether statements
/// are prepared (named, cached per connection; unnamed after all once the pool finds a
/// pooler sharing server sessions, see `PooledClient::query_params`) or sent unnamed each
/// time (one round trip as well, and safe behind pgBouncer in transaction mode), and the
/// flags function; and the trace contexts of the jobs fetched, until they start.
pub(crate) struct Executor {
    pub(crate) pool: Pool,
    /// The worker's SQL, every form rendered (shared with the lease's keeper).
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) prepared: bool,
    pub(crate) flags_fn: Option<FlagsFn>,
    pub(crate) parents: crate::traces::Parents,
    /// With history on: the outputs its completions carry.
    pub(crate) outputs: Option<Arc<crate::history::Outputs>>,
    /// Set by the lease's keeper and the listener: another Formica worker is alive, so a
    /// fetch begins in one of two turns the workers share (`fetch_turn.sql`), lest they lock
    /// each other's jobs; alone, it begins with the plan settings only (`fetch_begin.sql`:
    /// what keeps a fetch fast when a burst follows a quiet spell). Why two turns:
    /// docs/performance.md, "Several worker processes: one fetch out, two turns".
    pub(crate) others_alive: Arc<AtomicBool>,
}

impl Executor {
    /// Run `statement` and describe how it went, failures included, as the core expects.
    pub(crate) async fn execute(&self, statement: Statement) -> QueryResult {
        answered(self.run(statement).await)
    }

    async fn run(&self, mut statement: Statement) -> Result<QueryResult, Error> {
        if let (Statement::GetJobs(FetchRequest { forbidden_flags, .. }), Some(flags_fn)) =
            (&mut statement, &self.flags_fn)
        {
            *forbidden_flags = flags_fn().await;
        }
        let fetch = matches!(statement, Statement::GetJobs { .. });
        // A fetch and a statement ending jobs each run in a transaction begun with their plan
        // settings (`fetch_begin.sql`, `ending_begin.sql`).
        let begin = match statement {
            Statement::GetJobs(_) => {
                Some(self.catalog.fetch_begin(self.others_alive.load(Ordering::Relaxed)))
            }
            Statement::CompleteJobs { .. } | Statement::FailJobs { .. } => {
                Some(self.catalog.ending_begin.as_str())
            }
            _ => None,
        };
        // With history on, a completion stores the outputs its jobs' handlers returned.
        let carried = self.outputs.as_ref().map(|outputs| outputs.carried(&statement)).unwrap_or_default();
        let bound = bind(&self.catalog, statement, &carried);
        let mut client = self.pool.get().await?;
        let rows = client.query_params(bound.sql, &bound.params, self.prepared, begin).await?;
        if let (Some(outputs), false) = (&self.outputs, carried.is_empty()) {
            outputs.forget(carried.iter().map(|(id, _)| *id));
        }
        if fetch {
            self.parents.remember(&rows);
        }
        bound.answer(&rows)
    }
}

/// `result` as the core takes it: a failure with whether it is worth trying again.
pub(crate) fn answered(result: Result<QueryResult, Error>) -> QueryResult {
    result
        .unwrap_or_else(|e| QueryResult::Err(DbError { retryable: is_retryable(&e), message: e.to_string() }))
}

/// Failures worth trying again: lost or hung connections, serialization failures,
/// deadlocks, a statement cancelled or timed out, a lock not granted in time, a server
/// starting up or shutting down, short of resources (connections, memory, disk), or read-only
/// (a failover not finished), or a named statement a pooler refused. A statement the server
/// rejects as wrong is not: the core then isolates the job it is about instead of retrying
/// it forever; so a success refused only for a while must not land there, or the job would
/// run again.
pub(crate) fn is_retryable(e: &Error) -> bool {
    // A pool exhausted by clients held elsewhere frees up when they are released.
    let Error::Db(db) = e else {
        return matches!(e, Error::Connect { .. } | Error::TimedOut(_) | Error::PoolExhausted(_));
    };
    // A named statement a pooler refused did not run, and the pool sends it unnamed next.
    if crate::db::refused_by_pooler(db) {
        return true;
    }
    db.code().is_none_or(|code| {
        let code = code.code();
        code.starts_with("08")
            || code.starts_with("57P")
            || code == "57014"
            || code == "40001"
            || code == "40P01"
            || code == "55P03"
            || code == "25006"
            || code.starts_with("53")
    })
}
