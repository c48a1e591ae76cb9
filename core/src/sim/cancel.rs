//! Cancel requests on the simulated database, as the SQL keeps them
//! (`sql/queries/cancel_jobs.sql`, `worker/read_cancels.sql`, the settling part of
//! `worker/recover_lapsed.sql`): `requested_at` is left out, no statement reads it.

use super::db::{Db, Notification};
use crate::protocol::CANCEL;
use std::collections::BTreeSet;

/// What `cancel_jobs` did to one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelOutcome {
    /// No worker held it: failed for good here.
    Failed,
    /// Held by this worker: a request was recorded for it.
    Recorded {
        /// The holder (`locked_by`).
        worker_id: String,
        /// Whether the holder has a lease (a Formica worker, which reads requests).
        leased: bool,
    },
}

impl Db {
    /// `cancel_jobs(ids, reason)`: fail for good the jobs no worker holds (`cancelled:
    /// <reason>`, no attempt left); for held ones record a request (an earlier one keeps
    /// its reason) and wake the workers on `formica:cancel`. Returns the jobs found, by id.
    pub fn cancel_jobs(&mut self, ids: &[i64], reason: &str) -> Vec<(i64, CancelOutcome)> {
        let wanted: BTreeSet<i64> = ids.iter().copied().collect();
        let mut out = Vec::new();
        for id in wanted {
            let Some(job) = self.jobs.get_mut(&id) else { continue };
            match (job.locked_at, job.locked_by.clone()) {
                (None, _) => {
                    job.last_error = Some(format!("cancelled: {reason}"));
                    job.attempts = job.max_attempts;
                    out.push((id, CancelOutcome::Failed));
                }
                (Some(_), worker_id) => {
                    self.cancel_requests.entry(id).or_insert_with(|| reason.to_owned());
                    let worker_id = worker_id.unwrap_or_default();
                    let leased = self.leases.contains_key(&worker_id);
                    out.push((id, CancelOutcome::Recorded { worker_id, leased }));
                }
            }
        }
        for (id, _) in out.iter().filter(|(_, o)| *o == CancelOutcome::Failed) {
            self.settle_if_failed_for_good(*id);
        }
        if out.iter().any(|(_, o)| *o != CancelOutcome::Failed) {
            self.notifications.push(Notification { channel: CANCEL.into(), payload: String::new() });
        }
        out
    }

    /// The cancel requests: job id -> reason.
    pub fn cancel_requests(&self) -> impl Iterator<Item = (i64, &str)> {
        self.cancel_requests.iter().map(|(id, reason)| (*id, reason.as_str()))
    }

    /// `ReadCancels`: the requests of the jobs `worker_id` holds, by job id.
    pub(super) fn read_cancels(&self, worker_id: &str) -> Vec<(i64, String)> {
        self.cancel_requests
            .iter()
            .filter(|(id, _)| self.held_by(**id, worker_id))
            .map(|(id, reason)| (*id, reason.clone()))
            .collect()
    }

    /// The reason a request holds for `job_id`, as the recovery frees the job.
    pub(super) fn requested(&self, job_id: i64) -> Option<String> {
        self.cancel_requests.get(&job_id).cloned()
    }

    /// The recovery's settling of requests no worker carries out, on the state before the
    /// recovery frees anything: a job no one holds with attempts left fails for good as
    /// cancelled; the requests of unlocked jobs and of jobs gone are forgotten.
    pub(super) fn settle_cancels(&mut self) {
        let requests = std::mem::take(&mut self.cancel_requests);
        for (id, reason) in requests {
            match self.jobs.get_mut(&id) {
                Some(job) if job.locked_at.is_some() => {
                    self.cancel_requests.insert(id, reason);
                }
                Some(job) if job.attempts < job.max_attempts => {
                    job.last_error = Some(format!("cancelled: {reason}"));
                    job.attempts = job.max_attempts;
                }
                // Finished, or gone: forgotten.
                Some(_) | None => {}
            }
        }
    }
}
