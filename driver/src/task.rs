//! Task handlers: the code that runs a job, and what it can reach while it runs.
//!
//! Every handler is erased to one shape, payload in and [`TaskOutcome`] out, so the
//! worker's loop knows nothing of payload types or batches. The payload comes in as the
//! text PostgreSQL sent ([`Payload`]): a typed handler parses it into its type, a raw one
//! into a `Value`, once, and a payload handler takes it as it is. A batch handler's per-item
//! results become an outcome through [`formica_core::batch`], the one place that decides
//! which items a failed batch job keeps.

use crate::db::PooledClient;
use crate::error::Error;
use crate::extensions::{Extensions, MissingExtension};
use crate::utils::WorkerUtils;
use formica_core::batch;
use formica_core::job::{Job, JobSpec, Payload, Task};
use formica_core::worker::TaskOutcome;
use futures::future::{BoxFuture, FutureExt, Shared};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a task returns: any error fails the job, and its text with its causes becomes
/// `last_error`.
pub type TaskResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A handler's answer "not now": returned as its error (`Err(Snooze(delay).into())`, or
/// [`snooze`]), it asks for the job to run again after `delay` without spending an attempt
/// or recording an error. Bounded by the task's snooze window (a week by default, see
/// [`WorkerOptions::task_policy`](crate::WorkerOptions::task_policy)): a snooze that would
/// put the job off further past its creation fails the attempt instead, saying so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snooze(pub std::time::Duration);

impl std::fmt::Display for Snooze {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "snoozed for {:?}", self.0)
    }
}

impl std::error::Error for Snooze {}

/// Run this job again after `delay`, without spending an attempt: `return snooze(delay)`
/// from a handler (see [`Snooze`]).
pub fn snooze(delay: std::time::Duration) -> TaskResult {
    Err(Box::new(Snooze(delay)))
}

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
    /// retried with exponential backoff until `max_attempts`. It runs on the application's
    /// runtime, beside the worker's loop and lease: a handler that blocks its thread holds
    /// up that thread only (`spawn_blocking` keeps it free for other tasks).
    fn run(self, ctx: JobContext) -> impl Future<Output = TaskResult> + Send;
}

/// What a batch task returns: one result per item, in the order of the items (an item whose
/// result is an `Err` is kept for the retry, the others are done), or an `Err` that fails
/// the whole attempt and keeps every item.
pub type BatchResult = Result<Vec<TaskResult>, Box<dyn std::error::Error + Send + Sync>>;

/// A batch task: a job whose payload is a JSON array of items of type `Self`, run in one
/// go. Implement [`Task`] for the identifier and `run_batch` for the work; register it with
/// [`WorkerOptions::define_batch_job`](crate::WorkerOptions::define_batch_job) and add jobs
/// with [`WorkerUtils::add_batch_job`] (with a job key, items added while the job waits are
/// appended to it).
///
/// As in graphile-worker, which shares the queue: when every item succeeds the job
/// completes; when some fail, the attempt fails, `last_error` names each failed item
/// (`Batch failures:` then `payload[<index>]: <error>` lines) and the job keeps only the
/// failed items as its payload, so the retry runs those alone. An item that does not
/// deserialize as `Self` fails on its own without reaching `run_batch`. A payload that is
/// not an array, or a count of results that does not match the items, fails the attempt
/// and keeps every item.
///
/// ```ignore
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Notify { user: u64 }
/// impl Task for Notify { const IDENTIFIER: &'static str = "notify"; }
/// impl BatchTaskHandler for Notify {
///     async fn run_batch(items: Vec<Self>, ctx: JobContext) -> BatchResult {
///         let push = ctx.extension::<PushClient>()?;
///         Ok(push.send_all(items.iter().map(|n| n.user)).await)  // one Result per item
///     }
/// }
/// ```
pub trait BatchTaskHandler: Task + Serialize + DeserializeOwned + Send + 'static {
    /// Run the items of one job: one result per item, in order (see [`BatchResult`]).
    fn run_batch(items: Vec<Self>, ctx: JobContext) -> impl Future<Output = BatchResult> + Send;
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

/// Where a context's database work goes.
#[derive(Clone)]
pub(crate) enum Database {
    /// The worker's pool and schema.
    Utils(WorkerUtils),
    /// None: a context of the `testing` module, which records the jobs added through it.
    #[cfg(feature = "testing")]
    Recorded(Arc<crate::testing::recorded::Recorder>),
}

