//! Recurring jobs: graphile-worker's crontab format, matching, and the pure decisions of
//! when to schedule.
//!
//! The contract:
//!
//! - [`parse`] reads crontab text as graphile-worker does: lines are trimmed, blank lines
//!   and `#` lines are skipped, and every other line is
//!   `minute hour day-of-month month day-of-week task [?options] [{json5 payload}]`. Every
//!   mistake is a [`CrontabError`] with its 1-based line and column and what was expected;
//!   no input panics.
//! - A [`CronItem`] can only be made by parsing or by the [`Cron`] builder, which validate
//!   alike, so every item is one a crontab line can state: its [`Display`](std::fmt::Display)
//!   prints that canonical line and `parse(&item.to_string())` gives the item back.
//! - [`CronItem::matches`] and [`CronItem::next_after`] work on whole UTC minutes, with
//!   cron's rule that when both day-of-month and day-of-week are restricted either may
//!   match. An item with a time zone (`?tz=`) reads its fields in that zone's wall clock,
//!   by the daylight-saving rule of [`zone`]. `next_after` looks at most one Gregorian cycle (400 years) ahead: the calendar
//!   repeats after that, so an item with no match in it never matches.
//! - [`CronItem::backfill`], [`CronItem::due`] and the job builders in [`schedule`] are the
//!   decisions the worker machine takes at start-up and on every cron tick; the database's
//!   `known_crontabs` upsert stays the arbiter of which worker schedules a minute.
//!
//! Items are opaque (fields are read through accessors) so that none can be built that
//! the text format cannot express.

pub(crate) mod batch;
mod builder;
pub mod interval;
mod json5;
mod parse;
mod rules;
pub mod runner;
pub mod runtime;
pub mod schedule;
pub mod zone;

pub use builder::Cron;
pub use schedule::Slot;
pub use zone::Tz;

use crate::job::JobKeyMode;
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, TimeDelta, Timelike, Utc};
use serde_json::{Map, Value};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A crontab that could not be read, or a cron item that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(*line, *column, message))]
#[non_exhaustive]
pub struct CrontabError {
    /// 1-based line of the crontab text; for [`Crontab::from_items`], the 1-based position
    /// of the item; 0 for an item made by the [`Cron`] builder.
    pub line: usize,
    /// 1-based column (in characters) where the mistake starts; 0 when there is no text.
    pub column: usize,
    /// What is wrong and what was expected instead.
    pub message: String,
}

fn describe(line: usize, column: usize, message: &str) -> String {
    match (line, column) {
        (0, _) => format!("invalid cron item: {message}"),
        (_, 0) => format!("crontab item {line}: {message}"),
        _ => format!("crontab line {line}, column {column}: {message}"),
    }
}

/// A parsed crontab: items in the order they were written, with unique identifiers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Crontab {
    items: Vec<CronItem>,
}

/// Read crontab text (the contents of a `crontab` file). Same as [`Crontab::from_str`].
pub fn parse(text: &str) -> Result<Crontab, CrontabError> {
    parse::crontab(text)
}

impl Crontab {
    /// A crontab of items built in code; fails if two items share an identifier (the
    /// error's `line` is then the position of the second one, counted from 1).
    pub fn from_items(items: impl IntoIterator<Item = CronItem>) -> Result<Self, CrontabError> {
        let mut seen = std::collections::BTreeMap::new();
        let mut list = Vec::new();
        for (index, item) in items.into_iter().enumerate() {
            if let Some(first) = seen.insert(item.identifier.clone(), index + 1) {
                return Err(CrontabError {
                    line: index + 1,
                    column: 0,
                    message: parse::duplicate_message(&item.identifier, first),
                });
            }
            list.push(item);
        }
        Ok(Crontab { items: list })
    }

    /// The items, in order.
    pub fn items(&self) -> &[CronItem] {
        &self.items
    }

    /// The items, in order, by value.
    pub fn into_items(self) -> Vec<CronItem> {
        self.items
    }
}

