//! Interval schedules: `@every 30s task ?opts {payload}` in place of the five time fields.
//!
//! An interval's slots are the instants whose Unix time is a whole multiple of its period
//! (`@every 1m` fires at each whole minute, `@every 15s` at :00, :15, :30 and :45), so
//! every worker computes the same slots and the database's `known_crontabs` ledger lets
//! exactly one schedule each, as for a cron minute. A slot is an instant, not a wall-clock
//! time: intervals know no time zone and no daylight saving. Intervals are Formica's:
//! graphile-worker's parser refuses the line.

use super::rules::{phrase, time_phrase, PHRASE_UNITS};
use super::CronItem;
use chrono::{DateTime, TimeDelta, Utc};
use std::time::Duration;

/// The text that starts an interval line.
pub(super) const EVERY: &str = "@every";

/// Why an interval takes no `tz`.
pub(super) const INTERVAL_ZONE: &str =
    "an '@every' interval takes no 'tz' option: its slots are instants, the same in every zone";

/// The longest period: a year (366 days).
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 86_400);

/// The units of a period, largest first: a week is written `7d` (weeks are for `fill`).
const PERIOD_UNITS: &str = "dhms";

const PERIOD_EXPECTED: &str =
    "expected number-unit pairs in the units d, h, m and s, largest first and each once, such as '30s' or '1h30m'";

/// The period phrase after `@every`: whole seconds written as number-unit pairs in the
/// units d, h, m and s, each once, largest first (`1d12h`, `90s`), so a line reads one way
/// only; from 1 s to [`MAX_PERIOD`].
pub(super) fn period_phrase(text: &str) -> Result<Duration, String> {
    let mut last = None;
    let mut rest = text;
    while !rest.is_empty() || last.is_none() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let rank = rest[digits..].chars().next().and_then(|unit| PERIOD_UNITS.find(unit));
        match rank {
            Some(rank) if digits > 0 && last.is_none_or(|last| rank > last) => last = Some(rank),
            _ => return Err(PERIOD_EXPECTED.to_owned()),
        }
        rest = &rest[digits + 1..];
    }
    time_phrase(text).and_then(check_period)
}

/// The canonical period phrase (see [`period_phrase`]).
pub(super) fn period_text(period: Duration) -> String {
    phrase(period, &PHRASE_UNITS[1..])
}

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

#[cfg(test)]
mod tests {
    use crate::cron::{parse, Cron, CronItem};
    use std::time::Duration;

    fn error(line: &str) -> String {
        parse(line)
            .map(|c| c.into_items())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| format!("{line}: accepted"))
    }

    #[test]
    fn a_period_is_whole_seconds_in_d_h_m_s_largest_first_each_once() {
        for (text, seconds) in
            [("1s", 1), ("90s", 90), ("1h30m", 5_400), ("1d2h3m4s", 93_784), ("366d", 31_622_400)]
        {
            let items = parse(&format!("@every {text} t")).map(|c| c.into_items()).unwrap_or_default();
            assert_eq!(
                items.first().and_then(CronItem::interval),
                Some(Duration::from_secs(seconds)),
                "{text}"
            );
        }
        for text in [
            "1w",
            "1s2m",
            "1m1m",
            "2m1h",
            "1x",
            "m",
            "1",
            "1m1",
            "0s",
            "367d",
            "1.5s",
            "1S",
            "99999999999999999999s",
        ] {
            let message = error(&format!("@every {text} t"));
            assert!(message.contains("invalid period after '@every'"), "{text}: {message}");
        }
        assert!(error("@every 1w t").contains("units d, h, m and s, largest first and each once"));
    }

    #[test]
    fn an_interval_takes_no_zone_from_its_options_its_builder_or_a_cron_tz_line() {
        let message = error("@every 30s t ?fill=1m&tz=Europe/Paris");
        assert!(message.contains("column 23") && message.contains("takes no 'tz' option"), "{message}");
        let zone = "Europe/Paris".parse().unwrap_or(chrono_tz::UTC);
        let built = Cron::every_for_task("t", Duration::from_secs(30)).time_zone(zone).build();
        assert!(built.is_err_and(|e| e.to_string().contains("takes no 'tz' option")));
        let items = parse("CRON_TZ=Europe/Paris\n@every 30s t\n0 8 * * * u")
            .map(|c| c.into_items())
            .unwrap_or_default();
        let zones: Vec<_> = items.iter().map(|item| item.options().time_zone).collect();
        assert_eq!(zones, [None, Some(zone)]);
    }

    #[test]
    fn a_period_of_a_week_or_more_is_written_in_days_and_reads_back() {
        let item = Cron::every_for_task("t", Duration::from_secs(8 * 86_400 + 61)).build();
        let line = item.as_ref().map(ToString::to_string).unwrap_or_default();
        assert_eq!(line, "@every 8d1m1s t");
        assert_eq!(parse(&line).map(|c| c.into_items()).ok(), item.ok().map(|i| vec![i]));
    }
}
