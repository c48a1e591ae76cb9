//! Formica's `schedules` table in the simulated database: runtime schedules added,
//! changed and removed as `WorkerUtils` does (each write notifies
//! [`SCHEDULES`](crate::protocol::SCHEDULES)), and read by [`Statement::ReadSchedules`].
//!
//! [`Statement::ReadSchedules`]: crate::protocol::Statement::ReadSchedules

use super::db::{Db, Notification};
use crate::cron::runner::ScheduleRow;
use crate::cron::CronItem;
use crate::protocol::SCHEDULES;

impl Db {
    /// Add `item` as a runtime schedule, or replace the one with its identifier.
    pub fn put_schedule(&mut self, item: &CronItem) {
        self.schedules.insert(item.identifier().to_owned(), item.to_string());
        self.notify_schedules();
    }

    /// Remove the runtime schedule `identifier`; whether there was one.
    pub fn remove_schedule(&mut self, identifier: &str) -> bool {
        let removed = self.schedules.remove(identifier).is_some();
        if removed {
            self.notify_schedules();
        }
        removed
    }

    /// The runtime schedules, by identifier, as `ReadSchedules` answers.
    pub fn schedule_rows(&self) -> Vec<ScheduleRow> {
        let row = |(identifier, line): (&String, &String)| ScheduleRow {
            identifier: identifier.clone(),
            line: line.clone(),
        };
        self.schedules.iter().map(row).collect()
    }

    fn notify_schedules(&mut self) {
        self.notifications.push(Notification { channel: SCHEDULES.into(), payload: String::new() });
    }
}
