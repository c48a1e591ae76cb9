//! The pool: checkouts, the reserve kept from tasks, waiters, and closing idle connections.

use super::connect::connect_watched;
use crate::error::Error;
use crate::runtime::Runtime;
use crate::settings::ConnectionSettings;
use futures::future::{self, Either};
use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::{Client, Config, Statement};

/// How long [`Pool::get`] waits for a free connection before failing with
/// [`Error::PoolExhausted`].
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection may sit unused in the pool before it is closed (as node-postgres,
/// graphile-worker's pool).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// A pool of at most `max_size` connections, opened when needed, reused most recently used
/// first, and closed after [`DEFAULT_IDLE_TIMEOUT`] unused, so an idle worker holds about one
/// connection besides its LISTEN connection. A connection found closed is replaced on the
/// next checkout, so a server restart heals by itself.
///
/// Two rules keep it from wedging:
///
/// - waiting for a connection gives up after [`DEFAULT_ACQUIRE_TIMEOUT`] with
///   [`Error::PoolExhausted`], which says who holds the connections and for how long;
/// - clients that tasks hold ([`Pool::get_for_task`], behind `JobContext::client`) never
///   take the last `reserved` connections (2 when `max_size` is 4 or more, else 1, else 0):
///   those stay for short statements, the worker's own and `add_job` from within a task,
///   so tasks that each hold a client and add jobs all finish.
///
/// The pool is Formica's own, not deadpool or bb8: both tie their timers and spawning to
/// tokio (or pick a runtime by feature flag), while the driver runs on whatever
/// [`Runtime`] the adapter supplies, and neither has the reserve above. The state is a
/// short critical section under one lock; waiters are served first come, first served.
///
/// Two limits keep a broken network from leaving a worker silently idle:
///
/// - opening a connection gives up after `connect_timeout` (from the connection settings,
///   else [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT)), so a server that accepts and never answers is an
///   error, not a hang;
/// - the connections of a pool and the worker's LISTEN connection are *watched*: one
///   that owes a response (a statement was sent, its `ReadyForQuery` has not come) and has
///   received nothing for the response timeout is closed, so the statement fails with an
///   error the worker retries on a fresh connection. TCP keepalives cannot do this: a
///   proxy or a pooler that hangs still acknowledges TCP. The timeout is `tcp_user_timeout`
///   of the connection settings (tokio-postgres reads it in seconds; `0` turns the watch
///   off), else [`DEFAULT_RESPONSE_TIMEOUT`](crate::DEFAULT_RESPONSE_TIMEOUT); [`Pool::response_timeout`] sets it in
///   code. A statement that legitimately runs longer than this without sending a row (a
///   long report inside a task, through the worker's pool) needs a longer timeout. The
///   watch itself is in the `watch` module; over TLS it watches inside the encryption. When
///   a pooled connection ends with an error (the watch gave up on it, say), whatever it was
///   running is also cancelled on the server (a cancel request on a new connection to the
///   same address): a backend waiting on a lock does not notice its client is gone, and
///   would otherwise go on waiting, holding its connection slot.
#[derive(Clone)]
pub struct Pool(Arc<PoolInner>);

struct PoolInner {
    runtime: Arc<dyn Runtime>,
    settings: ConnectionSettings,
    options: PoolOptions,
    state: std::sync::Mutex<State>,
    /// Set once the pool found its server sessions shared with other clients (a pooler in
    /// transaction mode, see the `named` module): statements go unnamed from then on.
    sessions_shared: AtomicBool,
}

#[derive(Clone, Copy)]
struct PoolOptions {
    max_size: usize,
    reserved: usize,
    acquire_timeout: Duration,
    idle_timeout: Option<Duration>,
}

#[derive(Default)]
struct State {
    /// Unused connections, the most recently used last.
    idle: Vec<(Conn, Instant)>,
    /// Connections open or being opened, checked out or idle.
    open: usize,
    /// Checkouts held by tasks.
    held_by_tasks: usize,
    /// Who holds each checkout, by checkout id.
    holders: std::collections::BTreeMap<u64, Holder>,
    next_id: u64,
    waiters: std::collections::VecDeque<Waiter>,
    /// Whether a task closing idle connections is running.
    reaping: bool,
}

struct Holder {
    what: String,
    since: Instant,
}

struct Waiter {
    for_task: bool,
    what: String,
    grant: futures::channel::oneshot::Sender<PooledClient>,
}

/// A connection and the statements prepared on it (prepared statements belong to their
/// session, so the cache lives with the connection).
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) prepared: HashMap<String, Statement>,
    /// Whether the session was checked for prepared statements of another client.
    pub(super) probed: bool,
}

