//! Dead letters from an application: a task names the task its jobs are sent to when they
//! fail for good (`WorkerUtils::set_dead_letter`, `remove_dead_letter`, `dead_letters`);
//! guide: docs/guide/dead-letters.md.
//!
//! Each is a row of Formica's records schema. A Formica worker's failure of a job on its
//! last attempt (or of one that did not stop) adds, in the same statement, a job of the
//! target task whose payload is `{"job_id", "task", "payload", "last_error", "attempts"}`;
//! a cancelled job is not sent. The failed job stays as it was (permanently failed), to be
//! redriven (`formica retry`, the dashboard's Redrive) once its cause is fixed.

use crate::error::Error;
use crate::params::{param, typed};
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use formica_sql as sql;
use tokio_postgres::types::Type;

/// A task's dead letter, as [`WorkerUtils::dead_letters`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeadLetter {
    /// The task whose jobs are sent.
    pub task: String,
    /// The task that receives them.
    pub target: String,
    /// Who set it (as given, else the database role).
    pub set_by: String,
    /// When.
    pub set_at: DateTime<Utc>,
    /// How many of its jobs were sent (since the first was).
    pub sent: i64,
    /// The job that received the last one sent, and when it was sent.
    pub last_sent: Option<(i64, DateTime<Utc>)>,
}

impl WorkerUtils {
    /// Send the jobs of `task` that fail for good to `target` (a task identifier), replacing
    /// its dead letter; `by` is recorded as who set it (else the database role). Returns
    /// when it was set. Formica workers send from their next failure on.
    pub async fn set_dead_letter(
        &self,
        task: &str,
        target: &str,
        by: Option<&str>,
    ) -> Result<DateTime<Utc>, Error> {
        let (task, target) = (task.trim(), target.trim());
        if task.is_empty() || target.is_empty() {
            return Err(Error::DeadLetter("a dead letter needs a task and a target task".into()));
        }
        if task == target {
            return Err(Error::DeadLetter(format!("task {task:?} cannot be its own dead letter")));
        }
        let params = vec![
            param(task.to_owned(), Type::TEXT),
            param(target.to_owned(), Type::TEXT),
            param(by.map(str::to_owned), Type::TEXT),
        ];
        let client = self.pool().get().await?;
        let rows =
            client.query_typed(&sql::render(sql::dead_letters::SET, self.schema()), &typed(&params)).await?;
        let row = rows.first().ok_or_else(|| Error::Row("the dead letter was not recorded".into()))?;
        Ok(row.try_get(0)?)
    }

    /// Send the jobs of `task` nowhere when they fail for good. Returns whether it had a
    /// dead letter.
    pub async fn remove_dead_letter(&self, task: &str) -> Result<bool, Error> {
        let params = vec![param(task.trim().to_owned(), Type::TEXT)];
        let client = self.pool().get().await?;
        let sql = sql::render(sql::dead_letters::REMOVE, self.schema());
        Ok(!client.query_typed(&sql, &typed(&params)).await?.is_empty())
    }

    /// The dead letters, by task, with how many jobs each sent.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>, Error> {
        let client = self.pool().get().await?;
        let rows = client.query_typed(&sql::render(sql::dead_letters::LIST, self.schema()), &[]).await?;
        rows.iter()
            .map(|row| {
                let (last_job, last_at): (Option<i64>, Option<DateTime<Utc>>) =
                    (row.try_get(5)?, row.try_get(6)?);
                Ok(DeadLetter {
                    task: row.try_get(0)?,
                    target: row.try_get(1)?,
                    set_by: row.try_get(2)?,
                    set_at: row.try_get(3)?,
                    sent: row.try_get::<_, Option<i64>>(4)?.unwrap_or_default(),
                    last_sent: last_job.zip(last_at),
                })
            })
            .collect()
    }
}
