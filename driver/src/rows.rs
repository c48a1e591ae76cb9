//! Turning result rows into [`Job`]s: the one place that knows column names and types.
//!
//! Rows come from tokio-postgres, or with the `sqlx` feature from sqlx ([`ResultRow`]).
//! Either way a value is read with tokio-postgres's `FromSql` from PostgreSQL's binary
//! format, so each column's Rust type is named once, here.

use crate::error::Error;
use formica_core::job::{Job, Payload};
use formica_core::protocol::Undecodable;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::Row;

/// A result row jobs are read from: tokio-postgres's [`Row`], or with the `sqlx` feature
/// sqlx's `PgRow`.
pub trait ResultRow: sealed::Sealed {
    /// The index of the column named `name`.
    fn column(&self, name: &str) -> Result<usize, Error>;
    /// The value of column `at`; an error names the column and says what was wrong with it.
    fn read<'a, T: FromSql<'a>>(&'a self, at: usize) -> Result<T, Error>;
}

pub(crate) fn no_column(name: &str) -> Error {
    Error::Row(format!("no column {name:?} in the row"))
}

pub(crate) mod sealed {
    /// Only the driver's row types are [`super::ResultRow`]s.
    pub trait Sealed {}
    impl Sealed for tokio_postgres::Row {}
}

impl ResultRow for Row {
    fn column(&self, name: &str) -> Result<usize, Error> {
        self.columns().iter().position(|c| c.name() == name).ok_or_else(|| no_column(name))
    }

    fn read<'a, T: FromSql<'a>>(&'a self, at: usize) -> Result<T, Error> {
        self.try_get(at).map_err(|e| {
            let name = self.columns().get(at).map_or("?", |c| c.name());
            let cause = std::error::Error::source(&e).map_or_else(|| e.to_string(), ToString::to_string);
            Error::Row(format!("column {name}: {cause}"))
        })
    }
}

/// A payload as PostgreSQL sent it: the text of its `json` (or `jsonb`) value, checked to
/// parse as a `Value` would but not parsed (see [`Payload`]).
struct Stored(Payload);

impl<'a> FromSql<'a> for Stored {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        // jsonb's binary form is a version byte, then the text.
        let text = match raw.split_first() {
            _ if *ty != Type::JSONB => raw,
            Some((1, text)) => text,
            _ => return Err("unsupported JSONB encoding version".into()),
        };
        Ok(Stored(Payload::from_text(std::str::from_utf8(text)?)?))
    }

    fn accepts(ty: &Type) -> bool {
        matches!(*ty, Type::JSON | Type::JSONB)
    }
}

/// Where each column of a job row is: looked up by name once per result set, then read by
/// index (a lookup by name compares the name with every column, for every row).
struct Columns {
    id: usize,
    job_queue_id: usize,
    payload: usize,
    priority: usize,
    run_at: usize,
    attempts: usize,
    max_attempts: usize,
    last_error: usize,
    created_at: usize,
    updated_at: usize,
    key: usize,
    locked_at: usize,
    locked_by: usize,
    revision: usize,
    flags: usize,
}

impl Columns {
    fn of(row: &impl ResultRow) -> Result<Self, Error> {
        let at = |name: &str| row.column(name);
        Ok(Columns {
            id: at("id")?,
            job_queue_id: at("job_queue_id")?,
            payload: at("payload")?,
            priority: at("priority")?,
            run_at: at("run_at")?,
            attempts: at("attempts")?,
            max_attempts: at("max_attempts")?,
            last_error: at("last_error")?,
            created_at: at("created_at")?,
            updated_at: at("updated_at")?,
            key: at("key")?,
            locked_at: at("locked_at")?,
            locked_by: at("locked_by")?,
            revision: at("revision")?,
            flags: at("flags")?,
        })
    }

    fn job(
        &self,
        row: &impl ResultRow,
        task_identifier: String,
        queue_name: Option<String>,
    ) -> Result<Job, Error> {
        let flags: Option<serde_json::Value> = row.read(self.flags)?;
        Ok(Job {
            id: row.read(self.id)?,
            job_queue_id: row.read(self.job_queue_id)?,
            queue_name,
            task_identifier,
            payload: row.read::<Stored>(self.payload)?.0,
            priority: row.read(self.priority)?,
            run_at: row.read(self.run_at)?,
            attempts: row.read(self.attempts)?,
            max_attempts: row.read(self.max_attempts)?,
            last_error: row.read(self.last_error)?,
            created_at: row.read(self.created_at)?,
            updated_at: row.read(self.updated_at)?,
            key: row.read(self.key)?,
            locked_at: row.read(self.locked_at)?,
            locked_by: row.read(self.locked_by)?,
            revision: row.read(self.revision)?,
            // Stored as {"flag": true, ...}; the keys are the flags.
            flags: match flags {
                Some(serde_json::Value::Object(map)) => map.into_iter().map(|(k, _)| k).collect(),
                _ => Default::default(),
            },
        })
    }
}

/// A row with the `_private_jobs` columns plus `task_identifier` and `queue_name`.
pub fn job_from_row(row: &impl ResultRow) -> Result<Job, Error> {
    let mut decoded = decode_rows(std::slice::from_ref(row))?;
    match decoded.undecodable.pop() {
        Some(bad) => Err(Error::Row(bad.error)),
        None => decoded.jobs.pop().ok_or_else(|| Error::Row("no job row".into())),
    }
}

/// A row with the `_private_jobs` columns, and the names of its task and queue.
pub fn job_from_parts(
    row: &impl ResultRow,
    task_identifier: String,
    queue_name: Option<String>,
) -> Result<Job, Error> {
    Columns::of(row)?.job(row, task_identifier, queue_name)
}

/// [`job_from_row`] over every row; fails on the first row that cannot be read.
pub fn jobs_from_rows(rows: &[impl ResultRow]) -> Result<Vec<Job>, Error> {
    let decoded = decode_rows(rows)?;
    match decoded.undecodable.into_iter().next() {
        Some(bad) => Err(Error::Row(bad.error)),
        None => Ok(decoded.jobs),
    }
}

/// Rows read one by one: the jobs, and the rows that could not be read, each named by its
/// job id and the column that failed (so one bad row does not strand the rest). Fails only
/// when the rows are not job rows at all, or a row's id cannot be read.
pub fn decode_rows(rows: &[impl ResultRow]) -> Result<Decoded, Error> {
    let mut decoded = Decoded::default();
    let Some(first) = rows.first() else { return Ok(decoded) };
    let columns = Columns::of(first)?;
    let (task, queue) = (first.column("task_identifier")?, first.column("queue_name")?);
    for row in rows {
        let job_id: i64 = row.read(columns.id)?;
        let job = (row.read(task).and_then(|t| Ok((t, row.read(queue)?))))
            .and_then(|(task, queue)| columns.job(row, task, queue));
        match job {
            Ok(job) => decoded.jobs.push(job),
            Err(e) => decoded.undecodable.push(Undecodable { job_id, error: row_error(e) }),
        }
    }
    Ok(decoded)
}

/// What [`decode_rows`] read.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The rows read as jobs.
    pub jobs: Vec<Job>,
    /// The rows that could not be read.
    pub undecodable: Vec<Undecodable>,
}

/// What `e` says about a row: an [`Error::Row`]'s message ("column payload: ..."), or the
/// error.
pub(crate) fn row_error(e: Error) -> String {
    if let Error::Row(message) = e {
        message
    } else {
        e.to_string()
    }
}