/// The pool's numbers at one moment ([`Pool::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStatus {
    /// Connections open (or being opened): in use and idle.
    pub size: usize,
    /// Open connections nobody uses.
    pub idle: usize,
    /// Checkouts waiting for a connection.
    pub waiting: usize,
    /// Connections held by tasks.
    pub held_by_tasks: usize,
    /// The most connections the pool opens.
    pub max_size: usize,
}

impl State {
    /// A checkout for `what` if the rules allow one now: an idle connection, else room to
    /// open one (counted as open from here).
    fn try_grant(&mut self, pool: &Arc<PoolInner>, for_task: bool, what: &str) -> Option<PooledClient> {
        let options = pool.options;
        if for_task && self.held_by_tasks + options.reserved >= options.max_size {
            return None;
        }
        let conn = match self.idle.pop() {
            Some((conn, _)) => Some(conn),
            None if self.open < options.max_size => {
                self.open += 1;
                None
            }
            None => return None,
        };
        if for_task {
            self.held_by_tasks += 1;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.holders.insert(id, Holder { what: what.to_owned(), since: pool.runtime.monotonic() });
        Some(PooledClient { conn, pool: pool.clone(), id, for_task, armed: true })
    }

    /// Undo a grant that nobody took.
    fn ungrant(&mut self, client: &mut PooledClient) {
        client.armed = false;
        self.holders.remove(&client.id);
        if client.for_task {
            self.held_by_tasks -= 1;
        }
        match client.conn.take() {
            Some(conn) => self.idle.push((conn, client.pool.runtime.monotonic())),
            None => self.open -= 1,
        }
    }

    /// Hand what is free to the waiters, in arrival order.
    fn serve_waiters(&mut self, pool: &Arc<PoolInner>) {
        let mut i = 0;
        while i < self.waiters.len() {
            if self.waiters[i].grant.is_canceled() {
                self.waiters.remove(i);
                continue;
            }
            let (for_task, what) = (self.waiters[i].for_task, std::mem::take(&mut self.waiters[i].what));
            match self.try_grant(pool, for_task, &what) {
                Some(client) => {
                    let waiter = self.waiters.remove(i).unwrap_or_else(|| unreachable!("index checked"));
                    if let Err(mut client) = waiter.grant.send(client) {
                        self.ungrant(&mut client);
                    }
                }
                None => {
                    self.waiters[i].what = what;
                    i += 1;
                }
            }
        }
    }
}

impl Pool {
    /// A pool of up to `max_size` (at least 1) connections made with `settings` (a
    /// [`ConnectionSettings`], or a tokio-postgres [`Config`]).
    pub fn new(runtime: Arc<dyn Runtime>, settings: impl Into<ConnectionSettings>, max_size: usize) -> Self {
        let max_size = max_size.max(1);
        let reserved = match max_size {
            1 => 0,
            2 | 3 => 1,
            _ => 2,
        };
        let options = PoolOptions {
            max_size,
            reserved,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        };
        Pool::with_options(runtime, settings.into(), options)
    }

    fn with_options(runtime: Arc<dyn Runtime>, settings: ConnectionSettings, options: PoolOptions) -> Self {
        Pool(Arc::new(PoolInner {
            runtime,
            settings,
            options,
            state: Default::default(),
            sessions_shared: AtomicBool::new(false),
        }))
    }

    /// A pool for the connection string `url` (a `postgres://` URL or libpq key=value
    /// settings), completed from the `PG*` environment variables (see
    /// [`ConnectionSettings::parse`]).
    pub fn from_url(runtime: Arc<dyn Runtime>, url: &str, max_size: usize) -> Result<Self, Error> {
        Ok(Pool::new(runtime, ConnectionSettings::parse(url)?, max_size))
    }

    /// The same settings in a new pool with `change` applied to its options; for the
    /// `with_*` methods, called before the pool is used.
    fn rebuild(self, change: impl FnOnce(&mut ConnectionSettings, &mut PoolOptions)) -> Self {
        let mut settings = self.0.settings.clone();
        let mut options = self.0.options;
        change(&mut settings, &mut options);
        Pool::with_options(self.0.runtime.clone(), settings, options)
    }

