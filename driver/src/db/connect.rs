//! Opening a connection: address resolution, TLS over the runtime's socket, the watch,
//! and the cancel sent to the server when a watched connection dies.

use crate::error::{describe, Error};
use crate::runtime::{Address, Runtime, Socket};
use crate::settings::ConnectionSettings;
use crate::tls::{Connector, Tls, TlsSocket};
use crate::watch::{Watch, Watched};
use futures::future::{self, Either};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::config::Host;
use tokio_postgres::error::{DbError, Severity, SqlState};
use tokio_postgres::{AsyncMessage, CancelToken, Client, Config, Connection};

/// How long opening a connection may take when the settings give no `connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a watched connection may owe a response while receiving nothing, when the
/// settings give no `tcp_user_timeout` (see [`Pool`](crate::Pool)).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(300);

/// The response timeout `config` asks for: `tcp_user_timeout` if set (`None` when it is
/// zero: no watch), else [`DEFAULT_RESPONSE_TIMEOUT`].
pub fn response_timeout(config: &Config) -> Option<Duration> {
    match config.get_tcp_user_timeout() {
        Some(timeout) if timeout.is_zero() => None,
        Some(timeout) => Some(*timeout),
        None => Some(DEFAULT_RESPONSE_TIMEOUT),
    }
}

/// A connection whose messages (notifications included) the caller must poll.
pub type RawConnection = Connection<Box<dyn Socket>, TlsSocket<Box<dyn Socket>>>;

/// The addresses `config` names, in the order libpq would try them.
pub fn addresses(config: &Config) -> Result<Vec<Address>, Error> {
    let ports = config.get_ports();
    let port = |i: usize| match ports {
        [] => 5432,
        [only] => *only,
        many => many.get(i).copied().unwrap_or(5432),
    };
    let hosts = config.get_hosts();
    if hosts.is_empty() {
        return Err(Error::Settings("no host given (set host= or a URL with a host)".into()));
    }
    Ok(hosts
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(name) => Address::Tcp { host: name.clone(), port: port(i) },
            #[cfg(unix)]
            Host::Unix(dir) => Address::Unix(dir.join(format!(".s.PGSQL.{}", port(i)))),
        })
        .collect())
}

/// Open a connection: the first address that answers wins. The caller polls the returned
/// connection (spawn it, or read its notifications). The connection is not watched (see
/// [`connect_raw_watched`]).
pub async fn connect_raw(
    rt: &dyn Runtime,
    settings: &ConnectionSettings,
) -> Result<(Client, RawConnection), Error> {
    open(rt, None, settings).await.map(|(client, connection, _)| (client, connection))
}

/// [`connect_raw`], and the connection is closed when it owes a response and receives
/// nothing for the settings' `tcp_user_timeout` (see [`Pool`](crate::Pool)).
pub async fn connect_raw_watched(
    rt: Arc<dyn Runtime>,
    settings: &ConnectionSettings,
) -> Result<(Client, RawConnection), Error> {
    let watch = response_timeout(settings.config()).map(|timeout| (rt.clone(), timeout));
    open(rt.as_ref(), watch, settings).await.map(|(client, connection, _)| (client, connection))
}

async fn open(
    rt: &dyn Runtime,
    watch: Watch,
    settings: &ConnectionSettings,
) -> Result<(Client, RawConnection, Address), Error> {
    let timeout = settings.config().get_connect_timeout().copied().unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    let mut last = None;
    for address in addresses(settings.config())? {
        let watch = watch.clone();
        let attempt = async {
            let socket = rt.connect(address.clone()).await.map_err(|e| Error::connect(&address, e))?;
            let socket: Box<dyn Socket> = match watch {
                Some(_) => Box::new(Watched::new(socket, watch.clone())),
                None => socket,
            };
            let (config, tls) = prepare(settings, &address, watch)?;
            match config.connect_raw(socket, tls).await {
                Ok((client, connection)) => Ok((client, connection, address.clone())),
                Err(e) => Err(Error::connect(&address, explain(&e, settings.tls(), &address))),
            }
        };
        let deadline = rt.sleep(timeout);
        let result = match future::select(Box::pin(attempt), deadline).await {
            Either::Left((result, _)) => result,
            Either::Right(((), _)) => Err(Error::connect(
                &address,
                format!(
                    "no answer within {timeout:?} (connect_timeout): is a PostgreSQL server listening there?"
                ),
            )),
        };
        match result {
            Ok(pair) => return Ok(pair),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Settings("no address to connect to".into())))
}

/// The settings and the TLS handshake for connecting to `address`.
fn prepare(
    settings: &ConnectionSettings,
    address: &Address,
    watch: Watch,
) -> Result<(Config, Connector), Error> {
    let mut config = settings.for_address(address);
    let host = match address {
        Address::Tcp { host, .. } => host.as_str(),
        // As libpq: no TLS over a Unix socket.
        Address::Unix(_) => {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
            "localhost"
        }
    };
    let tls = settings.tls().connector(host, watch).map_err(Error::Settings)?;
    Ok((config, tls))
}

