//! Rate limits on the simulated database, as the SQL keeps them (`sql/records/000010.sql`,
//! `sql/queries/flow_limit.sql`, `flow_unlimit.sql`): the limits by task, and the log of
//! starts the limited fetch writes and prunes.

use super::db::Db;
use crate::flow::Limit;
use crate::job::Job;
use crate::time::Timestamp;
use chrono::Duration;

impl Db {
    /// Limit `limit.task` (replacing its limit, if any) and wake the workers.
    pub fn set_rate_limit(&mut self, limit: Limit) {
        self.limits.insert(limit.task.clone(), limit);
        self.notify_flow();
    }

    /// Lift the limit of `task` and forget its starts; wakes the workers if there was one.
    /// Whether there was.
    pub fn remove_rate_limit(&mut self, task: &str) -> bool {
        let lifted = self.limits.remove(task).is_some();
        if lifted {
            self.rate_starts.retain(|(t, _, _)| t != task);
            self.notify_flow();
        }
        lifted
    }

    /// Starts of `limit`'s task logged in `partition` in the period ending at `now`.
    pub(super) fn started_in(&self, limit: &Limit, partition: &str, now: Timestamp) -> usize {
        let since = now - period(limit);
        self.rate_starts.iter().filter(|(t, p, at)| *t == limit.task && p == partition && *at > since).count()
    }

    /// Forget the starts of `limits`' tasks older than their period at `now`.
    pub(super) fn prune_starts(&mut self, limits: &[Limit], now: Timestamp) {
        self.rate_starts.retain(|(task, _, at)| {
            limits.iter().find(|l| l.task == *task).is_none_or(|l| *at > now - period(l))
        });
    }

    /// Log a start of `job` under `limit` at `now`.
    pub(super) fn log_start(&mut self, limit: &Limit, job: &Job, now: Timestamp) {
        self.rate_starts.push((limit.task.clone(), rate_partition(limit, job), now));
    }
}

/// The partition of `job` under `limit` (the empty text for an unpartitioned limit).
pub(super) fn rate_partition(limit: &Limit, job: &Job) -> String {
    limit.partition.as_ref().map(|p| p.of(&job.payload, job.key.as_deref())).unwrap_or_default()
}

fn period(limit: &Limit) -> Duration {
    Duration::milliseconds(i64::from(limit.period_ms))
}
