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
//! Promises: the first heartbeat and the first recovery sweep are due at start; never two
//! sweeps in flight, and a second heartbeat only while the first hangs (at most two); a
//! failed one is tried again at the next period; once [`stop`](Lease::stop)ped, nothing is
//! due.
//!
//! The lease [`holds`](Lease::holds) for [`LEASE`] from the sending of the latest heartbeat
//! that landed (the database took it no earlier, so its record lasts at least as long; the
//! worker's fed clock never runs slow). The worker fetches and starts jobs only while it
//! holds: so none before the first heartbeat landed (it never holds a job without a record
//! that lets it be recovered), and none once other workers may have freed its jobs. Those
//! can free them only `SUSPICION_GRACE` after the record lapsed, so a job started while the
//! lease holds was this worker's to start.
//!
//! Only the database clock decides whether a lease lapsed: workers' clocks may be off by
//! any amount, and the database's may step forward once in a while. What a live worker
//! needs is to reach the database: one whose heartbeats all fail (or that is paused) for
//! `LEASE + SUSPICION_GRACE - HEARTBEAT_INTERVAL` (12 s) may lose the jobs it is running
//! to another worker; its late writes are then fenced off by `locked_by`.

use crate::protocol::QueryId;
use crate::rng::SplitMix;
use crate::time::Timestamp;
use chrono::Duration;
use std::collections::BTreeMap;

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

/// A timer with at most one statement in flight (the recovery sweep).
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

/// Heartbeats in flight at most: a second goes only while the first hangs (on a connection
/// that stopped answering, say), so that one such connection does not cost the lease.
const HEARTBEATS_IN_FLIGHT: usize = 2;

/// The lease of a worker and its recovery sweeps.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lease {
    /// When the next heartbeat is due.
    heartbeat_at: Option<Timestamp>,
    /// The heartbeats in flight, with when each was sent.
    heartbeats: BTreeMap<QueryId, Timestamp>,
    recovery: Beat,
    /// Until when the lease surely holds: [`LEASE`] after the latest landed heartbeat was sent.
    holds_until: Option<Timestamp>,
    /// It held, then no longer did ([`Lease::lapsing`] said so); cleared by a landing.
    lapsed: bool,
    /// Between two recovery sweeps, before the jitter.
    recovery_period: Duration,
}

impl Lease {
    /// A lease whose first heartbeat (and first recovery sweep, if `recover`) is due now;
    /// the sweeps then come every `recovery_period` (plus jitter).
    pub fn start(now: Timestamp, recover: bool, recovery_period: Duration) -> Self {
        Lease {
            heartbeat_at: Some(now),
            recovery: Beat { at: recover.then_some(now), in_flight: false },
            recovery_period,
            ..Lease::default()
        }
    }

    /// What to send at `now` (the next ones are then armed). A heartbeat sent must be
    /// reported with [`Lease::heartbeat_sent`].
    pub fn handle_timeout(&mut self, now: Timestamp, rng: &mut SplitMix) -> Due {
        // Jittered so that workers started together spread their sweeps.
        let base = self.recovery_period;
        let period = || base + Duration::milliseconds(rng.between(0, base.num_milliseconds() / 3));
        let heartbeat = self.heartbeat_at.is_some_and(|at| at <= now);
        if heartbeat {
            self.heartbeat_at = Some(now + HEARTBEAT_INTERVAL);
        }
        Due {
            heartbeat: heartbeat && self.heartbeats.len() < HEARTBEATS_IN_FLIGHT,
            recovery: self.recovery.fire(now, period),
        }
    }

    /// Heartbeat `id` was sent at `now`.
    pub fn heartbeat_sent(&mut self, id: QueryId, now: Timestamp) {
        self.heartbeats.insert(id, now);
    }

    /// Heartbeat `id` ended; `landed` if the database took it. True if the lease holds again
    /// after [`Lease::lapsing`] said it no longer did.
    pub fn heartbeat_ended(&mut self, id: QueryId, landed: bool, now: Timestamp) -> bool {
        let Some(sent) = self.heartbeats.remove(&id) else { return false };
        if landed {
            self.holds_until = self.holds_until.max(Some(sent + LEASE));
        }
        let renewed = self.lapsed && self.holds(now);
        self.lapsed &= !renewed;
        renewed
    }

