//! formica-tokio: Formica on the tokio runtime.
//!
//! Supplies the driver's [`Runtime`] with tokio's sockets, timers and tasks, and
//! re-exports Formica's public API so an application depends on this crate alone: run
//! workers that execute jobs from a `graphile_worker` schema in PostgreSQL, and add jobs.
//!
//! ```no_run
//! use formica_tokio::{JobContext, JobSpec, Task, TaskHandler, TaskResult, WorkerOptions};
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
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let worker = WorkerOptions::default()
//!         .database_url("postgres://localhost/app")
//!         .define_job::<SendWelcome>()
//!         .init() // connects and installs the schema
//!         .await?;
//!     let mail = SendWelcome { to: "ada@example.com".into() };
//!     worker.create_utils().add_job(&mail, JobSpec::default()).await?;
//!     formica_tokio::stop_on_signals(worker.handle())?; // SIGINT/SIGTERM stop it gracefully
//!     worker.run().await?;
//!     Ok(())
//! }
//! ```
//!
//! Logs go through `tracing` (install a subscriber to see them). The guides below are
//! the repository's `docs/guide/` pages; the others (adding jobs, testing your application
//! with the `testing` feature, testing your scheduling, the dashboard, observability), the
//! guarantees and the architecture are beside them.
//!
// One source for each guide: shown on GitHub under docs/guide/ and here, compiled here.
#![doc = include_str!("docs/running-workers.md")]
//!
#![doc = include_str!("docs/connecting.md")]
//!
#![doc = include_str!("docs/cron.md")]
//!
#![doc = include_str!("docs/history.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use formica::*;

pub mod exec;

use futures::future::BoxFuture;
use std::io;
use std::sync::Arc;
use std::time::Instant;

/// Options for a worker on tokio: `WorkerOptions::default().database_url(..)...init().await`.
pub type WorkerOptions = formica::WorkerOptions<TokioRuntime>;

/// Stop the worker of `handle` gracefully on the first SIGINT or SIGTERM, and abort its
/// running tasks on the second. Call it from within the tokio runtime.
pub fn stop_on_signals(handle: WorkerHandle) -> io::Result<()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        let streams = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
        futures::stream::unfold(streams, |(mut interrupt, mut terminate)| async move {
            let name = tokio::select! {
                Some(()) = interrupt.recv() => "SIGINT",
                Some(()) = terminate.recv() => "SIGTERM",
                else => return None,
            };
            Some((name, (interrupt, terminate)))
        })
    };
    #[cfg(not(unix))]
    let signals = futures::stream::unfold((), |()| async {
        tokio::signal::ctrl_c().await.ok().map(|()| ("Ctrl-C", ()))
    });
    tokio::spawn(handle.stop_on_signals(signals));
    Ok(())
}

/// The tokio [`Runtime`]: tasks go to the current tokio runtime.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioRuntime;

impl Runtime for TokioRuntime {
    fn connect(&self, address: Address) -> BoxFuture<'static, io::Result<Box<dyn Socket>>> {
        Box::pin(async move {
            Ok(match address {
                Address::Tcp { host, port } => {
                    let stream = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
                    // Statements are small and latency-bound: do not wait to coalesce them.
                    stream.set_nodelay(true)?;
                    Box::new(stream) as Box<dyn Socket>
                }
                #[cfg(unix)]
                Address::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
                #[cfg(not(unix))]
                Address::Unix(_) => return Err(io::Error::new(io::ErrorKind::Unsupported, "Unix sockets")),
            })
        })
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        tokio::spawn(task);
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep_until(deadline.into()))
    }

    /// tokio's clock, read where it is called: a worker's loop and lease read it on their own
    /// threads, which `tokio::time::pause()` on the application's runtime does not reach.
    fn monotonic(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    /// A single-threaded tokio runtime on a thread of its own.
    fn dedicated(&self, name: &'static str) -> Option<io::Result<Arc<dyn Runtime>>> {
        let start = || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (handle, (stop, stopped)) =
                (runtime.handle().clone(), futures::channel::oneshot::channel::<()>());
            std::thread::Builder::new().name(name.to_owned()).spawn(move || {
                let _ = runtime.block_on(stopped);
                // Outside `block_on`, where the runtime may be dropped: what runs on it ends.
                drop(runtime);
            })?;
            Ok(Arc::new(TokioThread(handle, stop)) as Arc<dyn Runtime>)
        };
        Some(start())
    }
}

/// A tokio runtime driven by a thread of its own (see [`Runtime::dedicated`]): whoever
/// polls what it returns, its sockets, timers and tasks are that thread's. Dropped, it
/// ends the thread.
struct TokioThread(tokio::runtime::Handle, #[allow(dead_code)] futures::channel::oneshot::Sender<()>);

impl Runtime for TokioThread {
    fn connect(&self, address: Address) -> BoxFuture<'static, io::Result<Box<dyn Socket>>> {
        // Opened on the thread, so the socket is registered with its reactor.
        let opening = self.0.spawn(TokioRuntime.connect(address));
        Box::pin(async move { opening.await.map_err(io::Error::other)? })
    }

    fn spawn(&self, task: BoxFuture<'static, ()>) {
        self.0.spawn(task);
    }

    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        let _thread = self.0.enter();
        Box::pin(tokio::time::sleep_until(deadline.into()))
    }
}

/// A pool on tokio for the connection string `url` (a `postgres://` URL or libpq
/// key=value settings), of up to `max_size` connections.
pub fn pool(url: &str, max_size: usize) -> Result<Pool, Error> {
    Pool::from_url(Arc::new(TokioRuntime), url, max_size)
}
