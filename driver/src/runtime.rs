//! What an async runtime must supply: sockets, timers, spawning and the clocks.
//!
//! The driver is written once against this trait; each adapter implements it in a few
//! lines. It is object safe so the driver holds an `Arc<dyn Runtime>` instead of growing a
//! type parameter everywhere. Sockets only need tokio's `AsyncRead`/`AsyncWrite` traits
//! (which tokio-postgres speaks), not tokio's runtime: an adapter for another runtime
//! wraps its streams in those traits.

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};

/// A connected byte stream to PostgreSQL.
pub trait Socket: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Socket for T {}

/// Where to reach a PostgreSQL server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A TCP host name or address and port.
    Tcp {
        /// Host name or IP address.
        host: String,
        /// Port.
        port: u16,
    },
    /// A Unix socket file (`<dir>/.s.PGSQL.<port>`).
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp { host, port } => write!(f, "{host}:{port}"),
            Address::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// An async runtime as the driver needs it.
pub trait Runtime: Send + Sync + 'static {
    /// Open a stream to `address`.
    fn connect(&self, address: Address) -> BoxFuture<'static, io::Result<Box<dyn Socket>>>;
    /// Run `task` in the background until it completes.
    fn spawn(&self, task: BoxFuture<'static, ()>);
    /// A future that completes at `deadline` of [`Runtime::monotonic`]'s clock (at once if
    /// it has passed).
    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()>;
    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.sleep_until(self.monotonic() + duration)
    }
    /// The wall clock, read only by the driver and passed to the core. Override it to run
    /// workers on a controlled clock.
    #[allow(clippy::disallowed_methods)] // The one place the driver reads the wall clock.
    fn now(&self) -> DateTime<Utc> {
        std::time::SystemTime::now().into()
    }
    /// A runtime on a new thread of its own named `name`, for what no task may hold up: a
    /// worker's loop, its connections and its LISTEN stream (`formica-io`), and the
    /// heartbeats of its lease (`formica-lease`). Tasks run on this runtime, where a handler
    /// may block its thread, or every thread, for as long as it likes: the worker goes on
    /// answering, and its lease holds. What the returned runtime spawns, connects and times
    /// is driven by that thread, whoever polls it; the thread ends once the returned runtime
    /// is dropped, with what still runs on it.
    ///
    /// `None` (the default): this runtime has no such thread, and the worker runs beside its
    /// tasks (a task that blocks every thread then stalls the worker and its lease).
    fn dedicated(&self, name: &'static str) -> Option<io::Result<Arc<dyn Runtime>>> {
        let _ = name;
        None
    }
    /// The monotonic clock behind every timer and timeout of the driver. Override it with
    /// the runtime's own. (A worker reads it on its own threads, where a paused tokio clock
    /// of the application's runtime does not reach.)
    #[allow(clippy::disallowed_methods)] // The one place the driver reads the monotonic clock.
    fn monotonic(&self) -> Instant {
        Instant::now()
    }
}
