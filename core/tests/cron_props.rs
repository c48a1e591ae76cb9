//! Properties of the crontab code: printing round-trips through parsing, no text makes the
//! parser panic, and `next_after`, `due` and `backfill` agree with a naive minute-by-minute
//! scan that shares no code with the crate's matcher.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::{DateTime, Datelike, TimeDelta, TimeZone, Timelike, Utc};
use formica_core::cron::{parse, Cron, CronItem, Crontab};
use formica_core::job::JobKeyMode;
use proptest::prelude::*;
use serde_json::Value;
use std::time::Duration;

/// One element of a field list within `min..=max`.
fn element(min: u32, max: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        (min..=max).prop_map(|n| n.to_string()),
        (min..max).prop_flat_map(move |a| (Just(a), a + 1..=max)).prop_map(|(a, b)| format!("{a}-{b}")),
        Just("*".to_owned()),
        (1..=max + 5).prop_map(|n| format!("*/{n}")),
    ]
}

fn field(min: u32, max: u32) -> impl Strategy<Value = String> {
    prop::collection::vec(element(min, max), 1..4).prop_map(|parts| parts.join(","))
}

fn pattern() -> impl Strategy<Value = String> {
    (field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 7))
        .prop_map(|(a, b, c, d, e)| format!("{a} {b} {c} {d} {e}"))
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[\u{2028}\u{2029}\r\n\t'\"\\\\{}/*#]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn payload() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(
        prop::collection::btree_map(any::<String>(), json(), 0..4)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
    )
}

/// Items with every option drawn, built through the builder.
fn item() -> impl Strategy<Value = CronItem> {
    let options = (
        prop::option::of("[_a-zA-Z][-_a-zA-Z0-9]{0,8}"),
        prop_oneof![0..10_000_000u64, any::<u64>()],
        prop::option::of(1..=i16::MAX),
        prop::option::of("[-a-zA-Z0-9_:]{1,12}"),
        prop::option::of(any::<i16>()),
        prop::option::of("\\PC{1,12}|.{1,5}"),
        prop::option::of(prop_oneof![Just(JobKeyMode::Replace), Just(JobKeyMode::PreserveRunAt)]),
        prop::option::of(prop::sample::select(chrono_tz::TZ_VARIANTS.to_vec())),
    );
    ("[_a-zA-Z][_a-zA-Z0-9:/-]{0,12}", pattern(), options, payload()).prop_map(
        |(task, pattern, (id, fill, max, queue, priority, key, mode, zone), payload)| {
            let mut cron = Cron::for_task(task, pattern).fill(Duration::from_secs(fill));
            cron = if let Some(id) = id { cron.id(id) } else { cron };
            cron = if let Some(n) = max { cron.max_attempts(n) } else { cron };
            cron = if let Some(q) = queue { cron.queue(q) } else { cron };
            cron = if let Some(p) = priority { cron.priority(p) } else { cron };
            cron = if let Some(k) = key { cron.job_key(k) } else { cron };
            cron = if let Some(m) = mode { cron.job_key_mode(m) } else { cron };
            cron = if let Some(z) = zone { cron.time_zone(z) } else { cron };
            cron = if let Some(p) = payload { cron.payload(p) } else { cron };
            cron.build().unwrap_or_else(|e| panic!("generated item is valid: {e}"))
        },
    )
}

/// Items with only a schedule, for the time properties.
fn schedule() -> impl Strategy<Value = CronItem> {
    pattern().prop_map(|p| Cron::for_task("t", p).build().unwrap_or_else(|e| panic!("valid pattern: {e}")))
}

fn time() -> impl Strategy<Value = DateTime<Utc>> {
    // 2000-01-01 to 2100-01-01, to the millisecond.
    (946_684_800_000i64..4_102_444_800_000)
        .prop_map(|ms| Utc.timestamp_millis_opt(ms).single().expect("in range"))
}

/// The naive matcher: the day-of-month/day-of-week OR rule applies when both are
/// restricted, i.e. not every value listed.
fn naive_matches(item: &CronItem, t: DateTime<Utc>) -> bool {
    let date = item.dates().contains(t.day());
    let dow = item.dows().contains(t.weekday().num_days_from_sunday());
    let day = if item.dates().len() < 31 && item.dows().len() < 7 { date || dow } else { date && dow };
    day && item.months().contains(t.month())
        && item.hours().contains(t.hour())
        && item.minutes().contains(t.minute())
}

