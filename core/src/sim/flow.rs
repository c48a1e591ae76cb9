//! Flow controls on the simulated database, as the SQL keeps them (`sql/records/000006.sql`,
//! `000010.sql`, `000026.sql`, `sql/queries/flow_*.sql`, `worker/read_flow.sql`): pauses,
//! caps, rate limits and fairness; the reason and who/when are left out, no worker statement reads them.

use super::db::{Db, Notification};
use crate::flow::{Control, ControlKind, Controls, Partition, Pause, Scope};
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

    /// Send the jobs of `task` that fail for good to `target` (docs/guide/dead-letters.md).
    pub fn set_dead_letter(&mut self, task: &str, target: &str) {
        self.dead_letters.insert(task.to_owned(), target.to_owned());
    }

    /// Set `control` (replacing the one of its [`identity`](Control::identity), if any) and
    /// wake the workers.
    pub fn set_control(&mut self, control: Control) {
        self.controls.insert(key(&control.task, control.kind(), control.partition.as_ref()), control);
        self.notify_flow();
    }

    /// Lift the `kind` control of `task` over `partition` (fairness: whatever its
    /// partition); a rate limit's starts and fairness' passes are forgotten with it. Wakes
    /// the workers if there was one. Whether there was.
    pub fn remove_control(&mut self, task: &str, kind: ControlKind, partition: Option<&Partition>) -> bool {
        let Some(lifted) = self.controls.remove(&key(task, kind, partition)) else { return false };
        match kind {
            ControlKind::RateLimit => {
                let per = lifted.partition_key();
                self.rate_starts.retain(|(t, by, _, _)| t != task || *by != per);
            }
            ControlKind::Fair => self.fair.forget(task),
            // The sim keeps no bound: no add it makes is bounded.
            ControlKind::Cap | ControlKind::Bound => {}
        }
        self.notify_flow();
        true
    }

    /// What `ReadFlow` answers.
    pub(super) fn controls(&self) -> Controls {
        Controls { pauses: self.pauses(), controls: self.controls.values().cloned().collect() }
    }

    /// Jobs of `cap`'s task locked now, by anyone, in `partition`.
    pub fn locked_in(&self, cap: &Control, partition: &str) -> usize {
        self.jobs
            .values()
            .filter(|j| j.task_identifier == cap.task && j.locked_at.is_some())
            .filter(|j| cap.partition_of(j) == partition)
            .count()
    }
}

impl Db {
    pub(super) fn notify_flow(&mut self) {
        self.notifications.push(Notification { channel: FLOW.into(), payload: String::new() });
    }
}

/// The key of a control: its identity, owned.
fn key(
    task: &str,
    kind: ControlKind,
    partition: Option<&Partition>,
) -> (String, ControlKind, Option<Partition>) {
    (task.to_owned(), kind, partition.filter(|_| kind != ControlKind::Fair).cloned())
}

/// The row for `scope`/`name`: a pause of everything has no name.
fn pause(scope: Scope, name: &str) -> Pause {
    let name = if scope == Scope::All { String::new() } else { name.to_owned() };
    Pause { scope, name }
}
