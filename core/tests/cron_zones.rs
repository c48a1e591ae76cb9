//! Cron items in a time zone, and the daylight-saving rule (core/src/cron/zone.rs): a
//! local time fires at the first UTC minute at which the zone's clock has reached it. The
//! examples pin the rule in zones of both hemispheres, a half-hour shift and a skipped day;
//! the properties check it in random zones across twenty years of transitions against a
//! minute-by-minute scan of the zone's clock that shares no code with the matcher, for
//! `next_after`, `due` and the start-up backfill.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::{DateTime, Datelike, NaiveDateTime, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use formica_core::cron::schedule::round_up_to_minute;
use formica_core::cron::{parse, Cron, CronItem};
use proptest::prelude::*;
use std::time::Duration;

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

fn item(line: &str) -> CronItem {
    parse(line).expect("valid crontab").into_items().remove(0)
}

/// The item's firings in `[from, until)`.
fn firings(item: &CronItem, from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    item.due(from, until - TimeDelta::minutes(1)).into_iter().map(|s| s.at).collect()
}

#[test]
fn a_local_time_skipped_by_spring_forward_fires_once_when_the_clock_resumes() {
    // Paris, 29 March 2026: 02:00 CET becomes 03:00 CEST at 01:00 UTC.
    let daily = item("30 2 * * * report ?tz=Europe/Paris");
    let day = firings(&daily, utc(2026, 3, 27, 12, 0), utc(2026, 3, 31, 12, 0));
    assert_eq!(
        day,
        vec![
            utc(2026, 3, 28, 1, 30),
            utc(2026, 3, 29, 1, 0),
            utc(2026, 3, 30, 0, 30),
            utc(2026, 3, 31, 0, 30)
        ]
    );
    // Every quarter hour: the skipped 02:00-02:45 and 03:00 fire together, once, at 03:00.
    let quarters = item("*/15 * * * * tick ?tz=Europe/Paris");
    let around = firings(&quarters, utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 31));
    assert_eq!(
        around,
        vec![
            utc(2026, 3, 29, 0, 30),
            utc(2026, 3, 29, 0, 45),
            utc(2026, 3, 29, 1, 0),
            utc(2026, 3, 29, 1, 15),
            utc(2026, 3, 29, 1, 30)
        ]
    );
}

#[test]
fn a_local_time_that_occurs_twice_fires_at_its_first_occurrence_only() {
    // Paris, 25 October 2026: 03:00 CEST becomes 02:00 CET at 01:00 UTC.
    let daily = item("30 2 * * * report ?tz=Europe/Paris");
    let day = firings(&daily, utc(2026, 10, 24, 12, 0), utc(2026, 10, 26, 12, 0));
    assert_eq!(day, vec![utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]);
    // Every quarter hour: silent while the clock passes 02:00-02:59 the second time.
    let quarters = item("*/15 * * * * tick ?tz=Europe/Paris");
    let around = firings(&quarters, utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 2, 1));
    assert_eq!(around, vec![utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 0, 45), utc(2026, 10, 25, 2, 0)]);
}

#[test]
fn the_rule_holds_south_of_the_equator_for_half_hour_shifts_and_a_skipped_day() {
    // Sydney, 5 October 2025: 02:00 AEST becomes 03:00 AEDT at 16:00 UTC the day before.
    let sydney = item("15 2 * * * t ?tz=Australia/Sydney");
    assert_eq!(sydney.next_after(utc(2025, 10, 4, 12, 0)), Some(utc(2025, 10, 4, 16, 0)));
    // Lord Howe, 6 April 2025: 02:00 +11 becomes 01:30 +10:30 at 15:00 UTC; 01:45 occurs twice.
    let howe = item("45 1 * * * t ?tz=Australia/Lord_Howe");
    assert_eq!(howe.next_after(utc(2025, 4, 5, 12, 0)), Some(utc(2025, 4, 5, 14, 45)));
    assert_eq!(howe.next_after(utc(2025, 4, 5, 14, 45)), Some(utc(2025, 4, 6, 15, 15)));
    // Samoa skipped 30 December 2011: its noon fires as the clock resumes, 31 December 00:00.
    let apia = item("0 12 * * * t ?tz=Pacific/Apia");
    assert_eq!(apia.next_after(utc(2011, 12, 29, 23, 0)), Some(utc(2011, 12, 30, 10, 0)));
    assert_eq!(apia.next_after(utc(2011, 12, 30, 10, 0)), Some(utc(2011, 12, 30, 22, 0)));
}

#[test]
fn an_item_without_a_zone_is_utc_and_its_line_is_unchanged() {
    let plain = item("0 8 * * 1-5 report");
    assert_eq!(plain.options().time_zone, None);
    assert_eq!(plain.to_string(), "0 8 * * 1-5 report");
    assert_eq!(plain.next_after(utc(2026, 7, 1, 9, 0)), Some(utc(2026, 7, 2, 8, 0)));
    assert_eq!(plain.graphile_worker_refuses(), None);
    let paris = Cron::for_task("report", "0 8 * * 1-5").time_zone(chrono_tz::Europe::Paris).build().unwrap();
    assert_eq!(paris.to_string(), "0 8 * * 1-5 report ?tz=Europe/Paris");
    assert_eq!(paris.next_after(utc(2026, 7, 1, 9, 0)), Some(utc(2026, 7, 2, 6, 0)), "08:00 CEST");
    assert_eq!(paris.next_after(utc(2026, 12, 1, 9, 0)), Some(utc(2026, 12, 2, 7, 0)), "08:00 CET");
    assert_eq!(paris.graphile_worker_refuses().as_deref(), Some("unknown option: tz"));
}

