//! Turning result rows into [`Job`]s: the one place that knows column names and types.

use crate::error::Error;
use formica_core::job::Job;
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
            row.columns()
                .iter()
                .position(|c| c.name() == name)
                .ok_or_else(|| Error::Row(format!("no column {name:?} in a job row")))
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
        let get = |e: tokio_postgres::Error| Error::Row(e.to_string());
        let flags: Option<serde_json::Value> = row.try_get(self.flags).map_err(get)?;
        Ok(Job {
            id: row.try_get(self.id).map_err(get)?,
            job_queue_id: row.try_get(self.job_queue_id).map_err(get)?,
            queue_name,
            task_identifier,
            payload: row.try_get(self.payload).map_err(get)?,
            priority: row.try_get(self.priority).map_err(get)?,
            run_at: row.try_get(self.run_at).map_err(get)?,
            attempts: row.try_get(self.attempts).map_err(get)?,
            max_attempts: row.try_get(self.max_attempts).map_err(get)?,
            last_error: row.try_get(self.last_error).map_err(get)?,
            created_at: row.try_get(self.created_at).map_err(get)?,
            updated_at: row.try_get(self.updated_at).map_err(get)?,
            key: row.try_get(self.key).map_err(get)?,
            locked_at: row.try_get(self.locked_at).map_err(get)?,
            locked_by: row.try_get(self.locked_by).map_err(get)?,
            revision: row.try_get(self.revision).map_err(get)?,
            // Stored as {"flag": true, ...}; the keys are the flags.
            flags: match flags {
                Some(serde_json::Value::Object(map)) => map.into_iter().map(|(k, _)| k).collect(),
                _ => Default::default(),
            },
        })
    }
}

/// A row with the `_private_jobs` columns plus `task_identifier` and `queue_name`.
pub fn job_from_row(row: &Row) -> Result<Job, Error> {
    jobs_from_rows(std::slice::from_ref(row)).map(|mut jobs| jobs.remove(0))
}

/// A row with the `_private_jobs` columns, and the names of its task and queue.
pub fn job_from_parts(row: &Row, task_identifier: String, queue_name: Option<String>) -> Result<Job, Error> {
    Columns::of(row)?.job(row, task_identifier, queue_name)
}

/// [`job_from_row`] over every row.
pub fn jobs_from_rows(rows: &[Row]) -> Result<Vec<Job>, Error> {
    let Some(first) = rows.first() else { return Ok(Vec::new()) };
    let get = |e: tokio_postgres::Error| Error::Row(e.to_string());
    let columns = Columns::of(first)?;
    let at = |name: &str| {
        first
            .columns()
            .iter()
            .position(|c| c.name() == name)
            .ok_or_else(|| Error::Row(format!("no column {name:?} in a job row")))
    };
    let (task, queue) = (at("task_identifier")?, at("queue_name")?);
    rows.iter()
        .map(|row| columns.job(row, row.try_get(task).map_err(get)?, row.try_get(queue).map_err(get)?))
        .collect()
}
