//! Named (prepared) statements on pooled connections, and what a connection pooler in
//! transaction mode (pgBouncer before 1.21, or without `max_prepared_statements`) does to
//! them.
//!
//! A named statement belongs to its server session. Such a pooler hands each transaction
//! of a client to whichever server session is free, so a statement prepared in one is
//! missing from the next (`prepared statement "s3" does not exist`, SQLSTATE 26000), and,
//! as tokio-postgres names statements `s0`, `s1`, ... in every process, another process's
//! statement of the same name may be there already (`... already exists`, 42P05; or
//! `bind message supplies 2 parameters, but prepared statement "s3" requires 1`, 08P01).
//! Each refusal comes at Parse or Bind, so the statement did not run.
//! [`PooledClient::query_params`] takes the first as the sign, warns once, and sends every
//! statement of the pool unnamed from then on, the refused one first. Before a connection
//! prepares anything it also looks whether its session holds prepared statements already (a
//! session of its own holds none), which catches most poolers before a name is used.
//!
//! Why it matters: the worker took such a refusal of `complete` for a job's failure, and
//! ran the job again.
//!
//! What detection cannot prevent: until the first sign, a statement of another process with
//! the same name and parameters of compatible types runs silently in place of ours (`return`
//! where `complete` was meant runs the job again). Behind such a pooler, turn prepared
//! statements off (`--no-prepared-statements`, `WorkerOptions::prepared_statements(false)`),
//! or let the pooler track them (pgBouncer 1.21+, `max_prepared_statements`). A task that
//! leaves a named statement on its client (tokio-postgres keeps its lookups of custom types)
//! makes the check above see a session not its own: the pool then sends unnamed statements,
//! as safe, planned each time.
//!
//! A change to a table a cached plan reads (a column added to `_private_jobs`) makes the
//! server refuse the statement at Bind with `cached plan must not change result type`
//! (0A000): the connection's statements are forgotten, and the statement is prepared and
//! sent once more.

use super::pool::PooledClient;
use crate::error::{describe, Error};
use crate::params::{typed, Param};
use std::sync::atomic::Ordering;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

impl PooledClient {
    /// `sql` prepared on this connection, once per connection. Its parameter types are
    /// inferred from the casts in the text.
    pub async fn prepared(&mut self, sql: &str) -> Result<Statement, Error> {
        Ok(self.cached(sql).await?)
    }

    async fn cached(&mut self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        let conn = self.conn();
        if let Some(statement) = conn.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = conn.client.prepare(sql).await?;
        conn.prepared.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }

    /// The rows of `sql` with `params`: prepared (see [`PooledClient::prepared`]) if
    /// `prepare` and the pool has not found its server sessions shared, else unnamed (see
    /// the module docs). With `begin` (statements beginning a transaction), in that
    /// transaction: see [`in_transaction`].
    pub(crate) async fn query_params(
        &mut self,
        sql: &str,
        params: &[Param],
        prepare: bool,
        begin: Option<&str>,
    ) -> Result<Vec<Row>, Error> {
        let mut replanned = false;
        while prepare && !self.sessions_shared().load(Ordering::Relaxed) {
            if let Some(cause) = self.foreign_statements().await? {
                self.note_shared_sessions(&cause);
                break;
            }
            let statement = match self.cached(sql).await {
                Ok(statement) => statement,
                Err(e) if refused_by_pooler(&e) => {
                    self.note_shared_sessions(&describe(&e));
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let values: Vec<&(dyn ToSql + Sync)> =
                params.iter().map(|(v, _)| v.as_ref() as &(dyn ToSql + Sync)).collect();
            match in_transaction(self, begin, self.query(&statement, &values)).await {
                Err(e) if refused_by_pooler(&e) => self.note_shared_sessions(&describe(&e)),
                Err(e) if plan_changed(&e) && !replanned => {
                    replanned = true;
                    self.conn().prepared.clear();
                }
                result => return Ok(result?),
            }
        }
        Ok(in_transaction(self, begin, self.query_typed(sql, &typed(params))).await?)
    }

    /// What shows that this connection's session is not its own, looked at once, before it
    /// prepares anything: a session of its own holds no prepared statements.
    async fn foreign_statements(&mut self) -> Result<Option<String>, Error> {
        let conn = self.conn();
        if conn.probed {
            return Ok(None);
        }
        let sql = "select count(*) from pg_catalog.pg_prepared_statements";
        let found: i64 = conn.client.query_typed_one(sql, &[]).await?.try_get(0)?;
        conn.probed = true;
        Ok((found > 0)
            .then(|| format!("a new connection's server session holds {found} prepared statements already")))
    }

    /// The pool's server sessions are shared with other clients, as `cause` shows: warn
    /// (once per pool) and send statements unnamed from now on.
    fn note_shared_sessions(&self, cause: &str) {
        if !self.sessions_shared().swap(true, Ordering::Relaxed) {
            tracing::warn!(
                cause,
                "the server's sessions are shared with other clients (a connection pooler in transaction \
                 mode, such as pgBouncer), which breaks prepared statements: falling back to unnamed \
                 statements. Turn prepared statements off behind such a pooler \
                 (--no-prepared-statements, WorkerOptions::prepared_statements(false)): until this was \
                 noticed, another client's statement of the same name could have run in place of ours"
            );
        }
    }
}

/// `query` between `begin` (statements beginning a transaction) and a commit, all sent at
/// once: one round trip, and the transaction ends on the server even if this future is
/// dropped once polled (a failed statement makes the commit a rollback).
async fn in_transaction<T>(
    client: &tokio_postgres::Client,
    begin: Option<&str>,
    query: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, tokio_postgres::Error> {
    let Some(begin) = begin else { return query.await };
    // Polled in this order, so sent in this order.
    let (begun, result, ended) =
        futures::join!(client.batch_execute(begin), query, client.batch_execute("commit"));
    begun?;
    let result = result?;
    ended?;
    Ok(result)
}

/// Whether `e` is a refusal of a named statement that a pooler sharing server sessions
/// causes. Each comes at Parse or Bind: the statement did not run.
fn refused_by_pooler(e: &tokio_postgres::Error) -> bool {
    let Some(db) = e.as_db_error() else { return false };
    let code = db.code();
    // `prepared statement "s3" does not exist` / `... already exists`.
    *code == SqlState::INVALID_SQL_STATEMENT_NAME
        || *code == SqlState::DUPLICATE_PSTATEMENT
        // `bind message supplies 2 parameters, but prepared statement "s3" requires 1`, or
        // has as many result formats as another statement has columns.
        || (*code == SqlState::PROTOCOL_VIOLATION && db.message().starts_with("bind message"))
        // A parameter sent in binary for another statement's type.
        || (*code == SqlState::INVALID_BINARY_REPRESENTATION && db.message().contains("bind parameter"))
}

/// Whether `e` is the refusal, at Bind, of a cached plan whose tables changed their rows'
/// shape since it was prepared: the statement did not run.
fn plan_changed(e: &tokio_postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        *db.code() == SqlState::FEATURE_NOT_SUPPORTED
            && db.message() == "cached plan must not change result type"
    })
}
