//! The log of starts that the limited fetch writes and prunes on the simulated database,
//! as `sql/records/000010.sql` keeps it (the limits themselves are in `flow.rs`).

use super::db::Db;
use crate::flow::Control;
use crate::job::Job;
use crate::time::Timestamp;
use chrono::Duration;

impl Db {
    /// Starts of `limit`'s task logged in `partition` in the period ending at `now`.
    pub(super) fn started_in(&self, limit: &Control, partition: &str, now: Timestamp) -> usize {
        let since = now - period(limit);
        let per = limit.partition_key();
        self.rate_starts
            .iter()
            .filter(|(t, by, p, at)| *t == limit.task && *by == per && p == partition && *at > since)
            .count()
    }

    /// Forget the starts of `limits` older than their period at `now`.
    pub(super) fn prune_starts(&mut self, limits: &[Control], now: Timestamp) {
        self.rate_starts.retain(|(task, per, _, at)| {
            limits
                .iter()
                .find(|l| l.task == *task && l.partition_key() == *per)
                .is_none_or(|l| *at > now - period(l))
        });
    }

    /// Log a start of `job` under `limit` at `now`.
    pub(super) fn log_start(&mut self, limit: &Control, job: &Job, now: Timestamp) {
        self.rate_starts.push((limit.task.clone(), limit.partition_key(), limit.partition_of(job), now));
    }
}

fn period(limit: &Control) -> Duration {
    limit.period().unwrap_or_else(Duration::zero)
}
