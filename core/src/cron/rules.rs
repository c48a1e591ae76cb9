//! The rules of a crontab's values, shared by the parser and the builder: each `?opts`
//! option's rule and its message, time phrases (`fill=4w3d`), and the query-string encoding
//! both ways (Node's `querystring` decoding when parsing, escaping when an item is shown).

use super::CronItem;
use crate::job::{JobKeyMode, MAX_JOB_KEY_LEN, MAX_QUEUE_NAME_LEN};
use std::time::Duration;

pub(super) fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// ASCII digits to a number; `None` if it overflows.
pub(super) fn digits_u64(s: &str) -> Option<u64> {
    s.bytes().try_fold(0u64, |n, b| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
}

pub(super) fn is_task_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

pub(super) const OPTION_KEYS: [&str; 8] =
    ["id", "fill", "max", "queue", "jobKey", "jobKeyMode", "priority", "tz"];

/// The options graphile-worker 0.18's parser knows (it refuses any other).
pub(super) const NODE_OPTION_KEYS: [&str; 7] =
    ["id", "fill", "max", "queue", "jobKey", "jobKeyMode", "priority"];

/// The message for an option whose value breaks its rule.
pub(super) fn invalid_option(key: &str, value: &str, expected: &str) -> String {
    format!("invalid value {} for option '{key}': {expected}", quote(value))
}

/// `^-?\d+$` as a number (saturating; `None` if not an integer).
pub(super) fn integer(text: &str) -> Option<i64> {
    let (negative, digits) = text.strip_prefix('-').map_or((false, text), |d| (true, d));
    if !is_digits(digits) {
        return None;
    }
    let n = digits_u64(digits).and_then(|n| i64::try_from(n).ok()).unwrap_or(i64::MAX);
    Some(if negative { -n } else { n })
}

/// `id`: a letter or `_`, then letters, digits, `_` or `-`.
pub(super) fn check_id(id: &str) -> Result<String, String> {
    let mut chars = id.chars();
    let ok = chars.next().is_some_and(is_task_start)
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    ok.then(|| id.to_owned())
        .ok_or_else(|| "expected a letter or '_' followed by letters, digits, '_' or '-'".to_owned())
}

/// `max`: from 1 to 32767 (`None`: not an integer).
pub(super) fn check_max_attempts(n: Option<i64>) -> Result<i16, String> {
    n.and_then(|n| i16::try_from(n).ok())
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("expected an integer from 1 to {}", i16::MAX))
}

/// `priority`: a smallint (`None`: not an integer).
pub(super) fn check_priority(n: Option<i64>) -> Result<i16, String> {
    n.and_then(|n| i16::try_from(n).ok())
        .ok_or_else(|| format!("expected an integer from {} to {}", i16::MIN, i16::MAX))
}

/// `queue`: letters, digits, `_`, `-` or `:`, at most 128 characters.
pub(super) fn check_queue(queue: &str) -> Result<String, String> {
    let ok = !queue.is_empty()
        && queue.len() <= MAX_QUEUE_NAME_LEN
        && queue.chars().all(|c| c.is_ascii_alphanumeric() || "_-:".contains(c));
    ok.then(|| queue.to_owned())
        .ok_or_else(|| format!("expected 1 to {MAX_QUEUE_NAME_LEN} letters, digits, '_', '-' or ':'"))
}

/// `jobKey`: any text of 1 to 512 characters.
pub(super) fn check_job_key(key: &str) -> Result<String, String> {
    (1..=MAX_JOB_KEY_LEN)
        .contains(&key.chars().count())
        .then(|| key.to_owned())
        .ok_or_else(|| format!("expected a job key of 1 to {MAX_JOB_KEY_LEN} characters"))
}

/// `jobKeyMode` as text.
pub(super) fn job_key_mode(text: &str) -> Result<JobKeyMode, String> {
    check_job_key_mode(text.parse().map_err(|_| MODE_EXPECTED.to_owned())?)
}

pub(super) const MODE_EXPECTED: &str = "expected 'replace' or 'preserve_run_at'";

