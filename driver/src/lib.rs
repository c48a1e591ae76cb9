//! formica: a PostgreSQL job queue that shares Graphile Worker's database.
//!
//! This crate is runtime-agnostic: it drives `formica-core`'s pure logic with a
//! PostgreSQL connection, timers and spawning supplied by a [`Runtime`]. Applications use
//! it through an adapter (`formica-tokio`, `formica-async-std`), which re-exports this API
//! and supplies the runtime; depend on this crate to be generic over the runtime, or to
//! write an adapter.
//!
//! ```no_run
//! use formica::{JobContext, JobSpec, Runtime, Task, TaskHandler, TaskResult, WorkerOptions};
//! use std::sync::Arc;
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
//! /// Add a job and run every runnable job, on whichever runtime the adapter gives.
//! async fn welcome(runtime: Arc<dyn Runtime>) -> Result<(), formica::Error> {
//!     let worker = WorkerOptions::<()>::with_runtime(runtime)
//!         .database_url("postgres://localhost/app")
//!         .define_job::<SendWelcome>()
//!         .init() // connects and installs the schema
//!         .await?;
//!     let mail = SendWelcome { to: "ada@example.com".into() };
//!     worker.create_utils().add_job(&mail, JobSpec::default()).await?;
//!     worker.run_once().await // until no job is runnable; run() keeps going
//! }
//! ```
//!
//! The API is flat: the crate root holds every name an application uses, each at one
//! path. A few modules are namespaces of their own:
//!
//! - [`inspect`]: the queue as people see it (counts, jobs, workers, cron items,
//!   workflows, and its health: [`inspect::health`]), the read model of the dashboard and
//!   the `formica` command.
//! - [`rows`]: result rows read into [`Job`]s, for readers with queries of their own.
//! - [`cron`] (graphile-worker's crontab format: [`cron::Crontab`], [`cron::Cron`]),
//!   [`text`] (text made storable), [`unique`] (unique jobs' keys): the core's modules.
//! - [`controls`]: flow controls: pauses, and caps and rate limits as one [`controls::Control`].
//! - with the `sqlx` feature, `sqlx`: adding and managing jobs inside a caller's sqlx
//!   transaction.
//! - with the `testing` feature, `testing`: a handler's unit test without a database,
//!   assertions on what was enqueued, and a schema per test (see `docs/guide/testing.md`).
//! - with the `metrics` and `traces` features, OpenTelemetry metrics of the worker and a
//!   span per job run, in the trace of the span the job was added in (see
//!   `docs/guide/observability.md` in the repository).
//!
//! Spans of time a user sets or reads (timeouts, intervals, periods, delays) are
//! [`std::time::Duration`]; `chrono` is for points in time ([`chrono::DateTime`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod aging;
pub use aging::{Aging, AgingSet, AGING_BATCH};

mod bulk;
pub use bulk::{BulkAction, BulkFilter, DEFAULT_BULK_BATCH_SIZE};

mod db;
pub use db::{
    connect, connect_raw, connect_raw_watched, connect_watched, Pool, PoolStatus, PooledClient,
    RawConnection, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_RESPONSE_TIMEOUT,
};

mod durable;
pub use durable::StepError;
mod encryption;
pub use encryption::{encrypted_with, payload_as_shown, Encryption, Keyring, Rotated, ENVELOPE};

mod error;
pub use error::{Error, MigrateError};

mod extensions;
pub use extensions::MissingExtension;

mod history;
pub use history::{
    FinalState, HistoryBucket, HistoryFilter, HistoryOptions, JobOutcome, OutputTaskHandler, Pruned,
    Retention,
};

mod middleware;
pub use middleware::{Next, TaskOutcome};

mod migrate;
pub use migrate::MigrationReport;

mod upkeep;
pub use upkeep::REINDEX_TIMEOUT;
mod reports;
pub use reports::logs::{JobLogLayer, JobLogLine, JobLogs, JOB_LOGS_EVERY};
pub use reports::progress::{JobProgress, Progress, MAX_PROGRESS_VALUE, PROGRESS_EVERY};

mod runtime;
pub use runtime::{Address, Runtime, Socket};

mod schedules;
pub use schedules::{IntoSchedule, Schedule};

mod settings;
pub use settings::{pg_env_is_set, ConnectionSettings};

mod task;
pub use task::{
    snooze, AbortSignal, BatchResult, BatchTaskHandler, JobContext, Snooze, TaskHandler, TaskResult,
};

mod tls;
pub use tls::{RootCert, SslMode};

mod utils;
pub use utils::{
    Cancelled, CleanupTask, JobFilter, RawJob, Recorded, RescheduleJobOptions, WorkerUtils, DEFAULT_SCHEMA,
};

mod worker;
pub use worker::{
    CronSource, FlagsFn, Hook, Worker, WorkerHandle, WorkerOptions, DEFAULT_MAX_POOL_SIZE,
    DEFAULT_QUEUE_DEPTH_INTERVAL, DEFAULT_SCHEDULES_POLL,
};

mod workflows;
pub use workflows::{
    AddedWorkflow, BatchReport, Callback, CancelledWorkflow, DeletedWorkflow, OnDependencyFailure,
    OnSignalTimeout, RetriedWorkflow, SignalReport, SignalSent, SignalWait, Workflow, WorkflowError,
    WorkflowJob, DEFAULT_RESOLVE_EVERY,
};

pub mod controls;
pub mod dead_letters;
pub mod inspect;
pub mod rows;
#[cfg(feature = "sqlx")]
pub mod sqlx;
#[doc(hidden)]
pub mod statements;
#[cfg(feature = "testing")]
pub mod testing;

mod clock;
pub(crate) mod identity;
mod jobs;
mod lease;
mod listener;
mod log;
mod metrics;
mod params;
mod records_table;
mod traces;
mod waiting;
mod watch;

pub use formica_core::backoff::Backoff;
pub use formica_core::cron;
pub use formica_core::job::{Job, JobKeyMode, JobSpec, JobSpecBuilder, JobSpecError, Payload, Task};
pub use formica_core::policy::TaskPolicy;
pub use formica_core::text;
pub use formica_core::unique::Unique;
/// Unique jobs' keys and periods, as the claimed add computes them: for an application
/// that computes or tests a key itself.
pub mod unique {
    pub use formica_core::unique::{bucket, key, BadPeriod};
}
pub use formica_core::worker::{
    Event, RefetchDelay, HEARTBEAT_INTERVAL, LEASE, LOCK_SWEEP_INTERVAL, RECOVERY_PERIOD, SUSPICION_GRACE,
};
pub use {chrono, chrono_tz, formica_sql as sql, serde_json, tokio_postgres};
