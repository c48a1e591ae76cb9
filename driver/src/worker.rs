//! The worker: the one async loop that drives `formica_core::worker::Worker`.
//!
//! The core decides everything (what to fetch and when, batching, retries, shutdown); this
//! loop only carries its effects out and feeds the results back as inputs:
//!
//! - `Query` runs a statement on the pool (a future polled by this loop, so its answer
//!   reaches the machine with no channel or task switch) and answers `QueryDone`;
//! - `StartTask` hands the task (panics caught) to `run`, which spawns it on the
//!   application's runtime; it answers `TaskFinished`;
//! - `AbortTask` fires the task's abort signal and drops it; one that has not stopped
//!   5 s later is reported `Unstoppable`;
//! - `ConnectListener` opens the LISTEN connection, which answers `ListenerUp`,
//!   `Notification`s and finally `ListenerDown`;
//! - `Emit` goes to the log and to the hooks;
//! - the earliest `poll_timeout` deadline becomes a `Timeout`.
//!
//! The loop runs on the runtime's `formica-io` thread, the lease's keeper on its
//! `formica-lease` thread (see [`Runtime::dedicated`]): no task can hold either up. The
//! keeper's heartbeats arrive as `Heartbeat` inputs. Other inputs arrive through one
//! channel; the machine sees them one at a time, each source in the order its inputs
//! happened. No job state and no retry logic live here.

// A new Effect or Event must be handled here, not swallowed by `_ =>`.
#![warn(clippy::wildcard_enum_match_arm)]

use crate::clock::Clock;
use crate::db::Pool;
use crate::error::Error;
use crate::extensions::Extensions;
use crate::lease::{keep_lease, LeaseKeeping};
use crate::listener::listen;
use crate::log::log_event;
use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::settings::ConnectionSettings;
use crate::statements::Executor;
use crate::task::{AbortSignal, AbortTrigger, Handlers, JobContext, TaskHandler, TaskResult};
use crate::task::{BatchResult, BatchTaskHandler};
use crate::traces::JobSpan;
use crate::utils::{WorkerUtils, DEFAULT_SCHEMA};
use formica_core::cron::{self, Cron, CronItem, Crontab};
use formica_core::text::storable;
use formica_core::worker::{self as machine, Effect, Event, Input, QueryResult, Statement, TaskOutcome};
use futures::channel::mpsc;
use futures::future::{AbortHandle, Abortable, BoxFuture, Either, FutureExt};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tracing::Instrument;

/// A function that gives the flags to refuse, evaluated before every fetch.
pub type FlagsFn = Arc<dyn Fn() -> BoxFuture<'static, Vec<String>> + Send + Sync>;

/// A subscriber to worker events (job start, success, failure, completion, worker start
/// and stop, ...), called in the loop: keep it quick (count, send to a channel).
pub type Hook = Arc<dyn Fn(&Event) + Send + Sync>;

enum Connection {
    Url(String),
    Pool(Pool),
}

/// How to build a [`Worker`]. Defaults favour throughput without surprises: 10 concurrent
/// jobs, a local queue of prefetched jobs, completions and failures batched for 1 ms,
/// prepared statements, a 2 s poll as the fallback behind LISTEN/NOTIFY.
///
/// Adapters name it with their runtime (`formica_tokio::WorkerOptions`), so that
/// `WorkerOptions::default()` runs on that runtime.
pub struct WorkerOptions<R = ()> {
    runtime: Arc<dyn Runtime>,
    _runtime: PhantomData<fn() -> R>,
    connection: Option<Connection>,
    schema: String,
    config: machine::Config,
    max_pool_size: usize,
    handlers: Handlers,
    flags_fn: Option<FlagsFn>,
    prepared_statements: bool,
    hooks: Vec<Hook>,
    crontabs: Vec<CronSource>,
    queue_depth_interval: Duration,
    extensions: Extensions,
}

/// Recurring jobs for [`WorkerOptions::with_cron`]: crontab text (`&str`, `String`), a
/// crontab file (`&Path`, `PathBuf`), or typed items ([`Cron`], `Vec<Cron>`).
#[derive(Debug, Clone)]
pub enum CronSource {
    /// Crontab text.
    Text(String),
    /// A crontab file, read by `init`.
    File(PathBuf),
    /// Items built in code.
    Items(Vec<Cron>),
}

