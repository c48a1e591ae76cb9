//! Durable jobs (docs/guide/durable-jobs.md): a job completed in its handler's own
//! transaction (`complete.rs`), and steps that run once per job across attempts and crashes
//! (`steps.rs`).
//!
//! Both are paths of their own, taken only by handlers that ask: the worker's batched
//! completion is untouched. A handler that completed its job itself ends
//! [`TaskOutcome::Committed`], so the worker's core writes nothing more for it; a job that
//! recorded steps and succeeded completes in a transaction of its own that also settles its
//! steps (removed, or moved into its history row).

mod complete;
mod steps;

pub use steps::StepError;

use crate::db::Pool;
use crate::error::Error;
use crate::statements::Catalog;
use formica_core::job::Job;
use formica_core::worker::TaskOutcome;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// The handler committed its job's completion.
const COMMITTED: u8 = 1;
/// The handler ran or read a step: the job may have steps to settle when it completes.
const STEPPED: u8 = 2;

/// What a running job's context needs for its durable paths: the worker's SQL, and what the
/// handler did with them (shared by the context's clones and the task that reports its end).
#[derive(Clone)]
pub(crate) struct Durable {
    catalog: Arc<Catalog>,
    state: Arc<AtomicU8>,
}

impl Durable {
    pub(crate) fn new(catalog: Arc<Catalog>) -> Self {
        Durable { catalog, state: Arc::default() }
    }

    fn mark(&self, flag: u8) {
        self.state.fetch_or(flag, Ordering::AcqRel);
    }

    /// Whether the handler ran or read a step in this attempt: only then are there steps to
    /// settle as the job completes (a handler with steps runs them on every attempt).
    fn stepped(&self) -> bool {
        self.state.load(Ordering::Acquire) & STEPPED != 0
    }

    /// How the task of `job` ended, given what its handler did: committed if it completed
    /// the job itself (whatever it returned after: the job is gone); for a job with steps that
    /// succeeded, committed once its completion and its steps' settling commit together
    /// (failing that, the success goes to the worker's completion as any other).
    pub(crate) async fn settle(
        &self,
        job: &Job,
        worker_id: &str,
        pool: &Pool,
        outcome: TaskOutcome,
    ) -> TaskOutcome {
        let state = self.state.load(Ordering::Acquire);
        if state & COMMITTED != 0 {
            return TaskOutcome::Committed;
        }
        if state & STEPPED == 0 || outcome != TaskOutcome::Ok {
            return outcome;
        }
        match self.complete_with_steps(job, worker_id, pool).await {
            Ok(()) => TaskOutcome::Committed,
            Err(e) => {
                tracing::warn!(job_id = job.id, error = %e, "completing a job with steps in its transaction failed: the worker completes it");
                outcome
            }
        }
    }

    async fn complete_with_steps(&self, job: &Job, worker_id: &str, pool: &Pool) -> Result<(), Error> {
        let mut client = pool.get().await?;
        let tx = client.transaction().await?;
        complete::complete_in(&mut &tx, &self.catalog, job, worker_id, true).await?;
        Ok(tx.commit().await?)
    }
}