impl FromStr for Crontab {
    type Err = CrontabError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse(text)
    }
}

/// Prints one canonical line per item, each ending in a newline.
impl fmt::Display for Crontab {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.items.iter().try_for_each(|item| writeln!(f, "{item}"))
    }
}

/// One recurring job: when it fires, which task it runs and with what options and payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronItem {
    identifier: String,
    task: String,
    minutes: FieldSet,
    hours: FieldSet,
    dates: FieldSet,
    months: FieldSet,
    dows: FieldSet,
    options: CronOptions,
    payload: Map<String, Value>,
    /// The period of an `@every` item (its time fields are then all `*`, unused).
    interval: Option<Duration>,
}

/// How jobs made by a cron item are scheduled (the crontab's `?opts`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CronOptions {
    /// `fill`: how far back missed runs are scheduled when a worker starts, in whole
    /// seconds (zero: no backfill).
    pub backfill_period: Duration,
    /// `max`: attempts the job gets (default: the database's 25).
    pub max_attempts: Option<i16>,
    /// `queue`: the named queue the job joins.
    pub queue_name: Option<String>,
    /// `priority`: lower runs first (default 0).
    pub priority: Option<i16>,
    /// `jobKey`: the job key, so successive runs replace one another.
    pub job_key: Option<String>,
    /// `jobKeyMode`: `replace` or `preserve_run_at` (never `unsafe_dedupe`, which
    /// graphile-worker's crontab does not take).
    pub job_key_mode: Option<JobKeyMode>,
    /// `tz`: the IANA time zone whose wall clock the fields are read in (default: UTC, as
    /// graphile-worker, whose parser refuses this option). See [`zone`] for the
    /// daylight-saving rule.
    pub time_zone: Option<Tz>,
}

impl CronItem {
    /// The item's unique identifier: its `id` option, else its task identifier. It names
    /// the item's row in `known_crontabs`.
    pub fn identifier(&self) -> &str {
        &self.identifier
    }

    /// The task identifier of the jobs it adds.
    pub fn task(&self) -> &str {
        &self.task
    }

    /// Minutes of the hour it fires at (0-59).
    pub fn minutes(&self) -> FieldSet {
        self.minutes
    }

    /// Hours of the day it fires at (0-23, UTC or in its time zone).
    pub fn hours(&self) -> FieldSet {
        self.hours
    }

    /// Days of the month it fires on (1-31).
    pub fn dates(&self) -> FieldSet {
        self.dates
    }

    /// Months it fires in (1-12).
    pub fn months(&self) -> FieldSet {
        self.months
    }

    /// Days of the week it fires on (0-6, Sunday is 0).
    pub fn dows(&self) -> FieldSet {
        self.dows
    }

    /// Its scheduling options.
    pub fn options(&self) -> &CronOptions {
        &self.options
    }

    /// Why graphile-worker 0.18's parser would refuse its canonical line (an `@every`
    /// interval, or options it does not know); `None` when a Node worker could run it.
    pub fn graphile_worker_refuses(&self) -> Option<String> {
        if self.interval.is_some() {
            return Some(format!("'{}' intervals are Formica's", interval::EVERY));
        }
        let pairs = rules::option_pairs(self);
        let unknown: Vec<_> = pairs
            .into_iter()
            .map(|(key, _)| key)
            .filter(|key| !rules::NODE_OPTION_KEYS.contains(key))
            .collect();
        (!unknown.is_empty()).then(|| format!("unknown option: {}", unknown.join(", ")))
    }

    /// The item, read in `zone` (if any) unless it names its own: a default zone. An
    /// interval stays without one (its slots know no zone).
    pub fn in_zone_by_default(mut self, zone: Option<Tz>) -> Self {
        if self.interval.is_none() {
            self.options.time_zone = self.options.time_zone.or(zone);
        }
        self
    }