impl From<&str> for CronSource {
    fn from(text: &str) -> Self {
        CronSource::Text(text.to_owned())
    }
}
impl From<String> for CronSource {
    fn from(text: String) -> Self {
        CronSource::Text(text)
    }
}
impl From<&Path> for CronSource {
    fn from(path: &Path) -> Self {
        CronSource::File(path.to_owned())
    }
}
impl From<PathBuf> for CronSource {
    fn from(path: PathBuf) -> Self {
        CronSource::File(path)
    }
}
impl From<Cron> for CronSource {
    fn from(item: Cron) -> Self {
        CronSource::Items(vec![item])
    }
}
impl From<Vec<Cron>> for CronSource {
    fn from(items: Vec<Cron>) -> Self {
        CronSource::Items(items)
    }
}

impl CronSource {
    /// The items, or the parser's error naming where the mistake is.
    fn items(self) -> Result<Vec<CronItem>, Error> {
        let crontab = match self {
            CronSource::Text(text) => cron::parse(&text).map_err(crontab_error("text"))?,
            CronSource::File(path) => {
                let origin = format!("file {}", path.display());
                let text = std::fs::read_to_string(&path).map_err(crontab_error(&origin))?;
                cron::parse(&text).map_err(crontab_error(&origin))?
            }
            CronSource::Items(items) => {
                let items = items.into_iter().map(Cron::build).collect::<Result<Vec<_>, _>>();
                Crontab::from_items(items.map_err(crontab_error("items"))?).map_err(crontab_error("items"))?
            }
        };
        Ok(crontab.into_items())
    }
}

/// Wraps a crontab problem from `origin` in [`Error::Crontab`].
fn crontab_error<E: std::error::Error + Send + Sync + 'static>(origin: &str) -> impl FnOnce(E) -> Error + '_ {
    move |e| Error::Crontab { origin: origin.to_owned(), source: Box::new(e) }
}

impl<R: Runtime + Default> Default for WorkerOptions<R> {
    fn default() -> Self {
        Self::with_runtime(Arc::new(R::default()))
    }
}

