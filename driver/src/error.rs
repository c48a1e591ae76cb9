//! The errors the driver returns to its callers.

use crate::runtime::Address;
use formica_core::job::JobSpecError;

/// Why a database operation of Formica failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The job spec breaks a limit of the schema; nothing was sent to the database.
    #[error("invalid job spec: {0}")]
    Spec(#[from] JobSpecError),
    /// PostgreSQL refused a statement or the connection broke.
    #[error("database error: {}", describe(.0))]
    Db(#[from] tokio_postgres::Error),
    /// PostgreSQL refused a statement sent on a caller's sqlx connection, or that
    /// connection failed (the `sqlx` feature).
    #[cfg(feature = "sqlx")]
    #[error("database error: {}", describe_sqlx(.0))]
    Sqlx(#[from] sqlx::Error),
    /// No server could be reached at any configured address.
    #[error("could not connect to PostgreSQL at {address}: {message}")]
    Connect {
        /// The last address tried.
        address: String,
        /// What went wrong there.
        message: String,
    },
    /// No pooled connection became free within the pool's acquire timeout; the message
    /// says who holds them.
    #[error("the connection pool is exhausted: {0}")]
    PoolExhausted(String),
    /// A connection did not answer in time and was given up.
    #[error("timed out: {0}")]
    TimedOut(String),
    /// The connection settings are malformed or name no server (a bad URL, an unknown
    /// `sslmode`, an unreadable certificate file).
    #[error("invalid connection settings: {0}")]
    Settings(String),
    /// The worker's options do not make a worker (no database given, a signal handler
    /// that cannot be installed).
    #[error("invalid configuration: {0}")]
    Options(String),
    /// History is on but the worker's role cannot insert into the history table: the
    /// worker did not start.
    #[error(
        "history is on but this role cannot insert into {table}: grant it insert, or turn history \
         off with WorkerOptions::history(HistoryOptions::off())"
    )]
    HistoryNotWritable {
        /// The history table, as SQL names it.
        table: String,
    },
    /// A crontab could not be read or parsed.
    #[error("crontab {origin}: {source}")]
    Crontab {
        /// Where it came from (`file ./crontab`, `text`, `items`).
        origin: String,
        /// What is wrong: the parser's error naming the line, or the I/O error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The schema could not be brought to the version this Formica needs.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
    /// A payload is not valid JSON, or could not be turned into JSON.
    #[error("invalid payload JSON: {0}")]
    Payload(#[from] serde_json::Error),
    /// A row did not have the shape the statement promises.
    #[error("unexpected row from the database: {0}")]
    Row(String),
    /// `add_job` returned no job: the job holding the key was locked between the
    /// function's check and its update. Adding again is safe.
    #[error("job with key {0:?} was not added: the job holding that key was locked meanwhile; add it again")]
    NotAdded(Option<String>),
    /// An add layer ([`crate::WorkerUtils::before_add`]) refused the job: nothing was stored.
    #[error("job of task {task:?} refused before it was added: {reason}")]
    Refused {
        /// The job's task.
        task: String,
        /// The layer's reason.
        reason: String,
    },
    /// `run_once` stopped because looking for jobs failed in a way retrying cannot fix.
    #[error("the worker stopped: {statement} failed and retrying cannot help: {error}")]
    GaveUp {
        /// What failed.
        statement: &'static str,
        /// The database's error.
        error: String,
    },
    /// `force_unlock_workers` released nothing: these workers hold a live lease (each with
    /// its expiry, by the database clock), so they may be running the jobs they hold.
    #[error(
        "nothing unlocked: {}; unlocking a live worker lets the jobs it is running run twice",
        alive_until(.0)
    )]
    WorkersAlive(Vec<(String, chrono::DateTime<chrono::Utc>)>),
    /// Formica broke one of its own rules (a bug: please report it), or could not start a
    /// thread it needs.
    #[error("internal error: {0}")]
    Internal(String),
    /// A flow control's values are wrong (a cap or rate limit naming no task, allowing no
    /// job, or a partition naming no field or separator): nothing was stored.
    #[error("invalid flow control: {0}")]
    Control(String),
    /// A dead letter names no task, or its own: nothing was stored.
    #[error("invalid dead letter: {0}")]
    DeadLetter(String),
    /// The connected role lacks a privilege the operation needs: PostgreSQL's message, then
    /// what to grant.
    #[error("{0}")]
    Denied(String),
    /// A bulk action's filter or values are wrong (an unknown state, a reschedule that
    /// changes nothing): nothing was changed.
    #[error("invalid bulk action: {0}")]
    Filter(String),
    /// A unique job `within` a period (`Unique::within`) was not added: one with this key
    /// was added within that period (finished or not), so its claim holds.
    #[error("unique job with key {0:?} not added: one was added within its period")]
    Claimed(String),
    /// A workflow refused before anything of it was added (`WorkerUtils::add_workflow`).
    #[error("workflow refused, nothing added: {0}")]
    Workflow(#[from] formica_core::workflow::WorkflowError),
    /// No job is found by what was asked (`inspect::why`): the message names it.
    #[error("{0}")]
    JobNotFound(String),
    /// No workflow has this id.
    #[error("no workflow has id {0}")]
    WorkflowNotFound(i64),
    /// A handler's transaction (a step's, or one completing its job) did not commit: the job
    /// is no longer this worker's (its lease lapsed and it was recovered, or it was removed),
    /// so its writes were rolled back; the worker that holds the job now runs it.
    #[error(
        "job {job_id} is no longer this worker's (held by {}): its transaction was rolled back",
        holder.as_deref().unwrap_or("no one")
    )]
    JobLost {
        /// The job.
        job_id: i64,
        /// The worker holding it now, if any (none: no one, or the job is gone).
        holder: Option<String>,
    },
    /// An add was refused because it would put more jobs waiting than the bound of their
    /// task (or partition) allows ([`ControlLimit::Waiting`](crate::controls::ControlLimit::Waiting)),
    /// after waiting for room as long as the bound says: nothing of the add was stored.
    #[error(
        "queue full: task {task:?}{} would have {count} waiting jobs, over its bound of {max}; nothing was added",
        partition.as_ref().map(|p| format!(" (partition {p:?})")).unwrap_or_default()
    )]
    QueueFull {
        /// The bounded task.
        task: String,
        /// The partition, if the bound is per partition.
        partition: Option<String>,
        /// The bound.
        max: u32,
        /// The jobs that would be waiting, the add's included.
        count: u64,
    },
    /// `retry_workflow` refused: the workflow was cancelled.
    #[error("workflow {0} was cancelled: a cancelled workflow is not retried")]
    WorkflowCancelled(i64),
    /// `delete_workflow` refused: the workflow has jobs not settled yet (not forced).
    #[error(
        "workflow {id} is not finished ({waiting} jobs waiting, {released} released): \
         not deleted; forced, its waiting jobs would never run and its released ones would run \
         as jobs nothing waits for (cancel it first to stop them)"
    )]
    WorkflowUnfinished {
        /// The workflow.
        id: i64,
        /// Its jobs waiting.
        waiting: u32,
        /// Its jobs released and not settled.
        released: u32,
    },
    /// `delete_workflow` refused: the workflow is the sub-workflow a released job of another
    /// workflow waits for (not forced).
    #[error(
        "workflow {id} is the sub-workflow of job {job:?} of workflow {workflow}, which waits for it: \
         not deleted; forced, that job would fail (\"its sub-workflow {id} was deleted\") and its \
         workflow go on as after any failure"
    )]
    SubworkflowHeld {
        /// The workflow asked to be deleted.
        id: i64,
        /// The workflow of the job waiting for it.
        workflow: i64,
        /// That job's name.
        job: String,
    },
}