    /// The payload merged into every job it adds (empty if none was given).
    pub fn payload(&self) -> &Map<String, Value> {
        &self.payload
    }

    /// Whether the item fires in the UTC minute that contains `ts` (seconds are ignored).
    /// An item with a [time zone](CronOptions::time_zone) fires by the rule in [`zone`].
    /// An interval item fires at its slots only (seconds count).
    pub fn matches(&self, ts: DateTime<Utc>) -> bool {
        let at = if self.interval.is_some() { ts } else { floor_minute(ts) };
        self.first_firing(at, at.date_naive()) == Some(at)
    }

    /// The first minute strictly after `ts` at which the item fires, as a whole UTC minute
    /// (an interval item: its first slot after `ts`, a whole second); `None` if it never
    /// fires again (e.g. `0 0 31 2 *`) or the date range ends first.
    pub fn next_after(&self, ts: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let from = schedule::round_down(ts, self.slot_unit()).checked_add_signed(self.slot_unit())?;
        let last_day = from
            .date_naive()
            .checked_add_days(chrono::Days::new(GREGORIAN_CYCLE_DAYS))
            .unwrap_or(NaiveDate::MAX);
        self.first_firing(from, last_day)
    }

    /// The first time the fields match at or after the whole minute `from`, on a day up to
    /// `last_day`, read as a wall-clock time (UTC's, or the item's zone's).
    fn first_match(&self, from: NaiveDateTime, last_day: NaiveDate) -> Option<NaiveDateTime> {
        let mut day = from.date();
        let mut earliest = (from.hour(), from.minute());
        while day <= last_day {
            if self.matches_day(day) {
                if let Some((hour, minute)) = self.first_time_from(earliest) {
                    return day.and_hms_opt(hour, minute, 0);
                }
            }
            day = day.succ_opt()?;
            earliest = (0, 0);
        }
        None
    }

    /// The first (hour, minute) of a day at or after `(hour, minute)` the item fires at.
    fn first_time_from(&self, (hour, minute): (u32, u32)) -> Option<(u32, u32)> {
        let h = self.hours.first_from(hour)?;
        if h == hour {
            if let Some(m) = self.minutes.first_from(minute) {
                return Some((h, m));
            }
            let h = self.hours.first_from(hour + 1)?;
            return Some((h, self.minutes.first_from(0)?));
        }
        Some((h, self.minutes.first_from(0)?))
    }

    /// Month must match; then if both day fields are restricted either may match (cron's
    /// rule, which graphile-worker follows), otherwise the restricted one must.
    fn matches_day(&self, day: NaiveDate) -> bool {
        if !self.months.contains(day.month()) {
            return false;
        }
        let date = self.dates.contains(day.day());
        let dow = self.dows.contains(day.weekday().num_days_from_sunday());
        if self.dates != Unit::Date.all() && self.dows != Unit::Dow.all() {
            date || dow
        } else {
            date && dow
        }
    }
}

/// Days in the 400-year Gregorian cycle, after which dates and weekdays repeat.
const GREGORIAN_CYCLE_DAYS: u64 = 146_097;

/// `ts` with seconds and fractions dropped.
fn floor_minute(ts: DateTime<Utc>) -> DateTime<Utc> {
    let into_minute =
        TimeDelta::seconds(i64::from(ts.second())) + TimeDelta::nanoseconds(i64::from(ts.nanosecond()));
    ts.checked_sub_signed(into_minute).unwrap_or(ts)
}

/// Prints the canonical crontab line: fields as `*`, `*/n` or compact lists with runs as
/// ranges, the task, the options that differ from the defaults in a fixed order (`id`,
/// `fill`, `max`, `queue`, `jobKey`, `jobKeyMode`, `priority`, `tz`), then the payload as JSON.
impl fmt::Display for CronItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(period) = self.interval {
            write!(f, "{} {} ", interval::EVERY, interval::period_text(period))?;
            return self.fmt_rest(f);
        }
        let fields = [
            (Unit::Minute, self.minutes),
            (Unit::Hour, self.hours),
            (Unit::Date, self.dates),
            (Unit::Month, self.months),
            (Unit::Dow, self.dows),
        ];
        for (unit, set) in fields {
            write_field(f, unit, set)?;
            f.write_str(" ")?;
        }
        self.fmt_rest(f)
    }
}