    /// Whether the lease surely holds at `now`: the worker may lock and start jobs.
    pub fn holds(&self, now: Timestamp) -> bool {
        self.holds_until.is_some_and(|until| now < until)
    }

    /// True once when the lease, having held, no longer surely does at `now`: other workers
    /// may soon free this worker's jobs.
    pub fn lapsing(&mut self, now: Timestamp) -> bool {
        let lapsing = !self.lapsed && self.holds_until.is_some() && !self.holds(now);
        self.lapsed |= lapsing;
        lapsing
    }

    /// The recovery sweep sent ended (a failed one waits for the next period).
    pub fn recovery_ended(&mut self) {
        self.recovery.in_flight = false;
    }

    /// No more recovery sweeps (shutdown: the worker only finishes what it runs).
    pub fn stop_recovery(&mut self) {
        self.recovery.at = None;
    }

    /// Nothing more (the worker stopped).
    pub fn stop(&mut self) {
        self.heartbeat_at = None;
        self.recovery.at = None;
    }

    /// When the next heartbeat is due.
    pub fn heartbeat_deadline(&self) -> Option<Timestamp> {
        self.heartbeat_at
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
    fn beats_at_start_then_every_interval_a_second_only_while_the_first_hangs() {
        let mut rng = SplitMix::new(7);
        let mut lease = Lease::start(t0(), true, RECOVERY_PERIOD);
        assert!(!lease.holds(t0()));
        assert_eq!(lease.handle_timeout(t0(), &mut rng), Due { heartbeat: true, recovery: true });
        lease.heartbeat_sent(1, t0());
        assert_eq!(lease.heartbeat_deadline(), Some(t0() + HEARTBEAT_INTERVAL));
        let next = lease.recovery_deadline().unwrap();
        assert!(next >= t0() + RECOVERY_PERIOD && next <= t0() + RECOVERY_PERIOD * 4 / 3);
        // The first still out at the next period: a second goes, the sweep does not.
        let later = t0() + Duration::seconds(5);
        assert_eq!(lease.handle_timeout(later, &mut rng), Due { heartbeat: true, recovery: false });
        lease.heartbeat_sent(2, later);
        // Two out: no third.
        let third = later + HEARTBEAT_INTERVAL;
        assert!(!lease.handle_timeout(third, &mut rng).heartbeat);
        assert!(!lease.heartbeat_ended(1, false, third));
        assert!(!lease.holds(third), "a failed heartbeat holds nothing");
        lease.recovery_ended();
        assert!(!lease.heartbeat_ended(2, true, third));
        assert!(lease.holds(third), "the second landed");
        assert!(!lease.holds(later + LEASE), "a lease from the sending of the one that landed");
        assert!(lease.handle_timeout(third + HEARTBEAT_INTERVAL, &mut rng).heartbeat, "none out: one goes");
    }

    #[test]
    fn the_lease_lapses_once_a_lease_passed_since_the_last_landed_heartbeat_was_sent() {
        let mut rng = SplitMix::new(3);
        let mut lease = Lease::start(t0(), false, RECOVERY_PERIOD);
        assert!(!lease.lapsing(t0() + LEASE * 2), "never held: nothing to lapse");
        lease.handle_timeout(t0(), &mut rng);
        lease.heartbeat_sent(1, t0());
        // Landed late: the lease still counts from the sending.
        assert!(!lease.heartbeat_ended(1, true, t0() + Duration::seconds(4)));
        let until = t0() + LEASE;
        assert!(lease.holds(until - Duration::milliseconds(1)));
        assert!(!lease.lapsing(until - Duration::milliseconds(1)));
        assert!(!lease.holds(until));
        assert!(lease.lapsing(until), "lapsing once");
        assert!(!lease.lapsing(until + Duration::seconds(1)));
        // A heartbeat that lands after that renews it, and says so once.
        lease.handle_timeout(until, &mut rng);
        lease.heartbeat_sent(2, until);
        assert!(lease.heartbeat_ended(2, true, until + Duration::seconds(1)));
        assert!(lease.holds(until + Duration::seconds(1)));
        lease.handle_timeout(until + HEARTBEAT_INTERVAL, &mut rng);
        lease.heartbeat_sent(3, until + HEARTBEAT_INTERVAL);
        assert!(!lease.heartbeat_ended(3, true, until + HEARTBEAT_INTERVAL), "held all along");
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