/// A statement's template that does not fit its parts (`formica_sql::fill`): a bug in
/// Formica's SQL, which any test that makes the form finds.
impl From<formica_sql::FillError> for Error {
    fn from(e: formica_sql::FillError) -> Self {
        Error::Internal(format!("Formica's SQL: {e}"))
    }
}

/// "worker a is alive until 2030-01-01T00:00:00Z (its lease), ..."
fn alive_until(workers: &[(String, chrono::DateTime<chrono::Utc>)]) -> String {
    let each = workers.iter().map(|(id, until)| {
        format!(
            "worker {id:?} is alive until {} (its lease)",
            until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )
    });
    each.collect::<Vec<_>>().join(", ")
}

/// What tokio-postgres says, with what it keeps in its sources: its `Display` alone is only
/// the kind ("db error", "error communicating with the server"), not the server's message
/// or the I/O error.
pub(crate) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{db} (SQLSTATE {})", db.code().code());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// What sqlx says, with the SQLSTATE of a database error.
#[cfg(feature = "sqlx")]
fn describe_sqlx(e: &sqlx::Error) -> String {
    match e.as_database_error().and_then(|db| db.code()) {
        Some(code) => format!("{e} (SQLSTATE {code})"),
        None => e.to_string(),
    }
}

/// A bound's refusal as `make_room` raises it (records step 25): its SQLSTATE and the
/// DETAIL naming the task, partition, bound and count.
const QUEUE_FULL: &str = "FMFUL";

