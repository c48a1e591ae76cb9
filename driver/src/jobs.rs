//! Adding and managing jobs on a connection: the statements of [`WorkerUtils`], bound,
//! checked and answered once for every client.
//!
//! Each operation validates what it can before the database is asked, binds its SQL from
//! `sql/queries/` with typed parameters in the order of the file's header, and reads the
//! answer into [`Job`]s. It runs on any [`Session`]: a tokio-postgres client or
//! transaction (what [`WorkerUtils`] uses), or with the `sqlx` feature a sqlx connection
//! (`crate::sqlx`). The parameters are tokio-postgres values in PostgreSQL's binary format,
//! which a sqlx connection sends as they are, so both clients store exactly the same jobs.
//!
//! [`WorkerUtils`]: crate::WorkerUtils

use crate::error::Error;
use crate::params::{param, typed, Param};
use crate::records_table::{RecordsKnown, TableKnown, Usable};
use crate::rows::{job_from_row, jobs_from_rows, ResultRow};
use crate::traces::Parent;
use chrono::{DateTime, Utc};
use formica_core::job::{Job, JobKeyMode, JobSpec, JobSpecError, RawJob, RescheduleJobOptions, Task};
use formica_sql as sql;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

mod stored;
use stored::{plain_jobs, stored_flags, Names, Stored};

/// Which jobs [`crate::WorkerUtils::list_jobs`] returns.
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
    /// Only jobs in this state (one of [`crate::inspect::JOB_STATES`]).
    pub state: Option<String>,
    /// At most this many, oldest first.
    pub limit: i64,
}

impl Default for JobFilter {
    fn default() -> Self {
        JobFilter { task: None, queue: None, failed: false, locked: false, state: None, limit: 100 }
    }
}

/// Housekeeping that [`crate::WorkerUtils::cleanup`] can do, in graphile-worker's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CleanupTask {
    /// Delete jobs that have used up their attempts and that no worker holds.
    DeletePermafailedJobs,
    /// Delete task identifiers no job uses, except those listed to keep (safe while Formica
    /// workers run: they look their tasks up by identifier at each fetch).
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

/// What [`crate::WorkerUtils::cancel_jobs`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cancelled {
    /// Jobs no worker held: failed for good now.
    pub failed: Vec<i64>,
    /// Jobs a worker held: a cancel request was recorded for each, for its holder.
    pub recorded: Vec<Recorded>,
}

/// A cancel request recorded for a job a worker holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The job.
    pub job_id: i64,
    /// The worker holding it (`locked_by`).
    pub worker_id: String,
    /// Whether that worker has a Formica lease: it reads the request within a heartbeat
    /// interval (about 3 s) and aborts the task. A worker without one (graphile-worker) runs
    /// the job on; it ends cancelled when released, unless it succeeded.
    pub leased: bool,
}

/// Jobs of task `T`, for the typed `add_jobs`.
pub(crate) fn raw_jobs_of<T: Task + Serialize>(jobs: &[(T, &JobSpec)]) -> Result<Vec<RawJob>, Error> {
    jobs.iter()
        .map(|(payload, spec)| {
            Ok(RawJob::new(
                T::IDENTIFIER,
                serde_json::to_value(payload)?,
                (*spec).clone().with_policy(&T::POLICY),
            ))
        })
        .collect()
}

/// A statement ready to send: its SQL for the schema, and its typed parameters in order.
pub(crate) struct Query {
    pub(crate) sql: String,
    pub(crate) params: Vec<Param>,
}

/// A connection the statements run on. Each statement is sent unnamed with its parameter
/// types, leaving nothing on the session (safe behind pgBouncer in transaction mode, and on
/// a caller's connection): one round trip on tokio-postgres, two on sqlx (which describes
/// a statement before it binds it).
pub(crate) trait Session {
    /// The rows it answers with.
    type Row: ResultRow;
    /// Run `query` and return its rows.
    async fn query(&mut self, query: Query) -> Result<Vec<Self::Row>, Error>;
}

