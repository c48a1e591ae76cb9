//! `WorkerUtils`: adding and managing jobs from any part of an application.
//!
//! Every method validates what it can before the database is asked (the limits of
//! [`JobSpec::validate`]) and goes through the schema's own SQL functions, so jobs added
//! here are exactly what graphile-worker's `add_job` would have stored. The `*_in`
//! variants take the caller's client or transaction, so a job can be added atomically
//! with the caller's own writes. Statements are sent unnamed with their parameter types
//! (`query_typed`): one round trip each, and nothing left on the session, so they work
//! behind pgBouncer in transaction mode.

use crate::db::Pool;
use crate::error::Error;
use crate::migrate::{migrate, MigrationReport};
use crate::rows::{job_from_parts, job_from_row, jobs_from_rows};
use chrono::{DateTime, Utc};
use formica_core::job::{Job, JobKeyMode, JobSpec, JobSpecError, Task};
use formica_sql as sql;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::GenericClient;
use tokio_postgres::Row;

/// The schema graphile-worker uses unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "graphile_worker";

/// A job to add in a batch, for [`WorkerUtils::add_raw_jobs`].
#[derive(Debug, Clone, PartialEq)]
pub struct RawJob {
    /// The task identifier.
    pub identifier: String,
    /// The payload.
    pub payload: Value,
    /// Scheduling options.
    pub spec: JobSpec,
}

/// New values for [`WorkerUtils::reschedule_jobs`]; `None` leaves a column as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RescheduleJobOptions {
    /// New earliest run time.
    pub run_at: Option<DateTime<Utc>>,
    /// New priority.
    pub priority: Option<i16>,
    /// New attempt count.
    pub attempts: Option<i16>,
    /// New attempt limit.
    pub max_attempts: Option<i16>,
}

/// Which jobs [`WorkerUtils::list_jobs`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFilter {
    /// Only jobs of this task.
    pub task: Option<String>,
    /// Only jobs of this queue.
    pub queue: Option<String>,
    /// Only jobs that have failed at least once.
    pub failed: bool,
    /// Only jobs a worker holds.
    pub locked: bool,
    /// At most this many, oldest first.
    pub limit: i64,
}

impl Default for JobFilter {
    fn default() -> Self {
        JobFilter { task: None, queue: None, failed: false, locked: false, limit: 100 }
    }
}

/// Housekeeping that [`WorkerUtils::cleanup`] can do, in graphile-worker's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CleanupTask {
    /// Delete jobs that have used up their attempts and that no worker holds.
    DeletePermafailedJobs,
    /// Delete task identifiers no job uses (unsafe while workers that know them run,
    /// unless they are listed to keep).
    GcTaskIdentifiers,
    /// Delete named queues no job uses and no worker holds.
    GcJobQueues,
}

impl std::str::FromStr for CleanupTask {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "DELETE_PERMAFAILED_JOBS" => Ok(CleanupTask::DeletePermafailedJobs),
            "GC_TASK_IDENTIFIERS" => Ok(CleanupTask::GcTaskIdentifiers),
            "GC_JOB_QUEUES" => Ok(CleanupTask::GcJobQueues),
            other => Err(format!(
                "unknown cleanup task {other:?}: expected DELETE_PERMAFAILED_JOBS, GC_TASK_IDENTIFIERS or GC_JOB_QUEUES"
            )),
        }
    }
}

/// Adds and manages jobs. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct WorkerUtils {
    pool: Pool,
    schema: String,
    use_local_time: bool,
}

impl WorkerUtils {
    /// Utilities over `pool` for the schema `schema`.
    pub fn new(pool: Pool, schema: impl Into<String>) -> Self {
        WorkerUtils { pool, schema: schema.into(), use_local_time: false }
    }

    /// Give jobs without a `run_at` the application's clock rather than the database's
    /// `now()` (useful when the two disagree, or in tests that control time).
    pub fn with_use_local_time(mut self, yes: bool) -> Self {
        self.use_local_time = yes;
        self
    }