/// `jobKeyMode`: graphile-worker's crontab takes `replace` and `preserve_run_at` only.
pub(super) fn check_job_key_mode(mode: JobKeyMode) -> Result<JobKeyMode, String> {
    match mode {
        JobKeyMode::Replace | JobKeyMode::PreserveRunAt => Ok(mode),
        JobKeyMode::UnsafeDedupe | JobKeyMode::ReplaceAndAbort => Err(MODE_EXPECTED.to_owned()),
    }
}

pub(super) const PHRASE_UNITS: [(char, u64); 5] =
    [('w', 604_800), ('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];

/// A time phrase such as `4w3d2h1m`: number-unit pairs (`s`, `m`, `h`, `d`, `w`), summed.
pub(super) fn time_phrase(text: &str) -> Result<Duration, String> {
    let bad =
        || "expected a time phrase of number-unit pairs such as '1d' or '4w3d2h1m' (units s, m, h, d, w)";
    let too_long = || format!("the time phrase is too long: expected at most {} seconds", u64::MAX);
    if text.is_empty() {
        return Err(bad().to_owned());
    }
    let mut total = 0u64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let unit = rest[digits..].chars().next().and_then(|u| PHRASE_UNITS.iter().find(|(c, _)| *c == u));
        let (Some((_, seconds)), true) = (unit, digits > 0) else { return Err(bad().to_owned()) };
        let amount = digits_u64(&rest[..digits]).and_then(|n| n.checked_mul(*seconds));
        total = amount.and_then(|a| total.checked_add(a)).ok_or_else(too_long)?;
        rest = &rest[digits + 1..];
    }
    Ok(Duration::from_secs(total))
}

/// The canonical time phrase of a non-zero period in whole seconds, in `units`, largest
/// first.
pub(super) fn phrase(period: Duration, units: &[(char, u64)]) -> String {
    let mut left = period.as_secs();
    let mut text = String::new();
    for &(unit, seconds) in units {
        if left >= seconds {
            text.push_str(&format!("{}{unit}", left / seconds));
            left %= seconds;
        }
    }
    text
}

/// The options of an item as `(key, value)` pairs in the canonical order, omitting
/// defaults (the `id` when it is the task identifier, a zero `fill`).
pub(super) fn option_pairs(item: &CronItem) -> Vec<(&'static str, String)> {
    let o = &item.options;
    let mut pairs = Vec::new();
    if item.identifier != item.task {
        pairs.push(("id", item.identifier.clone()));
    }
    if !o.backfill_period.is_zero() {
        pairs.push(("fill", phrase(o.backfill_period, &PHRASE_UNITS)));
    }
    pairs.extend(o.max_attempts.map(|n| ("max", n.to_string())));
    pairs.extend(o.queue_name.clone().map(|q| ("queue", q)));
    pairs.extend(o.job_key.clone().map(|k| ("jobKey", k)));
    pairs.extend(o.job_key_mode.map(|m| ("jobKeyMode", m.as_str().to_owned())));
    pairs.extend(o.priority.map(|n| ("priority", n.to_string())));
    pairs.extend(o.time_zone.map(|tz| ("tz", tz.name().to_owned())));
    pairs
}

/// An option's value as its canonical line shows it: escaped, except the `/` of a zone name
/// (`tz=America/New_York`), which the query string carries as it is.
pub(super) fn escape_option(key: &str, value: &str) -> String {
    let escaped = escape_query(value);
    if key == "tz" {
        escaped.replace("%2F", "/")
    } else {
        escaped
    }
}

/// Percent-encodes all but `A-Z a-z 0-9 - _ . ~ :` so the value survives `&`, `=`, `+`,
/// `%`, whitespace and non-ASCII text.
pub(super) fn escape_query(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~:".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Node's `querystring` decoding: `+` is a space, `%XX` a byte (left as is when not hex),
/// and the bytes are read as UTF-8 with replacement characters.
pub(super) fn unescape_query(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let hex = |i: usize| bytes.get(i).and_then(|&b| char::from(b).to_digit(16));
    while let Some(&b) = bytes.get(i) {
        match (b, hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.extend(u8::try_from(high * 16 + low).ok());
                i += 3;
            }
            (b'+', ..) => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `'text'` with control and other invisible characters escaped.
pub(super) fn quote(text: &str) -> String {
    format!("'{}'", text.escape_debug())
}
