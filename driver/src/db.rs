//! Connections: opening one through the [`Runtime`], and a small pool of them.
//!
//! Every connection is made with `Config::connect_raw` over a socket the runtime opened,
//! so tokio-postgres never needs a tokio runtime and one client type serves every
//! adapter. TLS is not supported yet: connect over a trusted network or a Unix socket.
//!
//! Two limits keep a broken network from leaving a worker silently idle:
//!
//! - opening a connection gives up after `connect_timeout` (from the connection settings,
//!   else [`DEFAULT_CONNECT_TIMEOUT`]), so a server that accepts and never answers is an
//!   error, not a hang;
//! - the connections of a [`Pool`] and the worker's LISTEN connection are *watched*: one
//!   that owes a response (a statement was sent, its `ReadyForQuery` has not come) and has
//!   received nothing for the response timeout is closed, so the statement fails with an
//!   error the worker retries on a fresh connection. TCP keepalives cannot do this: a
//!   proxy or a pooler that hangs still acknowledges TCP. The timeout is `tcp_user_timeout`
//!   of the connection settings (tokio-postgres reads it in seconds; `0` turns the watch
//!   off), else [`DEFAULT_RESPONSE_TIMEOUT`]; [`Pool::with_response_timeout`] sets it in
//!   code. A statement that legitimately runs longer than this without sending a row (a
//!   long report inside a task, through the worker's pool) needs a longer timeout. The
//!   statement given up on is also cancelled on the server (a cancel request on a new
//!   connection to the same address): a backend waiting on a lock does not notice its
//!   client is gone, and would otherwise go on waiting, holding its connection slot.

use crate::error::{describe, Error};
use crate::runtime::{Address, Runtime, Socket};
use futures::channel::mpsc;
use futures::future::{self, BoxFuture, Either};
use futures::lock::Mutex;
use futures::StreamExt;
use std::collections::HashMap;
use std::io;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::Host;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{CancelToken, Client, Config, Connection, NoTls, Statement};

/// How long opening a connection may take when the settings give no `connect_timeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a watched connection may owe a response while receiving nothing, when the
/// settings give no `tcp_user_timeout` (see the module docs).
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
pub type RawConnection = Connection<Box<dyn Socket>, NoTlsStream>;

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
        return Err(Error::Config("no host given (set host= or a URL with a host)".into()));
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
pub async fn connect_raw(rt: &dyn Runtime, config: &Config) -> Result<(Client, RawConnection), Error> {
    open(rt, None, config).await
}

/// [`connect_raw`], and the connection is closed when it owes a response and receives
/// nothing for [`response_timeout`]`(config)` (see the module docs).
pub async fn connect_raw_watched(
    rt: Arc<dyn Runtime>,
    config: &Config,
) -> Result<(Client, RawConnection), Error> {
    let watch = response_timeout(config).map(|timeout| (rt.clone(), timeout));
    open(rt.as_ref(), watch, config).await
}

async fn open(
    rt: &dyn Runtime,
    watch: Option<(Arc<dyn Runtime>, Duration)>,
    config: &Config,
) -> Result<(Client, RawConnection), Error> {
    let timeout = config.get_connect_timeout().copied().unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    let mut last = None;
    for address in addresses(config)? {
        let watch = watch.clone();
        let attempt = async {
            let socket = rt.connect(address.clone()).await.map_err(|e| Error::connect(&address, e))?;
            let cancel = Arc::new(OnceLock::new());
            let socket = match watch {
                Some((runtime, timeout)) => {
                    let target = CancelTarget { address: address.clone(), token: cancel.clone() };
                    Box::new(Watched::new(socket, runtime, timeout, target)) as Box<dyn Socket>
                }
                None => socket,
            };
            let (client, connection) = config
                .connect_raw(socket, NoTls)
                .await
                .map_err(|e| Error::connect(&address, describe(&e)))?;
            let _ = cancel.set(client.cancel_token());
            Ok((client, connection))
        };
        let deadline = rt.sleep_until(Instant::now() + timeout);
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
    Err(last.unwrap_or_else(|| Error::Config("no address to connect to".into())))
}

/// Open a connection whose messages are handled in the background (notifications are
/// dropped): for ordinary statements. Not watched (see [`connect_raw_watched`]).
pub async fn connect(rt: &dyn Runtime, config: &Config) -> Result<Client, Error> {
    let (client, connection) = connect_raw(rt, config).await?;
    spawn_connection(rt, connection);
    Ok(client)
}

/// [`connect`], watched.
pub async fn connect_watched(rt: Arc<dyn Runtime>, config: &Config) -> Result<Client, Error> {
    let (client, connection) = connect_raw_watched(rt.clone(), config).await?;
    spawn_connection(rt.as_ref(), connection);
    Ok(client)
}

fn spawn_connection(rt: &dyn Runtime, connection: RawConnection) {
    rt.spawn(Box::pin(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %describe(&e), "PostgreSQL connection closed with an error");
        }
    }));
}

