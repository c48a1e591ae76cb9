//! How to build a worker: [`WorkerOptions`] (its crontab sources in `cron_source.rs`) and `init`, which checks
//! the options, connects and hands back a [`Worker`] ready to run.

use super::run::Worker;
use super::shared::Shared;
use super::threads::Threads;
use crate::db::Pool;
use crate::error::Error;
use crate::extensions::Extensions;
use crate::log::Hook;
use crate::metrics::Metrics;
use crate::middleware::add::AddLayers;
use crate::middleware::{Next, RunLayers, TaskOutcome};
use crate::runtime::Runtime;
use crate::settings::ConnectionSettings;
use crate::statements::{Catalog, Executor, FlagsFn};
use crate::task::{BatchResult, BatchTaskHandler, Handlers, JobContext, TaskHandler, TaskResult};
use crate::utils::{WorkerUtils, DEFAULT_SCHEMA};
use formica_core::cron::{self, Crontab};
use formica_core::job::Payload;
use formica_core::job::RawJob;
use formica_core::policy::TaskPolicy;
use formica_core::worker::{self as machine, Event, Pruning};
use futures::channel::mpsc;
use futures::future::FutureExt;
mod cron_source;
mod schedules;
use cron_source::crontab_error;
pub use cron_source::CronSource;
pub use schedules::DEFAULT_SCHEDULES_POLL;

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

enum Database {
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
    database: Option<Database>,
    schema: String,
    migrate: bool,
    config: machine::Config,
    max_pool_size: usize,
    pub(crate) handlers: Handlers,
    run_layers: RunLayers,
    add_layers: AddLayers,
    flags_fn: Option<FlagsFn>,
    prepared_statements: bool,
    hooks: Vec<Hook>,
    crontabs: Vec<CronSource>,
    cron_zone: Option<cron::Tz>,
    queue_depth_interval: Duration,
    extensions: Extensions,
    pub(crate) history: crate::history::HistoryOptions,
    pub(crate) job_logs: Option<crate::JobLogs>,
    pub(crate) encryption: Option<crate::Encryption>,
    workflow_resolve_every: Duration,
    age_every: Duration,
    health_thresholds: crate::inspect::Thresholds,
}

impl<R: Runtime + Default> Default for WorkerOptions<R> {
    fn default() -> Self {
        Self::with_runtime(Arc::new(R::default()))
    }
}

/// The most connections a worker's own pool opens, unless [`WorkerOptions::max_pool_size`]
/// says otherwise.
pub const DEFAULT_MAX_POOL_SIZE: usize = 10;

/// How often the queue depth gauge is sampled, unless
/// [`WorkerOptions::queue_depth_interval`] says otherwise.
pub const DEFAULT_QUEUE_DEPTH_INTERVAL: Duration = Duration::from_secs(10);