#[test]
fn a_cron_tz_line_sets_the_zone_of_the_items_after_it_that_name_none() {
    let tab =
        parse("0 8 * * * a\nCRON_TZ=America/New_York\n0 8 * * * b\n0 8 * * * c ?tz=Asia/Tokyo").unwrap();
    let zones: Vec<_> = tab.items().iter().map(|i| i.options().time_zone).collect();
    assert_eq!(zones, [None, Some(chrono_tz::America::New_York), Some(chrono_tz::Asia::Tokyo)]);
    assert_eq!(parse(&tab.to_string()).unwrap(), tab, "each item prints its own zone");
    let err = parse("CRON_TZ=Mars/Olympus").unwrap_err();
    assert_eq!((err.line, err.column), (1, 9));
    assert!(err.message.contains("IANA time zone"), "{}", err.message);
    let err = parse("* * * * * t ?tz=Europe/Pariss").unwrap_err();
    assert!(err.message.contains("invalid value 'Europe/Pariss' for option 'tz'"), "{}", err.message);
}

#[test]
fn matches_agrees_with_next_after_across_a_transition() {
    let quarters = item("*/15 * * * * tick ?tz=Europe/Paris");
    assert!(quarters.matches(utc(2026, 3, 29, 1, 0)));
    assert!(!quarters.matches(utc(2026, 10, 25, 1, 15)), "02:15 the second time");
    assert!(quarters.matches(utc(2026, 10, 25, 0, 15)), "02:15 the first time");
}

// ---- Properties: the matcher against a scan of the zone's clock. ----

/// The zone's wall clock at `at`, to the minute.
fn wall(tz: Tz, at: DateTime<Utc>) -> NaiveDateTime {
    let local = at.with_timezone(&tz).naive_local();
    local.with_second(0).unwrap().with_nanosecond(0).unwrap()
}

/// The fields alone, on a wall-clock time (cron's day-of-month/day-of-week OR rule).
fn fields_match(item: &CronItem, t: NaiveDateTime) -> bool {
    let date = item.dates().contains(t.day());
    let dow = item.dows().contains(t.weekday().num_days_from_sunday());
    let day = if item.dates().len() < 31 && item.dows().len() < 7 { date || dow } else { date && dow };
    day && item.months().contains(t.month())
        && item.hours().contains(t.hour())
        && item.minutes().contains(t.minute())
}

/// The stated rule, minute by minute: the clock's high-water mark rises from `high` to
/// `max(high, wall(m))` at minute `m`, and `m` fires the matching local times it passes.
/// Returns each firing with the local times it stands for.
fn scan(
    item: &CronItem,
    tz: Tz,
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, Vec<NaiveDateTime>)> {
    // The clock's highest reading before `from` (a clock going back does not go back two days).
    let mut high = (1..=2 * 24 * 60).map(|n| wall(tz, from - TimeDelta::minutes(n))).max().unwrap();
    let mut out = Vec::new();
    let mut m = from;
    while m < until {
        let now = wall(tz, m);
        let mut passed = Vec::new();
        let mut t = high + TimeDelta::minutes(1);
        while t <= now {
            if fields_match(item, t) {
                passed.push(t);
            }
            t += TimeDelta::minutes(1);
        }
        high = high.max(now);
        if !passed.is_empty() {
            out.push((m, passed));
        }
        m += TimeDelta::minutes(1);
    }
    out
}

fn pattern() -> impl Strategy<Value = String> {
    let minutes = prop_oneof![
        Just("*".to_owned()),
        (2..=30u32).prop_map(|n| format!("*/{n}")),
        (0..60u32).prop_map(|n| n.to_string()),
        (0..30u32, 30..60u32).prop_map(|(a, b)| format!("{a},{b}")),
    ];
    // Hours near the usual transition times, often.
    let hours = prop_oneof![
        Just("*".to_owned()),
        (0..4u32).prop_map(|h| h.to_string()),
        (0..24u32).prop_map(|h| h.to_string()),
        (0..3u32).prop_map(|h| format!("{h}-{}", h + 2)),
    ];
    let dows = prop_oneof![3 => Just("*".to_owned()), 1 => (0..7u32).prop_map(|d| d.to_string())];
    (minutes, hours, dows).prop_map(|(m, h, d)| format!("{m} {h} * * {d}"))
}

