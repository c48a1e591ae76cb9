//! [`Refetch`]: the local queue's refetch delay (graphile-worker's
//! `localQueue.refetchDelay`), off unless configured.
//!
//! When many workers share a queue that receives a trickle of jobs, each notification would
//! make every one of them fetch, and most would find nothing. With a delay, a fetch that
//! found at most `threshold` jobs (and not a full batch) holds further fetches for
//! `(0.5 + r) * duration`, `r` uniform in [0, 1): the workers spread their next look. The
//! hold ends early once the notifications since announce `r' * max_abort_threshold` jobs
//! (never, if that is zero): a burst is fetched at once.
//!
//! Promises: while it holds, its deadline is armed (the hold ends by itself); it starts
//! only after a short fetch; a stop ends it.

use crate::rng::SplitMix;
use crate::time::Timestamp;
use chrono::Duration;

/// The refetch delay's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefetchDelay {
    /// The mean hold after a short fetch (each hold is 0.5 to 1.5 times it). At most the
    /// poll interval.
    pub duration: Duration,
    /// A fetch that found at most this many jobs starts a hold (graphile-worker: 0).
    pub threshold: usize,
    /// Jobs announced during a hold end it once they reach a random fraction of this
    /// (graphile-worker: five times the local queue's size); zero: they never do.
    pub max_abort_threshold: usize,
}

/// The hold, if one is on.
#[derive(Debug, Clone)]
pub(crate) struct Refetch {
    delay: Option<RefetchDelay>,
    until: Option<Timestamp>,
    announced: u64,
    abort_at: u64,
    rng: SplitMix,
}

impl Refetch {
    pub fn new(delay: Option<RefetchDelay>, seed: u64) -> Self {
        Refetch { delay, until: None, announced: 0, abort_at: 0, rng: SplitMix::new(seed) }
    }

    /// A fetch asking for `limit` jobs found `got` at `now`: a short one starts a hold.
    pub fn fetched(&mut self, got: usize, limit: usize, now: Timestamp) {
        let Some(delay) = self.delay else { return };
        if got > delay.threshold || got >= limit {
            return;
        }
        let micros = delay.duration.num_microseconds().unwrap_or(i64::MAX) as f64;
        let hold = Duration::microseconds((micros * (0.5 + self.rng.unit())) as i64);
        self.until = Some(now + hold);
        self.announced = 0;
        self.abort_at = (self.rng.unit() * delay.max_abort_threshold as f64).ceil() as u64;
    }

    /// A notification announced `count` new jobs.
    pub fn announced(&mut self, count: u64) {
        if self.until.is_none() {
            return;
        }
        self.announced = self.announced.saturating_add(count);
        if self.abort_at > 0 && self.announced >= self.abort_at {
            self.until = None;
        }
    }

    /// Whether fetches are held now.
    pub fn holds(&self) -> bool {
        self.until.is_some()
    }

    /// When the hold ends.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.until
    }

    /// The hold ends once its time has come (and at a stop).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.until.is_some_and(|at| at <= now) {
            self.until = None;
        }
    }

    /// No more holds wait: the worker stops.
    pub fn stop(&mut self) {
        self.until = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn delay(max_abort_threshold: usize) -> RefetchDelay {
        RefetchDelay { duration: Duration::milliseconds(100), threshold: 2, max_abort_threshold }
    }

    #[test]
    fn a_short_fetch_holds_for_half_to_one_and_a_half_durations_then_ends() {
        let t0 = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let mut refetch = Refetch::new(Some(delay(0)), 7);
        refetch.fetched(3, 10, t0);
        assert!(!refetch.holds(), "more than the threshold found: no hold");
        refetch.fetched(2, 2, t0);
        assert!(!refetch.holds(), "a full batch: no hold");
        for seed in 0..50 {
            let mut refetch = Refetch::new(Some(delay(0)), seed);
            refetch.fetched(0, 10, t0);
            let until = refetch.deadline().expect("a hold");
            assert!(until >= t0 + Duration::milliseconds(50) && until < t0 + Duration::milliseconds(150));
            refetch.announced(1_000_000);
            assert!(refetch.holds(), "with no abort threshold announcements do not end it");
            refetch.handle_timeout(until - Duration::milliseconds(1));
            assert!(refetch.holds());
            refetch.handle_timeout(until);
            assert!(!refetch.holds() && refetch.deadline().is_none());
        }
    }

    #[test]
    fn announced_jobs_end_the_hold_at_the_abort_threshold_and_without_a_delay_nothing_holds() {
        let t0 = Utc.timestamp_opt(1_700_000_000, 0).unwrap();
        let mut thresholds = std::collections::BTreeSet::new();
        for seed in 0..50 {
            let mut refetch = Refetch::new(Some(delay(100)), seed);
            refetch.fetched(1, 10, t0);
            let threshold = refetch.abort_at;
            assert!((1..=100).contains(&threshold), "drawn up to the maximum: {threshold}");
            for announced in 1..=threshold {
                assert!(refetch.holds(), "fewer than {threshold} jobs announced ({announced}) keep the hold");
                refetch.announced(1);
            }
            assert!(!refetch.holds(), "{threshold} jobs announced end the hold");
            thresholds.insert(threshold);
        }
        assert!(thresholds.len() > 10, "the threshold is drawn anew each hold: {thresholds:?}");
        let mut off = Refetch::new(None, 1);
        off.fetched(0, 10, t0);
        assert!(!off.holds());
    }
}
