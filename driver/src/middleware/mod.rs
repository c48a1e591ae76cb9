//! Middleware: what the application puts around every job's run and before every job it
//! adds, for the concerns that cut across tasks (a tenant's connection, a metrics label,
//! skipping the work of a disabled account, a field every job must carry).

use crate::task::{Handler, Handlers, JobContext};
use formica_core::job::Payload;
pub use formica_core::worker::TaskOutcome;
use futures::future::{BoxFuture, FutureExt};
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;

pub(crate) mod add;

/// A run layer, erased.
type RunLayer = Arc<dyn Fn(JobContext, Next) -> BoxFuture<'static, TaskOutcome> + Send + Sync>;

/// The run layers of a worker, outermost first.
#[derive(Clone)]
pub(crate) struct RunLayers(Arc<[RunLayer]>);

impl Default for RunLayers {
    fn default() -> Self {
        RunLayers(Vec::new().into())
    }
}

impl RunLayers {
    /// These layers, then `layer` inside them.
    pub(crate) fn with<F, Fut>(&self, layer: F) -> Self
    where
        F: Fn(JobContext, Next) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = TaskOutcome> + Send + 'static,
    {
        let layer: RunLayer = Arc::new(move |ctx, next| layer(ctx, next).boxed());
        RunLayers(self.0.iter().cloned().chain([layer]).collect())
    }

    /// Put every handler inside the layers, once, when the worker is built: with none, the
    /// handlers stay as they are, so a job's run costs what it costs without middleware.
    pub(crate) fn wrap(&self, handlers: &mut Handlers) {
        if self.0.is_empty() {
            return;
        }
        for handler in handlers.0.values_mut() {
            let (layers, task) = (self.0.clone(), handler.clone());
            *handler = Arc::new(move |ctx, payload| {
                Next { layers: layers.clone(), depth: 0, task: task.clone(), payload }.run(ctx).boxed()
            });
        }
    }
}

/// The rest of the chain a run layer wraps: the layers inside it, then the task.
///
/// Run layers ([`WorkerOptions::around_run`](crate::WorkerOptions::around_run)) nest: the
/// first given is the outermost. Each gets the job's [`JobContext`] and [`Next`], the rest
/// of the chain down to the task. It may change the context (an extension for this run
/// only, [`JobContext::with_extension`]) or the payload ([`Next::payload_mut`]), run the
/// rest with [`Next::run`] and turn its outcome into another, or return without running
/// it. [`TaskOutcome::Skipped`] is how a layer skips a job: the job is completed, as
/// after a success, and the worker reports [`Event::JobSkipped`](crate::Event::JobSkipped)
/// with the reason (logged at INFO), so a skipped job is never lost silently. Completing
/// rather than failing it: a skip is the application's decision that the work is moot, not
/// an error to retry or alert on; a layer that wants a failure returns
/// [`TaskOutcome::Err`]. A layer's panic fails the attempt as a task's does.
///
/// Add layers ([`WorkerUtils::before_add`](crate::WorkerUtils::before_add), also given to
/// a worker's utilities with
/// [`WorkerOptions::before_add`](crate::WorkerOptions::before_add)) see each job, in the
/// order given, before it is stored: they may fill or check its fields and refuse it with a
/// reason, which fails the add with [`Error::Refused`](crate::Error::Refused) and stores
/// nothing (for a batch of jobs: none of the batch). They apply to what [`WorkerUtils`](crate::WorkerUtils) adds,
/// including from within a job ([`JobContext::add_job`]); not to jobs added by SQL, by
/// graphile-worker, by cron, or through `SqlxUtils`.
///
/// With no layer given, nothing here runs: the run layers are wrapped around each handler
/// once, when the worker is built, so without them a job's run is its handler's call
/// exactly as without middleware (no test, no allocation, no dynamic call per job); and an
/// add is stored as given (one test of an empty list).
pub struct Next {
    layers: Arc<[RunLayer]>,
    /// The next layer to call (past the last: the task).
    depth: usize,
    task: Handler,
    payload: Payload,
}

impl Next {
    /// The payload the task will be given.
    pub fn payload(&self) -> &Value {
        self.payload.value()
    }

    /// The payload the task will be given, to change (what the job stores is not changed:
    /// a retry starts from the stored payload again).
    pub fn payload_mut(&mut self) -> &mut Value {
        &mut self.payload
    }

    /// Run the inner layers and the task with `ctx`, and return how it ended: `Ok`, `Err`,
    /// `ItemsFailed` (a batch task), `Panicked` or `Skipped` (by an inner layer). `Aborted`
    /// and `Unstoppable` are the worker's own, given when it aborts the whole run: a layer
    /// never gets them here and has no reason to return them.
    pub async fn run(self, ctx: JobContext) -> TaskOutcome {
        match self.layers.get(self.depth).cloned() {
            Some(layer) => layer(ctx, Next { depth: self.depth + 1, ..self }).await,
            None => (self.task)(ctx, self.payload).await,
        }
    }
}
