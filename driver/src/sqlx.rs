//! Adding and managing jobs inside a caller's sqlx transaction (the `sqlx` feature).
//!
//! [`SqlxUtils`] runs [`WorkerUtils`]' statements on a `&mut sqlx::PgConnection` the
//! caller holds: a transaction (`&mut tx`), a pooled connection (`&mut conn`) or a plain
//! one. A job added in a transaction exists only if it commits, and workers hear of it
//! then (PostgreSQL delivers the job's `NOTIFY` at commit). Nothing else is left on the
//! connection: statements are sent unnamed, so none stays prepared in sqlx's cache (where
//! a schema upgrade that changes the jobs' columns would break it).
//!
//! The statements, their checks and how their rows are read are the ones `WorkerUtils`
//! uses (the driver's `jobs` module): the parameters are encoded by tokio-postgres in
//! PostgreSQL's binary format and sent by sqlx as they are, and result rows are read back
//! the same way. Specs are checked before the database is asked, so a refused spec
//! ([`Error::Spec`]) leaves the caller's transaction usable; a statement PostgreSQL refuses
//! is an [`Error::Sqlx`] (see [`Error::sqlstate`]), after which PostgreSQL aborts the
//! transaction as for any failed statement.
//!
//! This crate turns on only sqlx's `postgres` feature: the application's own sqlx brings
//! the runtime and TLS it chose.
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! use formica::sqlx::SqlxUtils;
//! use formica::{JobSpec, Task};
//!
//! #[derive(serde::Serialize)]
//! struct SendEmail {
//!     to: String,
//! }
//! impl Task for SendEmail {
//!     const IDENTIFIER: &'static str = "send_email";
//! }
//!
//! let jobs = SqlxUtils::default(); // the `graphile_worker` schema
//! let mut tx = pool.begin().await?;
//! sqlx::query("insert into users (email) values ($1)").bind("a@example.com").execute(&mut *tx).await?;
//! let spec = JobSpec::builder().job_key("welcome:a@example.com").build();
//! jobs.add_job(&mut tx, &SendEmail { to: "a@example.com".into() }, spec).await?;
//! tx.commit().await?; // the user and the job exist together, or neither
//! # Ok(())
//! # }
//! ```
//!
//! [`WorkerUtils`]: crate::WorkerUtils

use crate::error::Error;
use crate::jobs::{raw_jobs_of, Cancelled, JobFilter, Jobs, Query, Session};
use crate::records_table::RecordsKnown;
use crate::rows::{sealed::Sealed, ResultRow};
use crate::utils::DEFAULT_SCHEMA;
use ::sqlx::encode::IsNull;
use ::sqlx::error::BoxDynError;
use ::sqlx::postgres::types::Oid;
use ::sqlx::postgres::{PgArgumentBuffer, PgConnection, PgRow, PgTypeInfo, PgValueFormat, Postgres};
use ::sqlx::{Column, Row, ValueRef};
use formica_core::job::{Job, JobSpec, RawJob, RescheduleJobOptions, Task};
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::types::{FromSql, ToSql, Type};

/// Adds and manages jobs of one schema on a sqlx connection the caller holds: the
/// counterpart of [`WorkerUtils`](crate::WorkerUtils)' methods, with the same checks and
/// the same SQL. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlxUtils {
    schema: String,
    records: RecordsKnown,
}

impl Default for SqlxUtils {
    /// On graphile-worker's schema, [`DEFAULT_SCHEMA`].
    fn default() -> Self {
        SqlxUtils::new(DEFAULT_SCHEMA)
    }
}

impl SqlxUtils {
    /// Utilities for the schema `schema` (installed with `WorkerUtils::migrate` or a
    /// worker).
    pub fn new(schema: impl Into<String>) -> Self {
        SqlxUtils { schema: schema.into(), records: RecordsKnown::default() }
    }