/// A socket that fails its reads once the connection has owed a response for the timeout
/// with nothing received (and nothing sent) meanwhile. It follows the protocol's message
/// framing in both directions: each request that ends in `ReadyForQuery` (the startup
/// message, `Query`, `Sync`, `FunctionCall`) is owed until that `ReadyForQuery` arrives.
/// An idle connection (a LISTEN connection between notifications) owes nothing and is
/// never timed out.
struct Watched {
    inner: Box<dyn Socket>,
    runtime: Arc<dyn Runtime>,
    timeout: Duration,
    sent: Framing,
    received: Framing,
    /// Requests whose `ReadyForQuery` has not arrived.
    owed: u64,
    /// The last byte sent or received.
    last_activity: Instant,
    /// A wake-up at the given instant, polled with the connection's waker.
    alarm: Option<(Instant, BoxFuture<'static, ()>)>,
    expired: bool,
    cancel: CancelTarget,
}

/// Where to cancel a watched connection's statement: its server, and its cancel key (set
/// once the connection is open).
struct CancelTarget {
    address: Address,
    token: Arc<OnceLock<CancelToken>>,
}

/// Follows message boundaries in one direction of the protocol.
struct Framing {
    /// The next message is the untagged startup message.
    startup: bool,
    header: [u8; 5],
    filled: usize,
    /// Body bytes of the current message still to pass.
    skip: usize,
}

impl Framing {
    fn new(startup: bool) -> Self {
        Framing { startup, header: [0; 5], filled: 0, skip: 0 }
    }

    /// Pass `data`, calling `on_message` with the tag of each message that begins in it
    /// (`0` for the startup message).
    fn feed(&mut self, mut data: &[u8], mut on_message: impl FnMut(u8)) {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(data.len());
                self.skip -= n;
                data = &data[n..];
                continue;
            }
            let header_len = if self.startup { 4 } else { 5 };
            let n = (header_len - self.filled).min(data.len());
            self.header[self.filled..self.filled + n].copy_from_slice(&data[..n]);
            self.filled += n;
            data = &data[n..];
            if self.filled == header_len {
                let (tag, len) = if self.startup {
                    (0, [self.header[0], self.header[1], self.header[2], self.header[3]])
                } else {
                    (self.header[0], [self.header[1], self.header[2], self.header[3], self.header[4]])
                };
                self.skip = (u32::from_be_bytes(len) as usize).saturating_sub(4);
                self.filled = 0;
                self.startup = false;
                on_message(tag);
            }
        }
    }
}

impl Watched {
    fn new(
        inner: Box<dyn Socket>,
        runtime: Arc<dyn Runtime>,
        timeout: Duration,
        cancel: CancelTarget,
    ) -> Self {
        Watched {
            inner,
            runtime,
            timeout,
            sent: Framing::new(true),
            received: Framing::new(false),
            owed: 0,
            last_activity: Instant::now(),
            alarm: None,
            expired: false,
            cancel,
        }
    }

