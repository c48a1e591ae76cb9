//! When a cron item adds jobs, and which jobs: the pure half of graphile-worker's cron
//! runner, for the worker machine to call.
//!
//! How the machine uses it, as graphile-worker's runner does:
//!
//! 1. At start (`start` = the worker's clock), read `known_crontabs`. An item whose
//!    identifier has no row is new: register it (`known_since = start`) and never backfill
//!    it. A known item gets [`CronItem::backfill`] with `last_execution`, or `known_since`
//!    when it never ran: the runs missed over its `fill` period, flagged as backfilled.
//! 2. Keep one cursor `next`, first [`round_up_to_minute`]`(start)`. On each tick at `now`,
//!    every item's [`CronItem::due`]`(next, now)` gives the minutes in `[next, now]` it
//!    fires at (a late timer catches up minute by minute, not flagged as backfilled); then
//!    `next = max(next, `[`following_minute`]`(now))`. A clock that went back yields nothing
//!    and never moves the cursor back, so no minute is offered twice by one worker.
//! 3. For each minute, in order, add the jobs built by [`CronItem::job_payload`] and
//!    [`CronItem::job_spec`] in one scheduling statement, whose conditional upsert of
//!    `last_execution` lets exactly one worker schedule a given (identifier, minute).
//!
//! The arms of the cursor timer are the machine's: graphile-worker wakes 1 ms after `next`.

use super::{floor_minute, CronItem};
use crate::job::JobSpec;
use chrono::{DateTime, DurationRound, SecondsFormat, TimeDelta, Utc};
use serde_json::{json, Value};

/// One run of a cron item: the minute (an interval's: the second) it is for, and whether it is a late catch-up found
/// at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot {
    /// The whole UTC minute the run is for; the job's `run_at` and `_cron.ts`.
    pub at: DateTime<Utc>,
    /// Found by the start-up backfill rather than on time.
    pub backfilled: bool,
}

/// `ts` with what is below `unit` (a second or a minute) dropped.
pub(super) fn round_down(ts: DateTime<Utc>, unit: TimeDelta) -> DateTime<Utc> {
    ts.duration_trunc(unit).unwrap_or(ts)
}

/// `ts` if it is a whole `unit` (a second or a minute), else the next whole one.
pub(crate) fn round_up(ts: DateTime<Utc>, unit: TimeDelta) -> DateTime<Utc> {
    let floor = round_down(ts, unit);
    if floor == ts {
        ts
    } else {
        floor.checked_add_signed(unit).unwrap_or(floor)
    }
}

/// The whole second after the one that contains `now`.
pub fn following_second(now: DateTime<Utc>) -> DateTime<Utc> {
    let floor = round_down(now, TimeDelta::seconds(1));
    floor.checked_add_signed(TimeDelta::seconds(1)).unwrap_or(floor)
}

/// `ts` if it is a whole minute, else the next whole minute.
pub fn round_up_to_minute(ts: DateTime<Utc>) -> DateTime<Utc> {
    let floor = floor_minute(ts);
    if floor == ts {
        ts
    } else {
        following_minute(ts)
    }
}

/// The whole minute after the one that contains `now`: where the cursor goes once `now`
/// has been handled.
pub fn following_minute(now: DateTime<Utc>) -> DateTime<Utc> {
    let floor = floor_minute(now);
    floor.checked_add_signed(TimeDelta::minutes(1)).unwrap_or(floor)
}

impl CronItem {
    /// The runs to backfill when a worker starts at `start`. `last_known` is the item's
    /// `last_execution`, or its `known_since` if it never ran, or `None` if the database
    /// does not know the item yet (new items are never backfilled).
    ///
    /// The runs are the minutes the item fires at that are at most its `fill` period
    /// before `start`, strictly before `start`, and not before `last_known`. The minute equal
    /// to `last_execution` is included as graphile-worker includes it; the scheduling
    /// statement then refuses it because `last_execution` does not advance.
    pub fn backfill(&self, last_known: Option<DateTime<Utc>>, start: DateTime<Utc>) -> Vec<Slot> {
        let Some(last_known) = last_known else { return Vec::new() };
        if self.options.backfill_period.is_zero() {
            return Vec::new();
        }
        let period = TimeDelta::from_std(self.options.backfill_period).unwrap_or(TimeDelta::MAX);
        let earliest = start.checked_sub_signed(period).unwrap_or(DateTime::<Utc>::MIN_UTC);
        self.firings(earliest.max(last_known), start, true)
    }

    /// The on-time runs for a tick at `now` with the cursor at `next`: the minutes from
    /// `next` up to the one containing `now`, both included, that the item fires at.
    /// Empty when `now` is before `next` (an early timer, or a clock that went back).
    pub fn due(&self, next: DateTime<Utc>, now: DateTime<Utc>) -> Vec<Slot> {
        self.firings(next, following_second(now), false)
    }

    /// The payload of the job for `slot`: the item's payload with `_cron` set to
    /// `{ "ts": "<ISO 8601, milliseconds, Z>", "backfilled": <bool> }` (replacing any
    /// `_cron` of the item's own).
    pub fn job_payload(&self, slot: Slot) -> Value {
        let mut payload = self.payload.clone();
        let ts = slot.at.to_rfc3339_opts(SecondsFormat::Millis, true);
        payload.insert("_cron".to_owned(), json!({ "ts": ts, "backfilled": slot.backfilled }));
        Value::Object(payload)
    }

    /// The spec of the job for `slot` (task [`CronItem::task`]): due at the slot's minute, so
    /// a backfilled job is due at once, with the item's queue, attempts, priority and job key.
    pub fn job_spec(&self, slot: Slot) -> JobSpec {
        let o = &self.options;
        JobSpec {
            queue_name: o.queue_name.clone(),
            run_at: Some(slot.at),
            max_attempts: o.max_attempts,
            job_key: o.job_key.clone(),
            job_key_mode: o.job_key_mode,
            priority: o.priority,
            flags: None,
            unique: None,
        }
    }

    /// The minutes in `[from, before)` the item fires at, as slots.
    fn firings(&self, from: DateTime<Utc>, before: DateTime<Utc>, backfilled: bool) -> Vec<Slot> {
        let mut slots = Vec::new();
        let unit = self.slot_unit();
        let mut from = round_up(from, unit);
        let last_day = before.date_naive();
        while from < before {
            let Some(at) = self.first_firing(from, last_day).filter(|at| *at < before) else { break };
            slots.push(Slot { at, backfilled });
            from = at.checked_add_signed(unit).unwrap_or(at);
            if from == at {
                break;
            }
        }
        slots
    }
}
