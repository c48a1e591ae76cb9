//! What a running job reports beside its outcome ([progress](progress) and
//! [its logs](logs)), and the coalescing writer they share: a handler's call only leaves its
//! value in its worker's [`Coalescer`], which sends one statement for everything left since
//! its last, at most once a period, the last values in any case. A worker whose handlers
//! report nothing sends nothing and starts nothing.

pub(crate) mod latest;
pub(crate) mod logs;
pub(crate) mod progress;

use crate::error::Error;
use crate::runtime::Runtime;
use crate::utils::WorkerUtils;
use futures::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a stopping worker waits for its last reports to be written.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Write a stopping worker's pending progress and log lines now, waiting at most
/// [`FLUSH_WAIT`] (its database may be gone): its jobs' last reports come after their
/// last write, less than a period before.
pub(crate) async fn flush(
    progress: &Coalescer<latest::Latest>,
    logs: Option<&logs::LogWriter>,
    runtime: &dyn Runtime,
) {
    let both = async {
        progress.flush().await;
        if let Some(logs) = logs {
            logs.flush().await;
        }
    };
    futures::pin_mut!(both);
    let _ = futures::future::select(both, runtime.sleep(FLUSH_WAIT)).await;
}

/// What a [`Coalescer`] gathers between two writes, and how it is written.
pub(crate) trait Batch: Default + Send + 'static {
    /// What it is, for the warning of a failed write.
    const WHAT: &'static str;
    fn is_empty(&self) -> bool;
    /// One statement for the whole batch.
    fn write(self, utils: WorkerUtils) -> BoxFuture<'static, Result<(), Error>>;
}

/// A worker's reports of one kind on their way to the database.
pub(crate) struct Coalescer<B> {
    utils: WorkerUtils,
    every: Duration,
    state: Mutex<State<B>>,
    /// Held while a batch is taken and written, so batches land in the order taken (a
    /// value written late never replaces a newer one).
    writing: futures::lock::Mutex<()>,
}

struct State<B> {
    pending: B,
    /// A task is on its way to write `pending`.
    scheduled: bool,
    /// When the last write started (none yet: the first is at once).
    last_write: Option<Instant>,
}

impl<B: Batch> Coalescer<B> {
    /// Writes of `utils`'s schema, at most one every `every`.
    pub(crate) fn new(utils: WorkerUtils, every: Duration) -> Arc<Self> {
        let state = State { pending: B::default(), scheduled: false, last_write: None };
        Arc::new(Coalescer { utils, every, state: Mutex::new(state), writing: Default::default() })
    }

    /// Change what is pending with `add`, and make sure a write will take it.
    pub(crate) fn add(self: &Arc<Self>, add: impl FnOnce(&mut B)) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        add(&mut state.pending);
        if !state.scheduled {
            state.scheduled = true;
            let runtime = self.utils.pool().runtime().clone();
            let writer = self.clone();
            runtime.clone().spawn(Box::pin(async move { writer.write_until_idle(runtime).await }));
        }
    }

    /// Write what is pending, no sooner than `every` after the last write, until a wait ends
    /// with nothing new (so the last values are written).
    async fn write_until_idle(self: Arc<Self>, runtime: Arc<dyn Runtime>) {
        loop {
            let last = self.state.lock().unwrap_or_else(|e| e.into_inner()).last_write;
            if let Some(last) = last {
                runtime.sleep_until(last + self.every).await;
            }
            let _writing = self.writing.lock().await;
            let batch = {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if state.pending.is_empty() {
                    state.scheduled = false;
                    return;
                }
                state.last_write = Some(runtime.monotonic());
                std::mem::take(&mut state.pending)
            };
            self.write(batch).await;
        }
    }

    /// Write what is pending now, whatever the period: when the worker stops, so that the
    /// last reports of its jobs are not left behind.
    pub(crate) async fn flush(&self) {
        let _writing = self.writing.lock().await;
        let batch = std::mem::take(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).pending);
        if !batch.is_empty() {
            self.write(batch).await;
        }
    }

    async fn write(&self, batch: B) {
        if let Err(e) = batch.write(self.utils.clone()).await {
            // Reports are advice, never worth a job: the next ones write again.
            tracing::warn!(error = %e, "could not write the {} of jobs", B::WHAT);
        }
    }
}
