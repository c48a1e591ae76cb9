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
//!
//! So before a connection prepares anything, the pool looks whether a pooler sits between
//! it and the server: the server process that runs its statements (`pg_backend_pid()`) is
//! the one the server announced when the connection opened (its `BackendKeyData`) unless a
//! pooler answered the startup in the server's place (pgBouncer, in any mode, announces a
//! random key of its own). A pooler found, it warns once and sends every statement of the
//! pool unnamed from then on, before any statement was named: nothing of a job is touched
//! by a statement that could be refused or replaced. The same look also counts the prepared
//! statements the session holds already (a session of its own holds none).
//!
//! Should a refusal come all the same (a pooler that passes the server's key on), each
//! comes at Parse or Bind, so the statement did not run: [`PooledClient::query_params`]
//! takes the first as the sign, warns once, and sends the refused statement unnamed, and
//! every statement after it. A refusal that reaches the worker all the same is retryable
//! (`crate::statements::is_retryable`): the worker retries it, and never takes it for the
//! job's failure (it took such a refusal of `complete` for one, and ran the job again).
//!
//! What detection cannot prevent: behind a pooler that passes the server's key on, until the
//! first sign, a statement of another process with the same name and parameters of
//! compatible types runs silently in place of ours. Behind such a pooler, turn prepared
//! statements off (`--no-prepared-statements`, `WorkerOptions::prepared_statements(false)`),
//! which also saves the look. A pooler that keeps named statements working (pgBouncer
//! 1.21+ with `max_prepared_statements`, or session mode) is found all the same, and gets
//! unnamed statements, planned each time: safe, a little slower. A task that leaves a named
//! statement on its client (tokio-postgres keeps its lookups of custom types) makes the
//! count above see a session not its own: the pool then sends unnamed statements too.
//!
//! A change to a table a cached plan reads (a column added to `_private_jobs`) makes the
//! server refuse the statement at Bind with `cached plan must not change result type`
//! (0A000): the connection's statements are forgotten, and the statement is prepared and
//! sent once more.

use super::pool::PooledClient;
use crate::error::{describe, Error};
use crate::params::{typed, Param};
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};
use tokio_postgres::types::ToSql;
use tokio_postgres::{CancelToken, Row, Statement};

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
    /// prepares anything: a server process other than the one announced at startup, or
    /// prepared statements already there (see the module docs).
    async fn foreign_statements(&mut self) -> Result<Option<String>, Error> {
        let conn = self.conn();
        if conn.probed {
            return Ok(None);
        }
        let announced = announced_pid(&conn.client.cancel_token()).await;
        let sql = "select count(*), pg_backend_pid() from pg_catalog.pg_prepared_statements";
        let row = conn.client.query_typed_one(sql, &[]).await?;
        let (found, pid): (i64, i32) = (row.try_get(0)?, row.try_get(1)?);
        conn.probed = true;
        if let Some(announced) = announced.filter(|announced| *announced != pid) {
            return Ok(Some(format!(
                "the server process running this connection's statements (pid {pid}) is not the one \
                 announced when it opened ({announced}): a connection pooler answered in its place"
            )));
        }
        Ok((found > 0)
            .then(|| format!("a new connection's server session holds {found} prepared statements already")))
    }

    /// The pool's server sessions are shared with other clients, as `cause` shows: warn
    /// (once per pool) and send statements unnamed from now on.
    fn note_shared_sessions(&self, cause: &str) {
        if !self.sessions_shared().swap(true, Ordering::Relaxed) {
            tracing::warn!(
                cause,
                "the server's sessions may be shared with other clients (a connection pooler in \
                 transaction mode, such as pgBouncer), which breaks prepared statements: falling back \
                 to unnamed statements. Behind such a pooler, turn prepared statements off \
                 (--no-prepared-statements, WorkerOptions::prepared_statements(false))"
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
pub(crate) fn refused_by_pooler(e: &tokio_postgres::Error) -> bool {
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

/// The server process a connection announced at startup (its `BackendKeyData`), which
/// tokio-postgres keeps only in the connection's cancel token: read back from the cancel
/// request the token writes, here into memory (nothing is sent anywhere).
async fn announced_pid(token: &CancelToken) -> Option<i32> {
    let mut request = Recorder::default();
    token.cancel_query_raw(&mut request, Unencrypted).await.ok()?;
    // The cancel request ends what was written: length, code, process id, secret key.
    let at = request.written.len().checked_sub(8)?;
    let pid = request.written.get(at..at + 4)?.try_into().ok()?;
    Some(i32::from_be_bytes(pid))
}

/// A stream that keeps what is written to it and answers `S` (go ahead) to a TLS request.
#[derive(Default)]
struct Recorder {
    written: Vec<u8>,
}

impl AsyncRead for Recorder {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if buf.remaining() > 0 {
            buf.put_slice(b"S");
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Recorder {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.written.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A "TLS" that leaves the [`Recorder`] as it is, whatever the connection's `sslmode`.
struct Unencrypted;

impl<'a> TlsConnect<&'a mut Recorder> for Unencrypted {
    type Stream = &'a mut Recorder;
    type Error = io::Error;
    type Future = std::future::Ready<io::Result<&'a mut Recorder>>;

    fn connect(self, stream: &'a mut Recorder) -> Self::Future {
        std::future::ready(Ok(stream))
    }
}

impl TlsStream for &mut Recorder {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
