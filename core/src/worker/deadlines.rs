//! What can be read of a [`Worker`] without changing it: its deadlines (the earliest of
//! its parts') and a few counters.

use super::{Phase, Worker};
use crate::cron::runner::CronRunner;
use crate::protocol::TimerKind;
use crate::time::Timestamp;

impl Worker {
    /// The earliest deadline and why; feed [`crate::protocol::Input::Timeout`] then.
    pub fn poll_timeout(&self) -> Option<(Timestamp, TimerKind)> {
        TimerKind::ALL.iter().filter_map(|&kind| Some((self.deadline(kind)?, kind))).min()
    }

    /// When the timer `kind` is due, if it is armed.
    pub fn deadline(&self, kind: TimerKind) -> Option<Timestamp> {
        match kind {
            TimerKind::Poll => self.fetcher.poll_deadline(),
            TimerKind::Flush => self.writes.deadline(),
            TimerKind::Listener => self.link.deadline(),
            TimerKind::LockSweep => self.sweeper.deadline(),
            // The lease's keeper's, not the worker's.
            TimerKind::Heartbeat => None,
            TimerKind::Recovery => self.lease.recovery_deadline(),
            TimerKind::LocalQueueTtl => self.fetcher.give_back_deadline(),
            TimerKind::TaskTimeout => self.slots.timeout_deadline(),
            TimerKind::ShutdownGrace => self.slots.grace_deadline(),
            TimerKind::Retry => self.retry_at,
            TimerKind::GiveUpWrites => self.writes.give_up_deadline(),
            TimerKind::Flow => self.flow.deadline(),
            TimerKind::PruneHistory => self.pruner.deadline(),
            TimerKind::ResolveWorkflows => self.resolver.deadline(),
            TimerKind::ReindexBloated => self.reindexer.deadline(),
            TimerKind::AgePriorities => self.ager.deadline(),
            TimerKind::Cron => {
                self.cron.as_ref().filter(|_| self.phase == Phase::Running).and_then(CronRunner::deadline)
            }
        }
    }

    /// Tasks running now.
    pub fn running(&self) -> usize {
        self.slots.len()
    }

    /// Whether the worker has stopped.
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// The machine's clock: the latest `now` it was given (it never goes back).
    pub fn now(&self) -> Timestamp {
        self.now
    }
}
