//! Completing a job in its handler's own transaction, on tokio-postgres or sqlx: the job's
//! completion (and its history row, and its steps' settling) commit with the handler's
//! writes, or neither does.

use super::{Durable, COMMITTED};
use crate::error::Error;
use crate::jobs::{Query, Session};
use crate::params::param;
use crate::rows::ResultRow;
use crate::statements::{bind, Catalog};
use crate::task::JobContext;
use formica_core::job::Job;
use formica_core::worker::Statement;
use tokio_postgres::types::Type;

/// Write `job`'s completion by `worker_id` on `session`, in the form the worker's own
/// completion takes (`complete_jobs.sql`, with history and workflow settling as the worker
/// writes them), and settle its steps if it `stepped`: an [`Error::JobLost`] if the job is no
/// longer this worker's, after which the transaction must roll back.
pub(super) async fn complete_in<S: Session>(
    session: &mut S,
    catalog: &Catalog,
    job: &Job,
    worker_id: &str,
    stepped: bool,
) -> Result<(), Error> {
    let settles_workflow_jobs = job.flags.contains(formica_core::workflow::FLAG);
    let completion =
        Statement::CompleteJobs { worker_id: worker_id.to_owned(), ids: vec![job.id], settles_workflow_jobs };
    let bound = bind(catalog, completion, &[]);
    let fenced = session.query(Query { sql: bound.sql.to_owned(), params: bound.params }).await?;
    if let Some(row) = fenced.first() {
        return Err(Error::JobLost { job_id: job.id, holder: row.read(1)? });
    }
    if stepped {
        let steps = Query { sql: catalog.steps_settled.clone(), params: vec![param(job.id, Type::INT8)] };
        session.query(steps).await?;
    }
    Ok(())
}

impl JobContext {
    /// This job's durable paths: an error in a context of the testing module, which has no
    /// database.
    pub(super) fn durable(&self) -> Result<&Durable, Error> {
        self.durable.as_ref().ok_or_else(|| {
            Error::Options("this job context has no database (a context of the testing module)".into())
        })
    }

    /// Complete this job in `tx`, the handler's transaction on the worker's database, and
    /// commit it: the handler's writes and the job's completion (with its history row, when
    /// the worker keeps history) are stored together, or neither is. A rollback, or a crash
    /// before the commit, leaves the job to run again and none of the writes.
    ///
    /// Fenced like every completion: if this worker no longer holds the job (its lease lapsed
    /// and another worker recovered it), nothing commits and the answer is
    /// [`Error::JobLost`]. Once committed, the worker writes nothing more for the job, whatever
    /// the handler returns (docs/guide/durable-jobs.md).
    pub async fn complete_with_transaction(&self, tx: tokio_postgres::Transaction<'_>) -> Result<(), Error> {
        let durable = self.durable()?;
        if let Err(e) =
            complete_in(&mut &tx, &durable.catalog, &self.job, &self.worker_id, durable.stepped()).await
        {
            tx.rollback().await?;
            return Err(e);
        }
        tx.commit().await?;
        durable.mark(COMMITTED);
        Ok(())
    }

    /// [`JobContext::complete_with_transaction`] on a transaction of the application's sqlx
    /// pool (the `sqlx` feature), on the worker's database.
    #[cfg(feature = "sqlx")]
    pub async fn complete_with_sqlx_transaction(
        &self,
        mut tx: ::sqlx::Transaction<'_, ::sqlx::Postgres>,
    ) -> Result<(), Error> {
        let durable = self.durable()?;
        let completed = complete_in(
            &mut crate::sqlx::Sqlx(&mut tx),
            &durable.catalog,
            &self.job,
            &self.worker_id,
            durable.stepped(),
        )
        .await;
        if let Err(e) = completed {
            tx.rollback().await?;
            return Err(e);
        }
        tx.commit().await?;
        durable.mark(COMMITTED);
        Ok(())
    }
}
