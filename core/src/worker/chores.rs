//! [`Chore`]: when a worker runs its upkeep passes beside its jobs (pruning the job history,
//! resolving workflows, aging priorities), and what a pass of each is given ([`Pruning`], [`Retention`]).
//!
//! Promises: the first pass within [`FIRST_PASS_WITHIN`] of start (or a quarter of the period,
//! if shorter); then a pass each period after the last one ended, less up to a quarter,
//! jittered from the worker's seed, so that workers started together spread their passes and
//! none is ever later than its period (unless paced, below); a failed pass waits twice as long as the one before
//! it, up to [`CHORE_BACKOFF_LIMIT`] (or the period, if longer), and a pass that succeeds
//! brings the period back; never two passes at once; none after [`stop`](Chore::stop); and,
//! for a [`paced`](Chore::paced) chore (the resolver, whose pass reads every released
//! workflow job), when the last [`PACED_BY`] passes each took at least `d`, the next comes
//! no sooner than [`PACE`] times `d` after the last ended, so however slow its pass grows it
//! holds the server at most a twentieth of the time for each worker, while one slow pass (a
//! cold start, a lock wait, a loaded machine) delays nothing. The others keep their period:
//! aging's bound counts on it.
//! Passes of different workers may overlap: each statement takes an advisory lock, and a
//! pass that finds another running does nothing.

use crate::protocol::Retention;
use crate::rng::SplitMix;
use crate::time::Timestamp;
use chrono::Duration;

/// The first pass comes at a random time within this long of a worker's start.
pub const FIRST_PASS_WITHIN: Duration = Duration::seconds(1);

/// The longest a failing chore waits between passes, unless its period is longer.
pub const CHORE_BACKOFF_LIMIT: Duration = Duration::minutes(1);

/// A [`paced`](Chore::paced) chore's pass that took `d` waits at least this many times `d`
/// before the next one: one part in twenty of the time, at most, for each worker.
pub const PACE: i32 = 19;

/// How many passes in a row must be slow before a [`paced`](Chore::paced) chore waits on
/// them: the shortest of these sets the pace.
pub const PACED_BY: usize = 3;

/// The longest period a chore keeps (a longer one counts as this): the machine adds it to
/// its clock.
pub const MAX_CHORE_PERIOD: Duration = Duration::days(365);

/// A worker's history pruner: what it keeps, and how often it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruning {
    /// What each pass keeps.
    pub retention: Retention,
    /// The time between passes, before the jitter.
    pub every: Duration,
}

/// One periodic chore of a worker. `Default`: never due.
#[derive(Debug, Clone, Default)]
pub(crate) struct Chore {
    at: Option<Timestamp>,
    /// When the pass in flight was sent.
    sent: Option<Timestamp>,
    stopped: bool,
    every: Duration,
    /// Passes failed in a row.
    failures: u32,
    /// When paced ([`PACE`]): the lengths of the last [`PACED_BY`] passes (zero: not run yet).
    paced: Option<[Duration; PACED_BY]>,
}

impl Chore {
    /// A chore whose first pass is due within [`FIRST_PASS_WITHIN`] of `now`, then every
    /// `every`, at most [`MAX_CHORE_PERIOD`] (`None`: a chore never due).
    pub fn start(now: Timestamp, every: Option<Duration>, rng: &mut SplitMix) -> Self {
        let Some(every) = every.map(|every| every.clamp(Duration::zero(), MAX_CHORE_PERIOD)) else {
            return Chore::default();
        };
        let within = (every / 4).min(FIRST_PASS_WITHIN).num_milliseconds();
        Chore { at: Some(now + Duration::milliseconds(rng.between(0, within))), every, ..Chore::default() }
    }

    /// This chore, its passes spaced by their own length ([`PACE`]).
    pub fn paced(self) -> Self {
        Chore { paced: Some([Duration::zero(); PACED_BY]), ..self }
    }

    /// Whether to send a pass at `now`. The next one is armed when this one ends.
    pub fn handle_timeout(&mut self, now: Timestamp) -> bool {
        if self.sent.is_some() || self.at.is_none_or(|at| at > now) {
            return false;
        }
        self.at = None;
        self.sent = Some(now);
        true
    }

    /// The pass sent ended at `now` (`ok`: it ran): arm the next, unless stopped, and, if
    /// paced, no sooner than [`PACE`] times the shortest of the last [`PACED_BY`] passes.
    pub fn ended(&mut self, now: Timestamp, ok: bool, rng: &mut SplitMix) {
        let took = match (self.sent.take(), self.paced.as_mut()) {
            (Some(sent), Some(lengths)) => {
                lengths.rotate_right(1);
                lengths[0] = now - sent;
                lengths.iter().copied().min().unwrap_or_else(Duration::zero)
            }
            _ => Duration::zero(),
        };
        self.failures = if ok { 0 } else { self.failures.saturating_add(1) };
        if !self.stopped {
            let wait = self.wait();
            let jittered = wait - Duration::milliseconds(rng.between(0, wait.num_milliseconds() / 4));
            self.at = Some(now + jittered.max((took * PACE).min(MAX_CHORE_PERIOD)));
        }
    }

