//! [`WorkerUtils::wait_for_job`]: the outcome of a job once it finishes, by notification.
//!
//! The waiter LISTENs on its own connection (a pooled one's notifications are dropped),
//! registers the job in `job_waiters`, and only then looks: the history write of a job
//! someone waits for notifies `formica:finished` (sql/queries/history/notify.sql). A write that
//! looked at the waiters just before the registration committed has not committed itself
//! yet: the look (sql/queries/history/pending.sql) waits for its row lock, so either the
//! look sees the job finished or the notification comes. No polling.

use super::outcome::{outcome_on, JobOutcome};
use crate::db::connect_raw_watched;
use crate::error::Error;
use crate::utils::WorkerUtils;
use formica_sql::history::{FINISHED, PENDING};
use futures::future::{self, Either};
use futures::StreamExt;
use std::time::Duration;
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client};

impl WorkerUtils {
    /// Wait until job `id` ends for good, at most `timeout`, and return its outcome from
    /// the history: `Ok(Some)` with its output or its error; `Ok(None)` if it ended without
    /// history (ended by a worker with history off or by graphile-worker's own workers,
    /// removed, no such job: such an end sends no notification, so if it happens during the
    /// wait the answer comes when `timeout` is up); [`Error::TimedOut`] if it is still to
    /// finish then. A job that fails an attempt with attempts left is still to finish.
    pub async fn wait_for_job(&self, id: i64, timeout: Duration) -> Result<Option<JobOutcome>, Error> {
        let runtime = self.pool().runtime().clone();
        let (client, mut connection) = connect_raw_watched(runtime.clone(), self.pool().settings()).await?;
        let (messages_tx, mut messages) = futures::channel::mpsc::unbounded();
        let drive = async move {
            let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = stream.next().await {
                let _ = messages_tx.unbounded_send(message.map_err(Error::from)?);
            }
            Err::<Option<JobOutcome>, _>(Error::Internal("the waiting connection closed".into()))
        };
        let wait = async {
            client.batch_execute(&format!("LISTEN \"{FINISHED}\"")).await?;
            let register =
                formica_sql::render("insert into :RECORDS.job_waiters (job_id) values ($1)", self.schema());
            client.query_typed(&register, &[(&id, Type::INT8)]).await?;
            let deadline = runtime.sleep(timeout);
            futures::pin_mut!(deadline);
            loop {
                if !pending(&client, self.schema(), id).await? {
                    let outcome = outcome_on(&client, self.schema(), id).await?;
                    forget_waiter(&client, self.schema()).await;
                    return Ok(outcome);
                }
                // Until a notification names this job.
                loop {
                    match future::select(messages.next(), &mut deadline).await {
                        Either::Left((Some(AsyncMessage::Notification(n)), _))
                            if n.payload().split(',').any(|job| job == id.to_string()) =>
                        {
                            break
                        }
                        Either::Left((Some(_), _)) => continue,
                        Either::Left((None, _)) => {
                            return Err(Error::Internal("the waiting connection closed".into()))
                        }
                        Either::Right(_) => {
                            // A job that ended without history sent no notification.
                            let finished = !pending(&client, self.schema(), id).await?;
                            let outcome = match finished {
                                true => Ok(outcome_on(&client, self.schema(), id).await?),
                                false => Err(Error::TimedOut(format!(
                                    "job {id} did not finish within {timeout:?}"
                                ))),
                            };
                            forget_waiter(&client, self.schema()).await;
                            return outcome;
                        }
                    }
                }
            }
        };
        futures::pin_mut!(drive, wait);
        match future::select(drive, wait).await {
            Either::Left((result, _)) | Either::Right((result, _)) => result,
        }
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