/// Whole minutes from the first at or after `from`, while before `until`.
fn minutes_between(from: DateTime<Utc>, until: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> {
    let first = Utc
        .timestamp_opt((from.timestamp_millis() + 59_999).div_euclid(60_000) * 60, 0)
        .single()
        .expect("ok");
    std::iter::successors(Some(first), |t| Some(*t + TimeDelta::minutes(1))).take_while(move |t| *t < until)
}

proptest! {
    #[test]
    fn printing_round_trips(item in item()) {
        let text = item.to_string();
        prop_assert!(!text.contains(['\n', '\r', '\u{2028}', '\u{2029}']), "one line: {text:?}");
        let tab = parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(tab.items(), [item]);
    }

    #[test]
    fn crontabs_round_trip(items in prop::collection::vec(item(), 0..5)) {
        let mut seen = std::collections::BTreeSet::new();
        let unique: Vec<_> = items.into_iter().filter(|i| seen.insert(i.identifier().to_owned())).collect();
        let tab = Crontab::from_items(unique).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(parse(&tab.to_string()), Ok(tab));
    }

    #[test]
    fn any_text_parses_or_fails_without_panicking(text in any::<String>()) {
        check_text(&text)?;
    }

    #[test]
    fn crontab_like_text_parses_or_fails_without_panicking(
        text in "[0-9*/,\\- ]{0,14}[a-z_:/ ]{0,6}( \\?[a-zA-Z=&%0-9+]{0,16})?( \\{[a-z0-9 :,'\"\\[\\]{}/*.+\\-\\\\]{0,24})?"
    ) {
        check_text(&text)?;
    }

    #[test]
    fn next_after_agrees_with_a_minute_scan(item in schedule(), from in time()) {
        let window = from + TimeDelta::days(40);
        let naive = minutes_between(from + TimeDelta::milliseconds(1), window).find(|t| naive_matches(&item, *t) && *t > from);
        let next = item.next_after(from);
        match naive {
            Some(t) => prop_assert_eq!(next, Some(t)),
            None => prop_assert!(next.is_none_or(|t| t >= window && item.matches(t))),
        }
    }

    #[test]
    fn due_and_backfill_agree_with_a_minute_scan(
        item in schedule(),
        start in time(),
        since in 0i64..3 * 86_400_000,
        until in 0i64..2 * 86_400_000,
        fill in 0u64..2 * 86_400,
    ) {
        let item = Cron::for_task("t", pattern_of(&item)).fill(Duration::from_secs(fill)).build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let now = start + TimeDelta::milliseconds(until);
        let due: Vec<_> = item.due(start, now).into_iter().map(|s| s.at).collect();
        let naive: Vec<_> = minutes_between(start, now + TimeDelta::milliseconds(1))
            .filter(|t| naive_matches(&item, *t)).collect();
        prop_assert_eq!(due, naive);

        let last = start - TimeDelta::milliseconds(since);
        let earliest = start - TimeDelta::seconds(fill as i64);
        let backfill: Vec<_> = item.backfill(Some(last), start).into_iter().map(|s| s.at).collect();
        let naive: Vec<_> = minutes_between(last.max(earliest), start)
            .filter(|t| fill > 0 && naive_matches(&item, *t)).collect();
        prop_assert_eq!(backfill, naive);
        prop_assert!(item.backfill(None, start).is_empty());
    }
}

/// The pattern part (five fields) of an item's canonical line.
fn pattern_of(item: &CronItem) -> String {
    item.to_string().split(' ').take(5).collect::<Vec<_>>().join(" ")
}

fn check_text(text: &str) -> Result<(), TestCaseError> {
    match parse(text) {
        Ok(tab) => prop_assert_eq!(parse(&tab.to_string()), Ok(tab)),
        Err(e) => prop_assert!(e.line >= 1 && e.column >= 1 && !e.message.is_empty(), "{e:?}"),
    }
    Ok(())
}
