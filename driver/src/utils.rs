//! `WorkerUtils`: adding and managing jobs from any part of an application.
//!
//! Every method validates what it can before the database is asked (the limits of
//! [`JobSpec::validate`]) and goes through the schema's own SQL functions, so jobs added
//! here are exactly what graphile-worker's `add_job` would have stored. The `*_in`
//! variants take the caller's client or transaction, so a job can be added atomically
//! with the caller's own writes (with the `sqlx` feature, `crate::sqlx` does the same on a
//! sqlx connection). `list_jobs` is with the other reads of the queue, in
//! [`crate::inspect`]. The statements themselves live in `jobs`, once for every client; they
//! are sent unnamed with their parameter types: one round trip each, and nothing left on
//! the session, so they work behind pgBouncer in transaction mode.

use crate::db::Pool;
use crate::error::Error;
use crate::jobs::{raw_jobs_of, Jobs};
pub use crate::jobs::{Cancelled, CleanupTask, JobFilter, Recorded};
use crate::middleware::add::AddLayers;
use crate::migrate::{check, migrate, MigrationReport};
use crate::records_table::RecordsKnown;
use formica_core::job::{Job, JobSpec, Task};
pub use formica_core::job::{RawJob, RescheduleJobOptions};
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::GenericClient;

/// The schema graphile-worker uses unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "graphile_worker";

/// Adds and manages jobs. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct WorkerUtils {
    pool: Pool,
    schema: String,
    use_local_time: bool,
    add_layers: AddLayers,
    records: RecordsKnown,
}

impl WorkerUtils {
    /// Utilities over `pool` for the schema `schema`.
    pub fn new(pool: Pool, schema: impl Into<String>) -> Self {
        WorkerUtils {
            pool,
            schema: schema.into(),
            use_local_time: false,
            add_layers: AddLayers::default(),
            records: RecordsKnown::default(),
        }
    }

    /// Give jobs without a `run_at` the application's clock rather than the database's
    /// `now()` (useful when the two disagree, or in tests that control time).
    pub fn use_local_time(mut self, yes: bool) -> Self {
        self.use_local_time = yes;
        self
    }

    /// Pass every job these utilities add through `layer` first, after the layers given
    /// before (see [`Next`](crate::Next)): it may fill or check the job's fields, or refuse
    /// it with a reason, which fails the add with [`Error::Refused`] and stores nothing (for
    /// `add_jobs`, none of the batch).
    ///
    /// ```ignore
    /// let utils = utils.before_add(|job| match job.payload.get("tenant") {
    ///     Some(_) => Ok(()),
    ///     None => Err("every job names its tenant".into()),
    /// });
    /// ```
    pub fn before_add<F>(self, layer: F) -> Self
    where
        F: Fn(&mut RawJob) -> Result<(), String> + Send + Sync + 'static,
    {
        let add_layers = self.add_layers.with(layer);
        self.with_add_layers(add_layers)
    }

    pub(crate) fn with_add_layers(mut self, layers: AddLayers) -> Self {
        self.add_layers = layers;
        self
    }

    pub(crate) fn add_layers(&self) -> &AddLayers {
        &self.add_layers
    }

    /// The schema these utilities work on.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The pool these utilities use.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Install or upgrade the schema beside any other migrator; a current schema is only read.
    pub async fn migrate(&self) -> Result<MigrationReport, Error> {
        let mut client = self.pool.get().await?;
        Ok(migrate(&mut client, &self.schema).await?)
    }

    /// With reads alone, check that the schema has every migration this Formica needs
    /// (returning the ledger's newest id), else fail with [`crate::MigrateError::NotMigrated`]
    /// naming what is missing. Needs only USAGE on the schemas and SELECT on their ledgers.
    pub async fn check_migrated(&self) -> Result<i32, Error> {
        let client = self.pool.get().await?;
        Ok(check(&client, &self.schema).await?)
    }