    /// The same pool with connections watched for `timeout` (`None`: not watched): a
    /// connection that owes a response and receives nothing for that long is closed (see
    /// [`Pool`]). It is kept in the settings as `tcp_user_timeout`, so the worker's
    /// LISTEN connection, made from [`Pool::settings`], follows it too. Call it before the
    /// pool is used.
    pub fn response_timeout(self, timeout: Option<Duration>) -> Self {
        self.rebuild(|settings, _| {
            settings.config_mut().tcp_user_timeout(timeout.unwrap_or(Duration::ZERO));
        })
    }

    /// The same pool, waiting at most `timeout` for a free connection (default
    /// [`DEFAULT_ACQUIRE_TIMEOUT`]). Call it before the pool is used.
    pub fn acquire_timeout(self, timeout: Duration) -> Self {
        self.rebuild(|_, options| options.acquire_timeout = timeout)
    }

    /// The same pool, closing connections unused for `timeout` (`None`: never; default
    /// [`DEFAULT_IDLE_TIMEOUT`]). Call it before the pool is used.
    pub fn idle_timeout(self, timeout: Option<Duration>) -> Self {
        self.rebuild(|_, options| options.idle_timeout = timeout)
    }

    /// The same pool, keeping `reserved` connections (at most `max_size - 1`) out of the
    /// reach of clients held by tasks. Call it before the pool is used.
    pub fn reserved(self, reserved: usize) -> Self {
        self.rebuild(|_, options| options.reserved = reserved.min(options.max_size - 1))
    }

    /// Check out a connection, waiting up to the acquire timeout for one to be free. For
    /// statements and short transactions: a client held for long belongs in
    /// [`Pool::get_for_task`].
    pub async fn get(&self) -> Result<PooledClient, Error> {
        self.checkout(false, "a statement").await
    }

    /// Check out a connection that a task may hold for as long as it runs: it never takes
    /// the reserved connections (see the type's docs). `what` names the holder in
    /// [`Error::PoolExhausted`] (`"job 42"`).
    pub async fn get_for_task(&self, what: &str) -> Result<PooledClient, Error> {
        self.checkout(true, what).await
    }

    async fn checkout(&self, for_task: bool, what: &str) -> Result<PooledClient, Error> {
        let granted = {
            let mut state = self.lock();
            // Started here, in async context, not where a client is dropped (which may be
            // outside any runtime).
            if let Some(timeout) = self.0.options.idle_timeout {
                if !state.reaping {
                    state.reaping = true;
                    start_reaper(&self.0, timeout);
                }
            }
            match state.try_grant(&self.0, for_task, what) {
                Some(client) => Ok(client),
                None => {
                    let (grant, receiver) = futures::channel::oneshot::channel();
                    state.waiters.push_back(Waiter { for_task, what: what.to_owned(), grant });
                    Err(receiver)
                }
            }
        };
        let mut client = match granted {
            Ok(client) => client,
            Err(mut receiver) => {
                let deadline = self.0.runtime.sleep(self.0.options.acquire_timeout);
                match future::select(&mut receiver, deadline).await {
                    Either::Left((Ok(client), _)) => client,
                    // The pool dropped the waiter without an answer (it does not): as a timeout.
                    Either::Left((Err(_), _)) => return Err(self.exhausted(for_task, what)),
                    Either::Right(((), _)) => {
                        // A grant may have arrived just now: take it rather than lose it.
                        receiver.close();
                        match receiver.try_recv() {
                            Ok(Some(client)) => client,
                            _ => return Err(self.exhausted(for_task, what)),
                        }
                    }
                }
            }
        };
        let reusable = client.conn.as_ref().is_some_and(|conn| !conn.client.is_closed());
        if !reusable {
            // Closed or never opened: open one in its place. On error, dropping `client`
            // gives the room back.
            client.conn = None;
            let opened = connect_watched(self.0.runtime.clone(), &self.0.settings).await?;
            client.conn = Some(Conn { client: opened, prepared: HashMap::new(), probed: false });
        }
        Ok(client)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent between statements, so a panic elsewhere does not
        // spoil it.
        self.0.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The error for a checkout that waited in vain: who holds the connections.
    fn exhausted(&self, for_task: bool, what: &str) -> Error {
        let state = self.lock();
        let options = self.0.options;
        let now = self.0.runtime.monotonic();
        let mut holders: Vec<String> = state
            .holders
            .values()
            .map(|h| format!("{} for {:.1}s", h.what, now.duration_since(h.since).as_secs_f64()))
            .collect();
        holders.sort();
        let limit = if for_task {
            format!(
                "tasks may hold {} of its {} connections ({} reserved for short statements)",
                options.max_size - options.reserved,
                options.max_size,
                options.reserved
            )
        } else {
            format!("all {} connections are in use", options.max_size)
        };
        Error::PoolExhausted(format!(
            "{what} waited {:?} for a connection: {limit}; held by: {}. Raise the pool size \
             (max_pool_size) or release clients sooner",
            options.acquire_timeout,
            if holders.is_empty() {
                "nobody (connections are being opened)".to_owned()
            } else {
                holders.join(", ")
            }
        ))
    }

    /// The pool's numbers now.
    pub fn status(&self) -> PoolStatus {
        let state = self.lock();
        PoolStatus {
            size: state.open,
            idle: state.idle.len(),
            waiting: state.waiters.iter().filter(|w| !w.grant.is_canceled()).count(),
            held_by_tasks: state.held_by_tasks,
            max_size: self.0.options.max_size,
        }
    }

    /// The runtime the pool connects with.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.0.runtime
    }

