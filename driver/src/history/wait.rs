//! [`WorkerUtils::wait_for_job`]: the outcome of a job once it finishes, by notification.
//!
//! The waiter LISTENs on its own connection (`crate::waiting`), registers the job in
//! `job_waiters`, and only then looks: after each statement that writes history, a trigger
//! (records step 27) notifies `formica:finished` for every waiter whose job has ended. A
//! registration that trigger did not see committed after it, so the look
//! (sql/queries/history/pending.sql) waits for that statement's row locks: either the look sees
//! the job finished or the notification comes. No polling.

use super::outcome::{outcome_on, JobOutcome};
use crate::error::Error;
use crate::utils::WorkerUtils;
use crate::waiting::Waiting;
use formica_sql::history::{FINISHED, PENDING};
use std::time::Duration;
use tokio_postgres::types::Type;
use tokio_postgres::Client;

impl WorkerUtils {
    /// Wait until job `id` ends for good, at most `timeout`, and return its outcome from
    /// the history: `Ok(Some)` with its output or its error; `Ok(None)` if it ended without
    /// history (ended by a worker with history off or by graphile-worker's own workers,
    /// removed, no such job: such an end sends no notification, so if it happens during the
    /// wait the answer comes when `timeout` is up); [`Error::TimedOut`] if it is still to
    /// finish then. A job that fails an attempt with attempts left is still to finish.
    pub async fn wait_for_job(&self, id: i64, timeout: Duration) -> Result<Option<JobOutcome>, Error> {
        let mut waiting = Waiting::listen(self, FINISHED, timeout).await?;
        let client = &waiting.client;
        let register =
            formica_sql::render("insert into :RECORDS.job_waiters (job_id) values ($1)", self.schema());
        client.query_typed(&register, &[(&id, Type::INT8)]).await?;
        let outcome = loop {
            if !pending(&waiting.client, self.schema(), id).await? {
                break Ok(outcome_on(&waiting.client, self.schema(), id).await?);
            }
            if !waiting.named(id).await? {
                // A job that ended without history sent no notification.
                break match pending(&waiting.client, self.schema(), id).await? {
                    false => Ok(outcome_on(&waiting.client, self.schema(), id).await?),
                    true => Err(Error::TimedOut(format!("job {id} did not finish within {timeout:?}"))),
                };
            }
        };
        forget_waiter(&waiting.client, self.schema()).await;
        outcome
    }
}

async fn pending(client: &Client, schema: &str, id: i64) -> Result<bool, Error> {
    let sql = formica_sql::render(PENDING, schema);
    Ok(client.query_typed(&sql, &[(&id, Type::INT8)]).await?[0].try_get(0)?)
}

/// Drop this connection's registrations now, so finishing statements stop looking for them
/// (the pruner forgets those of waiters that died).
async fn forget_waiter(client: &Client, schema: &str) {
    let sql = formica_sql::render("delete from :RECORDS.job_waiters where pid = pg_backend_pid()", schema);
    if let Err(e) = client.batch_execute(&sql).await {
        tracing::debug!(error = %e, "could not forget a job waiter; the pruner will");
    }
}
