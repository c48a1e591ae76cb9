//! Retry delays: how long a failed job waits before its next attempt.
//!
//! The curve is graphile-worker's: `e^min(attempts, 10)` seconds, where `attempts` already
//! counts the attempt that failed (it is incremented when a job is fetched). So the first
//! retry comes after 2.7 s and the delay stops growing at about 6 h 07 min from the tenth
//! attempt on.

use chrono::{DateTime, Duration, Utc};

/// The delay after the attempt numbered `attempts` failed.
pub fn delay(attempts: i16) -> Duration {
    let exponent = f64::from(attempts.clamp(0, 10));
    Duration::microseconds((exponent.exp() * 1e6).round() as i64)
}

/// When a job that was due at `run_at` and failed attempt `attempts` at `now` may run
/// again: the delay counts from the later of the two.
pub fn next_run_at(now: DateTime<Utc>, run_at: DateTime<Utc>, attempts: i16) -> DateTime<Utc> {
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
    fn the_delay_counts_from_the_later_of_now_and_run_at() {
        let t = |s: i64| DateTime::<Utc>::from_timestamp(s, 0).unwrap_or_default();
        assert_eq!(next_run_at(t(100), t(50), 1), t(100) + delay(1));
        assert_eq!(next_run_at(t(100), t(500), 1), t(500) + delay(1));
    }
}