#[derive(serde::Deserialize)]
struct FullDetail {
    task: String,
    partition: Option<String>,
    max: u32,
    count: u64,
}

impl Error {
    /// [`Error::QueueFull`] if the database refused an add with SQLSTATE `code` because a
    /// bound is reached, as `detail` says.
    pub(crate) fn full(code: &str, detail: Option<&str>) -> Option<Self> {
        let FullDetail { task, partition, max, count } =
            serde_json::from_str(detail.filter(|_| code == QUEUE_FULL)?).ok()?;
        Some(Error::QueueFull { task, partition, max, count })
    }

    /// `e`, or if PostgreSQL refused it for want of a privilege, [`Error::Denied`] saying
    /// `grant` (such as "grant select on formica_x.job_history to this role").
    pub(crate) fn or_denied(e: tokio_postgres::Error, grant: impl FnOnce() -> String) -> Self {
        match e.as_db_error() {
            Some(db) if *db.code() == tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE => {
                Error::Denied(format!("{}: {}", db.message(), grant()))
            }
            _ => Error::Db(e),
        }
    }

    pub(crate) fn connect(address: &Address, message: impl std::fmt::Display) -> Self {
        Error::Connect { address: address.to_string(), message: message.to_string() }
    }

    /// The SQLSTATE code when PostgreSQL refused a statement.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Db(e) => e.code().map(|c| c.code()),
            #[cfg(feature = "sqlx")]
            Error::Sqlx(e) => e
                .as_database_error()?
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .map(|db| db.code()),
            _ => None,
        }
    }
}

/// Why migrating the schema was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// The server is older than PostgreSQL 12.
    #[error("Formica requires PostgreSQL 12 or newer; the server reports version number {0}")]
    ServerTooOld(i32),
    /// The schema was migrated by a graphile-worker older than 0.16.
    #[error(
        "schema {schema:?} is at graphile-worker migration {found}; Formica upgrades from migration 16 on. \
         Bring it to 16 or later with graphile-worker 0.16 or newer first (for example \
         `npx graphile-worker@0.18 --schema-only -c <connection>`), then start Formica again"
    )]
    TooOld {
        /// The schema name.
        schema: String,
        /// Its newest applied migration.
        found: i32,
    },
    /// The database has a breaking migration newer than this Formica knows: running on it
    /// could corrupt jobs. Found at start by `migrate`, or announced to a running worker (on
    /// `worker:migrate`): its `run` stops gracefully and returns this. The CLI exits with
    /// code 57 for it, as graphile-worker does.
    #[error(
        "schema {schema:?} includes breaking migration {breaking}, but this Formica supports migrations up to {supported}; \
         it would be unsafe to continue: upgrade Formica"
    )]
    NewerBreaking {
        /// The schema name.
        schema: String,
        /// The newest breaking migration in the database.
        breaking: i32,
        /// The newest migration this Formica knows.
        supported: i32,
    },
    /// The schema lacks migrations and this process does not migrate (an admin command, or
    /// a worker told `migrate(false)`): an owner must install them first.
    #[error("{lacking} in database {database}: run `formica --schema-only` to install it")]
    NotMigrated {
        /// The schema name.
        schema: String,
        /// The database's name.
        database: String,
        /// What is missing, such as "no graphile_worker schema".
        lacking: String,
    },
    /// The ledger kept changing under us (other migrators) for too long.
    #[error("schema {schema:?}: the migrations ledger did not settle while other processes migrated it; try again")]
    Unsettled {
        /// The schema name.
        schema: String,
    },
    /// A statement failed while migrating.
    #[error("migrating schema {schema:?} failed at {step}: {}", describe(.source))]
    Failed {
        /// The schema name.
        schema: String,
        /// What was being done.
        step: String,
        /// The database's error.
        #[source]
        source: tokio_postgres::Error,
    },
}