impl<C: GenericClient + Sync> Session for &C {
    type Row = tokio_postgres::Row;
    async fn query(&mut self, query: Query) -> Result<Vec<Self::Row>, Error> {
        let refused = |e: tokio_postgres::Error| {
            let full = e.as_db_error().and_then(|db| Error::full(db.code().code(), db.detail()));
            full.unwrap_or(Error::Db(e))
        };
        self.query_typed(&query.sql, &typed(&query.params)).await.map_err(refused)
    }
}

/// The operations on one schema. `default_run_at` dates jobs added without a `run_at`
/// (`None`: the database's `now()`, the transaction's start); `records` knows whether the
/// records schema can hold the trace context of jobs added inside a span, and whether this
/// role's adds can keep bounds.
pub(crate) struct Jobs<'a> {
    pub(crate) schema: &'a str,
    pub(crate) default_run_at: Option<DateTime<Utc>>,
    pub(crate) records: &'a RecordsKnown,
    /// The application's clock now, which buckets unique jobs added without a `run_at`
    /// (`None`: no clock, so such a job needs one).
    pub(crate) now: Option<DateTime<Utc>>,
}

impl Jobs<'_> {
    fn query(&self, template: &str, params: Vec<Param>) -> Query {
        Query { sql: sql::render(template, self.schema), params }
    }

    /// The add statement `template` with `params`, recording the trace context it runs in
    /// with its jobs when there is one (see `crate::traces`).
    fn add_query(
        &self,
        template: &str,
        mut params: Vec<Param>,
        parent: Option<Parent>,
    ) -> Result<Query, Error> {
        Ok(match parent {
            None => self.query(template, params),
            Some(parent) => {
                let traced = sql::traces::add(template, params.len())?;
                params.extend(parent.params());
                self.query(&traced, params)
            }
        })
    }

    /// The trace context a job added now records: none outside a span, and none while the
    /// records schema cannot hold it (an older Formica migrated it, or none did, or this
    /// role may not write there: asked on `session`).
    async fn parent(&self, session: &mut impl Session) -> Result<Option<Parent>, Error> {
        let Some(parent) = crate::traces::current() else {
            return Ok(None);
        };
        let recording = self.usable(session, &self.records.traces, "job_traces", "insert, update").await?;
        Ok(recording.then_some(parent))
    }

    /// Whether this role's adds keep bounds: the records' bounds table exists and this role
    /// may read it (asked on `session`). Where it may not, nothing can keep them: it adds as
    /// `graphile_worker.add_job` does.
    async fn keeps_bounds(&self, session: &mut impl Session) -> Result<bool, Error> {
        self.usable(session, &self.records.bounds, "bounds", "select").await
    }

    /// Whether the records table `table` may be used with `privileges`, as `known` has it or
    /// as asked on `session`.
    async fn usable(
        &self,
        session: &mut impl Session,
        known: &TableKnown,
        table: &str,
        privileges: &str,
    ) -> Result<bool, Error> {
        Ok(match known.usable() {
            Usable::Yes => true,
            Usable::No => false,
            Usable::Ask => {
                let records = sql::records_schema(self.schema);
                let table = format!("{}.{table}", sql::quote_ident(&records));
                let params = vec![
                    param(table, Type::TEXT),
                    param(records, Type::TEXT),
                    param(privileges.to_owned(), Type::TEXT),
                ];
                let rows = session.query(self.query(sql::USABLE, params)).await?;
                let present = rows.first().map(|row| row.read::<bool>(0)).transpose()?.unwrap_or(false);
                known.learn(present);
                present
            }
        })
    }

    /// The add statement `template` keeping bounds with its `part` (one of
    /// `formica_sql::flow::BOUND_*`), or, not `kept`, adding unbounded.
    fn bounded(template: &str, part: &str, kept: bool) -> Result<String, Error> {
        Ok(sql::fill(template, &[("BOUND", if kept { part } else { "" })])?)
    }

    /// Add a job of the task named `identifier`.
    pub(crate) async fn add(
        &self,
        mut session: impl Session,
        identifier: &str,
        payload: Value,
        spec: JobSpec,
    ) -> Result<Job, Error> {
        let (spec, within) = spec.with_unique_key(identifier, &payload, self.now)?;
        spec.validate(identifier)?;
        let params = vec![
            param(identifier.to_owned(), Type::TEXT),
            param(payload, Type::JSON),
            param(spec.queue_name, Type::TEXT),
            param(spec.run_at.or(self.default_run_at), Type::TIMESTAMPTZ),
            param(spec.max_attempts.map(i32::from), Type::INT4),
            param(spec.job_key.clone(), Type::TEXT),
            param(spec.priority.map(i32::from), Type::INT4),
            param(spec.flags, Type::TEXT_ARRAY),
            param(spec.job_key_mode.map(JobKeyMode::as_str), Type::TEXT),
        ];
        let kept = self.keeps_bounds(&mut session).await?;
        let rows = match within {
            None => {
                let parent = self.parent(&mut session).await?;
                let add = match spec.job_key_mode {
                    Some(JobKeyMode::ReplaceAndAbort) => sql::utils::ADD_ABORTING,
                    _ => sql::utils::ADD_JOB,
                };
                let add = Self::bounded(add, sql::flow::BOUND_ONE, kept)?;
                session.query(self.add_query(&add, params, parent)?).await?
            }
            // A claim is its own data-modifying statement: no trace context is recorded.
            Some(within) => {
                let micros = i64::try_from(within.as_micros()).unwrap_or(i64::MAX);
                let mut params = params;
                params.push(param(micros, Type::INT8));
                let add = Self::bounded(sql::utils::ADD_CLAIMED, sql::flow::BOUND_ONE, kept)?;
                session.query(self.query(&add, params)).await?
            }
        };
        match rows.first() {
            Some(row) => job_from_row(row),
            None if within.is_some() => Err(Error::Claimed(spec.job_key.unwrap_or_default())),
            None => Err(Error::NotAdded(spec.job_key)),
        }
    }

    /// Add several jobs in one statement: jobs without key or queue of registered tasks go
    /// in at once; others (or those when a task is new) through `add_jobs`, and one more
    /// statement names the tasks and queues that created. A key clash is resolved as
    /// `preserve_run_at` for the whole batch if any job asks for it, else as `replace`;
    /// `unsafe_dedupe` is refused.
    pub(crate) async fn add_many(
        &self,
        mut session: impl Session,
        jobs: &[RawJob],
    ) -> Result<Vec<Job>, Error> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let unique =
            |job: &RawJob| match job.spec.clone().with_unique_key(&job.identifier, &job.payload, self.now)? {
                (spec, None) => Ok(spec),
                (_, Some(_)) => Err(JobSpecError::UniqueWithinInBatch),
            };
        let keyed: Vec<RawJob>;
        let jobs = match jobs.iter().any(|job| job.spec.unique.is_some()) {
            false => jobs,
            true => {
                keyed = (jobs.iter())
                    .map(|job| Ok(RawJob { spec: unique(job)?, ..job.clone() }))
                    .collect::<Result<_, JobSpecError>>()?;
                &keyed
            }
        };
        let mut preserve_run_at = false;
        for job in jobs {
            job.spec.validate(&job.identifier)?;
            match job.spec.job_key_mode {
                Some(JobKeyMode::UnsafeDedupe) => return Err(JobSpecError::UnsafeDedupeInBatch.into()),
                Some(JobKeyMode::ReplaceAndAbort) => return Err(JobSpecError::ReplaceAndAbortInBatch.into()),
                Some(JobKeyMode::PreserveRunAt) => preserve_run_at = true,
                Some(JobKeyMode::Replace) | None => {}
            }
        }
        let parent = self.parent(&mut session).await?;
        let kept = self.keeps_bounds(&mut session).await?;
        if jobs.iter().all(|job| job.spec.job_key.is_none() && job.spec.queue_name.is_none()) {
            let rows = session.query(self.plain(jobs, parent.clone(), kept)?).await?;
            // All or none: none when a task is not registered yet (add_jobs registers it).
            if !rows.is_empty() {
                return plain_jobs(jobs, &rows);
            }
        }
        let mut specs = Vec::with_capacity(jobs.len());
        for job in jobs {
            specs.push(serde_json::json!({
                "identifier": job.identifier,
                "payload": job.payload,
                "queue_name": job.spec.queue_name,
                "run_at": job.spec.run_at.or(self.default_run_at),
                "max_attempts": job.spec.max_attempts,
                "job_key": job.spec.job_key,
                "priority": job.spec.priority,
                "flags": job.spec.flags,
            }));
        }
        let params = vec![param(Value::Array(specs), Type::JSON), param(preserve_run_at, Type::BOOL)];
        let add = Self::bounded(sql::utils::ADD_JOBS, sql::flow::BOUND_BATCH, kept)?;
        let rows = session.query(self.add_query(&add, params, parent)?).await?;
        let mut names = Names::of(&rows)?;
        if !names.missing_tasks.is_empty() || !names.missing_queues.is_empty() {
            let params = vec![
                param(std::mem::take(&mut names.missing_tasks), Type::INT4_ARRAY),
                param(std::mem::take(&mut names.missing_queues), Type::INT4_ARRAY),
            ];
            for row in session.query(self.query(sql::utils::NAMES, params)).await? {
                names.learn(&row)?;
            }
        }
        rows.iter().map(|row| names.job(row)).collect()
    }

    /// The statement adding jobs that have no key and no queue, column by column in binary:
    /// no JSON spec to build and parse, no conflict check per row; with bounds `kept`, none
    /// when a task is bounded.
    fn plain(&self, jobs: &[RawJob], parent: Option<Parent>, kept: bool) -> Result<Query, Error> {
        let mut identifiers: Vec<String> = Vec::new();
        let tasks: Vec<i32> = jobs
            .iter()
            .map(|job| {
                let at = match identifiers.iter().position(|known| *known == job.identifier) {
                    Some(at) => at,
                    None => {
                        identifiers.push(job.identifier.clone());
                        identifiers.len() - 1
                    }
                };
                // From 1, as SQL arrays count; a batch of over 2^31 jobs fails to bind.
                i32::try_from(at + 1).unwrap_or(i32::MAX)
            })
            .collect();
        let (mut payloads, mut max_attempts, mut priorities) = (Vec::new(), Vec::new(), Vec::new());
        for stored in jobs.iter().map(Stored::of) {
            payloads.push(stored.payload);
            max_attempts.push(i32::from(stored.max_attempts));
            priorities.push(i32::from(stored.priority));
        }
        let params = vec![
            param(identifiers, Type::TEXT_ARRAY),
            param(tasks, Type::INT4_ARRAY),
            param(payloads, Type::JSON_ARRAY),
            param(
                jobs.iter().map(|job| job.spec.run_at.or(self.default_run_at)).collect::<Vec<_>>(),
                Type::TIMESTAMPTZ_ARRAY,
            ),
            param(max_attempts, Type::INT4_ARRAY),
            param(priorities, Type::INT4_ARRAY),
            param(jobs.iter().map(|job| stored_flags(&job.spec)).collect::<Vec<_>>(), Type::JSONB_ARRAY),
        ];
        self.add_query(
            &Self::bounded(sql::utils::ADD_JOBS_PLAIN, sql::flow::BOUND_PLAIN, kept)?,
            params,
            parent,
        )
    }

    /// Remove the job holding `job_key` (a running one only loses its key).
    pub(crate) async fn remove(
        &self,
        mut session: impl Session,
        job_key: &str,
    ) -> Result<Option<Job>, Error> {
        let params = vec![param(job_key.to_owned(), Type::TEXT)];
        let rows = session.query(self.query(sql::utils::REMOVE_JOB, params)).await?;
        rows.first().map(job_from_row).transpose()
    }

    /// Delete the given jobs as if they had succeeded (held ones are skipped).
    pub(crate) async fn complete(&self, session: impl Session, ids: &[i64]) -> Result<Vec<Job>, Error> {
        self.jobs(session, sql::utils::COMPLETE_JOBS, vec![param(ids.to_vec(), Type::INT8_ARRAY)]).await
    }

    /// Fail the given jobs for good with `reason` (held ones are skipped).
    pub(crate) async fn permanently_fail(
        &self,
        session: impl Session,
        ids: &[i64],
        reason: Option<&str>,
    ) -> Result<Vec<Job>, Error> {
        let params =
            vec![param(ids.to_vec(), Type::INT8_ARRAY), param(reason.map(str::to_owned), Type::TEXT)];
        self.jobs(session, sql::utils::PERMANENTLY_FAIL_JOBS, params).await
    }

    /// Change when and how the given jobs run (held ones are skipped).
    pub(crate) async fn reschedule(
        &self,
        session: impl Session,
        ids: &[i64],
        options: &RescheduleJobOptions,
    ) -> Result<Vec<Job>, Error> {
        let as_int = |v: Option<i16>| param(v.map(i32::from), Type::INT4);
        let params = vec![
            param(ids.to_vec(), Type::INT8_ARRAY),
            param(options.run_at, Type::TIMESTAMPTZ),
            as_int(options.priority),
            as_int(options.attempts),
            as_int(options.max_attempts),
        ];
        self.jobs(session, sql::utils::RESCHEDULE_JOBS, params).await
    }

    /// Cancel the given jobs with `reason` (see [`crate::WorkerUtils::cancel_jobs`]).
    pub(crate) async fn cancel(
        &self,
        mut session: impl Session,
        ids: &[i64],
        reason: &str,
    ) -> Result<Cancelled, Error> {
        let params = vec![param(ids.to_vec(), Type::INT8_ARRAY), param(reason.to_owned(), Type::TEXT)];
        let rows = session.query(self.query(sql::utils::CANCEL_JOBS, params)).await?;
        let mut cancelled = Cancelled::default();
        for row in &rows {
            let (job_id, holder, leased): (i64, Option<String>, bool) =
                (row.read(0)?, row.read(1)?, row.read(2)?);
            match holder {
                None => cancelled.failed.push(job_id),
                Some(worker_id) => cancelled.recorded.push(Recorded { job_id, worker_id, leased }),
            }
        }
        Ok(cancelled)
    }

    /// Release every job and queue the given workers hold, unless one of them holds a live
    /// lease and not `even_if_alive`: then release nothing and name the live ones.
    pub(crate) async fn force_unlock_workers(
        &self,
        mut session: impl Session,
        worker_ids: &[&str],
        even_if_alive: bool,
    ) -> Result<(), Error> {
        let ids: Vec<String> = worker_ids.iter().map(|&id| id.to_owned()).collect();
        let params = vec![param(ids, Type::TEXT_ARRAY), param(even_if_alive, Type::BOOL)];
        let rows = session.query(self.query(sql::utils::FORCE_UNLOCK_WORKERS, params)).await?;
        let row = rows.first().ok_or_else(|| Error::Row("force_unlock_workers answered no row".into()))?;
        let column = |name: &str| row.column(name);
        if row.read::<bool>(column("unlocked")?)? {
            return Ok(());
        }
        let alive: Vec<String> = row.read(column("alive")?)?;
        let until: Vec<DateTime<Utc>> = row.read(column("alive_until")?)?;
        Err(Error::WorkersAlive(alive.into_iter().zip(until).collect()))
    }

    /// Run housekeeping `tasks`, in graphile-worker's order whatever the order given.
    pub(crate) async fn cleanup(
        &self,
        mut session: impl Session,
        tasks: &[CleanupTask],
        keep_task_identifiers: &[&str],
    ) -> Result<(), Error> {
        let mut tasks = tasks.to_vec();
        tasks.sort();
        tasks.dedup();
        for task in tasks {
            let query = match task {
                CleanupTask::DeletePermafailedJobs => {
                    self.query(sql::utils::CLEANUP_DELETE_PERMAFAILED_JOBS, Vec::new())
                }
                CleanupTask::GcTaskIdentifiers => {
                    let keep: Vec<String> = keep_task_identifiers.iter().map(|&t| t.to_owned()).collect();
                    self.query(sql::utils::CLEANUP_GC_TASK_IDENTIFIERS, vec![param(keep, Type::TEXT_ARRAY)])
                }
                CleanupTask::GcJobQueues => self.query(sql::utils::CLEANUP_GC_JOB_QUEUES, Vec::new()),
            };
            session.query(query).await?;
        }
        Ok(())
    }

    pub(crate) async fn jobs(
        &self,
        mut session: impl Session,
        template: &str,
        params: Vec<Param>,
    ) -> Result<Vec<Job>, Error> {
        jobs_from_rows(&session.query(self.query(template, params)).await?)
    }
}