    /// Ask the server, in the background, to cancel what this connection is running. The
    /// connection is being closed, so nothing else of ours can be running on it.
    fn cancel_on_server(&self) {
        let Some(token) = self.cancel.token.get().cloned() else {
            return; // Still opening: no statement of ours runs yet.
        };
        let (runtime, address) = (self.runtime.clone(), self.cancel.address.clone());
        let deadline = Instant::now() + self.timeout;
        let cancel = async move {
            let socket = runtime.connect(address.clone()).await?;
            token.cancel_query_raw(socket, NoTls).await.map_err(io::Error::other)
        };
        let runtime = self.runtime.clone();
        self.runtime.spawn(Box::pin(async move {
            let result = match future::select(Box::pin(cancel), runtime.sleep_until(deadline)).await {
                Either::Left((result, _)) => result,
                Either::Right(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "no answer")),
            };
            if let Err(e) = result {
                tracing::warn!(error = %e, "could not cancel a statement given up on; it may run on");
            }
        }));
    }

    /// `Ready` with the error once the connection has owed a response for too long;
    /// otherwise make sure `cx` is woken when that could happen.
    fn watch(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        loop {
            if self.owed == 0 && !self.expired {
                self.alarm = None;
                return Poll::Pending;
            }
            let deadline = self.last_activity + self.timeout;
            if self.expired || Instant::now() >= deadline {
                if !self.expired {
                    self.cancel_on_server();
                }
                self.expired = true;
                self.alarm = None;
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no response from PostgreSQL for {:?} (the response timeout, tcp_user_timeout): \
                         the connection is taken as dead",
                        self.timeout
                    ),
                ));
            }
            // Activity only moves the deadline later: an alarm set for an earlier one rings
            // early, and is set again here.
            let alarm = match &mut self.alarm {
                Some((at, alarm)) if *at <= deadline => alarm,
                _ => &mut self.alarm.insert((deadline, self.runtime.sleep_until(deadline))).1,
            };
            match alarm.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(()) => self.alarm = None,
            }
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the connection timed out")));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let data = &buf.filled()[before..];
                if !data.is_empty() {
                    this.last_activity = Instant::now();
                    let owed = &mut this.owed;
                    this.received.feed(data, |tag| {
                        if tag == b'Z' {
                            *owed = owed.saturating_sub(1);
                        }
                    });
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.watch(cx).map(Err),
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &result {
            if *n > 0 {
                this.last_activity = Instant::now();
                let owed = &mut this.owed;
                this.sent.feed(&buf[..*n], |tag| {
                    if matches!(tag, 0 | b'Q' | b'S' | b'F') {
                        *owed += 1;
                    }
                });
                // The connection may wait on this write's waker alone: arm the alarm with it.
                let _ = this.watch(cx);
            }
        }
        result
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A pool of at most `max_size` connections, opened lazily and reused. A connection found
/// closed is replaced on the next checkout, so a server restart heals by itself.
#[derive(Clone)]
pub struct Pool(Arc<Shared>);

struct Shared {
    runtime: Arc<dyn Runtime>,
    config: Config,
    max_size: usize,
    // One entry per connection allowed: `Some` an idle connection, `None` room to open one.
    // Waiting on the receiver is waiting for a free slot, in arrival order.
    returns: mpsc::UnboundedSender<Option<Conn>>,
    slots: Mutex<mpsc::UnboundedReceiver<Option<Conn>>>,
    /// Connections checked out, and callers waiting for one (for [`Pool::stats`]).
    in_use: AtomicUsize,
    waiting: AtomicUsize,
}

/// How busy a [`Pool`] is, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Connections checked out now.
    pub in_use: usize,
    /// Callers waiting for a free connection.
    pub waiting: usize,
    /// The most connections the pool opens.
    pub max_size: usize,
}

/// A connection and the statements prepared on it (prepared statements belong to their
/// session, so the cache lives with the connection).
struct Conn {
    client: Client,
    prepared: HashMap<String, Statement>,
}

impl Pool {
    /// A pool of up to `max_size` (at least 1) connections made from `config`.
    pub fn new(runtime: Arc<dyn Runtime>, config: Config, max_size: usize) -> Self {
        let max_size = max_size.max(1);
        let (returns, slots) = mpsc::unbounded();
        for _ in 0..max_size {
            // The receiver lives in `Shared` beside the sender, so this cannot fail.
            let _ = returns.unbounded_send(None);
        }
        let (in_use, waiting) = (AtomicUsize::new(0), AtomicUsize::new(0));
        Pool(Arc::new(Shared {
            runtime,
            config,
            max_size,
            returns,
            slots: Mutex::new(slots),
            in_use,
            waiting,
        }))
    }

