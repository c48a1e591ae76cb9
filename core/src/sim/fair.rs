//! Fairness' state on the simulated database, as `sql/records/000026.sql` keeps it: each
//! tenant's pass (`fair_passes`) and each fair task's clock (`fair_clocks`, the pass at
//! which the latest start began), read and advanced by the controlled fetch.

use crate::flow::Control;
use std::collections::BTreeMap;

/// The passes and clocks of the fair tasks.
#[derive(Debug, Clone, Default)]
pub(crate) struct FairState {
    /// (task, tenant) -> the tenant's pass: where its next start begins.
    passes: BTreeMap<(String, String), i64>,
    /// task -> the pass at which its latest start began.
    clocks: BTreeMap<String, i64>,
}

impl FairState {
    /// Forget `task`'s passes and clock (its fairness lifted).
    pub(super) fn forget(&mut self, task: &str) {
        self.passes.retain(|(t, _), _| t != task);
        self.clocks.remove(task);
    }

    /// Forget the passes of `fair`'s task at or behind its clock: such a tenant starts at
    /// the clock anyway, so its row says nothing (the table stays as small as the tenants
    /// ahead).
    pub(super) fn prune(&mut self, fair: &Control) {
        let clock = self.clock(&fair.task);
        self.passes.retain(|(t, _), pass| *t != fair.task || *pass > clock);
    }

    fn clock(&self, task: &str) -> i64 {
        self.clocks.get(task).copied().unwrap_or(0)
    }

    /// Where `tenant`'s next start of `task` begins: its pass, or the clock if that is
    /// later (a tenant back from idle banks no credit).
    pub(super) fn start(&self, task: &str, tenant: &str) -> i64 {
        let pass = self.passes.get(&(task.to_owned(), tenant.to_owned())).copied();
        pass.unwrap_or(i64::MIN).max(self.clock(task))
    }

    /// `n` jobs of `tenant` started from `start`, each a `stride`: its pass moves past them
    /// and the clock to where the last of them began, if later.
    pub(super) fn started(&mut self, task: &str, tenant: &str, start: i64, n: i64, stride: i64) {
        self.passes.insert((task.to_owned(), tenant.to_owned()), start + n * stride);
        let clock = self.clocks.entry(task.to_owned()).or_insert(0);
        *clock = (*clock).max(start + (n - 1) * stride);
    }
}
