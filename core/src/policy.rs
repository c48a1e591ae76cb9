//! Per-task policies: how a task's failed jobs are retried, how many attempts its jobs get
//! when added without a number, and how long its jobs may snooze.
//!
//! Pure decisions the worker machine takes (and that users can property-test): the delay
//! after a failed attempt ([`TaskPolicy::retry_delay`]), and whether a snooze is allowed
//! ([`TaskPolicy::snooze`]). A task with no policy of its own gets [`TaskPolicy::default`]:
//! graphile-worker's curve, the column's 25 attempts, and a week of snoozes.
//!
//! A snooze is bounded by the job's age, not by a count: a job may be put off while the new
//! run time stays within [`TaskPolicy::snooze_window`] of its `created_at`. The bound needs
//! no counter (`created_at` is in the row and survives crashes, restarts and other workers),
//! and past it a snooze becomes a failure that says why, which spends an attempt: a job
//! that keeps snoozing fails for good after its attempts, as any job that keeps failing.

use crate::backoff::{Backoff, JOB_RETRY};
use crate::time::Timestamp;
use chrono::Duration;

/// How long after it was created a job may still be snoozed, by default.
pub const DEFAULT_SNOOZE_WINDOW: Duration = Duration::days(7);

/// The longest delay a retry curve or a snooze gives, whatever it says: ten years, so that no `run_at`
/// overflows (in the worker or in PostgreSQL's intervals).
pub const MAX_RETRY_DELAY: Duration = Duration::days(3650);

/// A task's retry curve, default attempts and snooze bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskPolicy {
    /// The delay after a failed attempt: `backoff.delay(attempts)`, where `attempts` counts
    /// the attempt that failed (default [`JOB_RETRY`], graphile-worker's `e^min(n, 10)` s).
    pub backoff: Backoff,
    /// Attempts of a job added with no `max_attempts` (`None`: the column default, 25).
    pub max_attempts: Option<i16>,
    /// A snooze may postpone a job to at most this long after its `created_at`.
    pub snooze_window: Duration,
}

impl TaskPolicy {
    /// graphile-worker's curve, the column's 25 attempts, a week of snoozes: what a task
    /// gets unless it says otherwise (a base for `TaskPolicy { .., ..TaskPolicy::DEFAULT }`
    /// in a `const`).
    pub const DEFAULT: TaskPolicy =
        TaskPolicy { backoff: JOB_RETRY, max_attempts: None, snooze_window: DEFAULT_SNOOZE_WINDOW };
}

impl Default for TaskPolicy {
    fn default() -> Self {
        TaskPolicy::DEFAULT
    }
}

/// Why a snooze was refused: it becomes a failed attempt with this as `last_error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "snoozed past its limit: the job asked to run at {until}, but a snooze may put it off to at \
     most {window} after it was created ({created_at}); this attempt fails instead"
)]
pub struct SnoozeRefused {
    /// When the snooze asked the job to run.
    pub until: Timestamp,
    /// When the job was created.
    pub created_at: Timestamp,
    /// The task's snooze window, written for humans.
    pub window: String,
}

impl TaskPolicy {
    /// The delay before the next attempt after attempt `attempts` failed (at most
    /// [`MAX_RETRY_DELAY`]).
    pub fn retry_delay(&self, attempts: i16) -> Duration {
        self.backoff.delay(u32::try_from(attempts).unwrap_or(0)).min(MAX_RETRY_DELAY)
    }

    /// When a job due at `run_at` whose attempt `attempts` failed at `now` runs again: the
    /// delay counts from the later of the two, as graphile-worker's.
    pub fn next_run_at(&self, now: Timestamp, run_at: Timestamp, attempts: i16) -> Timestamp {
        now.max(run_at) + self.retry_delay(attempts)
    }

    /// The delay the failure statement is given: `None` for graphile-worker's curve, which
    /// the statement computes itself (so a task without a policy sends what it always did).
    pub fn custom_delay(&self, attempts: i16) -> Option<Duration> {
        (self.backoff != JOB_RETRY).then(|| self.retry_delay(attempts))
    }

