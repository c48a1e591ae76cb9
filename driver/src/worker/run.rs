//! A worker ready to run, the handle that stops it, and how running it places its parts:
//! the loop and the lease's keeper on their own threads, tasks on the application's runtime.

use super::shared::Shared;
use super::threads::{spawn_abortable, Stop, Threads};
use super::turning::Turning;
use crate::clock::Clock;
use crate::error::Error;
use crate::lease::{crontab_text, keep_lease, LeaseKeeping, Runs};
use crate::utils::WorkerUtils;
use formica_core::worker::{self as machine, Input};
use futures::channel::mpsc;
use futures::future::Either;
use futures::StreamExt;
use std::sync::Arc;

/// Asks a running worker to stop, from anywhere.
#[derive(Clone)]
pub struct WorkerHandle(mpsc::UnboundedSender<Input>);

impl WorkerHandle {
    /// Stop taking jobs, let running ones finish (up to the graceful shutdown timeout),
    /// give back prefetched ones, then return from `run`.
    pub fn stop(&self) {
        let _ = self.0.unbounded_send(Input::ShutdownRequested { graceful: true });
    }
    /// Abort running tasks now and give their jobs back.
    pub fn kill(&self) {
        let _ = self.0.unbounded_send(Input::ShutdownRequested { graceful: false });
    }

    /// Stop gracefully on the first item of `signals` (each names the signal, for the log)
    /// and abort running tasks on the second. Adapters feed it their runtime's SIGINT and
    /// SIGTERM; spawn the returned future.
    pub async fn stop_on_signals(self, signals: impl futures::Stream<Item = &'static str>) {
        use futures::StreamExt;
        let mut signals = std::pin::pin!(signals);
        if let Some(name) = signals.next().await {
            tracing::info!(
                signal = name,
                "shutting down gracefully; send the signal again to abort running jobs"
            );
            self.stop();
        }
        if let Some(name) = signals.next().await {
            tracing::warn!(signal = name, "aborting running jobs");
            self.kill();
        }
    }
}

/// A worker, ready to run.
pub struct Worker {
    pub(super) shared: Arc<Shared>,
    pub(super) config: machine::Config,
    pub(super) inputs: mpsc::UnboundedSender<Input>,
    pub(super) receiver: mpsc::UnboundedReceiver<Input>,
    pub(super) threads: Threads,
}

impl Worker {
    /// A handle to stop this worker from elsewhere.
    pub fn handle(&self) -> WorkerHandle {
        WorkerHandle(self.inputs.clone())
    }

    /// The id this worker locks jobs with.
    pub fn worker_id(&self) -> &str {
        &self.shared.worker_id
    }

    /// Utilities on the same pool and schema.
    pub fn create_utils(&self) -> WorkerUtils {
        self.shared.utils.clone()
    }

    /// Run until stopped through a [`WorkerHandle`] (or a signal, where the adapter handles
    /// them).
    pub async fn run(self) -> Result<(), Error> {
        self.drive(false).await
    }

    /// Run until no job is runnable now, then return.
    pub async fn run_once(self) -> Result<(), Error> {
        self.drive(true).await
    }

    async fn drive(self, once: bool) -> Result<(), Error> {
        let Worker { shared, mut config, inputs, receiver, threads } = self;
        config.run_once = once;
        let clock = Arc::new(Clock::new(threads.tasks.clone()));
        let (end_lease, ending_lease) = futures::channel::oneshot::channel();
        let keeping = LeaseKeeping {
            runtime: threads.lease.clone(),
            clock: clock.clone(),
            settings: shared.utils.pool().settings().clone(),
            catalog: shared.executor.catalog.clone(),
            worker_id: shared.worker_id.clone(),
            watchdog: config.watchdog,
            runs: Arc::new(Runs {
                crontab: crontab_text(&config.crontab),
                tasks: config.task_identifiers.clone(),
                accepted_flags: config.accepted_flags.clone(),
                forbidden_flags: shared.executor.flags_fn.is_none().then(|| config.forbidden_flags.clone()),
            }),
            inputs: inputs.clone(),
            others_alive: shared.executor.others_alive.clone(),
            end: ending_lease,
        };
        let keeper = spawn_abortable(threads.lease.as_ref(), keep_lease(keeping));
        let (starts, mut to_start) = mpsc::unbounded();
        let (done, mut finished) = futures::channel::oneshot::channel();
        let turning = Turning {
            shared,
            config,
            inputs,
            receiver,
            clock,
            starts,
            io: threads.io.clone(),
            keeper: Stop(keeper),
            end_lease,
        };
        let worker = spawn_abortable(threads.io.as_ref(), async move {
            let _ = done.send(turning.run().await);
        });
        // Dropping this future stops the worker (its loop, then its lease).
        let _stop = Stop(worker);
        // Tasks are spawned here, on the application's runtime, never run on the loop's
        // thread. Not a step of one runs here either: a handler that blocks before it first
        // waits would hold up the start of every task after it.
        loop {
            let tasks = match futures::future::select(to_start.next(), &mut finished).await {
                Either::Left((Some(tasks), _)) => tasks,
                Either::Left((None, _)) => return (&mut finished).await.unwrap_or_else(|_| Err(loop_died())),
                Either::Right((result, _)) => return result.unwrap_or_else(|_| Err(loop_died())),
            };
            for task in tasks {
                threads.tasks.spawn(task);
            }
        }
    }
}

fn loop_died() -> Error {
    Error::Internal("the worker's loop ended without a result (it panicked)".into())
}