/// An instant near a random transition of a random zone between 2006 and 2026 (or a
/// random instant, for zones without one in the year looked at).
fn zone_and_moment() -> impl Strategy<Value = (Tz, DateTime<Utc>)> {
    let start = utc(2006, 1, 1, 0, 0).timestamp();
    let span = utc(2026, 1, 1, 0, 0).timestamp() - start;
    (prop::sample::select(chrono_tz::TZ_VARIANTS.to_vec()), 0..span, -120i64..120).prop_map(
        move |(tz, offset, minutes)| {
            let from = Utc.timestamp_opt(start + offset - offset % 60, 0).unwrap();
            let offset_at = |at: DateTime<Utc>| wall(tz, at) - at.naive_utc();
            let first = offset_at(from);
            let transition = (1..=366 * 24)
                .map(|h| from + TimeDelta::hours(h))
                .find(|at| offset_at(*at) != first)
                .unwrap_or(from);
            (tz, transition + TimeDelta::minutes(minutes))
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn each_local_time_fires_once_by_the_rule_across_transitions(
        pattern in pattern(), (tz, moment) in zone_and_moment()
    ) {
        let item = Cron::for_task("t", pattern).time_zone(tz).build().unwrap();
        let (from, until) = (moment - TimeDelta::hours(30), moment + TimeDelta::hours(30));
        let expected = scan(&item, tz, from, until);
        // Each matching local time the clock reaches is in exactly one firing.
        let mut locals: Vec<_> = expected.iter().flat_map(|(_, l)| l.clone()).collect();
        let count = locals.len();
        locals.dedup();
        prop_assert_eq!(locals.len(), count);
        let expected: Vec<_> = expected.into_iter().map(|(m, _)| m).collect();
        prop_assert_eq!(&firings(&item, from, until), &expected, "due, {}", tz);
        let chain: Vec<_> = std::iter::successors(item.next_after(from - TimeDelta::minutes(1)), |at| item.next_after(*at))
            .take_while(|at| *at < until).collect();
        prop_assert_eq!(&chain, &expected, "next_after, {}", tz);
        for at in &expected {
            prop_assert!(item.matches(*at));
        }
    }

    #[test]
    fn backfill_across_a_transition_schedules_exactly_the_missed_slots(
        pattern in pattern(), (tz, moment) in zone_and_moment(), down in 1i64..26 * 60, fill in 1u64..30 * 3600
    ) {
        let item = Cron::for_task("t", pattern).time_zone(tz).fill(Duration::from_secs(fill)).build().unwrap();
        let start = moment + TimeDelta::seconds(17);
        let last = start - TimeDelta::minutes(down);
        let backfill: Vec<_> = item.backfill(Some(last), start).into_iter().map(|s| s.at).collect();
        let earliest = round_up_to_minute((start - TimeDelta::seconds(fill as i64)).max(last));
        let expected: Vec<_> = scan(&item, tz, earliest, start).into_iter().map(|(m, _)| m).collect();
        prop_assert_eq!(backfill, expected, "{}", tz);
    }
}

// ---- Intervals (core/src/cron/interval.rs). ----

#[test]
fn an_interval_fires_at_each_multiple_of_its_period_since_the_epoch() {
    let every = item("@every 15s tick ?fill=1m {a: 1}");
    assert_eq!(every.interval(), Some(Duration::from_secs(15)));
    assert_eq!(every.to_string(), r#"@every 15s tick ?fill=1m {"a":1}"#);
    assert_eq!(parse(&every.to_string()).unwrap().into_items(), std::slice::from_ref(&every));
    assert_eq!(
        Cron::every_for_task("tick", Duration::from_secs(15))
            .fill(Duration::from_secs(60))
            .payload(serde_json::json!({"a": 1}))
            .build()
            .unwrap(),
        every
    );
    let t = |s: u32| Utc.with_ymd_and_hms(2026, 3, 29, 1, 0, s).unwrap();
    let due: Vec<_> = every.due(t(0), t(46)).into_iter().map(|s| s.at).collect();
    assert_eq!(due, [t(0), t(15), t(30), t(45)]);
    assert_eq!(every.next_after(t(15)), Some(t(30)));
    assert!(every.matches(t(45)) && !every.matches(t(44)));
    let missed: Vec<_> = every.backfill(Some(t(20)), t(50)).into_iter().map(|s| s.at).collect();
    assert_eq!(missed, [t(30), t(45)]);
    assert!(every.graphile_worker_refuses().is_some());
    let second = item("@every 1s s");
    assert_eq!(second.due(t(0), t(59) + TimeDelta::milliseconds(999)).len(), 60);
    for bad in ["@every 0s t", "@every 1x t", "@every 367d t", "@every 5s"] {
        assert!(parse(bad).is_err(), "{bad}");
    }
}

proptest! {
    /// The strategies offered to applications build items whose lines read back.
    #[test]
    fn the_offered_strategies_build_items_that_round_trip(
        zone in formica_core::sim::strategies::time_zone(),
        every in formica_core::sim::strategies::interval_item("beat", vec!["t".to_owned()]),
    ) {
        let zoned = Cron::for_task("t", "0 8 * * *").time_zone(zone).build().unwrap();
        for item in [zoned, every] {
            prop_assert_eq!(parse(&item.to_string()).unwrap().into_items(), vec![item]);
        }
    }
}
