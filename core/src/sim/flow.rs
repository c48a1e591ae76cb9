//! Pauses on the simulated database, as the SQL keeps them (`sql/records/000006.sql`,
//! `sql/queries/flow_pause.sql`, `flow_resume.sql`, `worker/read_flow.sql`): the reason and
//! who/when are left out, no worker statement reads them.

use super::db::{Db, Notification};
use crate::flow::{Cap, Controls, Pause, Scope};
use crate::protocol::FLOW;

impl Db {
    /// Pause `scope`/`name` (an existing pause stays one) and wake the workers on `formica:flow`.
    pub fn pause(&mut self, scope: Scope, name: &str) {
        self.pauses.insert(pause(scope, name));
        self.notify_flow();
    }

    /// Lift the pause of `scope`/`name`; wakes the workers if there was one. Whether there was.
    pub fn resume(&mut self, scope: Scope, name: &str) -> bool {
        let lifted = self.pauses.remove(&pause(scope, name));
        if lifted {
            self.notify_flow();
        }
        lifted
    }

    /// The pauses in force, in (scope, name) order.
    pub fn pauses(&self) -> Vec<Pause> {
        self.pauses.iter().cloned().collect()
    }

    /// Cap `cap.task` (replacing its cap, if any) and wake the workers.
    pub fn set_cap(&mut self, cap: Cap) {
        self.caps.insert(cap.task.clone(), cap);
        self.notify_flow();
    }

    /// Lift the cap of `task`; wakes the workers if there was one. Whether there was.
    pub fn remove_cap(&mut self, task: &str) -> bool {
        let lifted = self.caps.remove(task).is_some();
        if lifted {
            self.notify_flow();
        }
        lifted
    }

    /// What `ReadFlow` answers.
    pub(super) fn controls(&self) -> Controls {
        Controls {
            pauses: self.pauses(),
            caps: self.caps.values().cloned().collect(),
            limits: self.limits.values().cloned().collect(),
        }
    }

    /// Jobs of `cap`'s task locked now, by anyone, in `partition`.
    pub fn locked_in(&self, cap: &Cap, partition: &str) -> usize {
        self.jobs
            .values()
            .filter(|j| j.task_identifier == cap.task && j.locked_at.is_some())
            .filter(|j| cap_partition(cap, j) == partition)
            .count()
    }
}

/// The partition of `job` under `cap` (the empty text for an unpartitioned cap).
pub(super) fn cap_partition(cap: &Cap, job: &crate::job::Job) -> String {
    cap.partition.as_ref().map(|p| p.of(&job.payload, job.key.as_deref())).unwrap_or_default()
}

impl Db {
    pub(super) fn notify_flow(&mut self) {
        self.notifications.push(Notification { channel: FLOW.into(), payload: String::new() });
    }
}

/// The row for `scope`/`name`: a pause of everything has no name.
fn pause(scope: Scope, name: &str) -> Pause {
    let name = if scope == Scope::All { String::new() } else { name.to_owned() };
    Pause { scope, name }
}
