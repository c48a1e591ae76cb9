//! Flow controls on the simulated database, as the SQL keeps them (`sql/records/000006.sql`,
//! `000010.sql`, `sql/queries/flow_*.sql`, `worker/read_flow.sql`): pauses, caps and rate
//! limits; the reason and who/when are left out, no worker statement reads them.

use super::db::{Db, Notification};
use crate::flow::{Control, ControlKind, Controls, Pause, Scope};
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

    /// Set `control` (replacing its task's control of its kind, if any) and wake the workers.
    pub fn set_control(&mut self, control: Control) {
        self.controls.insert((control.task.clone(), control.kind()), control);
        self.notify_flow();
    }

    /// Lift the `kind` control of `task` (a rate limit's starts are forgotten with it); wakes
    /// the workers if there was one. Whether there was.
    pub fn remove_control(&mut self, task: &str, kind: ControlKind) -> bool {
        let lifted = self.controls.remove(&(task.to_owned(), kind)).is_some();
        if lifted {
            if kind == ControlKind::RateLimit {
                self.rate_starts.retain(|(t, _, _)| t != task);
            }
            self.notify_flow();
        }
        lifted
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

/// The row for `scope`/`name`: a pause of everything has no name.
fn pause(scope: Scope, name: &str) -> Pause {
    let name = if scope == Scope::All { String::new() } else { name.to_owned() };
    Pause { scope, name }
}
