//! A finished job as its history row tells it, and [`WorkerUtils::job_outcome`].

use crate::error::Error;
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

/// How a job ended for good (completed, failed, cancelled), as its history row and its
/// workflow record it.
pub use formica_core::workflow::Outcome as FinalState;

/// One run of a job that ended for good, from the history.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOutcome {
    /// The job.
    pub job_id: i64,
    /// Its task.
    pub task_identifier: String,
    /// Its named queue, if any.
    pub queue_name: Option<String>,
    /// Its key, if any.
    pub key: Option<String>,
    /// Its payload when it ended.
    pub payload: Value,
    /// The attempts it made, the last included.
    pub attempts: i16,
    /// Its attempts allowed.
    pub max_attempts: i16,
    /// How it ended.
    pub outcome: FinalState,
    /// The error that ended it; for a completed job, its last failed attempt's, if any.
    pub last_error: Option<String>,
    /// When it was added.
    pub added_at: DateTime<Utc>,
    /// When its last attempt started.
    pub started_at: Option<DateTime<Utc>>,
    /// When it ended.
    pub finished_at: DateTime<Utc>,
    /// The worker that ran its last attempt.
    pub worker_id: Option<String>,
    /// What its handler returned ([`OutputTaskHandler`](super::OutputTaskHandler)).
    pub output: Option<Value>,
}

impl JobOutcome {
    /// The output as `T` (`None`: the job returned none).
    pub fn output_as<T: DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        Ok(self.output.clone().map(serde_json::from_value).transpose()?)
    }

    pub(crate) fn from_row(row: &Row) -> Result<Self, Error> {
        Ok(JobOutcome {
            job_id: row.try_get("job_id")?,
            task_identifier: row.try_get("task_identifier")?,
            queue_name: row.try_get("queue_name")?,
            key: row.try_get("key")?,
            payload: row.try_get("payload")?,
            attempts: row.try_get("attempts")?,
            max_attempts: row.try_get("max_attempts")?,
            outcome: {
                let text: &str = row.try_get("outcome")?;
                FinalState::parse(text)
                    .ok_or_else(|| Error::Row(format!("unknown history outcome {text:?}")))?
            },
            last_error: row.try_get("last_error")?,
            added_at: row.try_get("added_at")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            worker_id: row.try_get("worker_id")?,
            output: row.try_get("output")?,
        })
    }
}

impl WorkerUtils {
    /// How job `id` ended, from the history: its newest run that ended for good, or `None` if
    /// it has none (still to finish, finished with history off or by graphile-worker's own
    /// workers, or pruned).
    pub async fn job_outcome(&self, id: i64) -> Result<Option<JobOutcome>, Error> {
        let client = self.pool().get().await?;
        outcome_on(&client, self.schema(), id).await
    }
}

pub(super) async fn outcome_on(
    client: &tokio_postgres::Client,
    schema: &str,
    id: i64,
) -> Result<Option<JobOutcome>, Error> {
    let sql = formica_sql::render(formica_sql::history::OUTCOME, schema);
    let rows = client.query_typed(&sql, &[(&id, Type::INT8)]).await.map_err(super::read_refused(schema))?;
    rows.first().map(JobOutcome::from_row).transpose()
}