impl<R> WorkerOptions<R> {
    /// Options for a worker on `runtime`.
    pub fn with_runtime(runtime: Arc<dyn Runtime>) -> Self {
        WorkerOptions {
            runtime,
            _runtime: PhantomData,
            database: None,
            schema: DEFAULT_SCHEMA.to_owned(),
            migrate: true,
            config: machine::Config { vacuum_jobs: true, ..machine::Config::default() },
            max_pool_size: DEFAULT_MAX_POOL_SIZE,
            handlers: Handlers::default(),
            run_layers: RunLayers::default(),
            add_layers: AddLayers::default(),
            flags_fn: None,
            prepared_statements: true,
            hooks: Vec::new(),
            crontabs: Vec::new(),
            cron_zone: None,
            queue_depth_interval: DEFAULT_QUEUE_DEPTH_INTERVAL,
            extensions: Extensions::default(),
            history: Default::default(),
            job_logs: None,
            encryption: None,
            workflow_resolve_every: crate::workflows::DEFAULT_RESOLVE_EVERY,
            age_every: crate::aging::DEFAULT_AGE_EVERY,
            health_thresholds: Default::default(),
        }
    }
    /// Schedule recurring jobs: crontab text, a crontab file, or typed [`Cron`](cron::Cron) items (see
    /// [`CronSource`]); may be called several times. A mistake fails [`Self::init`] with
    /// the line and column. Each (item, minute) is scheduled once across all workers that
    /// share the database; `run_once` does not schedule.
    pub fn cron(mut self, source: impl Into<CronSource>) -> Self {
        self.crontabs.push(source.into());
        self
    }
    /// The zone whose wall clock cron items read their fields in when they name none
    /// (`?tz=` or a `CRON_TZ=` line); default UTC. See [`cron::zone`] for the DST rule.
    pub fn cron_time_zone(mut self, zone: cron::Tz) -> Self {
        self.cron_zone = Some(zone);
        self
    }
    /// How often this worker settles the workflow jobs that graphile-worker's workers ran
    /// (default 2 s, at least 100 ms; less up to a quarter, jittered; after a failed pass,
    /// twice as long as the one before up to a minute): see [`WorkerUtils::resolve_workflows`].
    /// One pass runs at a time across workers.
    pub fn workflow_resolve_every(mut self, every: Duration) -> Self {
        self.workflow_resolve_every = every;
        self
    }
    /// How often this worker runs the aging chore (default 10 s, at least 100 ms; less up to
    /// a quarter, jittered; after a failed pass, twice as long as the one before up to a
    /// minute): each pass ages the waiting jobs of the tasks given an
    /// [`Aging`](crate::Aging) (see [`WorkerUtils::set_aging`](crate::WorkerUtils::set_aging)),
    /// at most [`AGING_BATCH`](crate::AGING_BATCH) of them; with none set, a pass reads one
    /// empty table. One pass runs at a time across workers.
    pub fn age_priorities_every(mut self, every: Duration) -> Self {
        self.age_every = every;
        self
    }
    /// Run the reindexing chore this often (off by default; at least a minute): each pass
    /// rebuilds the most bloated index of the jobs table, if one is past the `bloat` health
    /// check's warning, with `REINDEX INDEX CONCURRENTLY`, one pass at a time across the
    /// schema's workers (see [`WorkerUtils::reindex_bloated`](crate::WorkerUtils::reindex_bloated)
    /// and docs/guide/health.md). Needs a role that owns the jobs table.
    pub fn reindex_bloated(mut self, every: Duration) -> Self {
        self.config.reindex_bloated = Some(to_chrono(every.max(crate::upkeep::MIN_REINDEX_EVERY)));
        self
    }
    /// Whether the worker vacuums the jobs table while it drains it (on by default): when
    /// what its fetches stepped over since its last vacuum (the index entries of the jobs
    /// locked since) costs as much as that vacuum took, it vacuums the table, skipping it if
    /// another vacuum holds it. A small local queue drains about a third faster for it
    /// (docs/performance.md, "A small local queue"). Needs a role that owns the jobs table;
    /// another vacuums nothing (see [`WorkerUtils::vacuum_jobs`](crate::WorkerUtils::vacuum_jobs)).
    pub fn vacuum_jobs(mut self, vacuum: bool) -> Self {
        self.config.vacuum_jobs = vacuum;
        self
    }
    /// What the health checks behind this worker's health metrics and its reindexing chore
    /// judge by (default [`Thresholds::default`](crate::inspect::Thresholds)).
    pub fn health_thresholds(mut self, thresholds: crate::inspect::Thresholds) -> Self {
        self.health_thresholds = thresholds;
        self
    }
    /// Connect with this connection string (`postgres://` URL or key=value settings).
    pub fn database_url(mut self, url: impl Into<String>) -> Self {
        self.database = Some(Database::Url(url.into()));
        self
    }
    /// Use an existing pool.
    pub fn pool(mut self, pool: Pool) -> Self {
        self.database = Some(Database::Pool(pool));
        self
    }
    /// The schema of the job tables (default `graphile_worker`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }
    /// Whether [`Self::init`] may install missing migrations (default true). Either way a
    /// current schema is only read; with `false`, a missing migration fails `init` with
    /// [`crate::MigrateError::NotMigrated`] naming it, so the worker's role needs no DDL rights.
    pub fn migrate(mut self, yes: bool) -> Self {
        self.migrate = yes;
        self
    }
    /// Jobs run at the same time (default 10; at least 1, checked by [`Self::init`]).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n;
        self
    }
    /// At most `n` jobs of `task` running at once in this worker (within `concurrency`;
    /// at least 1, or `init` refuses it). Across every worker, use a cap
    /// (`WorkerUtils::set_control`).
    pub fn task_concurrency(mut self, task: &str, n: usize) -> Self {
        self.config.task_concurrency.insert(task.to_owned(), n);
        self
    }
    /// How often to look for jobs when no notification comes (default 2 s; at least 10 ms,
    /// or `init` refuses it).
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.config.poll_interval = to_chrono(every);
        self
    }
    /// Hold up to `size` prefetched jobs (default 5000; 0: fetch only for free slots).
    ///
    /// Prefetched jobs are locked by this worker, so others cannot run them. The batch
    /// adapts to keep that short: it starts at `concurrency` and grows (up to a third of
    /// `size`; under 300, up to all of it or 100 jobs) only when a full batch arrives to find the slots idle, so a worker holds
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
    /// Run only jobs carrying at least one of these flags (none given: any job). A job
    /// without flags is then left to other workers, as is one with a forbidden flag.
    pub fn accepted_flags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, flags: I) -> Self {
        self.config.accepted_flags = flags.into_iter().map(Into::into).collect();
        self
    }
    /// Wrap every job's run in `layer`, inside the layers given before (see
    /// [`Next`](crate::Next)): it gets the job's context and the rest of the chain, and
    /// returns how the job ended, after running the rest with [`Next::run`] or without
    /// (`TaskOutcome::Skipped(reason)` completes the job unrun and reports it).
    pub fn around_run<F, Fut>(mut self, layer: F) -> Self
    where
        F: Fn(JobContext, Next) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = TaskOutcome> + Send + 'static,
    {
        self.run_layers = self.run_layers.with(layer);
        self
    }
    /// Give the worker's utilities (and so [`JobContext::add_job`]) this add layer, after
    /// those given before: see [`WorkerUtils::before_add`].
    pub fn before_add<F>(mut self, layer: F) -> Self
    where
        F: Fn(&mut RawJob) -> Result<(), String> + Send + Sync + 'static,
    {
        self.add_layers = self.add_layers.with(layer);
        self
    }
    /// Keep the `tracing` events inside each job's span at `logs.level` and above with the
    /// job, for as long as its history (docs/guide/job-logs.md). The events reach the worker
    /// only through a [`JobLogLayer`](crate::JobLogLayer) in the application's subscriber.
    /// Off by default.
    pub fn job_logs(mut self, logs: crate::JobLogs) -> Self {
        self.job_logs = Some(logs);
        self
    }
    /// Seal the payloads of `encryption`'s tasks as this worker's handlers add them, and open
    /// them before their handler runs (innermost: run layers see them sealed). A payload
    /// that cannot be opened (its key not in the ring, altered, not sealed) fails the attempt
    /// with a message saying why (docs/guide/encrypted-payloads.md).
    pub fn encrypt_payloads(mut self, encryption: crate::Encryption) -> Self {
        let adding = encryption.clone();
        self = self.before_add(move |job| adding.seal(job));
        self.encryption = Some(encryption);
        self
    }
    /// Send statements unprepared (for pgBouncer in transaction mode).
    pub fn prepared_statements(mut self, yes: bool) -> Self {
        self.prepared_statements = yes;
        self
    }
    /// Run jobs of task `T` with `T::run`, retried and snoozed by `T::POLICY`.
    pub fn define_job<T: TaskHandler>(mut self) -> Self {
        self.handlers.define::<T>();
        self.task_policy(T::IDENTIFIER, T::POLICY)
    }
    /// Retry and snooze jobs of task `identifier` by `policy` (a raw task's; a typed task's
    /// is its `POLICY`).
    pub fn task_policy(mut self, identifier: &str, policy: TaskPolicy) -> Self {
        self.config.task_policies.insert(identifier.to_owned(), policy);
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
    /// Run jobs of task `identifier` with `run`, given the payload as stored: its JSON text
    /// ([`Payload::text`], what an executable task is given), parsed only if `run` asks.
    pub fn define_payload_job<F, Fut>(mut self, identifier: &str, run: F) -> Self
    where
        F: Fn(JobContext, Payload) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = TaskResult> + Send + 'static,
    {
        self.handlers.define_payload(identifier, run);
        self
    }
    /// Run batch jobs of task `T` (payload: a JSON array of `T`) with `T::run_batch`: on a
    /// partial failure only the failed items are retried (see [`BatchTaskHandler`]).
    pub fn define_batch_job<T: BatchTaskHandler>(mut self) -> Self {
        self.handlers.define_batch::<T>();
        self.task_policy(T::IDENTIFIER, T::POLICY)
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
    /// The handlers defined so far (`testing::drain` keeps only some).
    #[cfg(feature = "testing")]
    pub(crate) fn handlers_mut(&mut self) -> &mut Handlers {
        &mut self.handlers
    }
    /// Call `hook` for every worker event.
    pub fn on_event(mut self, hook: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.hooks.push(Arc::new(hook));
        self
    }

    /// Check the options, connect, install or upgrade the schema if it lacks a migration
    /// (see [`Self::migrate`]), and return the worker,
    /// ready to run. An option out of its bounds (an interval, a concurrency of 0) is an
    /// [`Error::Options`] naming it.
    ///
    /// Without `database_url` or `pool`, the connection string is `DATABASE_URL`, else the
    /// `PG*` variables alone. Connections made here carry the worker id as
    /// `application_name` unless the settings name one.
    pub async fn init(mut self) -> Result<Worker, Error> {
        self.config.validate().map_err(Error::Options)?;
        if self.config.worker_id.is_empty() {
            self.config.worker_id = random_worker_id(self.runtime.now());
        }
        let url =
            match self.database {
                Some(Database::Pool(pool)) => Err(pool),
                Some(Database::Url(url)) => Ok(url),
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
            crontab.extend(source.items()?.into_iter().map(|item| item.in_zone_by_default(self.cron_zone)));
        }
        // Identifiers must be unique across every source.
        let crontab = Crontab::from_items(crontab).map_err(crontab_error("sources together"))?;
        let utils = WorkerUtils::new(pool, self.schema)
            .use_local_time(self.config.use_local_time)
            .with_add_layers(self.add_layers);
        if self.migrate {
            utils.migrate().await?;
        } else {
            utils.check_migrated().await?;
        }
        crate::history::check_writable(&utils, &self.history).await?;
        let mut config = self.config;
        config.crontab = crontab.into_items();
        config.task_identifiers = self.handlers.0.keys().cloned().collect();
        if let Some(encryption) = &self.encryption {
            encryption.wrap(&mut self.handlers);
        }
        self.run_layers.wrap(&mut self.handlers);
        config.latest_migration = formica_sql::LATEST;
        // The records schema is migrated with the schema: obey its pauses, run its chores.
        config.flow_control = true;
        config.prune_history = self.history.enabled.then(|| Pruning {
            retention: self.history.retention.to_core(),
            every: to_chrono(self.history.prune_every.max(crate::history::MIN_PRUNE_EVERY)),
        });
        let resolve_every = self.workflow_resolve_every.max(crate::workflows::MIN_RESOLVE_EVERY);
        config.resolve_workflows = Some(to_chrono(resolve_every));
        config.age_priorities = Some(to_chrono(self.age_every.max(crate::aging::MIN_AGE_EVERY)));
        // Each worker its own jitter: workers started together spread their sweeps and chores.
        config.seed = seed_of(&config.worker_id);
        let catalog = Catalog::new(utils.schema(), self.history.enabled)?;
        let (inputs, receiver) = mpsc::unbounded();
        let metrics = Metrics::new(utils.pool(), &config.worker_id);
        Ok(Worker {
            shared: Arc::new(Shared {
                executor: Executor {
                    pool: utils.pool().clone(),
                    catalog: Arc::new(catalog),
                    prepared: self.prepared_statements,
                    flags_fn: self.flags_fn,
                    parents: Default::default(),
                    outputs: crate::history::outputs(&self.history),
                    others_alive: Default::default(),
                },
                progress: crate::reports::latest::writer(utils.clone(), crate::PROGRESS_EVERY),
                logs: crate::reports::logs::LogWriter::new(&utils, self.job_logs.as_ref()),
                utils,
                handlers: self.handlers,
                extensions: Arc::new(self.extensions),
                hooks: self.hooks,
                metrics,
                queue_depth_interval: self.queue_depth_interval,
                health_thresholds: self.health_thresholds,
                worker_id: config.worker_id.clone().into(),
            }),
            config,
            inputs,
            receiver,
            threads,
        })
    }
}

/// A seed drawn from `worker_id` (stable: the same id jitters the same way).
fn seed_of(worker_id: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    worker_id.hash(&mut hasher);
    hasher.finish()
}

fn to_chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// A worker id unlikely to collide: the process id, the start time and a counter.
fn random_worker_id(now: chrono::DateTime<chrono::Utc>) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_i64(now.timestamp_nanos_opt().unwrap_or_default());
    format!("formica-{:016x}", h.finish())
}
