//! [`Cancels`]: the jobs this worker was asked to cancel or that ran past their timeout,
//! and why.
//!
//! A task aborted for running past its timeout fails that attempt (`timed out after ...`)
//! and is retried as any failure.
//!
//! A cancel request arrives as a notification on [`CANCEL`](crate::protocol::CANCEL) naming
//! job ids; only those this worker holds (running, waiting locally or being written) are
//! remembered. Promises: a job held here that is named is told to abort once, and when its
//! task ends other than successfully it fails for good with `cancelled: <reason>`; a task
//! that succeeded first is completed as usual (one outcome either way). A job prefetched
//! and started after the request is aborted as it starts. A request that arrives while the
//! listener is down is not seen: the caller learns from `cancel_jobs` which jobs were
//! locked, and may ask again.

use crate::protocol::TaskOutcome;
use chrono::Duration;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// A `formica:cancel` payload.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct Request {
    pub ids: Vec<i64>,
    #[serde(default)]
    pub reason: String,
}

/// A payload's request, if it is one (anything else is ignored).
fn parse(payload: &str) -> Option<Request> {
    serde_json::from_str(payload).ok()
}

/// Why a running job is being aborted, other than a shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Why {
    Cancelled(String),
    TimedOut(String),
}

/// The cancelled and timed out jobs of a worker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cancels {
    reasons: BTreeMap<i64, Why>,
}

impl Cancels {
    /// Remember the jobs of the request `payload` that are `held` here (a later request
    /// keeps the first reason); returns them.
    pub fn request(&mut self, payload: &str, held: &BTreeSet<i64>) -> Vec<i64> {
        let Some(Request { ids, reason }) = parse(payload) else { return Vec::new() };
        let ids: Vec<i64> = ids.into_iter().filter(|id| held.contains(id)).collect();
        for &id in &ids {
            self.reasons.entry(id).or_insert_with(|| Why::Cancelled(reason.clone()));
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
                TaskOutcome::Err(_) | TaskOutcome::Panicked(_) | TaskOutcome::Aborted,
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

    #[test]
    fn payloads_parse_and_the_first_reason_stays() {
        assert_eq!(
            parse(r#"{"ids":[1,2],"reason":"no"}"#),
            Some(Request { ids: vec![1, 2], reason: "no".into() })
        );
        assert_eq!(parse(r#"{"ids":[3]}"#).map(|r| r.reason), Some(String::new()));
        assert_eq!(parse("junk"), None);
        let mut cancels = Cancels::default();
        let held = BTreeSet::from([1, 2]);
        assert_eq!(cancels.request(r#"{"ids":[1,7],"reason":"first"}"#, &held), vec![1]);
        assert_eq!(cancels.request(r#"{"ids":[1,2],"reason":"second"}"#, &held), vec![1, 2]);
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
    fn a_cancelled_batch_keeps_only_its_failed_items() {
        let mut cancels = Cancels::default();
        cancels.request(r#"{"ids":[1],"reason":"stop"}"#, &BTreeSet::from([1]));
        let items = serde_json::json!([{"id": 2}]);
        let outcome = TaskOutcome::ItemsFailed { error: "Batch failures:\npayload[1]: x".into(), items };
        let kept = TaskOutcome::ItemsFailed {
            error: "cancelled: stop".into(),
            items: serde_json::json!([{"id": 2}]),
        };
        assert_eq!(cancels.ended(1, outcome), (kept, true));
    }
}