    /// The schema these utilities work on.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Jobs added without a `run_at` get the database's `now()`: in a transaction, the
    /// time it began.
    fn jobs(&self) -> Jobs<'_> {
        Jobs { schema: &self.schema, default_run_at: None, records: &self.records, now: None }
    }

    /// Add a job of task `T` with `payload`.
    pub async fn add_job<T: Task + Serialize>(
        &self,
        conn: &mut PgConnection,
        payload: &T,
        spec: JobSpec,
    ) -> Result<Job, Error> {
        self.add_raw_job(conn, T::IDENTIFIER, serde_json::to_value(payload)?, spec.with_policy(&T::POLICY))
            .await
    }

    /// Add a job of the task named `identifier`.
    pub async fn add_raw_job(
        &self,
        conn: &mut PgConnection,
        identifier: &str,
        payload: Value,
        spec: JobSpec,
    ) -> Result<Job, Error> {
        self.jobs().add(Sqlx(conn), identifier, payload, spec).await
    }

    /// Add several jobs of task `T` (see [`Self::add_raw_jobs`]).
    pub async fn add_jobs<T: Task + Serialize>(
        &self,
        conn: &mut PgConnection,
        jobs: &[(T, &JobSpec)],
    ) -> Result<Vec<Job>, Error> {
        self.add_raw_jobs(conn, &raw_jobs_of(jobs)?).await
    }

    /// Add several jobs in one statement. A key clash is resolved as `preserve_run_at` for
    /// the whole batch if any job asks for it, else as `replace`; `unsafe_dedupe` is
    /// refused. Two jobs with the same key in one batch are refused by the database.
    pub async fn add_raw_jobs(&self, conn: &mut PgConnection, jobs: &[RawJob]) -> Result<Vec<Job>, Error> {
        self.jobs().add_many(Sqlx(conn), jobs).await
    }

    /// Add one job whose payload is the array of `payloads`: with a job key, later batches
    /// for the same key are appended to it while it waits.
    pub async fn add_batch_job<T: Task + Serialize>(
        &self,
        conn: &mut PgConnection,
        payloads: &[T],
        spec: JobSpec,
    ) -> Result<Job, Error> {
        self.add_raw_job(conn, T::IDENTIFIER, serde_json::to_value(payloads)?, spec.with_policy(&T::POLICY))
            .await
    }

    /// Jobs matching `filter`, oldest first; rows that cannot be read are given apart.
    pub async fn list_jobs(
        &self,
        conn: &mut PgConnection,
        filter: &JobFilter,
    ) -> Result<crate::rows::Decoded, Error> {
        crate::inspect::list_jobs(&self.schema, Sqlx(conn), filter).await
    }

    /// Remove the job holding `job_key`. A job a worker is running cannot be removed: it
    /// loses its key and will not be retried. `None` if no job holds the key.
    pub async fn remove_job(&self, conn: &mut PgConnection, job_key: &str) -> Result<Option<Job>, Error> {
        self.jobs().remove(Sqlx(conn), job_key).await
    }

    /// Delete the given jobs as if they had succeeded (jobs a worker holds are skipped).
    /// Returns the jobs deleted.
    pub async fn complete_jobs(&self, conn: &mut PgConnection, ids: &[i64]) -> Result<Vec<Job>, Error> {
        self.jobs().complete(Sqlx(conn), ids).await
    }

    /// Mark the given jobs as failed for good with `reason` (jobs a worker holds are
    /// skipped). Returns the jobs changed.
    pub async fn permanently_fail_jobs(
        &self,
        conn: &mut PgConnection,
        ids: &[i64],
        reason: Option<&str>,
    ) -> Result<Vec<Job>, Error> {
        self.jobs().permanently_fail(Sqlx(conn), ids, reason).await
    }

    /// Change when and how the given jobs run (jobs a worker holds are skipped). Returns
    /// the jobs changed.
    pub async fn reschedule_jobs(
        &self,
        conn: &mut PgConnection,
        ids: &[i64],
        options: &RescheduleJobOptions,
    ) -> Result<Vec<Job>, Error> {
        self.jobs().reschedule(Sqlx(conn), ids, options).await
    }

    /// Cancel the given jobs with `reason`, as
    /// [`WorkerUtils::cancel_jobs`](crate::WorkerUtils::cancel_jobs) does; a held job's
    /// request is seen by its worker once the transaction commits.
    pub async fn cancel_jobs(
        &self,
        conn: &mut PgConnection,
        ids: &[i64],
        reason: &str,
    ) -> Result<Cancelled, Error> {
        self.jobs().cancel(Sqlx(conn), ids, reason).await
    }
}

