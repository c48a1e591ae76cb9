//! Connections: opening one through the [`Runtime`], and a small pool of them.
//!
//! Every connection is made with `Config::connect_raw` over a socket the runtime opened,
//! so tokio-postgres never needs a tokio runtime and one client type serves every
//! adapter. TLS is not supported yet: connect over a trusted network or a Unix socket.

use crate::error::Error;
use crate::runtime::{Address, Runtime, Socket};
use futures::channel::mpsc;
use futures::future::{self, Either};
use futures::lock::Mutex;
use futures::StreamExt;
use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Instant;
use tokio_postgres::config::Host;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Config, Connection, NoTls, Statement};

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
/// connection (spawn it, or read its notifications).
pub async fn connect_raw(rt: &dyn Runtime, config: &Config) -> Result<(Client, RawConnection), Error> {
    let mut last = None;
    for address in addresses(config)? {
        let attempt = async {
            let socket = rt.connect(address.clone()).await.map_err(|e| Error::connect(&address, e))?;
            config.connect_raw(socket, NoTls).await.map_err(|e| Error::connect(&address, e))
        };
        let result = match config.get_connect_timeout() {
            None => attempt.await,
            Some(timeout) => {
                let deadline = rt.sleep_until(Instant::now() + *timeout);
                match future::select(Box::pin(attempt), deadline).await {
                    Either::Left((result, _)) => result,
                    Either::Right(((), _)) => Err(Error::connect(&address, "timed out")),
                }
            }
        };
        match result {
            Ok(pair) => return Ok(pair),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::Config("no address to connect to".into())))
}

/// Open a connection whose messages are handled in the background (notifications are
/// dropped): for ordinary statements.
pub async fn connect(rt: &dyn Runtime, config: &Config) -> Result<Client, Error> {
    let (client, connection) = connect_raw(rt, config).await?;
    rt.spawn(Box::pin(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "PostgreSQL connection closed with an error");
        }
    }));
    Ok(client)
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
        Pool(Arc::new(Shared { runtime, config, max_size, returns, slots: Mutex::new(slots) }))
    }

    /// A pool for the connection string `url` (a `postgres://` URL or libpq key=value
    /// settings).
    pub fn from_url(runtime: Arc<dyn Runtime>, url: &str, max_size: usize) -> Result<Self, Error> {
        let config: Config = url.parse().map_err(|e| Error::Config(format!("{e}")))?;
        Ok(Pool::new(runtime, config, max_size))
    }

    /// Check out a connection, waiting for one to be free.
    pub async fn get(&self) -> Result<PooledClient, Error> {
        let slot = {
            let mut slots = self.0.slots.lock().await;
            slots.next().await
        };
        let mut checkout = PooledClient { conn: None, pool: self.0.clone() };
        match slot.flatten() {
            Some(conn) if !conn.client.is_closed() => checkout.conn = Some(conn),
            // On error the slot goes back empty when `checkout` drops.
            _ => {
                let client = connect(self.0.runtime.as_ref(), &self.0.config).await?;
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
        let reusable = self.conn.take().filter(|c| !c.client.is_closed());
        let _ = self.pool.returns.unbounded_send(reusable);
    }
}