    /// The wait before the next pass, before the jitter: the period, doubled for each
    /// failure in a row up to the limit.
    fn wait(&self) -> Duration {
        let limit = self.every.max(CHORE_BACKOFF_LIMIT);
        let mut wait = self.every;
        for _ in 0..self.failures {
            if wait >= limit {
                break;
            }
            wait = wait * 2;
        }
        wait.min(limit)
    }

    /// No more passes (one in flight still ends).
    pub fn stop(&mut self) {
        self.at = None;
        self.stopped = true;
    }

    /// When the next pass is due.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.at
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::time::t0;

    #[test]
    fn one_pass_at_a_time_each_period_after_the_last_ended_and_none_after_stop() {
        let (mut rng, every) = (SplitMix::new(3), Duration::seconds(2));
        let mut chore = Chore::start(t0(), Some(every), &mut rng);
        let first = chore.deadline().unwrap();
        assert!(first <= t0() + every / 4, "{first}");
        assert!(!chore.handle_timeout(first - Duration::milliseconds(1)));
        assert!(chore.handle_timeout(first));
        assert_eq!(chore.deadline(), None, "nothing is due while a pass is out");
        assert!(!chore.handle_timeout(first + every * 10), "never two at once");
        let ended = first + Duration::seconds(1);
        chore.ended(ended, true, &mut rng);
        let next = chore.deadline().unwrap();
        assert!(next > ended + every * 3 / 4 - Duration::milliseconds(1) && next <= ended + every, "{next}");
        assert!(chore.handle_timeout(next));
        chore.stop();
        chore.ended(next, true, &mut rng);
        assert_eq!(chore.deadline(), None, "none after stop");
        assert!(!chore.handle_timeout(next + every * 10));
        assert_eq!(Chore::start(t0(), None, &mut rng).deadline(), None, "a chore not wanted is never due");
    }

    #[test]
    fn failed_passes_back_off_doubling_up_to_the_limit_and_a_success_brings_the_period_back() {
        let (mut rng, every) = (SplitMix::new(5), Duration::seconds(2));
        let mut chore = Chore::start(t0(), Some(every), &mut rng);
        let mut now = chore.deadline().unwrap();
        let mut waits = Vec::new();
        for ok in [false, false, false, false, false, false, false, true] {
            assert!(chore.handle_timeout(now));
            chore.ended(now, ok, &mut rng);
            waits.push(chore.wait());
            now = chore.deadline().unwrap();
        }
        let secs: Vec<i64> = waits.iter().map(Duration::num_seconds).collect();
        assert_eq!(secs, [4, 8, 16, 32, 60, 60, 60, 2]);
        // A period longer than the limit is its own bound.
        let mut hourly = Chore::start(t0(), Some(Duration::hours(1)), &mut rng);
        assert!(hourly.handle_timeout(hourly.deadline().unwrap()));
        hourly.ended(t0(), false, &mut rng);
        assert_eq!(hourly.wait(), Duration::hours(1));
    }

    #[test]
    fn a_paced_chore_waits_pace_times_its_shortest_recent_pass_and_one_slow_pass_delays_nothing() {
        let (mut rng, every) = (SplitMix::new(7), Duration::seconds(2));
        let mut chore = Chore::start(t0(), Some(every), &mut rng).paced();
        let mut pass = |chore: &mut Chore, length: Duration| {
            let sent = chore.deadline().unwrap();
            assert!(chore.handle_timeout(sent));
            let ended = sent + length;
            chore.ended(ended, true, &mut rng);
            chore.deadline().unwrap() - ended
        };
        // One slow pass (a cold start, a lock wait) keeps the period.
        assert!(pass(&mut chore, Duration::milliseconds(400)) <= every);
        assert!(pass(&mut chore, Duration::milliseconds(10)) <= every);
        // Passes slow in a row: the next waits 19 times the shortest of the last three.
        let lengths = [600, 500, 700].map(Duration::milliseconds);
        let waits: Vec<Duration> = lengths.iter().map(|&length| pass(&mut chore, length)).collect();
        assert!(waits[0] <= every && waits[1] <= every, "{waits:?}");
        assert_eq!(waits[2], Duration::milliseconds(500) * PACE);
        // A quick pass brings the period back.
        assert!(pass(&mut chore, Duration::milliseconds(10)) <= every);
    }

    #[test]
    fn workers_started_together_spread_their_passes() {
        let every = Duration::seconds(2);
        let firsts: std::collections::BTreeSet<Timestamp> = (0..8)
            .map(|seed| Chore::start(t0(), Some(every), &mut SplitMix::new(seed)).deadline().unwrap())
            .collect();
        assert!(firsts.len() >= 6, "{firsts:?}");
    }
}