/// A caller's sqlx connection, as the statements' [`Session`].
pub(crate) struct Sqlx<'c>(pub(crate) &'c mut PgConnection);

impl Session for Sqlx<'_> {
    type Row = PgRow;
    async fn query(&mut self, query: Query) -> Result<Vec<PgRow>, Error> {
        let mut statement = ::sqlx::query(&query.sql).persistent(false);
        for (value, ty) in &query.params {
            statement = statement.bind(Encoded { value: value.as_ref(), ty });
        }
        let refused = |e: ::sqlx::Error| {
            let full = e.as_database_error().and_then(|db| {
                let detail =
                    db.try_downcast_ref::<::sqlx::postgres::PgDatabaseError>().and_then(|pg| pg.detail());
                Error::full(db.code().as_deref().unwrap_or_default(), detail)
            });
            full.unwrap_or(Error::Sqlx(e))
        };
        statement.fetch_all(&mut *self.0).await.map_err(refused)
    }
}

/// A parameter encoded by tokio-postgres, declared to the server by its type's OID.
struct Encoded<'a> {
    value: &'a (dyn ToSql + Send + Sync),
    ty: &'a Type,
}

impl ::sqlx::Type<Postgres> for Encoded<'_> {
    /// Not used: each value names its own type ([`::sqlx::Encode::produces`]).
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(0))
    }
}

impl ::sqlx::Encode<'_, Postgres> for Encoded<'_> {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        let mut bytes = bytes::BytesMut::new();
        match self.value.to_sql_checked(self.ty, &mut bytes)? {
            tokio_postgres::types::IsNull::Yes => Ok(IsNull::Yes),
            tokio_postgres::types::IsNull::No => {
                buf.extend_from_slice(&bytes);
                Ok(IsNull::No)
            }
        }
    }

    fn produces(&self) -> Option<PgTypeInfo> {
        Some(PgTypeInfo::with_oid(Oid(self.ty.oid())))
    }
}

impl Sealed for PgRow {}

impl ResultRow for PgRow {
    fn column(&self, name: &str) -> Result<usize, Error> {
        self.columns().iter().position(|c| c.name() == name).ok_or_else(|| crate::rows::no_column(name))
    }

    fn read<'a, T: FromSql<'a>>(&'a self, at: usize) -> Result<T, Error> {
        let name = self.columns().get(at).map_or("?", |c| c.name());
        let fail = |cause: &dyn std::fmt::Display| Error::Row(format!("column {name}: {cause}"));
        let value = self.try_get_raw(at).map_err(|e| fail(&e))?;
        let oid = value.type_info().oid().map_or(0, |oid| oid.0);
        let ty = Type::from_oid(oid).ok_or_else(|| fail(&format_args!("unknown type (OID {oid})")))?;
        if !T::accepts(&ty) {
            return Err(fail(&format_args!("cannot read type {ty} as {}", std::any::type_name::<T>())));
        }
        // Rows of extended-protocol statements, the only ones sent here, are binary.
        if value.format() != PgValueFormat::Binary {
            return Err(fail(&"a value in text format"));
        }
        let raw = if value.is_null() { None } else { Some(value.as_bytes().map_err(|e| fail(&e))?) };
        T::from_sql_nullable(&ty, raw).map_err(|e| fail(&e))
    }
}