    /// A pool for the connection string `url` (a `postgres://` URL or libpq key=value
    /// settings).
    pub fn from_url(runtime: Arc<dyn Runtime>, url: &str, max_size: usize) -> Result<Self, Error> {
        let config: Config = url.parse().map_err(|e| Error::Config(format!("{e}")))?;
        Ok(Pool::new(runtime, config, max_size))
    }

    /// The same pool with connections watched for `timeout` (`None`: not watched): a
    /// connection that owes a response and receives nothing for that long is closed (see
    /// the module docs). It is kept in the settings as `tcp_user_timeout`, so the worker's
    /// LISTEN connection, made from [`Pool::config`], follows it too. Call it before the
    /// pool is used: connections already open keep their watch.
    pub fn with_response_timeout(self, timeout: Option<Duration>) -> Self {
        let mut config = self.0.config.clone();
        config.tcp_user_timeout(timeout.unwrap_or(Duration::ZERO));
        Pool::new(self.0.runtime.clone(), config, self.0.max_size)
    }

    /// Check out a connection, waiting for one to be free.
    pub async fn get(&self) -> Result<PooledClient, Error> {
        let slot = {
            let _waiting = Counted::new(&self.0.waiting);
            let mut slots = self.0.slots.lock().await;
            slots.next().await
        };
        self.0.in_use.fetch_add(1, Ordering::Relaxed);
        let mut checkout = PooledClient { conn: None, pool: self.0.clone() };
        match slot.flatten() {
            Some(conn) if !conn.client.is_closed() => checkout.conn = Some(conn),
            // On error the slot goes back empty when `checkout` drops.
            _ => {
                let client = connect_watched(self.0.runtime.clone(), &self.0.config).await?;
                checkout.conn = Some(Conn { client, prepared: HashMap::new() });
            }
        }
        Ok(checkout)
    }

    /// The runtime the pool connects with.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.0.runtime
    }

    /// The connection settings.
    pub fn config(&self) -> &Config {
        &self.0.config
    }

    /// The most connections the pool opens.
    pub fn max_size(&self) -> usize {
        self.0.max_size
    }

    /// Connections in use and callers waiting, now.
    pub fn stats(&self) -> PoolStats {
        let (in_use, waiting) =
            (self.0.in_use.load(Ordering::Relaxed), self.0.waiting.load(Ordering::Relaxed));
        PoolStats { in_use, waiting, max_size: self.0.max_size }
    }
}

/// One more in `counter` while it lives (also when the future holding it is dropped).
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Counted(counter)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection checked out of a [`Pool`]; it goes back when dropped.
pub struct PooledClient {
    // Set in `Pool::get` before the value is handed out, taken only in `drop`.
    conn: Option<Conn>,
    pool: Arc<Shared>,
}

impl PooledClient {
    fn conn(&mut self) -> &mut Conn {
        self.conn.as_mut().unwrap_or_else(|| unreachable!("pooled client used after drop"))
    }

    /// `sql` prepared on this connection, once per connection. Its parameter types are
    /// inferred from the casts in the text.
    pub async fn prepared(&mut self, sql: &str) -> Result<Statement, Error> {
        let conn = self.conn();
        if let Some(statement) = conn.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = conn.client.prepare(sql).await?;
        conn.prepared.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

impl Deref for PooledClient {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.conn.as_ref().unwrap_or_else(|| unreachable!("pooled client used after drop")).client
    }
}

impl std::ops::DerefMut for PooledClient {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.conn().client
    }
}

impl Drop for PooledClient {
    fn drop(&mut self) {
        self.pool.in_use.fetch_sub(1, Ordering::Relaxed);
        let reusable = self.conn.take().filter(|c| !c.client.is_closed());
        let _ = self.pool.returns.unbounded_send(reusable);
    }
}