impl CronItem {
    /// The task, options and payload of the canonical line.
    fn fmt_rest(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.task)?;
        let options = rules::option_pairs(self);
        for (i, (key, value)) in options.iter().enumerate() {
            write!(f, "{}{key}={}", if i == 0 { " ?" } else { "&" }, rules::escape_option(key, value))?;
        }
        if !self.payload.is_empty() {
            write!(f, " {}", json5::to_line(&self.payload))?;
        }
        Ok(())
    }
}

/// The values one time field matches: a set of small numbers kept as a bit mask.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FieldSet(u64);

impl FieldSet {
    /// Whether `value` is in the set.
    pub fn contains(self, value: u32) -> bool {
        value < 64 && self.0 & (1 << value) != 0
    }

    /// The values, in ascending order.
    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..64).filter(move |&v| self.contains(v))
    }

    /// The number of values.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty (never true for a field of a parsed item).
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The smallest value at or above `value`.
    fn first_from(self, value: u32) -> Option<u32> {
        let rest = self.0.checked_shr(value).unwrap_or(0);
        (rest != 0).then(|| value + rest.trailing_zeros())
    }

    fn with(self, value: u32) -> Self {
        FieldSet(self.0 | (1 << value))
    }
}

impl fmt::Debug for FieldSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// The five time fields, their bounds and names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Minute,
    Hour,
    Date,
    Month,
    Dow,
}

impl Unit {
    const ALL: [Unit; 5] = [Unit::Minute, Unit::Hour, Unit::Date, Unit::Month, Unit::Dow];

    /// The smallest and largest value written in a crontab (day-of-week 7 is Sunday again).
    fn bounds(self) -> (u32, u32) {
        match self {
            Unit::Minute => (0, 59),
            Unit::Hour => (0, 23),
            Unit::Date => (1, 31),
            Unit::Month => (1, 12),
            Unit::Dow => (0, 7),
        }
    }

    /// The largest value stored (7 becomes 0 for day-of-week).
    fn max_stored(self) -> u32 {
        match self {
            Unit::Dow => 6,
            Unit::Minute | Unit::Hour | Unit::Date | Unit::Month => self.bounds().1,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Date => "day-of-month",
            Unit::Month => "month",
            Unit::Dow => "day-of-week",
        }
    }

    /// `*/step`: the smallest value, then every `step`-th one.
    fn stepped(self, step: u32) -> FieldSet {
        let (min, max) = (self.bounds().0, self.max_stored());
        let step = step.max(1) as usize;
        (min..=max).step_by(step).fold(FieldSet(0), FieldSet::with)
    }

    fn all(self) -> FieldSet {
        self.stepped(1)
    }
}

/// `*`, `*/n`, or a comma list where runs of consecutive values become ranges.
fn write_field(f: &mut fmt::Formatter<'_>, unit: Unit, set: FieldSet) -> fmt::Result {
    if set == unit.all() {
        return f.write_str("*");
    }
    let span = unit.max_stored() - unit.bounds().0;
    if set.len() > 1 {
        if let Some(step) = (2..=span).find(|&step| unit.stepped(step) == set) {
            return write!(f, "*/{step}");
        }
    }
    let values: Vec<u32> = set.iter().collect();
    let mut first = true;
    for run in values.chunk_by(|a, b| a + 1 == *b) {
        f.write_str(if first { "" } else { "," })?;
        first = false;
        match run {
            [single] => write!(f, "{single}")?,
            [start, .., end] => write!(f, "{start}-{end}")?,
            [] => {}
        }
    }
    Ok(())
}
