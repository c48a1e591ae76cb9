//! Interval schedules: `@every 30s task ?opts {payload}` in place of the five time fields.
//!
//! An interval's slots are the instants whose Unix time is a whole multiple of its period
//! (`@every 1m` fires at each whole minute, `@every 15s` at :00, :15, :30 and :45), so
//! every worker computes the same slots and the database's `known_crontabs` ledger lets
//! exactly one schedule each, as for a cron minute. A slot is an instant, not a wall-clock
//! time: intervals know no time zone and no daylight saving. Intervals are Formica's:
//! graphile-worker's parser refuses the line.

use super::CronItem;
use chrono::{DateTime, TimeDelta, Utc};
use std::time::Duration;

/// The text that starts an interval line.
pub(super) const EVERY: &str = "@every";

/// The longest period: a year (366 days).
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 86_400);

/// A period of whole seconds from 1 s to [`MAX_PERIOD`].
pub(super) fn check_period(period: Duration) -> Result<Duration, String> {
    let whole = Duration::from_secs(period.as_secs());
    (whole == period && (Duration::from_secs(1)..=MAX_PERIOD).contains(&period))
        .then_some(period)
        .ok_or_else(|| "expected a period of whole seconds from 1s to 366d".to_owned())
}

/// The first slot of `period` at or after `from`.
pub fn first_slot(period: Duration, from: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let step = i64::try_from(period.as_secs()).ok().filter(|s| *s > 0)?;
    let seconds = from.timestamp();
    let past = seconds.rem_euclid(step);
    let whole = past == 0 && from.timestamp_subsec_nanos() == 0;
    let slot = if whole { seconds } else { seconds - past + step };
    DateTime::from_timestamp(slot, 0)
}

impl CronItem {
    /// The period of an interval item (`@every`); `None` for a cron item.
    pub fn interval(&self) -> Option<Duration> {
        self.interval
    }

    /// The granularity of the item's slots: a second for intervals, else a minute.
    pub(super) fn slot_unit(&self) -> TimeDelta {
        if self.interval.is_some() {
            TimeDelta::seconds(1)
        } else {
            TimeDelta::minutes(1)
        }
    }
}