/// What went wrong while connecting, in words: tokio-postgres's refusal when the server
/// offers no TLS names neither the cause nor the setting, and a server out of connections
/// (SQLSTATE 53300) says what to change.
fn explain(e: &tokio_postgres::Error, tls: &Tls, address: &Address) -> String {
    if let Some(text) = tls.explain(e, address) {
        return text;
    }
    let text = describe(e);
    if e.code() == Some(&SqlState::TOO_MANY_CONNECTIONS) {
        return format!(
            "{text}: the server has no connection left for this client (other clients hold them all, \
             up to max_connections or the role's or database's CONNECTION LIMIT); a running worker \
             waits and retries, a starting one stops. Raise the limit, give workers smaller pools \
             (max_pool_size, formica -m), or put a connection pooler in front"
        );
    }
    if text.contains("server does not support TLS") {
        let mode = tls.mode().word();
        return format!(
            "the server does not offer TLS, and sslmode={mode} demands it: turn on ssl in the server's \
             configuration, or connect with sslmode=prefer or disable"
        );
    }
    text
}

/// Open a connection whose messages are handled in the background (notifications are
/// dropped): for ordinary statements. Not watched (see [`connect_raw_watched`]).
pub async fn connect(rt: &dyn Runtime, settings: &ConnectionSettings) -> Result<Client, Error> {
    let (client, connection) = connect_raw(rt, settings).await?;
    spawn_connection(rt, connection);
    Ok(client)
}

/// [`connect`], watched; a connection that ends with an error has what it was running
/// cancelled on the server.
pub async fn connect_watched(rt: Arc<dyn Runtime>, settings: &ConnectionSettings) -> Result<Client, Error> {
    let watch = response_timeout(settings.config()).map(|timeout| (rt.clone(), timeout));
    let (client, connection, address) = open(rt.as_ref(), watch, settings).await?;
    let (token, settings, runtime) = (client.cancel_token(), settings.clone(), rt.clone());
    rt.spawn(Box::pin(async move {
        let Err(e) = drive(connection).await else { return };
        tracing::warn!(error = %describe(&e), "PostgreSQL connection closed with an error");
        cancel_on_server(runtime, &settings, address, token).await;
    }));
    Ok(client)
}

/// Ask the server at `address` to cancel what the connection of `token` runs, within the
/// connect timeout (best effort: a failure is only logged).
async fn cancel_on_server(
    rt: Arc<dyn Runtime>,
    settings: &ConnectionSettings,
    address: Address,
    token: CancelToken,
) {
    let timeout = settings.config().get_connect_timeout().copied().unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    let cancel = async {
        let socket = rt.connect(address.clone()).await.map_err(|e| Error::connect(&address, e))?;
        let (_, tls) = prepare(settings, &address, None)?;
        token.cancel_query_raw(socket, tls).await.map_err(Error::from)
    };
    let result = match future::select(Box::pin(cancel), rt.sleep(timeout)).await {
        Either::Left((result, _)) => result,
        Either::Right(((), _)) => {
            Err(Error::TimedOut(format!("no answer from {address} within {timeout:?}")))
        }
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "could not cancel the statement of a closed connection; it may run on");
    }
}

fn spawn_connection(rt: &dyn Runtime, connection: RawConnection) {
    rt.spawn(Box::pin(async move {
        if let Err(e) = drive(connection).await {
            tracing::warn!(error = %describe(&e), "PostgreSQL connection closed with an error");
        }
    }));
}

/// Poll `connection` to its end, logging the server's notices (see [`log_notice`]);
/// notifications are dropped (LISTEN has its own connection).
///
/// tokio-postgres, awaited as a future, logs each notice at INFO through the `log` crate,
/// so every `create schema if not exists` printed `NOTICE: schema ... already exists,
/// skipping` on the terminal (with the build machine's source path in JSON logs).
async fn drive(mut connection: RawConnection) -> Result<(), tokio_postgres::Error> {
    let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        if let AsyncMessage::Notice(notice) = message? {
            log_notice(&notice);
        }
    }
    Ok(())
}

/// A server notice, quiet unless asked for (`RUST_LOG=formica::notice=debug`): Formica's
/// statements are its own, so a NOTICE (`... already exists, skipping`) or INFO tells an
/// operator nothing; a WARNING may (a deprecation, a setting ignored) and is logged as one,
/// but for a table skipped because another held it (55P03), which the worker's vacuum asks
/// for (`skip_locked`). Only the server's words are logged, under the target `formica::notice`.
fn log_notice(notice: &DbError) {
    let (severity, code, message) = (notice.severity(), notice.code().code(), notice.message());
    match notice.parsed_severity() {
        Some(Severity::Warning) if code != "55P03" => {
            tracing::warn!(target: "formica::notice", severity, code, "PostgreSQL: {message}")
        }
        _ => tracing::debug!(target: "formica::notice", severity, code, "PostgreSQL: {message}"),
    }
}
