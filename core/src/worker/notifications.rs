//! What each notification a worker's listener hears tells it: new jobs, cancel requests,
//! changed schedules or flow controls, a migration.

use super::Worker;
use crate::notify;
use crate::protocol::{Event, CANCEL, FLOW, JOBS_INSERT, SCHEDULES, WORKER_MIGRATE};

impl Worker {
    pub(super) fn notification(&mut self, channel: &str, payload: String) {
        match channel {
            JOBS_INSERT => {
                let count = notify::parse_insert_count(&payload);
                if count > 0 {
                    self.fetcher.notified(count.unsigned_abs());
                }
            }
            // A wake-up: the requests are rows, read whatever the payload.
            CANCEL => self.read_cancels(),
            SCHEDULES => {
                if let Some(cron) = &mut self.cron {
                    cron.schedules_changed(self.now);
                }
            }
            FLOW => self.flow.want(),
            WORKER_MIGRATE => match notify::parse_migration(&payload) {
                Some(m) if m.breaking && m.number <= i64::from(self.config.latest_migration) => {
                    self.emit(Event::SchemaReinstalled { migration: m.number });
                    if let Some(cron) = &mut self.cron {
                        cron.reinstalled(self.now);
                    }
                }
                Some(m) if m.breaking => {
                    self.emit(Event::BreakingMigration { migration: m.number });
                    self.shutdown(true);
                }
                _ => {}
            },
            _ => {}
        }
    }
}
