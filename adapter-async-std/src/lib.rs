//! formica-async-std: Formica on the async-std runtime.
//!
//! Supplies the driver's [`Runtime`] with async-std's sockets, timers and tasks, and
//! re-exports Formica's public API so an application depends on this crate alone: run
//! workers that execute jobs from a `graphile_worker` schema in PostgreSQL, and add jobs.
//! No tokio runtime is started anywhere: tokio-postgres only needs tokio's I/O traits,
//! which `tokio_util::compat` puts on async-std's streams.
//!
//! ```no_run
//! use formica_async_std::{JobContext, JobSpec, Task, TaskHandler, TaskResult, WorkerOptions};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct SendWelcome {
//!     to: String,
//! }
//! impl Task for SendWelcome {
//!     const IDENTIFIER: &'static str = "send_welcome";
//! }
//! impl TaskHandler for SendWelcome {
//!     async fn run(self, ctx: JobContext) -> TaskResult {
//!         println!("job {}: welcome mail to {}", ctx.job().id, self.to);
//!         Ok(()) // an error fails this attempt; it is retried with backoff
//!     }
//! }
//!
//! fn main() -> Result<(), formica_async_std::Error> {
//!     async_std::task::block_on(async {
//!         let worker = WorkerOptions::default()
//!             .database_url("postgres://localhost/app")
//!             .define_job::<SendWelcome>()
//!             .init() // connects and installs the schema
//!             .await?;
//!         let mail = SendWelcome { to: "ada@example.com".into() };
//!         worker.create_utils().add_job(&mail, JobSpec::default()).await?;
//!         worker.run_once().await // until no job is runnable; run() keeps going
//!     })
//! }
//! ```
//!
//! The cargo features are formica-tokio's: `metrics` (OpenTelemetry metrics of each worker),
//! `traces` (a span per job run) and `sqlx` (jobs added in a caller's sqlx transaction).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use formica::*;

use futures::future::BoxFuture;
use std::io;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::compat::FuturesAsyncReadCompatExt;

/// Options for a worker on async-std: `WorkerOptions::default().database_url(..)...init().await`.
pub type WorkerOptions = formica::WorkerOptions<AsyncStdRuntime>;

/// Stop the worker of `handle` gracefully on the first SIGINT or SIGTERM, and abort its
/// running tasks on the second.
#[cfg(unix)]
pub fn stop_on_signals(handle: WorkerHandle) -> io::Result<()> {
    use async_signal::{Signal, Signals};
    use futures::StreamExt;
    let signals = Signals::new([Signal::Int, Signal::Term])?.filter_map(|signal| async move {
        match signal {
            Ok(Signal::Int) => Some("SIGINT"),
            Ok(_) => Some("SIGTERM"),
            Err(_) => None,
        }
    });
    async_std::task::spawn(handle.stop_on_signals(signals));
    Ok(())
}

/// The async-std [`Runtime`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AsyncStdRuntime;

impl Runtime for AsyncStdRuntime {
    fn connect(&self, address: Address) -> BoxFuture<'static, io::Result<Box<dyn Socket>>> {
        Box::pin(async move {
            Ok(match address {
                Address::Tcp { host, port } => {
                    let stream = async_std::net::TcpStream::connect((host.as_str(), port)).await?;
                    // Statements are small and latency-bound: do not wait to coalesce them.
                    stream.set_nodelay(true)?;
                    Box::new(stream.compat()) as Box<dyn Socket>
                }
                #[cfg(unix)]
                Address::Unix(path) => {
                    Box::new(async_std::os::unix::net::UnixStream::connect(path).await?.compat())
                }
                #[cfg(not(unix))]
                Address::Unix(_) => return Err(io::Error::new(io::ErrorKind::Unsupported, "Unix sockets")),
            })
        })
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        async_std::task::spawn(task);
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        Box::pin(async_std::task::sleep(deadline.saturating_duration_since(Instant::now())))
    }

    /// A thread of its own running what is spawned on it (async-std's sockets and timers are
    /// the process's, so only spawning differs from [`AsyncStdRuntime`]).
    fn dedicated(&self, name: &'static str) -> Option<io::Result<Arc<dyn Runtime>>> {
        let (tasks, spawned) = futures::channel::mpsc::unbounded();
        let thread = std::thread::Builder::new().name(name.to_owned());
        let started = thread.spawn(move || async_std::task::block_on(run_all(spawned)));
        Some(started.map(|_| Arc::new(AsyncStdThread(tasks)) as Arc<dyn Runtime>))
    }
}

/// Runs every task `spawned` sends, on the calling thread, until the sender is gone (then
/// what still runs is dropped).
async fn run_all(mut spawned: futures::channel::mpsc::UnboundedReceiver<BoxFuture<'static, ()>>) {
    use futures::future::Either;
    use futures::stream::{FuturesUnordered, StreamExt};
    let mut running = FuturesUnordered::new();
    loop {
        // An empty set ends its stream at once: wait on it only when not empty.
        let ended = match running.is_empty() {
            true => Either::Left(futures::future::pending()),
            false => Either::Right(running.select_next_some()),
        };
        match futures::future::select(spawned.next(), ended).await {
            Either::Left((Some(task), _)) => running.push(task),
            Either::Left((None, _)) => return,
            Either::Right(((), _)) => {}
        }
    }
}

/// An [`AsyncStdRuntime`] whose tasks run on a thread of its own (see [`Runtime::dedicated`]).
struct AsyncStdThread(futures::channel::mpsc::UnboundedSender<BoxFuture<'static, ()>>);

impl Runtime for AsyncStdThread {
    fn connect(&self, address: Address) -> BoxFuture<'static, io::Result<Box<dyn Socket>>> {
        AsyncStdRuntime.connect(address)
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        let _ = self.0.unbounded_send(task);
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        AsyncStdRuntime.sleep_until(deadline)
    }
}

/// A pool on async-std for the connection string `url` (a `postgres://` URL or libpq
/// key=value settings), of up to `max_size` connections.
pub fn pool(url: &str, max_size: usize) -> Result<Pool, Error> {
    Pool::from_url(Arc::new(AsyncStdRuntime), url, max_size)
}
