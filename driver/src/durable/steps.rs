//! Steps: a job's work cut into named steps, each run once per job across attempts and
//! crashes. A finished step's output is recorded in the same transaction as the step's own
//! writes; a retry reads it back instead of running the step again.

use super::STEPPED;
use crate::error::Error;
use crate::task::JobContext;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_postgres::types::{ToSql, Type};

/// What a step and its closure fail with: the closure's own error as it is, or Formica's.
pub type StepError = Box<dyn std::error::Error + Send + Sync>;

impl JobContext {
    /// Run the step `name` of this job once: if an earlier attempt finished it, its recorded
    /// output, without running `run`; else `run`'s output, recorded as the step's in the
    /// transaction `run` was given, which commits only while this worker still holds the job
    /// (else [`Error::JobLost`], and nothing of the step is kept). A step whose closure fails
    /// is not recorded (its transaction rolls back): the next attempt runs it again.
    ///
    /// Writes made through the transaction happen exactly once per job; work outside the
    /// database (a call to an API) may happen again if the worker dies after it and before
    /// the step commits: give it an idempotency key such as the job's id and the step's name.
    /// The output is stored as JSON in Formica's schema until the job completes (then with
    /// its history, if the worker keeps it). See docs/guide/durable-jobs.md.
    pub async fn step<T, F>(&self, name: &str, run: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned + Send,
        F: for<'t> FnOnce(&'t tokio_postgres::Transaction<'t>) -> BoxFuture<'t, Result<T, StepError>>,
    {
        if name.is_empty() || name.contains('\0') {
            return Err(
                format!("invalid step name {name:?}: a step is named by non-empty text without NUL").into()
            );
        }
        let durable = self.durable()?;
        durable.mark(STEPPED);
        let (job_id, catalog) = (self.job.id, &durable.catalog);
        let mut client = self.client().await?;
        let key: [(&(dyn ToSql + Sync), Type); 2] = [(&job_id, Type::INT8), (&name, Type::TEXT)];
        let read = client.query_typed(&catalog.step_read, &key).await?;
        if let Some(row) = read.first() {
            let text: String = row.try_get(0)?;
            return serde_json::from_str(&text).map_err(|e| {
                let into = std::any::type_name::<T>();
                format!(
                    "step {name:?} of job {job_id}: its recorded output {text} does not read as {into}: {e}"
                )
                .into()
            });
        }
        let tx = client.transaction().await?;
        // An error or a panic drops `tx`, which rolls the step's writes back.
        let output = run(&tx).await?;
        let text = serde_json::to_string(&output).map_err(Error::Payload)?;
        let worker_id: &str = &self.worker_id;
        let record: [(&(dyn ToSql + Sync), Type); 4] =
            [(&job_id, Type::INT8), (&name, Type::TEXT), (&text, Type::TEXT), (&worker_id, Type::TEXT)];
        let answer = tx.query_typed(&catalog.step_record, &record).await?;
        let row = answer.first().ok_or_else(|| Error::Row("step_record answered no row".into()))?;
        if !row.try_get::<_, bool>(0)? {
            tx.rollback().await?;
            return Err(Error::JobLost { job_id, holder: row.try_get(1)? }.into());
        }
        tx.commit().await?;
        Ok(output)
    }
}
