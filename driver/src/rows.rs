//! Turning result rows into [`Job`]s: the one place that knows column names and types.

use crate::error::Error;
use formica_core::job::Job;
use tokio_postgres::Row;

/// A row with the `_private_jobs` columns plus `task_identifier` and `queue_name`.
pub fn job_from_row(row: &Row) -> Result<Job, Error> {
    let get = |e: tokio_postgres::Error| Error::Row(e.to_string());
    job_from_parts(row, row.try_get("task_identifier").map_err(get)?, row.try_get("queue_name").map_err(get)?)
}

/// A row with the `_private_jobs` columns, and the names of its task and queue.
pub fn job_from_parts(row: &Row, task_identifier: String, queue_name: Option<String>) -> Result<Job, Error> {
    let get = |e: tokio_postgres::Error| Error::Row(e.to_string());
    let flags: Option<serde_json::Value> = row.try_get("flags").map_err(get)?;
    Ok(Job {
        id: row.try_get("id").map_err(get)?,
        job_queue_id: row.try_get("job_queue_id").map_err(get)?,
        queue_name,
        task_identifier,
        payload: row.try_get("payload").map_err(get)?,
        priority: row.try_get("priority").map_err(get)?,
        run_at: row.try_get("run_at").map_err(get)?,
        attempts: row.try_get("attempts").map_err(get)?,
        max_attempts: row.try_get("max_attempts").map_err(get)?,
        last_error: row.try_get("last_error").map_err(get)?,
        created_at: row.try_get("created_at").map_err(get)?,
        updated_at: row.try_get("updated_at").map_err(get)?,
        key: row.try_get("key").map_err(get)?,
        locked_at: row.try_get("locked_at").map_err(get)?,
        locked_by: row.try_get("locked_by").map_err(get)?,
        revision: row.try_get("revision").map_err(get)?,
        // Stored as {"flag": true, ...}; the keys are the flags.
        flags: match flags {
            Some(serde_json::Value::Object(map)) => map.into_iter().map(|(k, _)| k).collect(),
            _ => Default::default(),
        },
    })
}

/// [`job_from_row`] over every row.
pub fn jobs_from_rows(rows: &[Row]) -> Result<Vec<Job>, Error> {
    rows.iter().map(job_from_row).collect()
}
