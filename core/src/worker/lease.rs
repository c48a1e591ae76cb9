//! [`Lease`]: whether this worker's lease surely holds, and the recovery of the jobs of
//! workers that lost theirs.
//!
//! The lease is renewed beside the loop, by the [`Keeper`](crate::lease::Keeper), which
//! reports every heartbeat ([`Input::Heartbeat`](crate::protocol::Input::Heartbeat)). Every
//! `recovery_interval` ([`RECOVERY_PERIOD`] by default; jittered up to a third more) a
//! running worker asks the database to suspect the workers whose lease lapsed and to free
//! the jobs and named queues of those suspected for more than [`SUSPICION_GRACE`] without
//! renewing. The grace is what makes a step forward of the database clock harmless: every
//! lease looks lapsed at once, and every live worker renews within a heartbeat interval.
//! So a worker that dies is recovered from at most
//! `LEASE + SUSPICION_GRACE + 2 * 4/3 recovery_interval` (23 s by default) after its last
//! heartbeat landed, by whichever live worker sweeps first (the sweep deletes the dead
//! worker's record as it frees its locks, so two sweeps never free the same worker twice).
//!
//! Promises: the first recovery sweep is due at start; never two sweeps in flight; a failed
//! one is tried again at the next period; once [`stop`](Lease::stop)ped, nothing is due.
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
//! needs is its keeper reaching the database: one whose heartbeats all fail (or whose
//! process is paused) for `LEASE + SUSPICION_GRACE - HEARTBEAT_INTERVAL` (12 s) may lose the
//! jobs it is running to another worker; its late writes are then fenced off by `locked_by`.
//! What its tasks do (block their threads, compute for an hour) does not matter.

pub use crate::lease::{HEARTBEAT_INTERVAL, LEASE, SUSPICION_GRACE};
use crate::rng::SplitMix;
use crate::time::Timestamp;
use chrono::Duration;

/// How often a worker looks for lapsed leases by default (`Config::recovery_interval`; plus
/// up to a third, jittered).
pub const RECOVERY_PERIOD: Duration = Duration::seconds(3);

/// The `last_error` the recovery leaves on a job freed from `worker_id`, whose attempt
/// `attempt` was lost with it (the wording of `sql/queries/worker/recover_lapsed.sql`).
pub fn lapsed_error(worker_id: &str, attempt: i16) -> String {
    format!("attempt {attempt} lost: worker {worker_id} stopped renewing its lease")
}

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

/// Whether the lease holds, and the recovery sweeps.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lease {
    recovery: Beat,
    /// Until when the lease surely holds: [`LEASE`] after the latest landed heartbeat was sent.
    holds_until: Option<Timestamp>,
    /// It held, then no longer did ([`Lease::lapsing`] said so); cleared by a landing.
    lapsed: bool,
    /// Between two recovery sweeps, before the jitter.
    recovery_period: Duration,
}

impl Lease {
    /// A lease that holds once a heartbeat lands; the first recovery sweep (if `recover`)
    /// is due now, then every `recovery_period` (plus jitter).
    pub fn start(now: Timestamp, recover: bool, recovery_period: Duration) -> Self {
        Lease {
            recovery: Beat { at: recover.then_some(now), in_flight: false },
            recovery_period,
            ..Lease::default()
        }
    }

    /// Whether a recovery sweep is due at `now` (the next one is then armed).
    pub fn handle_timeout(&mut self, now: Timestamp, rng: &mut SplitMix) -> bool {
        // Jittered so that workers started together spread their sweeps.
        let base = self.recovery_period;
        self.recovery.fire(now, || base + Duration::milliseconds(rng.between(0, base.num_milliseconds() / 3)))
    }

    /// A heartbeat sent at `sent` landed. True if the lease holds again after
    /// [`Lease::lapsing`] said it no longer did.
    pub fn landed(&mut self, sent: Timestamp, now: Timestamp) -> bool {
        self.holds_until = self.holds_until.max(Some(sent + LEASE));
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

    /// No more recovery sweeps (shutdown, or stopped).
    pub fn stop_recovery(&mut self) {
        self.recovery.at = None;
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
    use crate::time::t0;

    #[test]
    fn sweeps_at_start_then_every_period_one_at_a_time() {
        let mut rng = SplitMix::new(7);
        let mut lease = Lease::start(t0(), true, RECOVERY_PERIOD);
        assert!(lease.handle_timeout(t0(), &mut rng));
        let next = lease.recovery_deadline().unwrap();
        assert!(next >= t0() + RECOVERY_PERIOD && next <= t0() + RECOVERY_PERIOD * 4 / 3);
        assert!(!lease.handle_timeout(next, &mut rng), "the first is still out");
        lease.recovery_ended();
        let next = lease.recovery_deadline().unwrap();
        assert!(lease.handle_timeout(next, &mut rng));
        lease.stop_recovery();
        assert_eq!(lease.recovery_deadline(), None);
    }

    #[test]
    fn the_lease_lapses_once_a_lease_passed_since_the_last_landed_heartbeat_was_sent() {
        let mut lease = Lease::start(t0(), false, RECOVERY_PERIOD);
        assert_eq!(lease.recovery_deadline(), None, "run-once does not recover");
        assert!(!lease.holds(t0()), "nothing landed yet");
        assert!(!lease.lapsing(t0() + LEASE * 2), "never held: nothing to lapse");
        // Landed late: the lease still counts from the sending.
        assert!(!lease.landed(t0(), t0() + Duration::seconds(4)));
        let until = t0() + LEASE;
        assert!(lease.holds(until - Duration::milliseconds(1)));
        assert!(!lease.lapsing(until - Duration::milliseconds(1)));
        assert!(!lease.holds(until));
        assert!(lease.lapsing(until), "lapsing once");
        assert!(!lease.lapsing(until + Duration::seconds(1)));
        // An older heartbeat landing later holds nothing more.
        assert!(!lease.landed(t0() - Duration::seconds(1), until + Duration::seconds(1)));
        // A heartbeat that lands after that renews it, and says so once.
        assert!(lease.landed(until, until + Duration::seconds(1)));
        assert!(lease.holds(until + Duration::seconds(1)));
        assert!(!lease.landed(until + HEARTBEAT_INTERVAL, until + HEARTBEAT_INTERVAL), "held all along");
    }
}
