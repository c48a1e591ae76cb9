//! The job history on the simulated database, as far as its pruner sees it: each row's
//! outcome and when it finished (the sim's workers write none; a test adds them), pruned by
//! records migration 7's rule. Rows live in day partitions, dropped whole once the day
//! ended its outcome's retention before the pass's time.

use super::db::{Db, HistoryRow};
use crate::time::Timestamp;
use crate::worker::Retention;
use crate::workflow::Outcome;
use chrono::{Duration, NaiveTime};
use std::collections::BTreeSet;

/// When the UTC day of `at` ends.
fn day_end(at: Timestamp) -> Timestamp {
    (at.date_naive() + Duration::days(1)).and_time(NaiveTime::MIN).and_utc()
}

impl Db {
    /// Record that job `job_id` ended with `outcome` at `finished_at`.
    pub fn add_history(&mut self, job_id: i64, outcome: Outcome, finished_at: Timestamp) {
        self.history.push(HistoryRow { job_id, outcome, finished_at });
    }

    /// The history rows, in the order added.
    pub fn history(&self) -> &[HistoryRow] {
        &self.history
    }

    /// One pass of the pruner as of `at`: drop the days that ended `retention` of their
    /// outcome before it. Returns the day partitions dropped and the rows deleted (none: the
    /// sim has no default partitions).
    pub(super) fn prune_history(&mut self, retention: &Retention, at: Timestamp) -> (i32, i64) {
        let kept = |outcome: Outcome| match outcome {
            Outcome::Completed => retention.completed,
            Outcome::Failed => retention.failed,
            Outcome::Cancelled => retention.cancelled,
        };
        let past =
            |row: &HistoryRow| kept(row.outcome).is_some_and(|keep| day_end(row.finished_at) <= at - keep);
        let days: BTreeSet<(u8, Timestamp)> = self
            .history
            .iter()
            .filter(|row| past(row))
            .map(|row| (row.outcome as u8, day_end(row.finished_at)))
            .collect();
        self.history.retain(|row| !past(row));
        (i32::try_from(days.len()).unwrap_or(i32::MAX), 0)
    }
}
