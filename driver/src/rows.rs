//! Turning result rows into [`Job`]s: the one place that knows column names and types.

use crate::error::Error;
use formica_core::job::Job;
use formica_core::protocol::Undecodable;
use tokio_postgres::types::FromSql;
use tokio_postgres::Row;

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
    fn of(row: &Row) -> Result<Self, Error> {
        let at = |name: &str| {
            column(row, name).ok_or_else(|| Error::Row(format!("no column {name:?} in a job row")))
        };
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

    fn job(&self, row: &Row, task_identifier: String, queue_name: Option<String>) -> Result<Job, Error> {
        let flags: Option<serde_json::Value> = read(row, self.flags)?;
        Ok(Job {
            id: read(row, self.id)?,
            job_queue_id: read(row, self.job_queue_id)?,
            queue_name,
            task_identifier,
            payload: read(row, self.payload)?,
            priority: read(row, self.priority)?,
            run_at: read(row, self.run_at)?,
            attempts: read(row, self.attempts)?,
            max_attempts: read(row, self.max_attempts)?,
            last_error: read(row, self.last_error)?,
            created_at: read(row, self.created_at)?,
            updated_at: read(row, self.updated_at)?,
            key: read(row, self.key)?,
            locked_at: read(row, self.locked_at)?,
            locked_by: read(row, self.locked_by)?,
            revision: read(row, self.revision)?,
            // Stored as {"flag": true, ...}; the keys are the flags.
            flags: match flags {
                Some(serde_json::Value::Object(map)) => map.into_iter().map(|(k, _)| k).collect(),
                _ => Default::default(),
            },
        })
    }
}

/// Column `at` of `row`; an error names the column and says what was wrong with it.
fn read<'a, T: FromSql<'a>>(row: &'a Row, at: usize) -> Result<T, Error> {
    row.try_get(at).map_err(|e| {
        let name = row.columns().get(at).map_or("?", |c| c.name());
        let cause = std::error::Error::source(&e).map_or_else(|| e.to_string(), ToString::to_string);
        Error::Row(format!("column {name}: {cause}"))
    })
}

fn column(row: &Row, name: &str) -> Option<usize> {
    row.columns().iter().position(|c| c.name() == name)
}

/// A row with the `_private_jobs` columns plus `task_identifier` and `queue_name`.
pub fn job_from_row(row: &Row) -> Result<Job, Error> {
    let mut decoded = decode_rows(std::slice::from_ref(row))?;
    match decoded.undecodable.pop() {
        Some(bad) => Err(Error::Row(bad.error)),
        None => decoded.jobs.pop().ok_or_else(|| Error::Row("no job row".into())),
    }
}

/// A row with the `_private_jobs` columns, and the names of its task and queue.
pub fn job_from_parts(row: &Row, task_identifier: String, queue_name: Option<String>) -> Result<Job, Error> {
    Columns::of(row)?.job(row, task_identifier, queue_name)
}

/// [`job_from_row`] over every row; fails on the first row that cannot be read.
pub fn jobs_from_rows(rows: &[Row]) -> Result<Vec<Job>, Error> {
    let decoded = decode_rows(rows)?;
    match decoded.undecodable.into_iter().next() {
        Some(bad) => Err(Error::Row(bad.error)),
        None => Ok(decoded.jobs),
    }
}

/// Rows read one by one: the jobs, and the rows that could not be read, each named by its
/// job id and the column that failed (so one bad row does not strand the rest). Fails only
/// when the rows are not job rows at all, or a row's id cannot be read.
pub fn decode_rows(rows: &[Row]) -> Result<Decoded, Error> {
    let mut decoded = Decoded::default();
    let Some(first) = rows.first() else { return Ok(decoded) };
    let columns = Columns::of(first)?;
    let names =
        |name| column(first, name).ok_or_else(|| Error::Row(format!("no column {name:?} in a job row")));
    let (task, queue) = (names("task_identifier")?, names("queue_name")?);
    for row in rows {
        let job_id: i64 = read(row, columns.id)?;
        let job = (read(row, task).and_then(|t| Ok((t, read(row, queue)?))))
            .and_then(|(task, queue)| columns.job(row, task, queue));
        match job {
            Ok(job) => decoded.jobs.push(job),
            Err(e) => {
                let error = if let Error::Row(message) = e { message } else { e.to_string() };
                decoded.undecodable.push(Undecodable { job_id, error });
            }
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