impl<R> WorkerOptions<R> {
    /// Options for a worker on `runtime`.
    pub fn with_runtime(runtime: Arc<dyn Runtime>) -> Self {
        WorkerOptions {
            runtime,
            _runtime: PhantomData,
            connection: None,
            schema: DEFAULT_SCHEMA.to_owned(),
            config: machine::Config::default(),
            max_pool_size: 10,
            handlers: Handlers::default(),
            flags_fn: None,
            prepared_statements: true,
            hooks: Vec::new(),
            crontabs: Vec::new(),
            queue_depth_interval: Duration::from_secs(10),
            extensions: Extensions::default(),
        }
    }
    /// Schedule recurring jobs: crontab text, a crontab file, or typed [`Cron`] items (see
    /// [`CronSource`]); may be called several times. A mistake fails [`Self::init`] with
    /// the line and column. Each (item, minute) is scheduled once across all workers that
    /// share the database; `run_once` does not schedule.
    pub fn with_cron(mut self, source: impl Into<CronSource>) -> Self {
        self.crontabs.push(source.into());
        self
    }
    /// Connect with this connection string (`postgres://` URL or key=value settings).
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.connection = Some(Connection::Url(url.into()));
        self
    }
    /// Use an existing pool.
    pub fn pool(mut self, pool: Pool) -> Self {
        self.connection = Some(Connection::Pool(pool));
        self
    }
    /// The schema of the job tables (default `graphile_worker`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }
    /// Jobs run at the same time (default 10).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n.max(1);
        self
    }
    /// How often to look for jobs when no notification comes (default 2 s).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.config.poll_interval = to_chrono(every);
        self
    }
    /// Hold up to `size` prefetched jobs (default 5000; 0: fetch only for free slots).
    ///
    /// Prefetched jobs are locked by this worker, so others cannot run them. The batch
    /// adapts to keep that short: it starts at `concurrency` and grows (up to a third of
    /// `size`; under 300, up to half of it or 100 jobs) only when a full batch arrives to find the slots idle, so a worker holds
    /// about what it runs during one or two fetches. Queued jobs are given back at shutdown,
    /// or when no slot took one for [`Self::local_queue_ttl`] (and the batch starts small
    /// again).
    pub fn local_queue_size(mut self, size: usize) -> Self {
        self.config.local_queue_size = (size > 0).then_some(size);
        self
    }
    /// Give prefetched jobs back when every slot stayed busy this long (default 5 s), so an
    /// idle worker elsewhere runs them instead of them waiting behind slow tasks here. From
    /// 1 ms to 4 h (checked by [`Self::init`]).
    pub fn local_queue_ttl(mut self, ttl: Duration) -> Self {
        self.config.local_queue_ttl = to_chrono(ttl);
        self
    }
    /// How often to free locks older than four hours, graphile-worker's rule for workers
    /// that never heartbeat (default 8 min, plus up to a quarter, jittered; one sweep also
    /// runs at start). From 1 s to 4 h (checked by [`Self::init`]).
    pub fn lock_sweep_interval(mut self, every: Duration) -> Self {
        self.config.lock_sweep_interval = to_chrono(every);
        self
    }
    /// How often to look for workers whose lease lapsed and free their jobs (default 3 s,
    /// plus up to a third, jittered): a dead worker's jobs run again within
    /// `LEASE + SUSPICION_GRACE + 8/3 * every` (23 s by default). From 100 ms to the lease
    /// (10 s) (checked by [`Self::init`]).
    pub fn recovery_interval(mut self, every: Duration) -> Self {
        self.config.recovery_interval = to_chrono(every);
        self
    }
    /// Give the lease up when the worker's loop has not turned for this long (default 30 s;
    /// from 1 s to 1 h, checked by [`Self::init`]): a deadlock, or a hook or flags function
    /// that never returns, so its jobs run elsewhere instead of waiting on a worker that will
    /// never finish them. Tasks run beside the loop: however long they run or block, they
    /// never trigger it. The loop turns at least once a second.
    pub fn watchdog(mut self, limit: Duration) -> Self {
        self.config.watchdog = to_chrono(limit);
        self
    }
    /// The local queue's refetch delay (graphile-worker's `localQueue.refetchDelay`; off by
    /// default): after a fetch that found at most `delay.threshold` jobs, hold fetches for
    /// 0.5 to 1.5 times `delay.duration` unless notifications announce enough jobs meanwhile,
    /// so that many workers on a trickle of jobs do not all fetch each time. `init` refuses
    /// a duration longer than the poll interval.
    pub fn local_queue_refetch_delay(mut self, delay: machine::RefetchDelay) -> Self {
        self.config.refetch_delay = Some(delay);
        self
    }
    /// Batch completions for this long (zero: write each at once).
    pub fn complete_job_batch_delay(mut self, delay: Duration) -> Self {
        self.config.complete_batch_delay = to_chrono(delay);
        self
    }
    /// Batch failures for this long (zero: write each at once).
    pub fn fail_job_batch_delay(mut self, delay: Duration) -> Self {
        self.config.fail_batch_delay = to_chrono(delay);
        self
    }
    /// Abort a task of `identifier` that runs longer than `timeout`: its `abort_signal`
    /// fires and that attempt fails with `timed out after <timeout>` (retried as any
    /// failure).
    pub fn task_timeout(mut self, identifier: &str, timeout: Duration) -> Self {
        self.config.task_timeouts.insert(identifier.to_owned(), to_chrono(timeout));
        self
    }
    /// How long a graceful shutdown waits for running tasks before aborting them.
    pub fn graceful_shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.config.graceful_shutdown_timeout = to_chrono(timeout);
        self
    }
    /// Use this process's clock instead of the database's for due times and locks.
    pub fn use_local_time(mut self, yes: bool) -> Self {
        self.config.use_local_time = yes;
        self
    }
    /// The id written to `locked_by` (default: random `formica-<hex>`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.config.worker_id = id.into();
        self
    }
    /// Connections in the pool (default 10).
    pub fn max_pool_size(mut self, n: usize) -> Self {
        self.max_pool_size = n.max(1);
        self
    }
    /// Refuse jobs with any of these flags.
    pub fn forbidden_flags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, flags: I) -> Self {
        self.config.forbidden_flags = flags.into_iter().map(Into::into).collect();
        self
    }
    /// Refuse jobs with any of the flags `f` returns, asked before every fetch.
    pub fn forbidden_flags_fn<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<String>> + Send + 'static,
    {
        self.flags_fn = Some(Arc::new(move || f().boxed()));
        self
    }
    /// Send statements unprepared (for pgBouncer in transaction mode).
    pub fn prepared_statements(mut self, yes: bool) -> Self {
        self.prepared_statements = yes;
        self
    }
    /// Run jobs of task `T` with `T::run`.
    pub fn define_job<T: TaskHandler>(mut self) -> Self {
        self.handlers.define::<T>();
        self
    }
    /// Run jobs of task `identifier` with `run` (payload as JSON).
    pub fn define_raw_job<F, Fut>(mut self, identifier: &str, run: F) -> Self
    where
        F: Fn(JobContext, serde_json::Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = TaskResult> + Send + 'static,
    {
        self.handlers.define_raw(identifier, run);
        self
    }
    /// Run batch jobs of task `T` (payload: a JSON array of `T`) with `T::run_batch`: on a
    /// partial failure only the failed items are retried (see [`BatchTaskHandler`]).
    pub fn define_batch_job<T: BatchTaskHandler>(mut self) -> Self {
        self.handlers.define_batch::<T>();
        self
    }
    /// Run batch jobs of task `identifier` with `run`, given the payload's items as JSON; as
    /// [`Self::define_batch_job`], only the items whose result is an `Err` are retried.
    pub fn define_raw_batch_job<F, Fut>(mut self, identifier: &str, run: F) -> Self
    where
        F: Fn(JobContext, Vec<serde_json::Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = BatchResult> + Send + 'static,
    {
        self.handlers.define_raw_batch(identifier, run);
        self
    }
    /// Give every task `value` (a database pool, an HTTP client, a configuration), reached
    /// by its type with [`JobContext::extension`]. One value per type: a second of the same
    /// type replaces the first.
    pub fn add_extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }
    /// With the `metrics` feature: how often the queue depth gauge is sampled, by one
    /// query (default 10 s).
    pub fn queue_depth_interval(mut self, every: Duration) -> Self {
        self.queue_depth_interval = every.max(Duration::from_millis(10));
        self
    }
    /// Call `hook` for every worker event.
    pub fn on_event(mut self, hook: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.hooks.push(Arc::new(hook));
        self
    }

    /// Check the options, connect, install or upgrade the schema, and return the worker,
    /// ready to run. An interval out of its bounds is an [`Error::Options`] naming it.
    ///
    /// Without `database_url` or `pool`, the connection string is `DATABASE_URL`, else the
    /// `PG*` variables alone. Connections made here carry the worker id as
    /// `application_name` unless the settings name one.
    pub async fn init(mut self) -> Result<Worker, Error> {
        self.config.validate().map_err(Error::Options)?;
        if self.config.worker_id.is_empty() {
            self.config.worker_id = random_worker_id();
        }
        let url =
            match self.connection {
                Some(Connection::Pool(pool)) => Err(pool),
                Some(Connection::Url(url)) => Ok(url),
                None => match std::env::var("DATABASE_URL") {
                    Ok(url) => Ok(url),
                    Err(_) if crate::settings::pg_env_is_set() => Ok(String::new()),
                    Err(_) => return Err(Error::Options(
                        "no database: set database_url(...) or pool(...), DATABASE_URL or PGHOST/PGDATABASE"
                            .into(),
                    )),
                },
            };
        let threads = Threads::of(self.runtime.clone())?;
        // The worker's own pool is driven on its thread: tasks cannot hold up its answers.
        let pool = match url {
            Err(pool) => pool,
            Ok(url) => {
                let mut settings = ConnectionSettings::parse(&url)?;
                settings.default_application_name(&self.config.worker_id);
                Pool::new(threads.io.clone(), settings, self.max_pool_size)
            }
        };
        let mut crontab = Vec::new();
        for source in self.crontabs {
            crontab.extend(source.items()?);
        }
        // Identifiers must be unique across every source.
        let crontab = Crontab::from_items(crontab).map_err(crontab_error("sources together"))?;
        let utils = WorkerUtils::new(pool, self.schema).with_use_local_time(self.config.use_local_time);
        utils.migrate().await?;
        let mut config = self.config;
        config.crontab = crontab.into_items();
        config.task_identifiers = self.handlers.0.keys().cloned().collect();
        let (inputs, receiver) = mpsc::unbounded();
        let metrics = Metrics::new(utils.pool(), &config.worker_id);
        Ok(Worker {
            shared: Arc::new(Shared {
                executor: Executor {
                    pool: utils.pool().clone(),
                    schema: utils.schema().to_owned(),
                    prepared: self.prepared_statements,
                    flags_fn: self.flags_fn,
                },
                utils,
                handlers: self.handlers,
                extensions: Arc::new(self.extensions),
                hooks: self.hooks,
                metrics,
                queue_depth_interval: self.queue_depth_interval,
                worker_id: config.worker_id.clone().into(),
            }),
            config,
            inputs,
            receiver,
            threads,
        })
    }
}

