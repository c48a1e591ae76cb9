//! The reference model's cancel requests (`formica_<schema>.cancel_requests`), from the
//! documented rules: `cancel_jobs` fails an unlocked job for good and records a request
//! for a locked one (the first reason stays); a worker reads the requests of the jobs it
//! holds; the recovery sweep cancels a job it frees that has a request, and, from the
//! state before it frees anything, cancels an unlocked job with attempts left that has a
//! request and forgets the requests of unlocked and deleted jobs.

use crate::model::{Model, Row};
use formica_core::sim::Db;

impl Model {
    /// `cancel_jobs(ids, reason)`: each job found, with its holder and whether the holder
    /// has a lease (`None`: failed here).
    pub(crate) fn cancel_jobs(&mut self, ids: &[i64], reason: &str) -> Vec<(i64, Option<(String, bool)>)> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let mut out = Vec::new();
        for id in ids {
            let Some(row) = self.rows.get_mut(&id) else { continue };
            if row.locked_at.is_none() {
                row.last_error = Some(format!("cancelled: {reason}"));
                row.attempts = row.max_attempts;
                out.push((id, None));
                continue;
            }
            let holder = row.locked_by.clone().unwrap_or_default();
            self.cancel_requests.entry(id).or_insert_with(|| reason.to_owned());
            let leased = self.leases.contains_key(&holder);
            out.push((id, Some((holder, leased))));
        }
        out
    }

    /// The requests of the jobs `worker` holds, by job id.
    pub(crate) fn read_cancels(&self, worker: &str) -> Vec<(i64, String)> {
        let mut out = Vec::new();
        for (id, reason) in &self.cancel_requests {
            let held = self.rows.get(id).is_some_and(|r| r.locked_by.as_deref() == Some(worker));
            if held {
                out.push((*id, reason.clone()));
            }
        }
        out
    }

    /// The recovery's part, before it frees the jobs of `lapsed`: settle the requests of
    /// jobs no one holds, and mark the jobs about to be freed that have one as cancelled
    /// (returned).
    pub(crate) fn settle_cancels(&mut self, lapsed: &[String]) -> Vec<i64> {
        let mut freed_cancelled = Vec::new();
        let requests: Vec<(i64, String)> = self.cancel_requests.clone().into_iter().collect();
        for (id, reason) in requests {
            let Some(row) = self.rows.get_mut(&id) else {
                self.cancel_requests.remove(&id);
                continue;
            };
            if row.locked_at.is_none() {
                if row.attempts < row.max_attempts {
                    cancel(row, &reason);
                }
                self.cancel_requests.remove(&id);
            } else if row.locked_by.as_ref().is_some_and(|w| lapsed.contains(w)) {
                // Freed just after: fails for good; the request goes at the next sweep.
                cancel(row, &reason);
                freed_cancelled.push(id);
            }
        }
        freed_cancelled
    }

    /// Whether the simulated database holds the same requests.
    pub(crate) fn same_requests(&self, db: &Db) -> Result<(), String> {
        let sim: Vec<(i64, String)> = db.cancel_requests().map(|(id, r)| (id, r.to_owned())).collect();
        let model: Vec<(i64, String)> = self.cancel_requests.iter().map(|(id, r)| (*id, r.clone())).collect();
        match sim == model {
            true => Ok(()),
            false => Err(format!("cancel requests {sim:?}, model {model:?}")),
        }
    }
}

fn cancel(row: &mut Row, reason: &str) {
    row.last_error = Some(format!("cancelled: {reason}"));
    row.attempts = row.max_attempts;
}
