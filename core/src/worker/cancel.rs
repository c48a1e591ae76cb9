//! [`Cancels`]: the jobs this worker was asked to cancel or that ran past their timeout,
//! and why; and the reading of its cancel requests.
//!
//! A task aborted for running past its timeout fails that attempt (`timed out after ...`)
//! and is retried as any failure.
//!
//! A cancel request is a row (`cancel_requests` in Formica's records schema) recorded by
//! `cancel_jobs` for a job a worker holds, so none is lost: the worker reads the requests of
//! the jobs it holds ([`Statement::ReadCancels`](crate::protocol::Statement::ReadCancels))
//! when woken on [`CANCEL`](crate::protocol::CANCEL) (a wake-up only, whatever its payload),
//! when its listener comes (back) up, and after every heartbeat that lands while it holds a
//! job, so within about a [`HEARTBEAT_INTERVAL`](crate::lease::HEARTBEAT_INTERVAL) even with
//! no listener (pgBouncer in transaction mode, a listener hung). At most one read is in flight; one wanted
//! meanwhile is sent when it ends (a failed read waits for the next heartbeat).
//!
//! Promises: a job held here (running or waiting locally) that a request names is told to
//! abort once, and when its task ends other than successfully it fails for good with
//! `cancelled: <reason>` (the first reason recorded); a task that succeeded first is
//! completed as usual (one outcome either way). A job prefetched and started after the
//! request was read is aborted as it starts. Requests this worker never carries out (it
//! dies, or gives the job back) are settled by the recovery sweep
//! ([`Statement::RecoverLapsed`](crate::protocol::Statement::RecoverLapsed)).

use crate::protocol::TaskOutcome;
use chrono::Duration;
use std::collections::{BTreeMap, BTreeSet};

/// Why a running job is being aborted, other than a shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Why {
    Cancelled(String),
    TimedOut(String),
}

/// The cancelled and timed out jobs of a worker, and its read of the requests.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cancels {
    reasons: BTreeMap<i64, Why>,
    /// A read of the requests is in flight.
    reading: bool,
    /// Another read was wanted while one was in flight.
    again: bool,
}

impl Cancels {
    /// Whether to send a read of the requests now: none is in flight (else one is owed
    /// when it ends).
    pub fn read_wanted(&mut self) -> bool {
        self.again |= self.reading;
        !std::mem::replace(&mut self.reading, true)
    }

    /// The read in flight ended: whether another is owed.
    pub fn read_ended(&mut self) -> bool {
        self.reading = false;
        std::mem::take(&mut self.again)
    }

    /// Remember the `requests` (job id, reason) for jobs `held` here (a job already
    /// cancelled keeps its first reason); returns those jobs.
    pub fn request(&mut self, requests: Vec<(i64, String)>, held: &BTreeSet<i64>) -> Vec<i64> {
        let mut ids = Vec::new();
        for (id, reason) in requests.into_iter().filter(|(id, _)| held.contains(id)) {
            self.reasons.entry(id).or_insert(Why::Cancelled(reason));
            ids.push(id);
        }
        ids
    }

    /// Whether `job_id` was cancelled.
    pub fn contains(&self, job_id: i64) -> bool {
        matches!(self.reasons.get(&job_id), Some(Why::Cancelled(_)))
    }

    /// `job_id` ran past its `timeout` (unless it was cancelled first).
    pub fn timed_out(&mut self, job_id: i64, timeout: Duration) {
        let ms = timeout.num_milliseconds();
        let after = if ms % 1000 == 0 { format!("{}s", ms / 1000) } else { format!("{ms}ms") };
        self.reasons.entry(job_id).or_insert(Why::TimedOut(after));
    }

    /// The job's task ended with `outcome`: the outcome to record, and whether it fails
    /// for good (cancelled, and it did not succeed first).
    pub fn ended(&mut self, job_id: i64, outcome: TaskOutcome) -> (TaskOutcome, bool) {
        match (self.reasons.remove(&job_id), outcome) {
            (
                Some(Why::Cancelled(reason)),
                TaskOutcome::Err(_)
                | TaskOutcome::Panicked(_)
                | TaskOutcome::Aborted
                | TaskOutcome::Snoozed(_),
            ) => (TaskOutcome::Err(format!("cancelled: {reason}")), true),
            // The items that succeeded are done: the job keeps only the others.
            (Some(Why::Cancelled(reason)), TaskOutcome::ItemsFailed { items, .. }) => {
                (TaskOutcome::ItemsFailed { error: format!("cancelled: {reason}"), items }, true)
            }
            (Some(Why::TimedOut(after)), TaskOutcome::Aborted) => {
                (TaskOutcome::Err(format!("timed out after {after}")), false)
            }
            (why, TaskOutcome::Unstoppable) => {
                let because = match why {
                    Some(Why::Cancelled(reason)) => format!("cancelled: {reason}"),
                    Some(Why::TimedOut(after)) => format!("timed out after {after}"),
                    None => "aborted".to_owned(),
                };
                let error = format!(
                    "{because}, and the task did not stop (its handler blocks its thread): failed for good, \
                     as another attempt would run beside it"
                );
                (TaskOutcome::Err(error), true)
            }
            (_, outcome) => (outcome, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests(ids: &[i64], reason: &str) -> Vec<(i64, String)> {
        ids.iter().map(|&id| (id, reason.to_owned())).collect()
    }

    #[test]
    fn requests_for_held_jobs_are_kept_and_the_first_reason_stays() {
        let mut cancels = Cancels::default();
        let held = BTreeSet::from([1, 2]);
        assert_eq!(cancels.request(requests(&[1, 7], "first"), &held), vec![1]);
        assert_eq!(cancels.request(requests(&[1, 2], "second"), &held), vec![1, 2]);
        assert!(cancels.contains(1) && !cancels.contains(7));
        let failed = (TaskOutcome::Err("cancelled: first".into()), true);
        assert_eq!(cancels.ended(1, TaskOutcome::Aborted), failed);
        assert_eq!(cancels.ended(1, TaskOutcome::Aborted), (TaskOutcome::Aborted, false), "once");
        assert_eq!(cancels.ended(2, TaskOutcome::Ok), (TaskOutcome::Ok, false), "success came first");
        cancels.timed_out(3, Duration::seconds(5));
        assert!(!cancels.contains(3));
        assert_eq!(
            cancels.ended(3, TaskOutcome::Aborted),
            (TaskOutcome::Err("timed out after 5s".into()), false)
        );
    }

    #[test]
    fn one_read_in_flight_and_one_owed_for_any_wanted_meanwhile() {
        let mut cancels = Cancels::default();
        assert!(cancels.read_wanted());
        assert!(!cancels.read_wanted());
        assert!(!cancels.read_wanted(), "two wanted meanwhile: one owed");
        assert!(cancels.read_ended(), "the owed read");
        assert!(cancels.read_wanted());
        assert!(!cancels.read_ended(), "none owed");
        assert!(cancels.read_wanted(), "nothing in flight");
    }

    #[test]
    fn a_cancelled_batch_keeps_only_its_failed_items() {
        let mut cancels = Cancels::default();
        cancels.request(requests(&[1], "stop"), &BTreeSet::from([1]));
        let items = serde_json::json!([{"id": 2}]);
        let outcome = TaskOutcome::ItemsFailed { error: "Batch failures:\npayload[1]: x".into(), items };
        let kept = TaskOutcome::ItemsFailed {
            error: "cancelled: stop".into(),
            items: serde_json::json!([{"id": 2}]),
        };
        assert_eq!(cancels.ended(1, outcome), (kept, true));
    }
}