    /// Whether a job created at `created_at` may snooze at `now` for `delay` (a negative
    /// delay counts as none, one over [`MAX_RETRY_DELAY`] as that): `Ok` with when it runs
    /// again, or why not.
    pub fn snooze(
        &self,
        created_at: Timestamp,
        now: Timestamp,
        delay: Duration,
    ) -> Result<Timestamp, SnoozeRefused> {
        let delay = delay.clamp(Duration::zero(), MAX_RETRY_DELAY);
        let until = now.checked_add_signed(delay).unwrap_or(Timestamp::MAX_UTC);
        if created_at.checked_add_signed(self.snooze_window).is_none_or(|limit| until <= limit) {
            return Ok(until);
        }
        Err(SnoozeRefused { until, created_at, window: human(self.snooze_window) })
    }
}

/// `d` as `3d`, `5h`, `90s` or `250ms` (the largest unit that divides it).
fn human(d: Duration) -> String {
    let ms = d.num_milliseconds();
    let units = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1_000, "s")];
    match units.iter().find(|(unit, _)| ms != 0 && ms % unit == 0) {
        Some((unit, name)) => format!("{}{name}", ms / unit),
        None => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backoff::Growth;
    use proptest::prelude::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_timestamp(1_700_000_000 + s, 0).unwrap_or_default()
    }

    #[test]
    fn the_default_policy_is_graphile_workers_curve_and_sends_no_delay() {
        let policy = TaskPolicy::default();
        for attempts in 0..=30 {
            assert_eq!(policy.retry_delay(attempts), crate::backoff::delay(attempts));
            assert_eq!(policy.custom_delay(attempts), None);
        }
        assert_eq!(policy.max_attempts, None);
    }

    #[test]
    fn a_snooze_is_refused_past_the_window_and_says_so() {
        let policy = TaskPolicy { snooze_window: Duration::hours(1), ..TaskPolicy::default() };
        assert_eq!(policy.snooze(t(0), t(600), Duration::minutes(50)), Ok(t(3600)), "to the edge");
        let refused = policy.snooze(t(0), t(600), Duration::minutes(51)).unwrap_err();
        assert_eq!(refused.until, t(3660));
        let text = refused.to_string();
        assert!(text.starts_with("snoozed past its limit") && text.contains("at most 1h"), "{text}");
        assert_eq!(policy.snooze(t(0), t(10), Duration::seconds(-5)), Ok(t(10)), "negative is none");
        assert!(policy.snooze(t(0), t(10), Duration::MAX).is_err(), "no overflow");
        let forever = TaskPolicy { snooze_window: Duration::MAX, ..TaskPolicy::DEFAULT };
        assert_eq!(
            forever.snooze(t(0), t(10), Duration::MAX),
            Ok(t(10) + MAX_RETRY_DELAY),
            "at most ten years"
        );
    }

    proptest! {
        /// Any curve: delays never negative, never shrink with attempts, stop at the cap.
        #[test]
        fn a_task_curve_grows_and_stays_bounded(
            base_ms in 1_i64..100_000,
            double in any::<bool>(),
            max_step in 0_u32..30,
            cap_s in proptest::option::of(1_i64..100_000),
            attempts in 0_i16..200,
        ) {
            let growth = if double { Growth::Double } else { Growth::Exp };
            let cap = cap_s.map(Duration::seconds);
            let backoff = Backoff { base: Duration::milliseconds(base_ms), growth, max_step, cap };
            let policy = TaskPolicy { backoff, ..TaskPolicy::default() };
            let (now, next) = (policy.retry_delay(attempts), policy.retry_delay(attempts.saturating_add(1)));
            prop_assert!(now >= Duration::zero() && next >= now);
            prop_assert!(next <= cap.unwrap_or(MAX_RETRY_DELAY).min(MAX_RETRY_DELAY));
            prop_assert_eq!(policy.retry_delay(attempts), policy.retry_delay(attempts.max(0)));
            prop_assert_eq!(policy.custom_delay(attempts), (backoff != JOB_RETRY).then_some(now));
            prop_assert_eq!(policy.next_run_at(t(100), t(50), attempts), t(100) + now);
        }

        /// A job never runs later than its window allows through snoozes, and a snooze
        /// inside it is granted as asked.
        #[test]
        fn a_snooze_never_outlives_the_window(age in 0_i64..1_000_000, delay in -1000_i64..1_000_000, window in 1_i64..1_000_000) {
            let policy = TaskPolicy { snooze_window: Duration::seconds(window), ..TaskPolicy::default() };
            match policy.snooze(t(0), t(age), Duration::seconds(delay)) {
                Ok(until) => {
                    prop_assert!(until <= t(window));
                    prop_assert_eq!(until, t(age + delay.max(0)));
                }
                Err(refused) => prop_assert!(refused.until > t(window)),
            }
        }
    }
}
