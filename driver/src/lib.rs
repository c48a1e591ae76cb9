//! formica: a PostgreSQL job queue that shares Graphile Worker's database.
//!
//! This crate is runtime-agnostic: it drives `formica-core`'s pure logic with a
//! PostgreSQL connection, timers and spawning supplied by a [`Runtime`]. Applications use
//! it through an adapter (`formica-tokio`, `formica-async-std`), which re-exports this API.
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
//! - [`rows`]: result rows read into [`Job`]s, for readers with queries of their own.
//! - with the `sqlx` feature, `sqlx`: adding and managing jobs inside a caller's sqlx
//!   transaction.
//! - with the `metrics` and `traces` features, OpenTelemetry metrics of the worker and a
//!   span per job run (see the README's "Observability").
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod db;
mod error;
mod extensions;
mod jobs;
mod listener;
mod metrics;
pub mod migrate;
pub mod rows;
pub mod runtime;
pub mod settings;
#[cfg(feature = "sqlx")]
pub mod sqlx;
#[doc(hidden)]
pub mod statements;
pub mod task;
pub mod tls;
mod traces;
pub mod utils;
mod watch;
pub mod worker;

pub use db::{Pool, PoolStatus, PooledClient};
pub use error::{Error, MigrateError};
pub use extensions::MissingExtension;
pub use formica_core::cron::{self, Cron, CronItem, Crontab, CrontabError};
pub use formica_core::job::{Job, JobKeyMode, JobSpec, JobSpecBuilder, JobSpecError, Task};
pub use formica_core::text;
pub use formica_core::worker::{Event, HEARTBEAT_INTERVAL, LEASE, RECOVERY_PERIOD, SUSPICION_GRACE};
pub use migrate::MigrationReport;
pub use runtime::{Address, Runtime, Socket};
pub use settings::ConnectionSettings;
pub use task::{AbortSignal, BatchResult, BatchTaskHandler, JobContext, TaskHandler, TaskResult};
pub use tls::{RootCert, SslMode};
pub use utils::{
    Cancelled, CleanupTask, JobFilter, RawJob, RescheduleJobOptions, WorkerUtils, DEFAULT_SCHEMA,
};
pub use worker::{CronSource, FlagsFn, Hook, Worker, WorkerHandle, WorkerOptions};
pub use {chrono, formica_sql as sql, serde_json, tokio_postgres};
