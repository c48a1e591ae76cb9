//! formica: a PostgreSQL job queue that shares Graphile Worker's database.
//!
//! This crate is runtime-agnostic: it drives `formica-core`'s pure logic with a
//! PostgreSQL connection, timers and spawning supplied by a [`Runtime`]. Applications use
//! it through an adapter (`formica-tokio`, `formica-async-std`), which re-exports this API.
//!
//! - [`runtime`]: what an adapter supplies.
//! - [`db`]: connections and the pool.
//! - [`migrate`]: installing and upgrading the `graphile_worker` schema.
//! - [`utils`]: [`WorkerUtils`], adding and managing jobs.
//! - [`task`]: [`TaskHandler`] and what a running task can reach.
//! - [`worker`]: [`WorkerOptions`] and [`Worker`], the loop that runs jobs.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod db;
mod error;
mod listener;
pub mod migrate;
mod rows;
pub mod runtime;
#[doc(hidden)]
pub mod statements;
pub mod task;
pub mod utils;
pub mod worker;

pub use db::{Pool, PooledClient};
pub use error::{Error, MigrateError};
pub use formica_core::cron::{self, Cron, CronItem, Crontab, CrontabError};
pub use formica_core::job::{Job, JobKeyMode, JobSpec, JobSpecBuilder, JobSpecError, Task};
pub use formica_core::text;
pub use formica_core::worker::{Event, HEARTBEAT_INTERVAL, LEASE, RECOVERY_PERIOD, SUSPICION_GRACE};
pub use migrate::MigrationReport;
pub use runtime::{Address, Runtime, Socket};
pub use task::{AbortSignal, JobContext, TaskHandler, TaskResult};
pub use utils::{
    Cancelled, CleanupTask, JobFilter, RawJob, RescheduleJobOptions, WorkerUtils, DEFAULT_SCHEMA,
};
pub use worker::{CronSource, FlagsFn, Hook, Worker, WorkerHandle, WorkerOptions};
pub use {chrono, formica_sql as sql, serde_json, tokio_postgres};
