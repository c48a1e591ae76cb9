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
//! - [`runtime`]: what an adapter supplies.
//! - [`db`]: connections and the pool.
//! - [`settings`]: connection settings (URL, `key=value`, `PG*` variables, password file).
//! - [`tls`]: TLS with libpq's `sslmode`.
//! - [`migrate`]: installing and upgrading the `graphile_worker` schema.
//! - [`utils`]: [`WorkerUtils`], adding and managing jobs.
//! - [`task`]: [`TaskHandler`], [`BatchTaskHandler`] and what a running task can reach
//!   (application state through [`JobContext::extension`]).
//! - [`worker`]: [`WorkerOptions`] and [`Worker`], the loop that runs jobs.
//! - [`middleware`]: layers around every job's run and before every job added.
//! - [`workflows`]: jobs that wait for other jobs, and batches with a callback.
//! - [`rows`]: result rows read into [`Job`]s, for readers with queries of their own.
//! - with the `sqlx` feature, `sqlx`: adding and managing jobs inside a caller's sqlx
//!   transaction.
//! - with the `testing` feature, `testing`: a handler's unit test without a database,
//!   assertions on what was enqueued, and a schema per test (see `docs/guide/testing.md`).
//! - with the `metrics` and `traces` features, OpenTelemetry metrics of the worker and a
//!   span per job run, in the trace of the span the job was added in (see
//!   `docs/guide/observability.md` in the repository).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bulk;
mod clock;
pub mod controls;
pub mod db;
mod error;
mod extensions;
mod flow;
pub mod history;
pub mod identity;
pub mod inspect;
mod jobs;
mod lease;
mod listener;
mod log;
mod metrics;
pub mod middleware;
pub mod migrate;
mod params;
mod rate_limit;
pub mod rows;
pub mod runtime;
pub mod schedules;
pub mod settings;
#[cfg(feature = "sqlx")]
pub mod sqlx;
#[doc(hidden)]
pub mod statements;
pub mod task;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;
mod traces;
pub mod utils;
mod watch;
pub mod worker;
pub mod workflows;

pub use bulk::{BulkAction, BulkFilter};
pub use db::{Pool, PoolStatus, PooledClient};
pub use error::{Error, MigrateError};
pub use extensions::MissingExtension;
pub use formica_core::backoff::{self, Backoff};
pub use formica_core::cron::{self, Cron, CronItem, Crontab, CrontabError};
pub use formica_core::job::{Job, JobKeyMode, JobSpec, JobSpecBuilder, JobSpecError, Payload, Task};
pub use formica_core::policy::{self, TaskPolicy};
pub use formica_core::text;
pub use formica_core::unique::{self, Unique};
pub use formica_core::worker::{
    Event, RefetchDelay, HEARTBEAT_INTERVAL, LEASE, LOCK_SWEEP_INTERVAL, RECOVERY_PERIOD, SUSPICION_GRACE,
};
pub use history::{HistoryOptions, JobOutcome, Outcome, OutputTaskHandler, Retention};
pub use middleware::{Next, TaskOutcome};
pub use migrate::MigrationReport;
pub use runtime::{Address, Runtime, Socket};
pub use schedules::Schedule;
pub use settings::ConnectionSettings;
pub use task::{
    snooze, AbortSignal, BatchResult, BatchTaskHandler, JobContext, Snooze, TaskHandler, TaskResult,
};
pub use tls::{RootCert, SslMode};
pub use utils::{
    Cancelled, CleanupTask, JobFilter, RawJob, Recorded, RescheduleJobOptions, WorkerUtils, DEFAULT_SCHEMA,
};
pub use worker::{CronSource, FlagsFn, Hook, Worker, WorkerHandle, WorkerOptions};
pub use workflows::{
    AddedWorkflow, BatchReport, Callback, CancelledWorkflow, OnDependencyFailure, RetriedWorkflow, Workflow,
    WorkflowError, WorkflowJob,
};
pub use {chrono, chrono_tz, formica_sql as sql, serde_json, tokio_postgres};
