//! [`WorkerOptions::runtime_schedules`]: a worker that schedules the runtime
//! schedules too (see `crate::schedules`).

use super::WorkerOptions;
use std::time::Duration;

/// How often a worker reads the runtime schedules when no notification came.
pub const DEFAULT_SCHEDULES_POLL: Duration = Duration::from_secs(5);

impl<R> WorkerOptions<R> {
    /// Also schedule the runtime schedules ([`WorkerUtils::put_schedule`]), read at start,
    /// on each change's notification, and every `poll` should one be lost
    /// ([`DEFAULT_SCHEDULES_POLL`] is a fair choice). Needs records migration 8.
    ///
    /// [`WorkerUtils::put_schedule`]: crate::WorkerUtils::put_schedule
    pub fn runtime_schedules(mut self, poll: Duration) -> Self {
        self.config.runtime_schedules =
            Some(chrono::Duration::from_std(poll).unwrap_or(chrono::Duration::MAX));
        self
    }
}
