//! Time as the core sees it: [`Timestamp`], and [`FeedClock`], the time a driver feeds the
//! machine.
//!
//! The time a driver feeds the machine: the wall clock, but never going back and always
//! moving on with a monotonic clock. After the wall clock is set back, the machine's timers
//! still fire after the real time they asked for (instead of stalling for the size of the
//! jump); the fed time follows the wall clock again once the wall clock catches up.
//!
//! Pure: the caller reads both clocks and passes them in. The monotonic reading is a
//! [`Duration`] since any fixed origin of the caller's choosing.

use chrono::{DateTime, Duration, Utc};

/// A point in time, UTC: the one name the core uses for it.
pub type Timestamp = DateTime<Utc>;

/// The last time fed, and the monotonic reading then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedClock {
    fed: Timestamp,
    at: Duration,
}

impl FeedClock {
    /// Starts at `wall`, read at monotonic `mono`.
    pub fn new(wall: Timestamp, mono: Duration) -> Self {
        FeedClock { fed: wall, at: mono }
    }

    /// The time to feed now: `wall`, unless it is behind the last time fed plus the
    /// monotonic time since.
    pub fn now(&mut self, wall: Timestamp, mono: Duration) -> Timestamp {
        self.fed = wall.max(self.fed + (mono - self.at));
        self.at = mono;
        self.fed
    }

    /// The monotonic reading at which the fed clock will read `at` (for a timer).
    pub fn mono_at(&self, at: Timestamp) -> Duration {
        self.at + (at - self.fed)
    }
}

/// A fixed instant for the unit tests' clocks: 2024-01-01T00:00:00Z.
#[cfg(test)]
pub(crate) fn t0() -> Timestamp {
    Timestamp::from_timestamp(1_704_067_200, 0).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn a_wall_clock_set_back_is_ignored_until_it_catches_up() {
        let t0 = Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap();
        let s = Duration::seconds;
        let mut clock = FeedClock::new(t0, s(0));
        assert_eq!(clock.now(t0 + s(10), s(10)), t0 + s(10), "the wall clock, while it moves on");
        // Set back an hour: the fed time moves on with the monotonic clock instead.
        assert_eq!(clock.now(t0 - s(3590), s(15)), t0 + s(15));
        assert_eq!(clock.mono_at(t0 + s(20)), s(20), "a timer fires after the real time asked");
        // Set forward past the fed time: the wall clock again.
        assert_eq!(clock.now(t0 + s(100), s(16)), t0 + s(100));
        assert_eq!(clock.mono_at(t0 + s(104)), s(20));
    }
}