fn to_chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// A worker id unlikely to collide: the process id, the start time and a counter.
fn random_worker_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
    );
    format!("formica-{:016x}", h.finish())
}

/// What every spawned piece of the loop shares.
struct Shared {
    utils: WorkerUtils,
    executor: Executor,
    handlers: Handlers,
    extensions: Arc<Extensions>,
    hooks: Vec<Hook>,
    metrics: Metrics,
    queue_depth_interval: Duration,
    worker_id: Arc<str>,
}

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
    shared: Arc<Shared>,
    config: machine::Config,
    inputs: mpsc::UnboundedSender<Input>,
    receiver: mpsc::UnboundedReceiver<Input>,
    threads: Threads,
}

struct Running {
    abort: AbortHandle,
    trigger: AbortTrigger,
    /// Its end was reported: by the task, or for it once it was given up on.
    reported: Arc<AtomicBool>,
}

/// How long a task told to abort may take to stop before its attempt ends without it: a
/// handler that blocks its thread never sees the signal, and its slot, its job and a
/// shutdown would wait for it forever. Its thread stays busy until it returns.
const GIVE_UP_ON_ABORTED_TASK_AFTER: Duration = Duration::from_secs(5);

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
        let keeping = LeaseKeeping {
            runtime: threads.lease.clone(),
            clock: clock.clone(),
            settings: shared.utils.pool().settings().clone(),
            schema: shared.utils.schema().to_owned(),
            worker_id: shared.worker_id.clone(),
            watchdog: config.watchdog,
            inputs: inputs.clone(),
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

/// Spawn `task` on `runtime`, stopped by the returned handle.
fn spawn_abortable(runtime: &dyn Runtime, task: impl Future<Output = ()> + Send + 'static) -> AbortHandle {
    let (handle, registration) = AbortHandle::new_pair();
    runtime.spawn(Box::pin(Abortable::new(task, registration).map(|_| ())));
    handle
}

/// Stops what it holds when dropped.
struct Stop(AbortHandle);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Where a worker's parts run (see [`Runtime::dedicated`]).
struct Threads {
    /// The application's runtime: tasks run there, and the clocks are read from it.
    tasks: Arc<dyn Runtime>,
    /// The loop, its connections and its LISTEN stream.
    io: Arc<dyn Runtime>,
    /// The lease's keeper.
    lease: Arc<dyn Runtime>,
}

impl Threads {
    fn of(runtime: Arc<dyn Runtime>) -> Result<Self, Error> {
        let dedicated = |name| match runtime.dedicated(name) {
            Some(Ok(thread)) => Ok(thread),
            Some(Err(e)) => Err(Error::Internal(format!("could not start the {name} thread: {e}"))),
            None => Ok(runtime.clone()),
        };
        Ok(Threads {
            io: dedicated("formica-io")?,
            lease: dedicated("formica-lease")?,
            tasks: runtime.clone(),
        })
    }
}

/// The loop: it drives `formica_core::worker::Worker`, on the worker's own thread.
struct Turning {
    shared: Arc<Shared>,
    config: machine::Config,
    inputs: mpsc::UnboundedSender<Input>,
    receiver: mpsc::UnboundedReceiver<Input>,
    clock: Arc<Clock>,
    /// The worker's own thread: the loop's timers and its LISTEN stream run there, also
    /// when the pool was the application's.
    io: Arc<dyn Runtime>,
    /// Tasks to start on the application's runtime, a turn's at a time.
    starts: mpsc::UnboundedSender<Vec<BoxFuture<'static, ()>>>,
    /// Stops the lease's keeper when the loop ends, however it ends.
    keeper: Stop,
}

/// The loop turns at least this often, idle or not, so the lease's keeper can tell an idle
/// loop from a wedged one.
const TURN_AT_LEAST_EVERY: chrono::Duration = chrono::Duration::seconds(1);

impl Turning {
    async fn run(self) -> Result<(), Error> {
        let Turning { shared, config, inputs, mut receiver, clock, io: runtime, starts, keeper: _keeper } =
            self;
        let mut machine = machine::Worker::new(config, clock.now());
        let mut running: HashMap<i64, Running> = HashMap::new();
        let mut listener: Option<AbortHandle> = None;
        let mut gave_up = None;
        // Statements in flight, and timers of tasks given up on: each may give an input.
        let mut queries: FuturesUnordered<BoxFuture<'static, Option<Input>>> = FuturesUnordered::new();
        let mut turn = Turn::default();
        let sampler = sample_queue_depth(&shared);
        let mut to_start = Vec::new();
        loop {
            while let Some(effect) = machine.poll_effect() {
                match effect {
                    Effect::Query { id, statement } => {
                        // Polled by this loop, not spawned: its answer needs no channel and
                        // no task switch on the way to the machine.
                        let shared = shared.clone();
                        let fetch = matches!(statement, Statement::GetJobs { .. });
                        let sent = runtime.monotonic();
                        queries.push(Box::pin(async move {
                            if fetch {
                                tracing::trace!(target: "formica::latency", "fetch sent");
                            }
                            let result = shared.executor.execute(statement).await;
                            if fetch {
                                tracing::trace!(target: "formica::latency", "fetch answered");
                                shared.metrics.fetched(
                                    shared.utils.pool().runtime().monotonic() - sent,
                                    fetched(&result),
                                );
                            }
                            Some(Input::QueryDone { id, result })
                        }));
                    }
                    Effect::StartTask { job } => {
                        let job_id = job.id;
                        let (abort, task) = start_task(&shared, job, inputs.clone());
                        running.insert(job_id, abort);
                        // Not a step of it here: a handler may block the thread it runs on.
                        to_start.push(task);
                    }
                    Effect::AbortTask { job_id } => {
                        if let Some(task) = running.remove(&job_id) {
                            task.trigger.fire();
                            task.abort.abort();
                            let (give_up, worker_id) =
                                (runtime.sleep(GIVE_UP_ON_ABORTED_TASK_AFTER), shared.worker_id.clone());
                            queries.push(Box::pin(async move {
                                give_up.await;
                                if task.reported.swap(true, Ordering::AcqRel) {
                                    return None;
                                }
                                tracing::warn!(
                                    worker_id = &*worker_id,
                                    job_id,
                                    "the task did not stop within {GIVE_UP_ON_ABORTED_TASK_AFTER:?} of being told \
                                     to (it blocks its thread): its job fails for good, and its thread stays \
                                     busy until it returns"
                                );
                                Some(Input::TaskFinished { job_id, outcome: TaskOutcome::Unstoppable })
                            }));
                        }
                    }
                    Effect::ConnectListener => {
                        let (handle, registration) = AbortHandle::new_pair();
                        if let Some(old) = listener.replace(handle) {
                            old.abort();
                        }
                        let settings = shared.utils.pool().settings().clone();
                        let task = listen(runtime.clone(), settings, inputs.clone());
                        runtime.spawn(Box::pin(Abortable::new(task, registration).map(|_| ())));
                    }
                    Effect::Emit(event) => {
                        if let Event::JobComplete { job_id, .. } = &event {
                            running.remove(job_id);
                        }
                        if let Event::GaveUp { statement, error } = &event {
                            gave_up = Some(Error::GaveUp { statement, error: error.clone() });
                        }
                        log_event(&event, &shared.worker_id);
                        shared.metrics.event(&event);
                        for hook in &shared.hooks {
                            hook(&event);
                        }
                    }
                    Effect::Stopped => {
                        for task in listener.take().into_iter().chain(sampler) {
                            task.abort();
                        }
                        return gave_up.map_or(Ok(()), Err);
                    }
                }
            }
            let mut now = clock.now();
            clock.loop_turned(now);
            let deadline = machine.poll_timeout().map(|(at, _)| at);
            // A deadline that passed and inputs already waiting are taken without arming a
            // timer, in turns (so an always-due timer cannot starve answers and signals, nor
            // a flood of answers the timer); only an idle loop sleeps.
            let due = deadline.is_some_and(|at| at <= now);
            let ready = turn.next(|source| match source {
                Source::Timer => due.then_some(Input::Timeout),
                Source::Queries => queries.next().now_or_never().flatten().flatten(),
                Source::Channel => receiver.try_recv().ok(),
            });
            let spent = ready.is_some() && turn.spent();
            // The tasks go to the application's runtime together once the inputs waiting
            // are taken: one hand-over to another thread for many jobs under load.
            let handing_over = (ready.is_none() || spent) && !to_start.is_empty();
            if handing_over && starts.unbounded_send(std::mem::take(&mut to_start)).is_err() {
                // `run` was dropped: so is this loop, at its next await.
                return Ok(());
            }
            if spent {
                // Let the runtime run what this loop spawned (the listener, the queries' own
                // tasks) before taking more: on a single-threaded runtime they would wait.
                YieldNow(false).await;
                now = clock.now();
            }
            let (input, now) = match ready {
                Some(input) => (input, now),
                None => {
                    turn.rested();
                    let wake =
                        deadline.map_or(now + TURN_AT_LEAST_EVERY, |at| at.min(now + TURN_AT_LEAST_EVERY));
                    let timer = runtime.sleep_until(clock.instant_at(wake));
                    // An empty set of queries ends its stream: wait on it only when not empty.
                    let answer = match queries.is_empty() {
                        true => Either::Left(futures::future::pending()),
                        false => Either::Right(queries.select_next_some()),
                    };
                    let inputs = futures::future::select(receiver.next(), answer);
                    let input = match futures::future::select(inputs, timer).await {
                        Either::Left((Either::Left((Some(input), _)), _)) => input,
                        Either::Left((Either::Right((Some(answer), _)), _)) => answer,
                        Either::Left((Either::Right((None, _)), _)) => continue,
                        // Every sender lives in this function or in tasks it spawned:
                        // unreachable, but if it happens there is nothing left to wait for.
                        Either::Left((Either::Left((None, _)), _)) => return Ok(()),
                        // Only turning: nothing is due yet.
                        Either::Right(((), _)) if deadline.is_none_or(|at| at > wake) => continue,
                        Either::Right(((), _)) => Input::Timeout,
                    };
                    (input, clock.now())
                }
            };
            if let Input::TaskFinished { job_id, .. } = &input {
                running.remove(job_id);
            }
            machine
                .handle(input, now)
                .map_err(|e| Error::Internal(format!("the worker's state machine refused an input: {e}")))?;
        }
    }
}

/// How many jobs a fetch brought (`None`: it failed).
fn fetched(result: &QueryResult) -> Option<usize> {
    match result {
        QueryResult::Jobs { jobs, undecodable } => Some(jobs.len() + undecodable.len()),
        QueryResult::Tasks(_) | QueryResult::KnownCrontabs(_) | QueryResult::Done | QueryResult::Err(_) => {
            None
        }
    }
}

/// With metrics on, sample the queue depth now and at every interval until aborted.
fn sample_queue_depth(shared: &Arc<Shared>) -> Option<AbortHandle> {
    if !shared.metrics.enabled() {
        return None;
    }
    let (handle, registration) = AbortHandle::new_pair();
    let (shared, runtime) = (shared.clone(), shared.utils.pool().runtime().clone());
    let spawner = runtime.clone();
    let sampling = async move {
        loop {
            shared.metrics.sample_queue_depth(&shared.utils).await;
            runtime.sleep(shared.queue_depth_interval).await;
        }
    };
    spawner.spawn(Box::pin(Abortable::new(sampling, registration).map(|_| ())));
    Some(handle)
}

/// Where the loop looks for a ready input.
#[derive(Debug, Clone, Copy)]
enum Source {
    Timer,
    Queries,
    Channel,
}

/// Inputs taken in a row without waiting, before the loop yields to the runtime once.
const BUDGET: u32 = 64;

/// Whose turn it is to be looked at first, and how much of the budget is left.
#[derive(Debug, Default)]
struct Turn {
    first: usize,
    taken: u32,
}

impl Turn {
    const SOURCES: [Source; 3] = [Source::Timer, Source::Queries, Source::Channel];

    /// The first ready input, looking at the sources in turn from the one after the source
    /// that gave the last input.
    fn next(&mut self, mut ready: impl FnMut(Source) -> Option<Input>) -> Option<Input> {
        for i in 0..Self::SOURCES.len() {
            let at = (self.first + i) % Self::SOURCES.len();
            if let Some(input) = ready(Self::SOURCES[at]) {
                self.first = (at + 1) % Self::SOURCES.len();
                self.taken += 1;
                return Some(input);
            }
        }
        None
    }

    /// Whether the budget is spent (it then starts over).
    fn spent(&mut self) -> bool {
        let spent = self.taken >= BUDGET;
        if spent {
            self.taken = 0;
        }
        spent
    }

    /// The loop waited: the budget starts over.
    fn rested(&mut self) {
        self.taken = 0;
    }
}

/// Pending once, waking itself at once: the runtime runs other tasks in between.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Spawnable future running `job`'s handler and reporting how it ended.
fn start_task(
    shared: &Arc<Shared>,
    job: formica_core::job::Job,
    inputs: mpsc::UnboundedSender<Input>,
) -> (Running, BoxFuture<'static, ()>) {
    let (trigger, signal): (AbortTrigger, AbortSignal) = AbortSignal::new();
    let (abort, registration) = AbortHandle::new_pair();
    let reported = Arc::new(AtomicBool::new(false));
    let running_reported = reported.clone();
    let job_id = job.id;
    let job_span = JobSpan::start(&job, &shared.worker_id);
    let span = tracing::info_span!("job", job_id, task = %job.task_identifier, worker_id = %shared.worker_id);
    let handler = shared.handlers.0.get(&job.task_identifier).cloned();
    let payload = job.payload.clone();
    let ctx = JobContext {
        job: Arc::new(job),
        worker_id: shared.worker_id.clone(),
        utils: shared.utils.clone(),
        abort: signal,
        span: span.clone(),
        extensions: shared.extensions.clone(),
    };
    let work = async move {
        match handler {
            Some(handler) => handler(ctx, payload).await,
            None => TaskOutcome::Err(format!(
                "Unsupported task {:?}: this worker has no handler for it",
                ctx.job.task_identifier
            )),
        }
    };
    let task = async move {
        let outcome = match AssertUnwindSafe(Abortable::new(work, registration)).catch_unwind().await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_aborted)) => TaskOutcome::Aborted,
            Err(panic) => TaskOutcome::Panicked(panic_message(&panic)),
        };
        job_span.end(&outcome);
        if !reported.swap(true, Ordering::AcqRel) {
            let _ = inputs.unbounded_send(Input::TaskFinished { job_id, outcome });
        }
    }
    .instrument(span);
    (Running { abort, trigger, reported: running_reported }, Box::pin(task))
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into());
    format!("task panicked: {}", storable(&text))
}
