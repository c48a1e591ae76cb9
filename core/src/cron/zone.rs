//! Cron items in a time zone (`?tz=Europe/Paris`), and the daylight-saving rule.
//!
//! An item with a zone reads its five fields as the zone's wall-clock time; an item without
//! one reads them as UTC, exactly as graphile-worker does. Slots stay whole UTC minutes, so
//! `known_crontabs.last_execution`, `_cron.ts` and the once-per-slot guarantee are as before.
//!
//! **The rule**: a local time fires at the first UTC minute at which the zone's clock has
//! reached it. So:
//!
//! - a local time skipped by spring-forward (02:30 in Paris on the last Sunday of March)
//!   fires at the first minute after the gap (03:00 local); every skipped time of the
//!   gap, and 03:00 itself, fire there together, once;
//! - a local time that occurs twice in autumn (02:30 in Paris on the last Sunday of
//!   October) fires once, at its first occurrence; when the clock goes back, the times it
//!   passes again do not fire again (an every-minute item is silent for that repeated
//!   hour: use UTC or an interval for work that must run through it).
//!
//! Historical offsets with seconds (local mean time, before about 1900) are read to the
//! minute below.

use super::{floor_minute, CronItem};
use chrono::{DateTime, LocalResult, NaiveDate, NaiveDateTime, TimeDelta, TimeZone, Utc};
pub use chrono_tz::Tz;

/// The longest a zone's clock has ever jumped forward (Samoa skipped 30 December 2011),
/// with a margin: how far past a skipped local time to look for where the clock resumes.
const LONGEST_GAP_MINUTES: i64 = 2 * 24 * 60;

/// A zone named by its IANA identifier (`Europe/Paris`, `America/New_York`, `UTC`).
pub(super) fn check_zone(name: &str) -> Result<Tz, String> {
    name.parse::<Tz>()
        .map_err(|_| "expected an IANA time zone name such as 'Europe/Paris' or 'UTC'".to_owned())
}

/// The wall-clock time of `tz` at `at`, to the minute below.
pub fn local_minute(tz: Tz, at: DateTime<Utc>) -> NaiveDateTime {
    floor_minute(at.with_timezone(&tz).naive_local().and_utc()).naive_utc()
}

/// The first whole UTC minute at which the clock of `tz` has reached the local `time`:
/// its (first) occurrence, or where the clock resumes after the gap that skipped it.
pub fn reached(tz: Tz, time: NaiveDateTime) -> Option<DateTime<Utc>> {
    let first = |t: NaiveDateTime| match tz.from_local_datetime(&t) {
        LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => Some(at.with_timezone(&Utc)),
        LocalResult::None => None,
    };
    if let Some(at) = first(time) {
        return Some(super::schedule::round_up_to_minute(at));
    }
    // Skipped: the gap's end is the first local minute that exists, reached as the clock jumps.
    (1..=LONGEST_GAP_MINUTES)
        .find_map(|n| first(time.checked_add_signed(TimeDelta::minutes(n))?))
        .map(super::schedule::round_up_to_minute)
}

impl CronItem {
    /// The first minute at or after the whole minute `from`, up to the end of `last_day`
    /// (UTC) or a little past it, at which the item fires.
    pub(super) fn first_firing(&self, from: DateTime<Utc>, last_day: NaiveDate) -> Option<DateTime<Utc>> {
        if let Some(period) = self.interval {
            return super::interval::first_slot(period, from);
        }
        let Some(tz) = self.options.time_zone else {
            return self.first_match(from.naive_utc(), last_day).map(|t| t.and_utc());
        };
        // Local times after the clock's reading one minute before `from`: any earlier one was
        // reached before `from`. Offsets are under a day, so local dates end two days later.
        let mut local = local_minute(tz, from - TimeDelta::minutes(1)) + TimeDelta::minutes(1);
        let last_local_day = last_day.checked_add_days(chrono::Days::new(2)).unwrap_or(NaiveDate::MAX);
        loop {
            let time = self.first_match(local, last_local_day)?;
            let at = reached(tz, time)?;
            // Reached before `from`: a time the clock passes again after going back.
            if at >= from {
                return Some(at);
            }
            local = time.checked_add_signed(TimeDelta::minutes(1))?;
        }
    }
}
