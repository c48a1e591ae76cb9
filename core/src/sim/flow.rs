//! Pauses on the simulated database, as the SQL keeps them (`sql/records/000006.sql`,
//! `sql/queries/flow_pause.sql`, `flow_resume.sql`, `worker/read_flow.sql`): the reason and
//! who/when are left out, no worker statement reads them.

use super::db::{Db, Notification};
use crate::flow::{Pause, Scope};
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

    fn notify_flow(&mut self) {
        self.notifications.push(Notification { channel: FLOW.into(), payload: String::new() });
    }
}

/// The row for `scope`/`name`: a pause of everything has no name.
fn pause(scope: Scope, name: &str) -> Pause {
    let name = if scope == Scope::All { String::new() } else { name.to_owned() };
    Pause { scope, name }
}