/// What a running task can reach.
#[derive(Clone)]
pub struct JobContext {
    pub(crate) job: Arc<Job>,
    pub(crate) worker_id: Arc<str>,
    pub(crate) database: Database,
    pub(crate) abort: AbortSignal,
    pub(crate) span: tracing::Span,
    pub(crate) extensions: Arc<Extensions>,
    /// Where an [`OutputTaskHandler`](crate::OutputTaskHandler) leaves its output (`None`: history off).
    pub(crate) outputs: Option<Arc<crate::history::Outputs>>,
    /// Its steps and its completion in its own transaction (`None`: a context of the
    /// `testing` module, which has no database).
    pub(crate) durable: Option<crate::durable::Durable>,
    /// Where [`JobContext::set_progress`] leaves its values (`None`: a `testing` context).
    pub(crate) progress: Option<Arc<crate::reports::latest::ProgressWriter>>,
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
    ///
    /// A context of the `testing` module has no database: an [`Error::Options`] saying so.
    pub async fn client(&self) -> Result<PooledClient, Error> {
        match &self.database {
            Database::Utils(utils) => utils.pool().get_for_task(&format!("job {}", self.job.id)).await,
            #[cfg(feature = "testing")]
            Database::Recorded(_) => Err(Error::Options(crate::testing::recorded::NO_DATABASE.into())),
        }
    }
    /// The worker's utilities (same pool and schema).
    ///
    /// # Panics
    ///
    /// In a context of the `testing` module, which has no database.
    pub fn utils(&self) -> &WorkerUtils {
        match &self.database {
            Database::Utils(utils) => utils,
            #[cfg(feature = "testing")]
            Database::Recorded(_) => panic!("{}", crate::testing::recorded::NO_DATABASE),
        }
    }
    /// Add a job from within this one. (In a context of the `testing` module, the job is
    /// recorded instead: see `formica::testing::TestJob`.)
    pub async fn add_job<T: Task + Serialize>(&self, payload: &T, spec: JobSpec) -> Result<Job, Error> {
        match &self.database {
            Database::Utils(utils) => utils.add_job(payload, spec).await,
            #[cfg(feature = "testing")]
            Database::Recorded(recorder) => {
                recorder.add(T::IDENTIFIER, serde_json::to_value(payload)?, spec.with_policy(&T::POLICY))
            }
        }
    }
    /// Add `jobs` to this job's workflow, from its handler (fan-out whose width is known
    /// only now; docs/guide/workflows.md, "Fan-out at runtime"). Each is named
    /// `"<this job's name>/<name>"` in the workflow, and its dependencies name jobs of
    /// `jobs`; every job that waits for this one waits for them too, so a fan-in after it
    /// runs once they have all settled. Idempotent: a job whose name is taken (added by an
    /// earlier attempt of this job, killed or failed after the add) is not added again. The
    /// answer: the workflow's id, and the jobs this call released (name in the workflow,
    /// job id). Refused with [`WorkflowError::NotRunning`](crate::WorkflowError::NotRunning)
    /// when this job is not a released workflow job (not part of a workflow, or settled
    /// already), and as `add_workflow` refuses jobs. (In a context of the `testing` module,
    /// the jobs are validated and recorded instead: see `formica::testing::Ran::workflow_jobs`.)
    pub async fn add_workflow_jobs(
        &self,
        jobs: impl IntoIterator<Item = crate::WorkflowJob>,
    ) -> Result<crate::AddedWorkflow, Error> {
        let jobs = jobs.into_iter().collect();
        match &self.database {
            Database::Utils(utils) => {
                let name = format!("{} (job {})", self.job.task_identifier, self.job.id);
                utils.add_workflow_jobs(self.job.id, &name, jobs).await
            }
            #[cfg(feature = "testing")]
            Database::Recorded(recorder) => recorder.add_workflow_jobs(jobs),
        }
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
    /// The application state of type `T` given to the worker with
    /// [`WorkerOptions::add_extension`](crate::WorkerOptions::add_extension) (a pool, a
    /// client, a configuration); an error naming `T` if none was, so `?` fails the attempt
    /// with a clear `last_error`. Clone what must outlive the borrow of the context.
    ///
    /// ```ignore
    /// let http = ctx.extension::<reqwest::Client>()?.clone();
    /// ```
    pub fn extension<T: Send + Sync + 'static>(&self) -> Result<&T, MissingExtension> {
        self.extensions.get::<T>()
    }
    /// This context with `value` as the extension of its type for this run alone (replacing
    /// the worker's, if any): how a run layer ([`Next`](crate::Next)) hands the task
    /// something per job, such as a tenant's connection.
    pub fn with_extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        Arc::make_mut(&mut self.extensions).insert(value);
        self
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
pub(crate) type Handler = Arc<dyn Fn(JobContext, Payload) -> BoxFuture<'static, TaskOutcome> + Send + Sync>;

/// The attempt failed with `message` (the core makes it storable).
fn failed(message: &str) -> TaskOutcome {
    TaskOutcome::Err(message.to_owned())
}

fn outcome(result: TaskResult) -> TaskOutcome {
    match result {
        Ok(()) => TaskOutcome::Ok,
        Err(error) => error_outcome(&*error),
    }
}

/// A handler's error: a snooze it asked for, or a failure.
fn error_outcome(error: &(dyn std::error::Error + Send + Sync + 'static)) -> TaskOutcome {
    match error.downcast_ref::<Snooze>() {
        Some(Snooze(delay)) => {
            TaskOutcome::Snoozed(chrono::Duration::from_std(*delay).unwrap_or(chrono::Duration::MAX))
        }
        None => failed(&error_chain(error)),
    }
}

/// The items of a batch job's payload, or the failure of a payload that is not an array.
fn batch_items(payload: Payload, identifier: &str) -> Result<Vec<Value>, TaskOutcome> {
    match payload.into_value() {
        Value::Array(items) => Ok(items),
        other => Err(failed(&format!(
            "the payload of batch task {identifier:?} must be a JSON array of items, got {other}"
        ))),
    }
}

/// Runs a typed batch: items that do not deserialize fail alone, the rest go to `T`.
async fn run_typed_batch<T: BatchTaskHandler>(ctx: JobContext, items: Vec<Value>) -> TaskOutcome {
    let mut runnable = Vec::with_capacity(items.len());
    let mut undecodable = Vec::with_capacity(items.len());
    for item in &items {
        match T::deserialize(item) {
            Ok(task) => {
                runnable.push(task);
                undecodable.push(None);
            }
            Err(e) => undecodable.push(Some(format!("does not match task {:?}: {e}", T::IDENTIFIER))),
        }
    }
    let expected = runnable.len();
    let mut results = match T::run_batch(runnable, ctx).await {
        Ok(results) if results.len() == expected => results.into_iter(),
        Ok(results) => return batch::miscounted(results.len(), expected),
        Err(error) => return error_outcome(&*error),
    };
    // Each item's result in payload order: its decoding error, or the handler's next one.
    let merged = (undecodable.into_iter())
        .map(|error| match error {
            Some(error) => Err(error),
            // Counted above: one result per decoded item (none left would keep the item).
            None => results.next().map_or(Err("no result".into()), |r| r.map_err(|e| error_chain(&*e))),
        })
        .collect();
    batch::outcome(items, merged)
}

/// `T::run` on the payload parsed as `T` (the worker's handler of a typed task, and what
/// the `testing` module runs).
pub(crate) fn typed_handler<T: TaskHandler>() -> Handler {
    Arc::new(|ctx, payload| {
        Box::pin(async move {
            match payload.parse::<T>() {
                Ok(task) => outcome(task.run(ctx).await),
                Err(e) => failed(&format!("payload does not match task {:?}: {e}", T::IDENTIFIER)),
            }
        })
    })
}

/// `T::run_batch` on the payload's items (the worker's handler of a typed batch task).
pub(crate) fn typed_batch_handler<T: BatchTaskHandler>() -> Handler {
    Arc::new(|ctx, payload| {
        Box::pin(async move {
            match batch_items(payload, T::IDENTIFIER) {
                Ok(items) => run_typed_batch::<T>(ctx, items).await,
                Err(outcome) => outcome,
            }
        })
    })
}

/// The handlers a worker knows, by task identifier.
#[derive(Clone, Default)]
pub(crate) struct Handlers(pub(crate) BTreeMap<String, Handler>);

impl Handlers {
    pub(crate) fn define<T: TaskHandler>(&mut self) {
        self.0.insert(T::IDENTIFIER.to_owned(), typed_handler::<T>());
    }

    pub(crate) fn define_batch<T: BatchTaskHandler>(&mut self) {
        self.0.insert(T::IDENTIFIER.to_owned(), typed_batch_handler::<T>());
    }

    pub(crate) fn define_raw<F, Fut>(&mut self, identifier: &str, run: F)
    where
        F: Fn(JobContext, serde_json::Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = TaskResult> + Send + 'static,
    {
        let run = Arc::new(run);
        self.0.insert(
            identifier.to_owned(),
            Arc::new(move |ctx, payload: Payload| {
                let run = run.clone();
                Box::pin(async move { outcome(run(ctx, payload.into_value()).await) })
            }),
        );
    }

    pub(crate) fn define_payload<F, Fut>(&mut self, identifier: &str, run: F)
    where
        F: Fn(JobContext, Payload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = TaskResult> + Send + 'static,
    {
        let run = Arc::new(run);
        self.0.insert(
            identifier.to_owned(),
            Arc::new(move |ctx, payload| {
                let run = run.clone();
                Box::pin(async move { outcome(run(ctx, payload).await) })
            }),
        );
    }

    pub(crate) fn define_raw_batch<F, Fut>(&mut self, identifier: &str, run: F)
    where
        F: Fn(JobContext, Vec<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = BatchResult> + Send + 'static,
    {
        let (run, identifier) = (Arc::new(run), Arc::<str>::from(identifier));
        self.0.insert(
            identifier.to_string(),
            Arc::new(move |ctx, payload| {
                let (run, identifier) = (run.clone(), identifier.clone());
                Box::pin(async move {
                    let items = match batch_items(payload, &identifier) {
                        Ok(items) => items,
                        Err(outcome) => return outcome,
                    };
                    match run(ctx, items.clone()).await {
                        Ok(results) => batch::outcome(
                            items,
                            results.into_iter().map(|r| r.map_err(|e| error_chain(&*e))).collect(),
                        ),
                        Err(error) => error_outcome(&*error),
                    }
                })
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
