//! Task handlers: the code that runs a job, and what it can reach while it runs.

use crate::db::PooledClient;
use crate::error::Error;
use crate::utils::WorkerUtils;
use formica_core::job::{Job, JobSpec, Task};
use futures::future::{BoxFuture, FutureExt, Shared};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a task returns: any error fails the job, and its text with its causes becomes
/// `last_error` (see [`error_chain`]).
pub type TaskResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A task with a typed payload. The payload type is the handler: implement [`Task`] for
/// the identifier and `run` for the work.
///
/// ```
/// use formica::{JobContext, Task, TaskHandler, TaskResult};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct SendEmail { to: String }
/// impl Task for SendEmail { const IDENTIFIER: &'static str = "send_email"; }
/// impl TaskHandler for SendEmail {
///     async fn run(self, ctx: JobContext) -> TaskResult {
///         println!("mailing {} for job {}", self.to, ctx.job().id);
///         Ok(())
///     }
/// }
/// ```
pub trait TaskHandler: Task + Serialize + DeserializeOwned + Send + 'static {
    /// Run one job. Returning an error (or panicking) fails this attempt; the job is
    /// retried with exponential backoff until `max_attempts`.
    fn run(self, ctx: JobContext) -> impl Future<Output = TaskResult> + Send;
}

/// Fires once, when a forced shutdown aborts running tasks. A task that holds resources
/// can watch it to stop early and cleanly; the task is dropped at its next await anyway.
#[derive(Clone)]
pub struct AbortSignal {
    fired: Arc<AtomicBool>,
    wait: Shared<futures::channel::oneshot::Receiver<()>>,
}

/// The sending side of an [`AbortSignal`].
pub(crate) struct AbortTrigger {
    fired: Arc<AtomicBool>,
    send: futures::channel::oneshot::Sender<()>,
}

impl AbortSignal {
    pub(crate) fn new() -> (AbortTrigger, AbortSignal) {
        let (send, wait) = futures::channel::oneshot::channel();
        let fired = Arc::new(AtomicBool::new(false));
        (AbortTrigger { fired: fired.clone(), send }, AbortSignal { fired, wait: wait.shared() })
    }

    /// Whether the signal has fired.
    pub fn is_aborted(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Completes when the signal fires (never, if the task ends without an abort).
    pub async fn aborted(&self) {
        // A dropped trigger (the task finished normally) is no abort.
        if self.wait.clone().await.is_err() {
            futures::future::pending::<()>().await;
        }
    }
}

impl AbortTrigger {
    pub(crate) fn fire(self) {
        self.fired.store(true, Ordering::SeqCst);
        let _ = self.send.send(());
    }
}

/// What a running task can reach.
#[derive(Clone)]
pub struct JobContext {
    pub(crate) job: Arc<Job>,
    pub(crate) worker_id: Arc<str>,
    pub(crate) utils: WorkerUtils,
    pub(crate) abort: AbortSignal,
    pub(crate) span: tracing::Span,
}

impl JobContext {
    /// The job being run (its `attempts` counts this attempt).
    pub fn job(&self) -> &Job {
        &self.job
    }
    /// The id this worker locks jobs with.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }
    /// A connection from the worker's pool, to hold while the task runs if need be. It
    /// never takes the connections the pool reserves for short statements, so the worker
    /// and [`JobContext::add_job`] keep working while tasks hold clients (see
    /// [`crate::Pool`]).
    pub async fn client(&self) -> Result<PooledClient, Error> {
        self.utils.pool().get_for_task(&format!("job {}", self.job.id)).await
    }
    /// The worker's utilities (same pool and schema).
    pub fn utils(&self) -> &WorkerUtils {
        &self.utils
    }
    /// Add a job from within this one.
    pub async fn add_job<T: Task + Serialize>(&self, payload: &T, spec: JobSpec) -> Result<Job, Error> {
        self.utils.add_job(payload, spec).await
    }
    /// Fires on forced shutdown.
    pub fn abort_signal(&self) -> &AbortSignal {
        &self.abort
    }
    /// The tracing span of this job (job id, task, worker id), already entered while the
    /// task runs.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }
}

/// `error` and its causes ([`source`](std::error::Error::source)), outermost first, as
/// `outer: cause: root` (anyhow's `{:#}`), so that `last_error` says why as well as what.
/// A cause whose text is already in the message (errors that print their source
/// themselves) is not repeated.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let message = cause.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = cause.source();
    }
    text
}

/// A type-erased handler: payload in, outcome out.
pub(crate) type Handler =
    Arc<dyn Fn(JobContext, serde_json::Value) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// The handlers a worker knows, by task identifier.
#[derive(Clone, Default)]
pub(crate) struct Handlers(pub(crate) BTreeMap<String, Handler>);

impl Handlers {
    pub(crate) fn define<T: TaskHandler>(&mut self) {
        self.0.insert(
            T::IDENTIFIER.to_owned(),
            Arc::new(|ctx, payload| {
                Box::pin(async move {
                    let task: T = serde_json::from_value(payload)
                        .map_err(|e| format!("payload does not match task {:?}: {e}", T::IDENTIFIER))?;
                    task.run(ctx).await.map_err(|e| error_chain(&*e))
                })
            }),
        );
    }

    pub(crate) fn define_raw<F, Fut>(&mut self, identifier: &str, run: F)
    where
        F: Fn(JobContext, serde_json::Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = TaskResult> + Send + 'static,
    {
        let run = Arc::new(run);
        self.0.insert(
            identifier.to_owned(),
            Arc::new(move |ctx, payload| {
                let run = run.clone();
                Box::pin(async move { run(ctx, payload).await.map_err(|e| error_chain(&*e)) })
            }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::error_chain;
    use std::fmt;

    /// An error with a message and maybe a cause, which it may print itself.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    #[test]
    fn causes_follow_the_message_each_once() {
        let root = Layer("disk full", None);
        assert_eq!(error_chain(&root), "disk full");
        let chain = Layer("sending mail", Some(Box::new(Layer("writing the spool", Some(Box::new(root))))));
        assert_eq!(error_chain(&chain), "sending mail: writing the spool: disk full");
        // A message that already says its cause does not say it twice.
        let says_it = Layer("spool (disk full)", Some(Box::new(Layer("disk full", None))));
        assert_eq!(error_chain(&says_it), "spool (disk full)");
    }
}