    /// The operations on this schema, dating jobs without a `run_at` by the chosen clock.
    pub(crate) fn jobs(&self) -> Jobs<'_> {
        Jobs {
            schema: &self.schema,
            default_run_at: self.use_local_time.then(|| self.pool.runtime().now()),
            records: &self.records,
            now: Some(self.pool.runtime().now()),
        }
    }

    /// Add a job of task `T` with `payload`.
    pub async fn add_job<T: Task + Serialize>(&self, payload: &T, spec: JobSpec) -> Result<Job, Error> {
        self.add_raw_job(T::IDENTIFIER, serde_json::to_value(payload)?, spec.with_policy(&T::POLICY)).await
    }

    /// Add a job of the task named `identifier`.
    pub async fn add_raw_job(&self, identifier: &str, payload: Value, spec: JobSpec) -> Result<Job, Error> {
        let client = self.pool.get().await?;
        self.add_raw_job_in(&*client, identifier, payload, spec).await
    }

    /// [`Self::add_job`] through the caller's client or transaction.
    pub async fn add_job_in<C: GenericClient + Sync, T: Task + Serialize>(
        &self,
        client: &C,
        payload: &T,
        spec: JobSpec,
    ) -> Result<Job, Error> {
        self.add_raw_job_in(
            client,
            T::IDENTIFIER,
            serde_json::to_value(payload)?,
            spec.with_policy(&T::POLICY),
        )
        .await
    }

    /// [`Self::add_raw_job`] through the caller's client or transaction.
    pub async fn add_raw_job_in<C: GenericClient + Sync>(
        &self,
        client: &C,
        identifier: &str,
        payload: Value,
        spec: JobSpec,
    ) -> Result<Job, Error> {
        if self.add_layers.is_empty() {
            return self.jobs().add(client, identifier, payload, spec).await;
        }
        let job = self.add_layers.apply(RawJob::new(identifier, payload, spec))?;
        self.jobs().add(client, &job.identifier, job.payload, job.spec).await
    }

    /// Add several jobs of task `T` in one statement, as [`Self::add_raw_jobs`].
    pub async fn add_jobs<T: Task + Serialize>(&self, jobs: &[(T, &JobSpec)]) -> Result<Vec<Job>, Error> {
        self.add_raw_jobs(&raw_jobs_of(jobs)?).await
    }

    /// Add several jobs in one statement (a second names the tasks and queues the batch
    /// registered; jobs without key or queue of a new task take a third). A key clash is
    /// resolved as `preserve_run_at` for the whole batch if any job asks for it, else as
    /// `replace`; `unsafe_dedupe` is refused. Two jobs with the same key in one batch are
    /// refused by the database.
    pub async fn add_raw_jobs(&self, jobs: &[RawJob]) -> Result<Vec<Job>, Error> {
        let client = self.pool.get().await?;
        self.add_raw_jobs_in(&*client, jobs).await
    }

    /// [`Self::add_raw_jobs`] through the caller's client or transaction.
    pub async fn add_raw_jobs_in<C: GenericClient + Sync>(
        &self,
        client: &C,
        jobs: &[RawJob],
    ) -> Result<Vec<Job>, Error> {
        self.jobs().add_many(client, &self.add_layers.apply_all(jobs)?).await
    }

    /// Add one job whose payload is the array of `payloads`: with a job key, later batches
    /// for the same key are appended to it while it waits.
    pub async fn add_batch_job<T: Task + Serialize>(
        &self,
        payloads: &[T],
        spec: JobSpec,
    ) -> Result<Job, Error> {
        self.add_raw_job(T::IDENTIFIER, serde_json::to_value(payloads)?, spec.with_policy(&T::POLICY)).await
    }

    /// Remove the job holding `job_key`. A job a worker is running cannot be removed: it
    /// loses its key and will not be retried. `None` if no job holds the key.
    pub async fn remove_job(&self, job_key: &str) -> Result<Option<Job>, Error> {
        let client = self.pool.get().await?;
        self.jobs().remove(&*client, job_key).await
    }

    /// Delete the given jobs as if they had succeeded (jobs a worker holds are skipped).
    /// Returns the jobs deleted.
    pub async fn complete_jobs(&self, ids: &[i64]) -> Result<Vec<Job>, Error> {
        let client = self.pool.get().await?;
        self.jobs().complete(&*client, ids).await
    }

    /// Mark the given jobs as failed for good with `reason` (jobs a worker holds are
    /// skipped). Returns the jobs changed.
    pub async fn permanently_fail_jobs(&self, ids: &[i64], reason: Option<&str>) -> Result<Vec<Job>, Error> {
        let client = self.pool.get().await?;
        self.jobs().permanently_fail(&*client, ids, reason).await
    }

    /// Cancel the given jobs with `reason`. One no worker holds fails for good at once
    /// (`attempts = max_attempts`, `last_error` `cancelled: <reason>`; it is kept so the
    /// reason can be read). For a held one a cancel request is recorded in Formica's records
    /// schema (a second request keeps the first reason) and the workers are woken: its
    /// Formica worker reads the request at once if its listener is up, else after its next
    /// heartbeat (within about 3 s; pgBouncer in transaction mode included), fires the
    /// task's `abort_signal` and fails the job the same way, unless the task succeeded first
    /// (then it completes, and only that is recorded). A request whose job is released
    /// unfinished (its worker died, gave it back) is applied by the recovery sweep; a job
    /// graphile-worker holds runs on and ends cancelled when released, unless it succeeded.
    /// Any number of ids and any reason fit. Ids that match no job are left out of the
    /// answer.
    pub async fn cancel_jobs(&self, ids: &[i64], reason: &str) -> Result<Cancelled, Error> {
        let client = self.pool.get().await?;
        self.jobs().cancel(&*client, ids, reason).await
    }

    /// [`cancel_jobs`](Self::cancel_jobs) for one job.
    pub async fn cancel_job(&self, id: i64, reason: &str) -> Result<Cancelled, Error> {
        self.cancel_jobs(&[id], reason).await
    }

    /// Change when and how the given jobs run (jobs a worker holds are skipped). Returns
    /// the jobs changed.
    pub async fn reschedule_jobs(
        &self,
        ids: &[i64],
        options: &RescheduleJobOptions,
    ) -> Result<Vec<Job>, Error> {
        let client = self.pool.get().await?;
        self.jobs().reschedule(&*client, ids, options).await
    }

    /// Release every job and queue locked by the given workers (known to be dead), so other
    /// workers can take them at once instead of after their lease lapses (graphile-worker's:
    /// the four-hour stale-lock period). Refused, releasing nothing, with
    /// [`Error::WorkersAlive`] if one of them holds a live lease: a Formica worker renewing
    /// it may be running those jobs, which would then run twice. A worker that stopped
    /// cleanly ended its lease; one killed moments ago keeps it until it expires: see
    /// [`Self::force_unlock_workers_even_if_alive`].
    pub async fn force_unlock_workers(&self, worker_ids: &[&str]) -> Result<(), Error> {
        let client = self.pool.get().await?;
        self.jobs().force_unlock_workers(&*client, worker_ids, false).await
    }

    /// [`Self::force_unlock_workers`] even for workers holding a live lease: for a worker
    /// known to be dead before its lease expires. If it is in fact alive, the jobs it is
    /// running run twice.
    pub async fn force_unlock_workers_even_if_alive(&self, worker_ids: &[&str]) -> Result<(), Error> {
        let client = self.pool.get().await?;
        self.jobs().force_unlock_workers(&*client, worker_ids, true).await
    }

    /// Run housekeeping `tasks` (in graphile-worker's order, whatever the order given).
    /// `keep_task_identifiers` are never garbage-collected.
    pub async fn cleanup(&self, tasks: &[CleanupTask], keep_task_identifiers: &[&str]) -> Result<(), Error> {
        let client = self.pool.get().await?;
        self.jobs().cleanup(&*client, tasks, keep_task_identifiers).await
    }
}
