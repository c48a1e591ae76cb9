//! Backoff curves: how long to wait after the `n`th failure in a row.
//!
//! One type, [`Backoff`], and three uses of it, so each curve is a constant a test can read:
//! - [`JOB_RETRY`], the retry delay of a failed job. It is graphile-worker's:
//!   `e^min(attempts, 10)` seconds, where `attempts` already counts the attempt that failed
//!   (it is incremented when a job is fetched). So the first retry comes after 2.7 s and the
//!   delay stops growing at about 6 h 07 min from the tenth attempt on.
//! - [`WRITE_RETRY`], how long a refused write of outcomes waits before it is sent again.
//! - [`listener`], the wait before reconnecting the LISTEN connection, jittered so that
//!   workers cut off together do not reconnect together.

use crate::rng::SplitMix;
use crate::time::Timestamp;
use chrono::Duration;

/// How the delay grows with each failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Growth {
    /// Doubles.
    Double,
    /// Grows by `e`.
    Exp,
}

/// `base * growth^min(step, max_step)`, at most `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay at step 0.
    pub base: Duration,
    /// How it grows.
    pub growth: Growth,
    /// The step from which it stops growing.
    pub max_step: u32,
    /// The longest delay (`None`: only `max_step` bounds it).
    pub cap: Option<Duration>,
}

impl Backoff {
    /// The same delay after every failure.
    pub const fn fixed(delay: Duration) -> Self {
        Backoff { base: delay, growth: Growth::Double, max_step: 0, cap: None }
    }

    /// `base · 2^n` after the `n`th attempt failed, at most `cap`.
    pub const fn doubling(base: Duration, cap: Duration) -> Self {
        Backoff { base, growth: Growth::Double, max_step: 62, cap: Some(cap) }
    }

    /// The delay at `step`, in milliseconds, unrounded.
    fn millis(&self, step: u32) -> f64 {
        let step = step.min(self.max_step);
        let factor = match self.growth {
            Growth::Double => (1_u64 << step.min(62)) as f64,
            Growth::Exp => f64::from(step).exp(),
        };
        let base = self.base.num_milliseconds() as f64;
        let cap = self.cap.map_or(f64::INFINITY, |cap| cap.num_milliseconds() as f64);
        // `factor * base` in this order: the job curve is `e^n` seconds to the microsecond.
        (factor * base).min(cap)
    }

    /// The delay after the failure numbered `step` (to the microsecond).
    pub fn delay(&self, step: u32) -> Duration {
        Duration::microseconds((self.millis(step) * 1000.0).round() as i64)
    }

    /// The delay at `step`, scaled by a random factor in [50%, 100%] drawn from `rng`, rounded
    /// up to the millisecond.
    pub fn jittered(&self, step: u32, rng: &mut SplitMix) -> Duration {
        let jitter = 0.5 + (rng.next_u64() % 1000) as f64 / 2000.0;
        Duration::milliseconds((self.millis(step) * jitter).ceil() as i64)
    }
}

/// The retry curve of failed jobs: `e^step` seconds, growing up to step 10.
pub const JOB_RETRY: Backoff =
    Backoff { base: Duration::seconds(1), growth: Growth::Exp, max_step: 10, cap: None };

/// A refused write of outcomes is sent again after 200 ms, 400 ms, ... up to 25.6 s.
pub const WRITE_RETRY: Backoff = Backoff {
    base: Duration::milliseconds(100),
    growth: Growth::Double,
    max_step: 8,
    cap: Some(Duration::seconds(30)),
};

/// Reconnecting the listener: 50 ms · e^step, at most `max` (before jitter).
pub fn listener(max: Duration) -> Backoff {
    Backoff { base: Duration::milliseconds(50), growth: Growth::Exp, max_step: 20, cap: Some(max) }
}

/// The delay after the attempt numbered `attempts` failed.
pub fn delay(attempts: i16) -> Duration {
    JOB_RETRY.delay(u32::try_from(attempts).unwrap_or(0))
}

/// When a job that was due at `run_at` and failed attempt `attempts` at `now` may run
/// again: the delay counts from the later of the two.
pub fn next_run_at(now: Timestamp, run_at: Timestamp, attempts: i16) -> Timestamp {
    now.max(run_at) + delay(attempts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_follow_graphile_workers_table() {
        // (attempts, delay rounded as graphile-worker's README shows it)
        let table = [
            (1, "2.72s"),
            (2, "7.39s"),
            (3, "20.1s"),
            (4, "54.6s"),
            (5, "2m28s"),
            (6, "6m43s"),
            (7, "18m17s"),
            (8, "49m41s"),
            (9, "2h15m"),
            (10, "6h07m06s"),
            (11, "6h07m06s"),
            (25, "6h07m06s"),
        ];
        for (attempts, shown) in table {
            let ms = delay(attempts).num_milliseconds();
            let s = (ms + 500) / 1000;
            let text = match s {
                0..=9 => format!("{:.2}s", ms as f64 / 1000.0),
                10..=59 => format!("{:.1}s", ms as f64 / 1000.0),
                60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
                _ if attempts < 10 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
                _ => format!("{}h{:02}m{:02}s", s / 3600, (s % 3600) / 60, s % 60),
            };
            assert_eq!(text, shown, "attempt {attempts}");
        }
        assert_eq!(delay(0), Duration::seconds(1));
        assert_eq!(delay(-3), Duration::seconds(1), "never negative");
    }

    #[test]
    fn the_job_curve_is_e_to_the_attempts_seconds_to_the_microsecond() {
        // The same number graphile-worker's SQL computes: exp(least(attempts, 10)) seconds.
        for attempts in 0..=12_i16 {
            let exact = (f64::from(attempts.min(10)).exp() * 1e6).round() as i64;
            assert_eq!(delay(attempts), Duration::microseconds(exact), "attempt {attempts}");
        }
    }

    #[test]
    fn the_delay_counts_from_the_later_of_now_and_run_at() {
        let t = |s: i64| Timestamp::from_timestamp(s, 0).unwrap_or_default();
        assert_eq!(next_run_at(t(100), t(50), 1), t(100) + delay(1));
        assert_eq!(next_run_at(t(100), t(500), 1), t(500) + delay(1));
    }

    #[test]
    fn writes_retry_doubling_from_200_ms_up_to_25_6_s() {
        let steps: Vec<i64> = (1..=10).map(|n| WRITE_RETRY.delay(n).num_milliseconds()).collect();
        assert_eq!(steps, [200, 400, 800, 1600, 3200, 6400, 12800, 25600, 25600, 25600]);
    }

    #[test]
    fn the_listener_waits_grow_to_the_cap_and_jitter_stays_within_half_to_whole() {
        let curve = listener(Duration::seconds(60));
        assert_eq!(curve.delay(1), Duration::microseconds((50_000.0 * 1_f64.exp()).round() as i64));
        assert_eq!(curve.delay(9), Duration::seconds(60), "capped");
        assert_eq!(curve.delay(u32::MAX), Duration::seconds(60), "never overflows");
        let mut rng = SplitMix::new(7);
        for step in 0..25 {
            let nominal = curve.delay(step);
            let waited = curve.jittered(step, &mut rng);
            assert!(waited * 2 >= nominal - Duration::milliseconds(1), "step {step}: {waited} of {nominal}");
            assert!(waited <= nominal + Duration::milliseconds(1), "step {step}: {waited} of {nominal}");
        }
    }
}
