//! Crontab parsing, printing, matching, the builder and the scheduling decisions, as tables
//! of cases taken from graphile-worker's documentation and behaviour.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::{DateTime, TimeZone, Utc, Weekday};
use formica_core::cron::schedule::{following_minute, round_up_to_minute};
use formica_core::cron::{parse, Cron, CronItem, Crontab, Slot};
use formica_core::job::{JobKeyMode, JobSpec, Task};
use serde_json::json;
use std::time::Duration;

fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).single().expect("valid test time")
}

fn item(line: &str) -> CronItem {
    let tab = parse(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    assert_eq!(tab.items().len(), 1, "{line:?}");
    tab.into_items().remove(0)
}

#[test]
fn valid_lines_parse_to_their_canonical_text() {
    // (crontab text, canonical text of its items)
    let table = [
        ("* * * * * task", "* * * * * task"),
        ("30 4 * * 1 send_weekly_email", "30 4 * * 1 send_weekly_email"),
        (
            "30 4 * * 1 send_weekly_email ?fill=2d&max=10 {onboarding:false}",
            "30 4 * * 1 send_weekly_email ?fill=2d&max=10 {\"onboarding\":false}",
        ),
        ("0 */4 * * * rollup", "0 */4 * * * rollup"),
        ("*/10,7,56-59 * * * * t", "0,7,10,20,30,40,50,56-59 * * * * t"),
        ("0-59 0-23 1-31 1-12 0-6 t", "* * * * * t"),
        ("*/1 */1 */1 */1 */1 t", "* * * * * t"),
        ("0,15,30,45 * * * * t", "*/15 * * * * t"),
        ("* * */2 * * t", "* * */2 * * t"),
        ("* * 1,3,5 * * t", "* * 1,3,5 * * t"),
        ("*/100 */30 */40 */13 */9 t", "0 0 1 1 0 t"),
        ("05 007 * * * t", "5 7 * * * t"),
        ("* * * * 7 t", "* * * * 0 t"),
        ("* * * * 5-7 t", "* * * * 0,5-6 t"),
        ("* * * * 0-7 t", "* * * * * t"),
        ("* * * * 1-5,0 t", "* * * * 0-5 t"),
        ("* * * * 1-6,0 t", "* * * * * t"),
        ("1,1,2,2 * * * * t", "1-2 * * * * t"),
        ("0 0 1 1 * nested/task:x-y_z", "0 0 1 1 * nested/task:x-y_z"),
        ("  \t0   0\t1 1   *   t   ?fill=7d    {a:1}   ", "0 0 1 1 * t ?fill=1w {\"a\":1}"),
        ("* * * * * t ?fill=4w3d2h1m", "* * * * * t ?fill=4w3d2h1m"),
        ("* * * * * t ?fill=90s", "* * * * * t ?fill=1m30s"),
        ("* * * * * t ?fill=1d24h", "* * * * * t ?fill=2d"),
        ("* * * * * t ?fill=0m", "* * * * * t"),
        ("* * * * * t ?id=t", "* * * * * t"),
        ("* * * * * t ?&&id=other&", "* * * * * t ?id=other"),
        (
            "* * * * * t ?priority=-3&jobKeyMode=preserve_run_at&jobKey=k&queue=q:1&max=3&fill=1h&id=x",
            "* * * * * t ?id=x&fill=1h&max=3&queue=q:1&jobKey=k&jobKeyMode=preserve_run_at&priority=-3",
        ),
        ("* * * * * t ?jobKey=a+b%20c%26d%3D", "* * * * * t ?jobKey=a%20b%20c%26d%3D"),
        ("* * * * * t ?jobKey=100%", "* * * * * t ?jobKey=100%25"),
        ("* * * * * t ?jobKey=%E2%9C%93", "* * * * * t ?jobKey=%E2%9C%93"),
        ("* * * * * t ?%69d=x", "* * * * * t ?id=x"),
        ("* * * * * t {}", "* * * * * t"),
        ("* * * * * t {a: '#', b: \"x y\"}", "* * * * * t {\"a\":\"#\",\"b\":\"x y\"}"),
        ("* * * * * t {a:1} // a comment}", "* * * * * t {\"a\":1}"),
        ("# a comment\n\n   # indented comment\n* * * * * t", "* * * * * t"),
        ("* * * * * a\r\n* * * * * b\r\n", "* * * * * a\n* * * * * b"),
        // Between the fields any JavaScript whitespace separates, line separators included.
        ("*\r*\u{2028}*\u{2029}*\u{a0}*\u{3000}t", "* * * * * t"),
    ];
    for (text, canonical) in table {
        let tab = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(tab.to_string().trim_end(), canonical, "{text:?}");
        assert_eq!(parse(&tab.to_string()), Ok(tab), "{text:?} round trip");
    }
    assert_eq!(parse(""), Ok(Crontab::default()));
    assert_eq!(parse("\n  \n# only comments\n"), Ok(Crontab::default()));
}

#[test]
fn fields_options_and_payload_are_read_as_graphile_worker_reads_them() {
    let i = item("*/10,7,56-59 1-3 */15 2,4 5-7 my_task ?id=mine&fill=2d3h&max=10&queue=q&jobKey=k%20k&jobKeyMode=replace&priority=-5 {a:1,b:[true,null],'c':'x'}");
    assert_eq!(i.identifier(), "mine");
    assert_eq!(i.task(), "my_task");
    assert_eq!(i.minutes().iter().collect::<Vec<_>>(), [0, 7, 10, 20, 30, 40, 50, 56, 57, 58, 59]);
    assert_eq!(i.hours().iter().collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(i.dates().iter().collect::<Vec<_>>(), [1, 16, 31]);
    assert_eq!(i.months().iter().collect::<Vec<_>>(), [2, 4]);
    assert_eq!(i.dows().iter().collect::<Vec<_>>(), [0, 5, 6]);
    let o = i.options();
    assert_eq!(o.backfill_period, Duration::from_secs(2 * 86_400 + 3 * 3_600));
    assert_eq!(o.max_attempts, Some(10));
    assert_eq!(o.queue_name.as_deref(), Some("q"));
    assert_eq!(o.job_key.as_deref(), Some("k k"));
    assert_eq!(o.job_key_mode, Some(JobKeyMode::Replace));
    assert_eq!(o.priority, Some(-5));
    assert_eq!(serde_json::Value::Object(i.payload().clone()), json!({"a": 1, "b": [true, null], "c": "x"}));

    let plain = item("* * * * * t");
    assert_eq!(plain.identifier(), "t");
    assert_eq!(plain.options().backfill_period, Duration::ZERO);
    assert_eq!(plain.options().max_attempts, None);
    assert_eq!(plain.options().job_key_mode, None);
    assert!(plain.payload().is_empty());
    // The doc's example of a time phrase: 4w3d2h1m is 44761 minutes.
    assert_eq!(
        item("* * * * * t ?fill=4w3d2h1m").options().backfill_period,
        Duration::from_secs(44_761 * 60)
    );
}

#[test]
fn json5_payloads_become_the_json_javascript_would_store() {
    let table = [
        ("{a:1, b: [1,2,],}", json!({"a": 1, "b": [1, 2]})),
        ("{'single': 'quoted', \"double\": \"quoted\"}", json!({"single": "quoted", "double": "quoted"})),
        (
            "{hex: 0x1F, neg: -0xA, lead: .5, trail: 5., plus: +1, exp: 1e3, e2: 5.e-1}",
            json!({"hex": 31, "neg": -10, "lead": 0.5, "trail": 5, "plus": 1, "exp": 1000, "e2": 0.5}),
        ),
        (
            "{one: 1.0, zero: -0, big: 1e400, inf: -Infinity, nan: NaN}",
            json!({"one": 1, "zero": 0, "big": null, "inf": null, "nan": null}),
        ),
        ("{huge: 12345678901234567890}", json!({"huge": 12345678901234567168u64})),
        ("{f: 0.1}", json!({"f": 0.1})),
        ("{s: 'a\\nb\\t\\x41\\u00e9\\ud83d\\ude00\\'\\\"\\q'}", json!({"s": "a\nb\tAé😀'\"q"})),
        ("{lone: '\\udc00'}", json!({"lone": "\u{fffd}"})),
        ("{/* c */ a /* c */ : /* c */ 1 } // to the end }", json!({"a": 1})),
        (
            "{$id: 1, _x: 2, café: 3, \\u0061b: 4, true: 5, null: 6}",
            json!({"$id": 1, "_x": 2, "café": 3, "ab": 4, "true": 5, "null": 6}),
        ),
        ("{a: 1, a: 2}", json!({"a": 2})),
        ("{nested: {deeper: [{x: null}]}}", json!({"nested": {"deeper": [{"x": null}]}})),
    ];
    for (text, expected) in table {
        let map = formica_core::cron::parse(&format!("* * * * * t {text}"))
            .map(|tab| tab.items()[0].payload().clone())
            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(serde_json::Value::Object(map), expected, "{text:?}");
    }
}

#[test]
fn every_mistake_gives_its_line_column_and_what_was_expected() {
    // (text, line, column, message)
    let fields = "(minute hour day-of-month month day-of-week)";
    let long_task = format!("* * * * * {}", "t".repeat(129));
    let table: Vec<(&str, usize, usize, String)> = vec![
        ("* * * *", 1, 8, format!("expected five time fields {fields} then a task identifier, found 4 fields")),
        ("*", 1, 2, format!("expected five time fields {fields} then a task identifier, found 1 field")),
        ("* * * * *", 1, 10, "expected a task identifier after the five time fields".into()),
        ("* * * * *   ", 1, 10, "expected a task identifier after the five time fields".into()),
        (
            "* * * * too_few_parameters",
            1,
            9,
            format!("found 'too_few_parameters' where the day-of-week field was expected: a line needs five time fields {fields} before the task"),
        ),
        (
            "* * * * MON t",
            1,
            9,
            format!("found 'MON' where the day-of-week field was expected: a line needs five time fields {fields} before the task"),
        ),
        (
            "* * * 1,J t",
            1,
            9,
            "unexpected character 'J' in the month field: expected numbers, '*', '/', ',' or '-' (names such as MON or JAN are not supported)".into(),
        ),
        ("60 * * * * t", 1, 1, "value 60 is too large for the minute field: expected 0-59".into()),
        ("* 24 * * * t", 1, 3, "value 24 is too large for the hour field: expected 0-23".into()),
        ("* * 0 * * t", 1, 5, "value 0 is too small for the day-of-month field: expected 1-31".into()),
        ("* * 32 * * t", 1, 5, "value 32 is too large for the day-of-month field: expected 1-31".into()),
        ("* * * 0 * t", 1, 7, "value 0 is too small for the month field: expected 1-12".into()),
        ("* * * 13 * t", 1, 7, "value 13 is too large for the month field: expected 1-12".into()),
        (
            "* * * * 8 t",
            1,
            9,
            "value 8 is too large for the day-of-week field: expected 0-6 (Sunday to Saturday; 7 is also Sunday)".into(),
        ),
        ("1,2-70 * * * * t", 1, 5, "value 70 is too large for the minute field: expected 0-59".into()),
        ("99999999999 * * * * t", 1, 1, "value 99999999999 is too large for the minute field: expected 0-59".into()),
        ("*/0 * * * * t", 1, 3, "step 0 in the minute field: expected '*/n' with n greater than zero".into()),
        ("5-3 * * * * t", 1, 1, "range '5-3' in the minute field must end after it starts".into()),
        ("5-5 * * * * t", 1, 1, "range '5-5' in the minute field must end after it starts".into()),
        (
            "* 1-5/2 * * * t",
            1,
            3,
            "invalid '1-5/2' in the hour field: a step '/n' may only follow '*' (ranges with steps such as 'a-b/n' are not supported)".into(),
        ),
        ("1,,2 * * * * t", 1, 3, "invalid '' in the minute field: expected a number, a range 'a-b', '*' or '*/n'".into()),
        ("1-2-3 * * * * t", 1, 1, "invalid '1-2-3' in the minute field: expected a number, a range 'a-b', '*' or '*/n'".into()),
        ("** * * * * t", 1, 1, "invalid '**' in the minute field: expected a number, a range 'a-b', '*' or '*/n'".into()),
        ("*/ * * * * t", 1, 1, "invalid '*/' in the minute field: expected a number, a range 'a-b', '*' or '*/n'".into()),
        (
            "* * * * * 1task",
            1,
            11,
            "invalid task identifier '1task': expected a letter or '_' first".into(),
        ),
        (
            "* * * * * my.task",
            1,
            13,
            "unexpected character '.' in task identifier: expected letters, digits, '_', '-', ':' or '/', and a space before '?options' or the payload".into(),
        ),
        (
            "* * * * * t?fill=1d",
            1,
            12,
            "unexpected character '?' in task identifier: expected letters, digits, '_', '-', ':' or '/', and a space before '?options' or the payload".into(),
        ),
        (
            &long_task,
            1,
            11,
            "task identifier is 129 characters long: expected at most 128".into(),
        ),
        ("* * * * * t ?", 1, 13, "expected options after '?', such as '?fill=1h'".into()),
        ("* * * * * t x", 1, 13, "expected '?options' or a JSON5 object payload starting with '{'".into()),
        ("* * * * * t [1]", 1, 13, "expected '?options' or a JSON5 object payload starting with '{'".into()),
        ("* * * * * t ?max=1 2", 1, 20, "expected a JSON5 object payload starting with '{' after the options".into()),
        (
            "* * * * * t ?foo=1",
            1,
            14,
            "unknown option 'foo': expected one of id, fill, max, queue, jobKey, jobKeyMode, priority, tz".into(),
        ),
        ("* * * * * t ?max=1&max=2", 1, 20, "option 'max' is given more than once".into()),
        (
            "* * * * * t ?id=1x",
            1,
            17,
            "invalid value '1x' for option 'id': expected a letter or '_' followed by letters, digits, '_' or '-'".into(),
        ),
        (
            "* * * * * t ?id",
            1,
            16,
            "invalid value '' for option 'id': expected a letter or '_' followed by letters, digits, '_' or '-'".into(),
        ),
        (
            "* * * * * t ?fill=1y",
            1,
            19,
            "invalid value '1y' for option 'fill': expected a time phrase of number-unit pairs such as '1d' or '4w3d2h1m' (units s, m, h, d, w)".into(),
        ),
        (
            "* * * * * t ?fill=d",
            1,
            19,
            "invalid value 'd' for option 'fill': expected a time phrase of number-unit pairs such as '1d' or '4w3d2h1m' (units s, m, h, d, w)".into(),
        ),
        (
            "* * * * * t ?fill=99999999999999999999w",
            1,
            19,
            "invalid value '99999999999999999999w' for option 'fill': the time phrase is too long: expected at most 18446744073709551615 seconds".into(),
        ),
        ("* * * * * t ?max=0", 1, 18, "invalid value '0' for option 'max': expected an integer from 1 to 32767".into()),
        ("* * * * * t ?max=32768", 1, 18, "invalid value '32768' for option 'max': expected an integer from 1 to 32767".into()),
        ("* * * * * t ?max=-1", 1, 18, "invalid value '-1' for option 'max': expected an integer from 1 to 32767".into()),
        (
            "* * * * * t ?priority=x",
            1,
            23,
            "invalid value 'x' for option 'priority': expected an integer from -32768 to 32767".into(),
        ),
        (
            "* * * * * t ?priority=40000",
            1,
            23,
            "invalid value '40000' for option 'priority': expected an integer from -32768 to 32767".into(),
        ),
        (
            "* * * * * t ?queue=a%20b",
            1,
            20,
            "invalid value 'a b' for option 'queue': expected 1 to 128 letters, digits, '_', '-' or ':'".into(),
        ),
        ("* * * * * t ?jobKey=", 1, 21, "invalid value '' for option 'jobKey': expected a job key of 1 to 512 characters".into()),
        (
            "* * * * * t ?jobKeyMode=unsafe_dedupe",
            1,
            25,
            "invalid value 'unsafe_dedupe' for option 'jobKeyMode': expected 'replace' or 'preserve_run_at'".into(),
        ),
        (
            "* * * * * t ?jobKeyMode=merge",
            1,
            25,
            "invalid value 'merge' for option 'jobKeyMode': expected 'replace' or 'preserve_run_at'".into(),
        ),
        ("* * * * * t {a:1", 1, 16, "expected the payload to end with '}'".into()),
        ("* * * * * t {a:1}\u{2028}}", 1, 18, "a line break may not appear in the task, options or payload".into()),
        ("* * * * * t\u{2028}?max=1", 1, 12, "a line break may not appear in the task, options or payload".into()),
        ("* * * * * t {a:1}\r}", 1, 18, "a line break may not appear in the task, options or payload".into()),
        ("* * * * * t {a:}", 1, 16, "invalid JSON5 payload: unexpected '}': expected a value".into()),
        ("* * * * * t {a 1}", 1, 16, "invalid JSON5 payload: unexpected '1': expected ':' after the property name".into()),
        ("* * * * * t {a:1 b:2}", 1, 18, "invalid JSON5 payload: unexpected 'b': expected ',' or '}'".into()),
        ("* * * * * t {a:1} {b:2}", 1, 19, "invalid JSON5 payload: unexpected '{' after the payload object".into()),
        ("* * * * * t {a:'x}", 1, 16, "invalid JSON5 payload: unterminated string".into()),
        ("* * * * * t {a:01}", 1, 17, "invalid JSON5 payload: a number may not have leading zeros".into()),
        ("* * * * * t {a:1x}", 1, 17, "invalid JSON5 payload: unexpected 'x': expected the number to end".into()),
        ("* * * * * t {a:'\\1'}", 1, 18, "invalid JSON5 payload: octal escapes are not allowed".into()),
        ("* * * * * t {a:'\\xZZ'}", 1, 19, "invalid JSON5 payload: unexpected 'Z': expected a hexadecimal digit".into()),
        ("* * * * * t {a:undefined}", 1, 16, "invalid JSON5 payload: unexpected 'undefined': expected a value".into()),
        ("* * * * * t {a:1, /* open }", 1, 19, "invalid JSON5 payload: unterminated comment".into()),
        ("* * * * * t {1:1}", 1, 14, "invalid JSON5 payload: unexpected '1': expected a property name or '}'".into()),
        ("* * * * * t {é:1, \\u0031:2}", 1, 19, "invalid JSON5 payload: '1' may not appear in a property name".into()),
        ("* * * * * t\n\n* * * * * t", 3, 11, "duplicate identifier 't' (already used on line 1): give each item its own with '?id=...'".into()),
        (
            "* * * * * a ?id=x\n* * * * * b ?id=x",
            2,
            17,
            "duplicate identifier 'x' (already used on line 1): give each item its own with '?id=...'".into(),
        ),
        ("* * * * * x\n* * * * * b ?id=x", 2, 17, "duplicate identifier 'x' (already used on line 1): give each item its own with '?id=...'".into()),
        // Columns count characters, not bytes.
        ("\u{3000}é * * * * t", 1, 2, "unexpected character 'é' in the minute field: expected numbers, '*', '/', ',' or '-' (names such as MON or JAN are not supported)".into()),
        ("* * * * * t {é:'ü', ü:}", 1, 23, "invalid JSON5 payload: unexpected '}': expected a value".into()),
    ];
    for (text, line, column, message) in table {
        let err = parse(text).expect_err(text);
        assert_eq!(
            (err.line, err.column, err.message.as_str()),
            (line, column, message.as_str()),
            "{text:?}"
        );
        assert_eq!(err.to_string(), format!("crontab line {line}, column {column}: {message}"));
    }
}

#[test]
fn payloads_nest_at_most_128_deep() {
    let nested =
        |depth: usize| format!("* * * * * t {}{}{}", "{a:".repeat(depth - 1), "{}", "}".repeat(depth - 1));
    assert!(parse(&nested(128)).is_ok());
    let err = parse(&nested(129)).expect_err("too deep");
    assert_eq!(err.message, "invalid JSON5 payload: the payload nests deeper than 128 levels");
    let tab = parse(&nested(128)).expect("ok");
    assert_eq!(parse(&tab.to_string()), Ok(tab));
}

#[test]
fn matching_uses_utc_minutes_and_crons_day_rule() {
    // (pattern, time, matches)
    let table = [
        ("* * * * *", at(2024, 1, 1, 0, 0), true),
        ("30 4 * * 1", at(2024, 1, 1, 4, 30), true), // 2024-01-01 is a Monday
        ("30 4 * * 1", at(2024, 1, 1, 4, 31), false),
        ("30 4 * * 1", at(2024, 1, 2, 4, 30), false),
        ("0 0 * * 0", at(2024, 1, 7, 0, 0), true), // Sunday is 0 ...
        ("0 0 * * 7", at(2024, 1, 7, 0, 0), true), // ... and 7
        ("0 0 * * 6", at(2024, 1, 6, 0, 0), true), // Saturday is 6
        ("0 0 * * 1-5", at(2024, 1, 6, 0, 0), false),
        // Both day fields restricted: either matches (Friday the 13th rule).
        ("0 0 13 * 5", at(2024, 1, 13, 0, 0), true), // a Saturday the 13th
        ("0 0 13 * 5", at(2024, 1, 5, 0, 0), true),  // a Friday the 5th
        ("0 0 13 * 5", at(2024, 1, 6, 0, 0), false),
        // Only one restricted: it must match. A full list counts as unrestricted.
        ("0 0 13 * *", at(2024, 1, 5, 0, 0), false),
        ("0 0 1-31 * 5", at(2024, 1, 6, 0, 0), false),
        ("0 0 1-31 * 5", at(2024, 1, 5, 0, 0), true),
        ("0 0 13 * 0-6", at(2024, 1, 5, 0, 0), false),
        // Month always applies, even under the OR rule.
        ("0 0 13 2 5", at(2024, 1, 5, 0, 0), false),
        ("0 0 13 2 5", at(2024, 2, 2, 0, 0), true),
        ("0 12 29 2 *", at(2024, 2, 29, 12, 0), true),
        ("*/15 * * * *", at(2024, 1, 1, 0, 45), true),
        ("*/15 * * * *", at(2024, 1, 1, 0, 50), false),
        ("* * */2 * *", at(2024, 1, 31, 0, 0), true),
        ("* * */2 * *", at(2024, 1, 30, 0, 0), false),
    ];
    for (pattern, ts, expected) in table {
        let i = item(&format!("{pattern} t"));
        assert_eq!(i.matches(ts), expected, "{pattern} at {ts}");
        // Seconds within the minute do not matter.
        assert_eq!(i.matches(ts + chrono::TimeDelta::seconds(59)), expected, "{pattern} at {ts}+59s");
    }
}

#[test]
fn next_after_finds_the_first_later_minute_or_none() {
    // (pattern, after, expected next)
    let table = [
        ("* * * * *", at(2024, 1, 1, 10, 0), Some(at(2024, 1, 1, 10, 1))),
        ("5 * * * *", at(2024, 1, 1, 10, 5), Some(at(2024, 1, 1, 11, 5))),
        ("5 * * * *", at(2024, 1, 1, 23, 10), Some(at(2024, 1, 2, 0, 5))),
        ("0 0 1 * *", at(2024, 12, 31, 23, 59), Some(at(2025, 1, 1, 0, 0))),
        ("59 23 31 12 *", at(2024, 12, 31, 23, 59), Some(at(2025, 12, 31, 23, 59))),
        ("*/15 9-17 * * 1-5", at(2024, 1, 5, 17, 50), Some(at(2024, 1, 8, 9, 0))), // Friday to Monday
        ("0 0 * * 0", at(2024, 1, 6, 12, 0), Some(at(2024, 1, 7, 0, 0))),
        ("0 12 29 2 *", at(2024, 3, 1, 0, 0), Some(at(2028, 2, 29, 12, 0))),
        ("0 12 29 2 *", at(2096, 3, 1, 0, 0), Some(at(2104, 2, 29, 12, 0))), // 2100 is no leap year
        ("0 0 29 2 1", at(2024, 3, 1, 0, 0), Some(at(2025, 2, 3, 0, 0))),    // OR: a Monday in February
        ("0 0 31 * *", at(2024, 1, 31, 0, 0), Some(at(2024, 3, 31, 0, 0))),
        ("30 4 * * 1", at(2024, 1, 1, 4, 29), Some(at(2024, 1, 1, 4, 30))),
        ("0 0 31 2 *", at(2024, 1, 1, 0, 0), None),
        ("0 0 30 2 *", at(2024, 1, 1, 0, 0), None),
        ("0 0 31 4,6,9,11 *", at(2024, 1, 1, 0, 0), None),
    ];
    for (pattern, after, expected) in table {
        let i = item(&format!("{pattern} t"));
        assert_eq!(i.next_after(after), expected, "{pattern} after {after}");
        // Anywhere inside the minute gives the same answer: strictly after the minute.
        assert_eq!(i.next_after(after + chrono::TimeDelta::milliseconds(59_999)), expected, "{pattern}");
        if let Some(next) = expected {
            assert!(i.matches(next));
        }
    }
    let every = item("* * * * * t");
    assert_eq!(every.next_after(DateTime::<Utc>::MAX_UTC), None);
}

struct SendDailyReport;
impl Task for SendDailyReport {
    const IDENTIFIER: &'static str = "send_daily_report";
}

struct SendWeeklyEmail;
impl Task for SendWeeklyEmail {
    const IDENTIFIER: &'static str = "send_weekly_email";
}

#[test]
fn built_items_equal_parsed_ones() {
    let built = |cron: Cron| cron.build().expect("valid builder");
    let table = [
        (built(Cron::daily_at::<SendDailyReport>(8, 0)), "0 8 * * * send_daily_report"),
        (built(Cron::every_minute::<SendDailyReport>()), "* * * * * send_daily_report"),
        (built(Cron::every_minutes::<SendDailyReport>(15)), "*/15 * * * * send_daily_report"),
        (built(Cron::hourly_at::<SendDailyReport>(5)), "5 * * * * send_daily_report"),
        (
            built(
                Cron::weekly_at::<SendWeeklyEmail>(Weekday::Mon, 4, 30)
                    .fill(Duration::from_secs(2 * 86_400))
                    .max_attempts(10)
                    .payload(json!({"onboarding": false})),
            ),
            "30 4 * * 1 send_weekly_email ?fill=2d&max=10 {onboarding:false}",
        ),
        (built(Cron::weekly_at::<SendWeeklyEmail>(Weekday::Sun, 0, 0)), "0 0 * * 7 send_weekly_email"),
        (
            built(
                Cron::for_task("raw:task/name", "*/10,7 1-3 * * *")
                    .id("other")
                    .fill(Duration::from_millis(3_600_999))
                    .max_attempts(3)
                    .queue("q")
                    .priority(-1)
                    .job_key("k k")
                    .job_key_mode(JobKeyMode::PreserveRunAt)
                    .payload(json!({"n": 1.0, "f": 0.5, "s": "é"})),
            ),
            "7,*/10 1-3 * * * raw:task/name ?id=other&fill=1h&max=3&queue=q&priority=-1&jobKey=k+k&jobKeyMode=preserve_run_at {n: 1, f: .5, s: 'é'}",
        ),
        (built(Cron::new::<SendDailyReport>("0 8 * * *").id("send_daily_report")), "0 8 * * * send_daily_report"),
    ];
    for (built, text) in table {
        assert_eq!(built, item(text), "{text}");
        assert_eq!(item(&built.to_string()), built, "round trip of {built}");
    }
    let tab = Crontab::from_items([
        built(Cron::daily_at::<SendDailyReport>(8, 0)),
        built(Cron::daily_at::<SendDailyReport>(20, 0).id("evening")),
    ])
    .expect("unique");
    assert_eq!(parse("0 8 * * * send_daily_report\n0 20 * * * send_daily_report ?id=evening"), Ok(tab));
}

#[test]
fn builder_mistakes_are_reported_without_a_position() {
    let table = [
        (Cron::daily_at::<SendDailyReport>(24, 0), "value 24 is too large for the hour field: expected 0-23"),
        (Cron::hourly_at::<SendDailyReport>(60), "value 60 is too large for the minute field: expected 0-59"),
        (Cron::every_minutes::<SendDailyReport>(0), "step 0 in the minute field: expected '*/n' with n greater than zero"),
        (Cron::for_task("t", "* * * *"), "expected five time fields (minute hour day-of-month month day-of-week) then a task identifier, found 4 fields"),
        (Cron::for_task("t", "* * * * * *"), "expected exactly five time fields, found more: '*'"),
        (Cron::for_task("1t", "* * * * *"), "invalid task identifier '1t': expected a letter or '_' first"),
        (Cron::for_task("t", "* * * * *").id("a b"), "invalid value 'a b' for option 'id': expected a letter or '_' followed by letters, digits, '_' or '-'"),
        (Cron::for_task("t", "* * * * *").max_attempts(0), "invalid value '0' for option 'max': expected an integer from 1 to 32767"),
        (Cron::for_task("t", "* * * * *").queue(""), "invalid value '' for option 'queue': expected 1 to 128 letters, digits, '_', '-' or ':'"),
        (Cron::for_task("t", "* * * * *").job_key(""), "invalid value '' for option 'jobKey': expected a job key of 1 to 512 characters"),
        (
            Cron::for_task("t", "* * * * *").job_key_mode(JobKeyMode::UnsafeDedupe),
            "invalid value 'unsafe_dedupe' for option 'jobKeyMode': expected 'replace' or 'preserve_run_at'",
        ),
        (Cron::for_task("t", "* * * * *").payload(json!([1])), "the payload must be a JSON object"),
        (
            Cron::for_task("t", "* * * * *").payload((0..128).fold(json!({}), |v, _| json!({ "a": v }))),
            "the payload nests deeper than 128 levels",
        ),
    ];
    for (cron, message) in table {
        let err = cron.build().expect_err(message);
        assert_eq!((err.line, err.column, err.message.as_str()), (0, 0, message));
        assert_eq!(err.to_string(), format!("invalid cron item: {message}"));
    }
    let twice = Crontab::from_items([
        Cron::daily_at::<SendDailyReport>(8, 0).build().expect("ok"),
        Cron::daily_at::<SendDailyReport>(9, 0).build().expect("ok"),
    ])
    .expect_err("duplicate");
    assert_eq!((twice.line, twice.column), (2, 0));
    assert_eq!(
        twice.to_string(),
        "crontab item 2: duplicate identifier 'send_daily_report' (already used on line 1): give each item its own with '?id=...'"
    );
}

fn minutes(slots: &[Slot]) -> Vec<(DateTime<Utc>, bool)> {
    slots.iter().map(|s| (s.at, s.backfilled)).collect()
}

#[test]
fn backfill_covers_the_fill_period_of_known_items_only() {
    let ms = |t: DateTime<Utc>, ms: i64| t + chrono::TimeDelta::milliseconds(ms);
    // graphile-worker's verified run: fill=5m, last_execution 13:48:00.017, start 13:51:00.9.
    let every = item("* * * * * t ?fill=5m");
    let start = ms(at(2026, 11, 22, 13, 51), 900);
    let slots = every.backfill(Some(ms(at(2026, 11, 22, 13, 48), 17)), start);
    let expected: Vec<_> = [49, 50, 51].map(|m| (at(2026, 11, 22, 13, m), true)).into();
    assert_eq!(minutes(&slots), expected);
    // The minute equal to last_execution is offered (the SQL refuses it), earlier ones not.
    let slots = every.backfill(Some(at(2026, 11, 22, 13, 48)), start);
    assert_eq!(slots.first().map(|s| s.at), Some(at(2026, 11, 22, 13, 48)));
    // Never more than fill back, never at or after start.
    let slots = every.backfill(Some(at(2026, 1, 1, 0, 0)), at(2026, 11, 22, 13, 51));
    let expected: Vec<_> = (46..=50).map(|m| (at(2026, 11, 22, 13, m), true)).collect();
    assert_eq!(minutes(&slots), expected);
    // New items and items without fill are not backfilled.
    assert_eq!(every.backfill(None, start), []);
    assert_eq!(item("* * * * * t").backfill(Some(at(2026, 1, 1, 0, 0)), start), []);
    // graphile-worker's cron test: `0 */4 * * *` with fill=1d; last run 25 h ago gives the
    // six 4-hourly slots of the last day, 5 h ago only the slot since.
    let rollup = item("0 */4 * * * rollup ?fill=1d");
    let start = at(2024, 1, 2, 10, 30);
    let slots = rollup.backfill(Some(start - chrono::TimeDelta::hours(25)), start);
    let expected: Vec<_> =
        [(1, 12), (1, 16), (1, 20), (2, 0), (2, 4), (2, 8)].map(|(d, h)| (at(2024, 1, d, h, 0), true)).into();
    assert_eq!(minutes(&slots), expected);
    let slots = rollup.backfill(Some(start - chrono::TimeDelta::hours(5)), start);
    assert_eq!(minutes(&slots), [(at(2024, 1, 2, 8, 0), true)]);
    // A huge fill is bounded by the date range, not an overflow.
    let huge = item("0 0 1 1 * t ?fill=99999999w");
    assert_eq!(huge.backfill(Some(at(2020, 6, 1, 0, 0)), start).len(), 4);
}

#[test]
fn due_schedules_each_matching_minute_once_as_the_clock_moves() {
    let every = item("* * * * * t");
    // On time, late (catch up minute by minute, not flagged), early, and backwards.
    assert_eq!(
        minutes(&every.due(at(2024, 1, 1, 10, 0), at(2024, 1, 1, 10, 0))),
        [(at(2024, 1, 1, 10, 0), false)]
    );
    let late = every.due(at(2024, 1, 1, 10, 0), at(2024, 1, 1, 10, 3) + chrono::TimeDelta::seconds(30));
    assert_eq!(minutes(&late), (0..=3).map(|m| (at(2024, 1, 1, 10, m), false)).collect::<Vec<_>>());
    assert_eq!(every.due(at(2024, 1, 1, 10, 4), at(2024, 1, 1, 10, 2)), []);

    // A worker's cursor over a clock that jitters, jumps ahead and goes back.
    let quarter = item("*/15 * * * * t");
    let start = at(2024, 1, 1, 9, 59) + chrono::TimeDelta::seconds(20);
    let mut next = round_up_to_minute(start);
    assert_eq!(next, at(2024, 1, 1, 10, 0));
    let mut scheduled = Vec::new();
    let clock = [(10, 0), (10, 1), (10, 14), (10, 15), (10, 3), (10, 15), (11, 2), (10, 40), (11, 15)];
    for (h, m) in clock {
        let now = at(2024, 1, 1, h, m) + chrono::TimeDelta::milliseconds(1);
        scheduled.extend(quarter.due(next, now).into_iter().map(|s| s.at));
        next = next.max(following_minute(now));
    }
    let expected: Vec<_> =
        [(10, 0), (10, 15), (10, 30), (10, 45), (11, 0), (11, 15)].map(|(h, m)| at(2024, 1, 1, h, m)).into();
    assert_eq!(scheduled, expected);
    // Start-up right on a minute: the backfill stops before it and the regular run takes it.
    let start = at(2024, 1, 1, 10, 15);
    let fill = item("*/15 * * * * t ?fill=1h");
    let backfilled = fill.backfill(Some(at(2024, 1, 1, 9, 50)), start);
    assert_eq!(minutes(&backfilled), [(at(2024, 1, 1, 10, 0), true)]);
    assert_eq!(minutes(&fill.due(round_up_to_minute(start), start)), [(start, false)]);
}

#[test]
fn jobs_carry_the_cron_stamp_and_the_items_options() {
    let i = item("52 13 * * * t ?max=3&queue=cronq&priority=-1&jobKey=bfk&jobKeyMode=preserve_run_at {greeting:'hi', n:1, _cron: 'mine'}");
    let slot = Slot { at: at(2026, 11, 22, 13, 52), backfilled: false };
    assert_eq!(
        i.job_payload(slot),
        json!({"greeting": "hi", "n": 1, "_cron": {"ts": "2026-11-22T13:52:00.000Z", "backfilled": false}})
    );
    let late = Slot { backfilled: true, ..slot };
    assert_eq!(i.job_payload(late)["_cron"], json!({"ts": "2026-11-22T13:52:00.000Z", "backfilled": true}));
    let spec = i.job_spec(slot);
    let expected = JobSpec::builder()
        .run_at(slot.at)
        .max_attempts(3)
        .queue_name("cronq")
        .priority(-1)
        .job_key("bfk")
        .job_key_mode(JobKeyMode::PreserveRunAt)
        .build();
    assert_eq!(spec, expected);
    assert_eq!(spec.validate(i.task()), Ok(()));
    let plain = item("* * * * * t").job_spec(slot);
    assert_eq!(plain, JobSpec { run_at: Some(slot.at), ..JobSpec::default() });
}
