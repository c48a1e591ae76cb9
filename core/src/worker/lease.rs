//! [`Lease`]: this worker's proof of life, and the recovery of the jobs of workers that lost
//! theirs.
//!
//! A worker records in the database that it is alive until [`LEASE`] from now (by the
//! database clock), renewing it every [`HEARTBEAT_INTERVAL`] from start to stop, draining
//! included. Every `recovery_interval` ([`RECOVERY_PERIOD`] by default; jittered up to a
//! third more) a running worker asks the database to suspect the workers whose lease
//! lapsed and to free the jobs and named queues of those suspected for more than
//! [`SUSPICION_GRACE`] without renewing. The grace is what makes a step forward of the
//! database clock harmless: every lease looks lapsed at once, and every live worker renews
//! within a heartbeat interval. So a worker that dies is recovered from at most
//! `LEASE + SUSPICION_GRACE + 2 * 4/3 recovery_interval` (23 s by default) after its last
//! heartbeat landed, by whichever live worker sweeps first (the sweep deletes the dead
//! worker's record as it frees its locks, so two sweeps never free the same worker twice).
//!
//! Promises: the first heartbeat and the first recovery sweep are due at start; the worker
//! fetches nothing until a heartbeat landed (so it never holds a job without a record that
//! lets it be recovered); never two heartbeats or two sweeps in flight; a failed one is
//! tried again at the next period; once [`stop`](Lease::stop)ped, nothing is due.
//!
//! Only the database clock decides whether a lease lapsed: workers' clocks may be off by
//! any amount, and the database's may step forward once in a while. What a live worker
//! needs is to reach the database: one whose heartbeats all fail (or that is paused) for
//! `LEASE + SUSPICION_GRACE - HEARTBEAT_INTERVAL` (12 s) may lose its jobs to another
//! worker; its late writes are then fenced off by `locked_by`.

use crate::rng::SplitMix;
use crate::time::Timestamp;
use chrono::Duration;

/// How often a worker renews its lease.
pub const HEARTBEAT_INTERVAL: Duration = Duration::seconds(3);
/// How long a lease holds without renewal.
pub const LEASE: Duration = Duration::seconds(10);
/// How long a lapsed lease is suspected before its worker's jobs are freed: longer than a
/// heartbeat interval, so that a live worker renews within it after a step of the
/// database clock. With the lease, a worker survives a stall of 12 s.
pub const SUSPICION_GRACE: Duration = Duration::seconds(5);
/// How often a worker looks for lapsed leases by default (`Config::recovery_interval`; plus
/// up to a third, jittered).
pub const RECOVERY_PERIOD: Duration = Duration::seconds(3);

/// A timer with at most one statement in flight.
#[derive(Debug, Clone, Copy, Default)]
struct Beat {
    at: Option<Timestamp>,
    in_flight: bool,
}

impl Beat {
    /// Whether to send now; the next one is then armed `after()` from `now`.
    fn fire(&mut self, now: Timestamp, after: impl FnOnce() -> Duration) -> bool {
        if self.at.is_none_or(|at| at > now) {
            return false;
        }
        self.at = Some(now + after());
        !std::mem::replace(&mut self.in_flight, true)
    }
}

/// What is due at a timeout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Due {
    pub heartbeat: bool,
    pub recovery: bool,
}

/// The lease of a worker and its recovery sweeps.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lease {
    heartbeat: Beat,
    recovery: Beat,
    /// A heartbeat landed: the worker may lock jobs.
    held: bool,
    /// Between two recovery sweeps, before the jitter.
    recovery_period: Duration,
}

impl Lease {
    /// A lease whose first heartbeat (and first recovery sweep, if `recover`) is due now;
    /// the sweeps then come every `recovery_period` (plus jitter).
    pub fn start(now: Timestamp, recover: bool, recovery_period: Duration) -> Self {
        Lease {
            heartbeat: Beat { at: Some(now), in_flight: false },
            recovery: Beat { at: recover.then_some(now), in_flight: false },
            held: false,
            recovery_period,
        }
    }

    /// What to send at `now` (the next ones are then armed).
    pub fn handle_timeout(&mut self, now: Timestamp, rng: &mut SplitMix) -> Due {
        // Jittered so that workers started together spread their sweeps.
        let base = self.recovery_period;
        let period = || base + Duration::milliseconds(rng.between(0, base.num_milliseconds() / 3));
        Due {
            heartbeat: self.heartbeat.fire(now, || HEARTBEAT_INTERVAL),
            recovery: self.recovery.fire(now, period),
        }
    }

    /// The heartbeat sent ended; `landed` if the database took it.
    pub fn heartbeat_ended(&mut self, landed: bool) {
        self.heartbeat.in_flight = false;
        self.held |= landed;
    }

    /// The recovery sweep sent ended (a failed one waits for the next period).
    pub fn recovery_ended(&mut self) {
        self.recovery.in_flight = false;
    }

    /// Whether a heartbeat landed, so jobs this worker locks can be recovered if it dies.
    pub fn held(&self) -> bool {
        self.held
    }

    /// No more recovery sweeps (shutdown: the worker only finishes what it runs).
    pub fn stop_recovery(&mut self) {
        self.recovery.at = None;
    }

    /// Nothing more (the worker stopped).
    pub fn stop(&mut self) {
        self.heartbeat.at = None;
        self.recovery.at = None;
    }

    /// When the next heartbeat is due.
    pub fn heartbeat_deadline(&self) -> Option<Timestamp> {
        self.heartbeat.at
    }

    /// When the next recovery sweep is due.
    pub fn recovery_deadline(&self) -> Option<Timestamp> {
        self.recovery.at
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn t0() -> Timestamp {
        Timestamp::from_timestamp(1_704_067_200, 0).unwrap()
    }

    #[test]
    fn beats_at_start_then_every_interval_never_two_in_flight() {
        let mut rng = SplitMix::new(7);
        let mut lease = Lease::start(t0(), true, RECOVERY_PERIOD);
        assert!(!lease.held());
        assert_eq!(lease.handle_timeout(t0(), &mut rng), Due { heartbeat: true, recovery: true });
        assert_eq!(lease.heartbeat_deadline(), Some(t0() + HEARTBEAT_INTERVAL));
        let next = lease.recovery_deadline().unwrap();
        assert!(next >= t0() + RECOVERY_PERIOD && next <= t0() + RECOVERY_PERIOD * 4 / 3);
        // Still in flight at the next period: not sent again.
        let later = t0() + Duration::seconds(5);
        assert_eq!(lease.handle_timeout(later, &mut rng), Due::default());
        lease.heartbeat_ended(false);
        assert!(!lease.held(), "a failed heartbeat holds nothing");
        lease.recovery_ended();
        assert_eq!(
            lease.handle_timeout(later + HEARTBEAT_INTERVAL * 2, &mut rng),
            Due { heartbeat: true, recovery: true }
        );
        lease.heartbeat_ended(true);
        assert!(lease.held());
    }

    #[test]
    fn stopping_disarms_everything_and_run_once_does_not_recover() {
        let mut lease = Lease::start(t0(), false, RECOVERY_PERIOD);
        assert_eq!(lease.recovery_deadline(), None);
        assert_eq!(lease.heartbeat_deadline(), Some(t0()));
        lease.stop();
        assert_eq!(lease.heartbeat_deadline(), None);
        assert_eq!(lease.handle_timeout(t0() + LEASE, &mut SplitMix::new(1)), Due::default());
    }
}