    /// tokio-postgres's part of the connection settings.
    pub fn config(&self) -> &Config {
        self.0.settings.config()
    }

    /// The connection settings.
    pub fn settings(&self) -> &ConnectionSettings {
        &self.0.settings
    }

    /// The most connections the pool opens.
    pub fn max_size(&self) -> usize {
        self.0.options.max_size
    }
}

/// Close idle connections as they pass the idle timeout, while any connection is open.
fn start_reaper(pool: &Arc<PoolInner>, timeout: Duration) {
    let weak = Arc::downgrade(pool);
    let runtime = pool.runtime.clone();
    pool.runtime.spawn(Box::pin(async move {
        loop {
            runtime.sleep(timeout / 4).await;
            let Some(pool) = weak.upgrade() else { return };
            let closed: Vec<(Conn, Instant)> = {
                let mut state = pool.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                // The oldest come first.
                let now = runtime.monotonic();
                let stale = state
                    .idle
                    .iter()
                    .take_while(|(_, since)| now.saturating_duration_since(*since) >= timeout)
                    .count();
                let closed: Vec<_> = state.idle.drain(..stale).collect();
                state.open -= closed.len();
                if state.open == 0 {
                    // The next checkout starts it again.
                    state.reaping = false;
                    drop(state);
                    drop(closed);
                    return;
                }
                closed
            };
            // Dropping a client ends its session (outside the lock).
            drop(closed);
        }
    }));
}

/// A connection checked out of a [`Pool`]; it goes back when dropped.
pub struct PooledClient {
    // Set before the value is handed out (`None` only while the pool opens it).
    conn: Option<Conn>,
    pool: Arc<PoolInner>,
    id: u64,
    for_task: bool,
    /// Whether dropping it gives it back (a grant nobody took is undone by the pool).
    armed: bool,
}

impl PooledClient {
    pub(super) fn conn(&mut self) -> &mut Conn {
        self.conn.as_mut().unwrap_or_else(|| unreachable!("pooled client used before it was opened"))
    }

    /// Set once the pool found its server sessions shared with other clients (see
    /// [`PooledClient::query_params`]).
    pub(super) fn sessions_shared(&self) -> &AtomicBool {
        &self.pool.sessions_shared
    }
}

impl Deref for PooledClient {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.conn.as_ref().unwrap_or_else(|| unreachable!("pooled client used before it was opened")).client
    }
}

impl std::ops::DerefMut for PooledClient {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.conn().client
    }
}

impl Drop for PooledClient {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let pool = self.pool.clone();
        let reusable = self.conn.take().filter(|c| !c.client.is_closed());
        let mut state = pool.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        state.holders.remove(&self.id);
        if self.for_task {
            state.held_by_tasks -= 1;
        }
        match reusable {
            Some(conn) => state.idle.push((conn, pool.runtime.monotonic())),
            None => state.open -= 1,
        }
        state.serve_waiters(&pool);
    }
}