    /// The schema these utilities work on.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The pool these utilities use.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    fn sql(&self, text: &str) -> String {
        sql::render(text, &self.schema)
    }

    /// Install or upgrade the schema (see [`crate::migrate`]).
    pub async fn migrate(&self) -> Result<MigrationReport, Error> {
        let mut client = self.pool.get().await?;
        Ok(migrate(&mut client, &self.schema).await?)
    }

    /// Add a job of task `T` with `payload`.
    pub async fn add_job<T: Task + Serialize>(&self, payload: &T, spec: JobSpec) -> Result<Job, Error> {
        self.add_raw_job(T::IDENTIFIER, serde_json::to_value(payload)?, spec).await
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
        self.add_raw_job_in(client, T::IDENTIFIER, serde_json::to_value(payload)?, spec).await
    }

    /// [`Self::add_raw_job`] through the caller's client or transaction.
    pub async fn add_raw_job_in<C: GenericClient + Sync>(
        &self,
        client: &C,
        identifier: &str,
        payload: Value,
        spec: JobSpec,
    ) -> Result<Job, Error> {
        spec.validate(identifier)?;
        let run_at = spec.run_at.or_else(|| self.local_now());
        let max_attempts = spec.max_attempts.map(i32::from);
        let priority = spec.priority.map(i32::from);
        let mode = spec.job_key_mode.map(JobKeyMode::as_str);
        let rows = client
            .query_typed(
                &self.sql(sql::utils::ADD_JOB),
                &[
                    (&identifier, Type::TEXT),
                    (&payload, Type::JSON),
                    (&spec.queue_name, Type::TEXT),
                    (&run_at, Type::TIMESTAMPTZ),
                    (&max_attempts, Type::INT4),
                    (&spec.job_key, Type::TEXT),
                    (&priority, Type::INT4),
                    (&spec.flags, Type::TEXT_ARRAY),
                    (&mode, Type::TEXT),
                ],
            )
            .await?;
        match rows.first() {
            Some(row) => job_from_row(row),
            None => Err(Error::NotAdded(spec.job_key)),
        }
    }

    /// Add several jobs of task `T` in one round trip.
    pub async fn add_jobs<T: Task + Serialize>(&self, jobs: &[(T, &JobSpec)]) -> Result<Vec<Job>, Error> {
        let raw = jobs
            .iter()
            .map(|(payload, spec)| {
                Ok(RawJob {
                    identifier: T::IDENTIFIER.into(),
                    payload: serde_json::to_value(payload)?,
                    spec: (*spec).clone(),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        self.add_raw_jobs(&raw).await
    }

    /// Add several jobs in one round trip. A key clash is resolved as `preserve_run_at` for
    /// the whole batch if any job asks for it, else as `replace`; `unsafe_dedupe` is
    /// refused. Two jobs with the same key in one batch are refused by the database.
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
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut preserve_run_at = false;
        for job in jobs {
            job.spec.validate(&job.identifier)?;
            match job.spec.job_key_mode {
                Some(JobKeyMode::UnsafeDedupe) => return Err(JobSpecError::UnsafeDedupeInBatch.into()),
                Some(JobKeyMode::PreserveRunAt) => preserve_run_at = true,
                Some(JobKeyMode::Replace) | None => {}
            }
        }
        let plain = jobs.iter().all(|job| job.spec.job_key.is_none() && job.spec.queue_name.is_none());
        if plain {
            let rows = self.add_plain_jobs(client, jobs).await?;
            // None or all: none when a task is not registered yet.
            if !rows.is_empty() {
                return jobs_from_rows(&rows);
            }
        }
        let mut specs = Vec::with_capacity(jobs.len());
        for job in jobs {
            specs.push(serde_json::json!({
                "identifier": job.identifier,
                "payload": job.payload,
                "queue_name": job.spec.queue_name,
                "run_at": job.spec.run_at.or_else(|| self.local_now()),
                "max_attempts": job.spec.max_attempts,
                "job_key": job.spec.job_key,
                "priority": job.spec.priority,
                "flags": job.spec.flags,
            }));
        }
        let specs = Value::Array(specs);
        let rows = client
            .query_typed(
                &self.sql(sql::utils::ADD_JOBS),
                &[(&specs, Type::JSON), (&preserve_run_at, Type::BOOL)],
            )
            .await?;
        self.with_names(client, &rows).await
    }

    /// Jobs without key or queue, sent column by column in binary (no JSON spec to build
    /// and parse, no conflict check per row): all of them, or none when a task is not
    /// registered yet.
    async fn add_plain_jobs<C: GenericClient + Sync>(
        &self,
        client: &C,
        jobs: &[RawJob],
    ) -> Result<Vec<Row>, Error> {
        let identifiers: Vec<&str> = jobs.iter().map(|job| job.identifier.as_str()).collect();
        let payloads: Vec<Option<&Value>> =
            jobs.iter().map(|job| Some(&job.payload).filter(|p| !p.is_null())).collect();
        let run_at: Vec<Option<DateTime<Utc>>> =
            jobs.iter().map(|job| job.spec.run_at.or_else(|| self.local_now())).collect();
        let max_attempts: Vec<Option<i32>> =
            jobs.iter().map(|job| job.spec.max_attempts.map(i32::from)).collect();
        let priority: Vec<Option<i32>> = jobs.iter().map(|job| job.spec.priority.map(i32::from)).collect();
        let flags: Vec<Option<Value>> =
            jobs.iter().map(|job| job.spec.flags.as_ref().map(|flags| serde_json::json!(flags))).collect();
        let rows = client
            .query_typed(
                &self.sql(sql::utils::ADD_JOBS_PLAIN),
                &[
                    (&identifiers, Type::TEXT_ARRAY),
                    (&payloads, Type::JSON_ARRAY),
                    (&run_at, Type::TIMESTAMPTZ_ARRAY),
                    (&max_attempts, Type::INT4_ARRAY),
                    (&priority, Type::INT4_ARRAY),
                    (&flags, Type::JSON_ARRAY),
                ],
            )
            .await?;
        Ok(rows)
    }

    /// Jobs from `rows` whose `task_identifier`/`queue_name` may be null because the
    /// statement created them: those are looked up in one more round trip.
    async fn with_names<C: GenericClient + Sync>(&self, client: &C, rows: &[Row]) -> Result<Vec<Job>, Error> {
        let get = |e: tokio_postgres::Error| Error::Row(e.to_string());
        let mut tasks = BTreeMap::new();
        let mut queues = BTreeMap::new();
        for row in rows {
            let task_id: i32 = row.try_get("task_id").map_err(get)?;
            if let Some(name) = row.try_get::<_, Option<String>>("task_identifier").map_err(get)? {
                tasks.insert(task_id, name);
            }
            if let Some(queue_id) = row.try_get::<_, Option<i32>>("job_queue_id").map_err(get)? {
                if let Some(name) = row.try_get::<_, Option<String>>("queue_name").map_err(get)? {
                    queues.insert(queue_id, name);
                }
            }
        }
        let missing = |known: &BTreeMap<i32, String>, column: &str| -> Result<Vec<i32>, Error> {
            let mut ids = Vec::new();
            for row in rows {
                if let Some(id) = row.try_get::<_, Option<i32>>(column).map_err(get)? {
                    if !known.contains_key(&id) && !ids.contains(&id) {
                        ids.push(id);
                    }
                }
            }
            Ok(ids)
        };
        let (missing_tasks, missing_queues) =
            (missing(&tasks, "task_id")?, missing(&queues, "job_queue_id")?);
        if !missing_tasks.is_empty() || !missing_queues.is_empty() {
            let names = client
                .query_typed(
                    &self.sql(sql::utils::NAMES),
                    &[(&missing_tasks, Type::INT4_ARRAY), (&missing_queues, Type::INT4_ARRAY)],
                )
                .await?;
            for row in names {
                let (kind, id, name): (String, i32, String) = (
                    row.try_get(0).map_err(get)?,
                    row.try_get(1).map_err(get)?,
                    row.try_get(2).map_err(get)?,
                );
                if kind == "task" {
                    tasks.insert(id, name)
                } else {
                    queues.insert(id, name)
                };
            }
        }
        rows.iter()
            .map(|row| {
                let task_id: i32 = row.try_get("task_id").map_err(get)?;
                let queue_id: Option<i32> = row.try_get("job_queue_id").map_err(get)?;
                let task = tasks
                    .get(&task_id)
                    .cloned()
                    .ok_or_else(|| Error::Row(format!("no task with id {task_id}")))?;
                job_from_parts(row, task, queue_id.and_then(|q| queues.get(&q).cloned()))
            })
            .collect()
    }

    /// Add one job whose payload is the array of `payloads`: with a job key, later batches
    /// for the same key are appended to it while it waits.
    pub async fn add_batch_job<T: Task + Serialize>(
        &self,
        payloads: &[T],
        spec: JobSpec,
    ) -> Result<Job, Error> {
        self.add_raw_job(T::IDENTIFIER, serde_json::to_value(payloads)?, spec).await
    }

    /// Jobs matching `filter`, oldest first.
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, Error> {
        self.jobs_query(
            sql::utils::LIST_JOBS,
            &[
                (&filter.task, Type::TEXT),
                (&filter.queue, Type::TEXT),
                (&filter.failed, Type::BOOL),
                (&filter.locked, Type::BOOL),
                (&filter.limit, Type::INT8),
            ],
        )
        .await
    }

    /// Remove the job holding `job_key`. A job a worker is running cannot be removed: it
    /// loses its key and will not be retried. `None` if no job holds the key.
    pub async fn remove_job(&self, job_key: &str) -> Result<Option<Job>, Error> {
        let client = self.pool.get().await?;
        let rows = client.query_typed(&self.sql(sql::utils::REMOVE_JOB), &[(&job_key, Type::TEXT)]).await?;
        rows.first().map(job_from_row).transpose()
    }

    /// Delete the given jobs as if they had succeeded (jobs a worker holds are skipped).
    /// Returns the jobs deleted.
    pub async fn complete_jobs(&self, ids: &[i64]) -> Result<Vec<Job>, Error> {
        self.jobs_query(sql::utils::COMPLETE_JOBS, &[(&ids, Type::INT8_ARRAY)]).await
    }

    /// Mark the given jobs as failed for good with `reason` (jobs a worker holds are
    /// skipped). Returns the jobs changed.
    pub async fn permanently_fail_jobs(&self, ids: &[i64], reason: Option<&str>) -> Result<Vec<Job>, Error> {
        self.jobs_query(sql::utils::PERMANENTLY_FAIL_JOBS, &[(&ids, Type::INT8_ARRAY), (&reason, Type::TEXT)])
            .await
    }

    /// Cancel the given jobs with `reason`. One no worker holds fails for good at once
    /// (`attempts = max_attempts`, `last_error` `cancelled: <reason>`; it is kept so the
    /// reason can be read). A held one's Formica worker is notified: it fires the task's
    /// `abort_signal` and fails the job the same way, unless the task succeeded first (then
    /// it completes, and only that is recorded). The notification reaches workers whose
    /// listener is up; a job held by graphile-worker runs on. Ids that match no job are
    /// left out of the answer.
    pub async fn cancel_jobs(&self, ids: &[i64], reason: &str) -> Result<Cancelled, Error> {
        let client = self.pool.get().await?;
        let params: [(&(dyn ToSql + Sync), Type); 2] = [(&ids, Type::INT8_ARRAY), (&reason, Type::TEXT)];
        let rows = client.query_typed(&self.sql(sql::utils::CANCEL_JOBS), &params).await?;
        let mut cancelled = Cancelled::default();
        for row in rows {
            let (id, held): (i64, bool) = (row.try_get(0)?, row.try_get(1)?);
            if held { &mut cancelled.told } else { &mut cancelled.failed }.push(id);
        }
        Ok(cancelled)
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
        let as_int = |v: Option<i16>| v.map(i32::from);
        self.jobs_query(
            sql::utils::RESCHEDULE_JOBS,
            &[
                (&ids, Type::INT8_ARRAY),
                (&options.run_at, Type::TIMESTAMPTZ),
                (&as_int(options.priority), Type::INT4),
                (&as_int(options.attempts), Type::INT4),
                (&as_int(options.max_attempts), Type::INT4),
            ],
        )
        .await
    }

    /// Release every job and queue locked by the given workers (known to be dead), so other
    /// workers can take them at once instead of after the four-hour stale-lock period.
    pub async fn force_unlock_workers(&self, worker_ids: &[&str]) -> Result<(), Error> {
        let client = self.pool.get().await?;
        client
            .query_typed(&self.sql(sql::utils::FORCE_UNLOCK_WORKERS), &[(&worker_ids, Type::TEXT_ARRAY)])
            .await?;
        Ok(())
    }

    /// Run housekeeping `tasks` (in graphile-worker's order, whatever the order given).
    /// `keep_task_identifiers` are never garbage-collected.
    pub async fn cleanup(&self, tasks: &[CleanupTask], keep_task_identifiers: &[&str]) -> Result<(), Error> {
        let client = self.pool.get().await?;
        let mut tasks = tasks.to_vec();
        tasks.sort();
        tasks.dedup();
        for task in tasks {
            match task {
                CleanupTask::DeletePermafailedJobs => {
                    client.query_typed(&self.sql(sql::utils::CLEANUP_DELETE_PERMAFAILED_JOBS), &[]).await?
                }
                CleanupTask::GcTaskIdentifiers => {
                    client
                        .query_typed(
                            &self.sql(sql::utils::CLEANUP_GC_TASK_IDENTIFIERS),
                            &[(&keep_task_identifiers, Type::TEXT_ARRAY)],
                        )
                        .await?
                }
                CleanupTask::GcJobQueues => {
                    client.query_typed(&self.sql(sql::utils::CLEANUP_GC_JOB_QUEUES), &[]).await?
                }
            };
        }
        Ok(())
    }

    async fn jobs_query(
        &self,
        text: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Job>, Error> {
        let client = self.pool.get().await?;
        let rows = client.query_typed(&self.sql(text), params).await?;
        jobs_from_rows(&rows)
    }

    fn local_now(&self) -> Option<DateTime<Utc>> {
        self.use_local_time.then(|| self.pool.runtime().now())
    }
}

/// What [`WorkerUtils::cancel_jobs`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cancelled {
    /// Jobs no worker held: failed for good now.
    pub failed: Vec<i64>,
    /// Jobs a worker held: their worker was told to cancel them.
    pub told: Vec<i64>,
}
