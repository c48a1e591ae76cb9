//! Crontab text to items (the rules of each value, shared with the builder, are in `rules`).
//!
//! The grammar is graphile-worker's (its regular expressions, restated): a trimmed line is
//! five whitespace-separated fields of `[0-9*/,-]`, then `task`, then optionally `?opts`
//! (a query string without whitespace) and optionally a `{...}` JSON5 payload. Every check
//! reports the byte offset where it failed so that errors carry a line and column.

use super::interval::{period_phrase, EVERY, INTERVAL_ZONE};
use super::json5::{self, is_js_space};
use super::rules::{
    check_id, check_job_key, check_max_attempts, check_priority, check_queue, digits_u64, integer,
    invalid_option, is_digits, is_task_start, job_key_mode, quote, time_phrase, unescape_query, OPTION_KEYS,
};
use super::zone::{check_zone, Tz};
use super::{CronItem, CronOptions, Crontab, CrontabError, FieldSet, Unit};
use crate::job::MAX_IDENTIFIER_LEN;
use serde_json::Map;
use std::collections::BTreeMap;

/// A check that failed: where (byte offset into the text checked) and why.
#[derive(Debug)]
pub(super) struct Problem {
    pub(super) at: usize,
    pub(super) message: String,
}

impl Problem {
    fn new(at: usize, message: impl Into<String>) -> Self {
        Problem { at, message: message.into() }
    }

    /// The same problem in a larger text where the checked part starts at `offset`.
    fn shift(self, offset: usize) -> Self {
        Problem { at: self.at + offset, ..self }
    }
}

type Check<T> = Result<T, Problem>;

/// The whole crontab: items in order, identifiers unique. A `CRON_TZ=<zone>` line sets the
/// zone of the items after it that name none (the convention of cronie's crontabs).
pub(super) fn crontab(text: &str) -> Result<Crontab, CrontabError> {
    let mut first_line = BTreeMap::new();
    let mut items = Vec::new();
    let mut zone = None;
    for (index, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let number = index + 1;
        let at = |p: Problem| CrontabError { line: number, column: column(line, p.at), message: p.message };
        if let Some(z) = zone_line(line).map_err(at)? {
            zone = Some(z);
            continue;
        }
        let Some((item, identifier_at)) = item_line(line).map_err(at)? else { continue };
        let item = item.in_zone_by_default(zone);
        if let Some(first) = first_line.insert(item.identifier.clone(), number) {
            return Err(at(Problem::new(identifier_at, duplicate_message(&item.identifier, first))));
        }
        items.push(item);
    }
    Ok(Crontab { items })
}

/// The text that starts a crontab line setting the zone of the items after it.
pub(super) const ZONE_LINE: &str = "CRON_TZ=";

/// The zone of a `CRON_TZ=<zone>` line; `None` for any other line.
fn zone_line(line: &str) -> Check<Option<Tz>> {
    let start = skip_space(line, 0);
    let Some(name) = line[start..].strip_prefix(ZONE_LINE) else { return Ok(None) };
    let at = start + ZONE_LINE.len();
    check_zone(name.trim_end_matches(is_js_space))
        .map(Some)
        .map_err(|expected| Problem::new(at, format!("invalid {ZONE_LINE} line: {expected}")))
}

/// The message for an identifier used twice.
pub(super) fn duplicate_message(identifier: &str, first: usize) -> String {
    format!(
        "duplicate identifier {} (already used on line {first}): give each item its own with '?id=...'",
        quote(identifier)
    )
}

/// 1-based column, in characters, of byte offset `at` in `line`.
fn column(line: &str, at: usize) -> usize {
    line.get(..at).map_or(line.chars().count(), |before| before.chars().count()) + 1
}

/// The end of the run of non-whitespace starting at `from`.
fn token_end(text: &str, from: usize) -> usize {
    text[from..].find(is_js_space).map_or(text.len(), |n| from + n)
}

/// The first non-whitespace offset at or after `from`.
fn skip_space(text: &str, from: usize) -> usize {
    text[from..].find(|c| !is_js_space(c)).map_or(text.len(), |n| from + n)
}

/// One line: `None` for blank and comment lines, else the item and the offset of the text
/// its identifier came from (for the duplicate error).
fn item_line(line: &str) -> Check<Option<(CronItem, usize)>> {
    let text = line.trim_end_matches(is_js_space);
    let start = skip_space(text, 0);
    if start == text.len() || text[start..].starts_with('#') {
        return Ok(None);
    }
    let (fields, interval, mut pos) = match every(text, start)? {
        Some((period, pos)) => (Unit::ALL.map(Unit::all), Some(period), pos),
        None => {
            let (fields, pos) = fields(text, start)?;
            (fields, None, pos)
        }
    };
    if pos == text.len() {
        let after = if interval.is_some() { "the period" } else { "the five time fields" };
        return Err(Problem::new(pos, format!("expected a task identifier after {after}")));
    }
    if let Some(at) = text[pos..].find(['\r', '\u{2028}', '\u{2029}']) {
        return Err(Problem::new(pos + at, "a line break may not appear in the task, options or payload"));
    }
    let task_at = pos;
    let task = &text[pos..token_end(text, pos)];
    check_task(task).map_err(|p| p.shift(pos))?;
    pos = skip_space(text, pos + task.len());

    let mut opts = Opts::default();
    let opts_at = pos + 1;
    let mut expected = "expected '?options' or a JSON5 object payload starting with '{'";
    if text[pos..].starts_with('?') {
        let end = token_end(text, pos);
        if end == opts_at {
            return Err(Problem::new(pos, "expected options after '?', such as '?fill=1h'"));
        }
        opts = options(&text[opts_at..end]).map_err(|p| p.shift(opts_at))?;
        if let (Some(at), Some(_)) = (opts.tz_at, interval) {
            return Err(Problem::new(opts_at + at, INTERVAL_ZONE));
        }
        pos = skip_space(text, end);
        expected = "expected a JSON5 object payload starting with '{' after the options";
    }
    let mut payload = Map::new();
    if pos < text.len() {
        if !text[pos..].starts_with('{') {
            return Err(Problem::new(pos, expected));
        }
        payload = payload_text(&text[pos..]).map_err(|p| p.shift(pos))?;
    }
    let (identifier, identifier_at) = match opts.id {
        Some((id, at)) => (id, opts_at + at),
        None => (task.to_owned(), task_at),
    };
    let [minutes, hours, dates, months, dows] = fields;
    let item = CronItem {
        identifier,
        task: task.to_owned(),
        minutes,
        hours,
        dates,
        months,
        dows,
        options: opts.options,
        payload,
        interval,
    };
    Ok(Some((item, identifier_at)))
}

/// `@every <period>` at `start`: the period and the offset of what follows; `None` when
/// the line starts with time fields instead.
fn every(text: &str, start: usize) -> Check<Option<(std::time::Duration, usize)>> {
    let end = token_end(text, start);
    if &text[start..end] != EVERY {
        return Ok(None);
    }
    let at = skip_space(text, end);
    let phrase_end = token_end(text, at);
    let period = period_phrase(&text[at..phrase_end])
        .map_err(|expected| Problem::new(at, format!("invalid period after '{EVERY}': {expected}")))?;
    Ok(Some((period, skip_space(text, phrase_end))))
}

/// The five time fields from `start`; returns them and the offset of what follows.
fn fields(text: &str, start: usize) -> Check<([FieldSet; 5], usize)> {
    let mut sets = [FieldSet(0); 5];
    let mut pos = start;
    for (index, unit) in Unit::ALL.into_iter().enumerate() {
        if pos == text.len() {
            return Err(Problem::new(
                pos,
                format!(
                    "expected five time fields (minute hour day-of-month month day-of-week) then a \
                     task identifier, found {index} field{}",
                    if index == 1 { "" } else { "s" }
                ),
            ));
        }
        let end = token_end(text, pos);
        sets[index] = field(unit, &text[pos..end]).map_err(|p| p.shift(pos))?;
        pos = skip_space(text, end);
    }
    Ok((sets, pos))
}

/// A pattern of exactly five time fields, as the builder takes it.
pub(super) fn pattern(text: &str) -> Check<[FieldSet; 5]> {
    let text = text.trim_end_matches(is_js_space);
    let (sets, rest) = fields(text, skip_space(text, 0))?;
    if rest < text.len() {
        return Err(Problem::new(
            rest,
            format!("expected exactly five time fields, found more: {}", quote(&text[rest..])),
        ));
    }
    Ok(sets)
}

/// One time field: a comma list of `n`, `a-b`, `*` and `*/n`.
fn field(unit: Unit, token: &str) -> Check<FieldSet> {
    if let Some((at, c)) = token.char_indices().find(|&(_, c)| !"0123456789*/,-".contains(c)) {
        let message = if at == 0 && is_task_start(c) {
            format!(
                "found {} where the {} field was expected: a line needs five time fields \
                 (minute hour day-of-month month day-of-week) before the task",
                quote(token),
                unit.name()
            )
        } else {
            format!(
                "unexpected character {} in the {} field: expected numbers, '*', '/', ',' or '-' \
                 (names such as MON or JAN are not supported)",
                quote(&c.to_string()),
                unit.name()
            )
        };
        return Err(Problem::new(at, message));
    }
    let mut set = FieldSet(0);
    let mut at = 0;
    for element in token.split(',') {
        set.0 |= element_set(unit, element).map_err(|p| p.shift(at))?.0;
        at += element.len() + 1;
    }
    Ok(set)
}

/// One element of a field list.
fn element_set(unit: Unit, element: &str) -> Check<FieldSet> {
    let expected = || {
        format!(
            "invalid {} in the {} field: expected a number, a range 'a-b', '*' or '*/n'",
            quote(element),
            unit.name()
        )
    };
    if let Some(rest) = element.strip_prefix('*') {
        if rest.is_empty() {
            return Ok(unit.all());
        }
        let step =
            rest.strip_prefix('/').filter(|s| is_digits(s)).ok_or_else(|| Problem::new(0, expected()))?;
        return match digits_value(step) {
            0 => Err(Problem::new(
                2,
                format!("step 0 in the {} field: expected '*/n' with n greater than zero", unit.name()),
            )),
            n => Ok(unit.stepped(n)),
        };
    }
    if element.contains('/') {
        return Err(Problem::new(
            0,
            format!(
                "invalid {} in the {} field: a step '/n' may only follow '*' (ranges with steps \
                 such as 'a-b/n' are not supported)",
                quote(element),
                unit.name()
            ),
        ));
    }
    let parts: Vec<&str> = element.split('-').collect();
    if !parts.iter().all(|p| is_digits(p)) {
        return Err(Problem::new(0, expected()));
    }
    match parts[..] {
        [number] => Ok(FieldSet(0).with(store(unit, bounded(unit, number, 0)?))),
        [from, to] => {
            let (a, b) = (bounded(unit, from, 0)?, bounded(unit, to, from.len() + 1)?);
            if b <= a {
                return Err(Problem::new(
                    0,
                    format!("range {} in the {} field must end after it starts", quote(element), unit.name()),
                ));
            }
            Ok((a..=b).fold(FieldSet(0), |set, v| set.with(store(unit, v))))
        }
        _ => Err(Problem::new(0, expected())),
    }
}

/// A number of a field, checked against the field's bounds (7 is accepted as Sunday).
fn bounded(unit: Unit, digits: &str, at: usize) -> Check<u32> {
    let value = digits_value(digits);
    let (min, max) = unit.bounds();
    if (min..=max).contains(&value) {
        return Ok(value);
    }
    let range = match unit {
        Unit::Dow => "0-6 (Sunday to Saturday; 7 is also Sunday)".to_owned(),
        Unit::Minute | Unit::Hour | Unit::Date | Unit::Month => format!("{min}-{max}"),
    };
    let size = if value < min { "too small" } else { "too large" };
    Err(Problem::new(at, format!("value {digits} is {size} for the {} field: expected {range}", unit.name())))
}

/// The value kept in the set: day-of-week 7 is Sunday, 0.
fn store(unit: Unit, value: u32) -> u32 {
    if unit == Unit::Dow && value == 7 {
        0
    } else {
        value
    }
}

/// ASCII digits to a number, saturating (a huge value is out of range anyway).
fn digits_value(s: &str) -> u32 {
    digits_u64(s).and_then(|n| u32::try_from(n).ok()).unwrap_or(u32::MAX)
}

/// A task identifier: graphile-worker's `^[_a-zA-Z][_a-zA-Z0-9:/_-]*$` (`/` for nested task
/// folders), at most 128 characters as the schema requires.
pub(super) fn check_task(task: &str) -> Check<()> {
    let mut chars = task.char_indices();
    if !chars.next().is_some_and(|(_, c)| is_task_start(c)) {
        return Err(Problem::new(
            0,
            format!("invalid task identifier {}: expected a letter or '_' first", quote(task)),
        ));
    }
    if let Some((at, c)) = chars.find(|&(_, c)| !(c.is_ascii_alphanumeric() || "_:/-".contains(c))) {
        return Err(Problem::new(
            at,
            format!(
                "unexpected character {} in task identifier: expected letters, digits, '_', '-', ':' \
                 or '/', and a space before '?options' or the payload",
                quote(&c.to_string())
            ),
        ));
    }
    if task.len() > MAX_IDENTIFIER_LEN {
        return Err(Problem::new(
            0,
            format!(
                "task identifier is {} characters long: expected at most {MAX_IDENTIFIER_LEN}",
                task.len()
            ),
        ));
    }
    Ok(())
}

/// What `?opts` set.
#[derive(Default)]
struct Opts {
    /// The `id` and its offset in the options text.
    id: Option<(String, usize)>,
    /// The offset of the `tz` option in the options text.
    tz_at: Option<usize>,
    options: CronOptions,
}

/// The query string after `?`: `&`-separated `key=value` pairs, percent-decoded as Node's
/// `querystring` does, each known key at most once.
fn options(text: &str) -> Check<Opts> {
    let mut opts = Opts::default();
    let mut seen = Vec::new();
    let mut at = 0;
    for pair in text.split('&') {
        let here = at;
        at += pair.len() + 1;
        if pair.is_empty() {
            continue;
        }
        let (raw_key, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        let value_at = here + pair.len().min(raw_key.len() + 1);
        let (key, value) = (unescape_query(raw_key), unescape_query(raw_value));
        if !OPTION_KEYS.contains(&key.as_str()) {
            return Err(Problem::new(
                here,
                format!("unknown option {}: expected one of {}", quote(&key), OPTION_KEYS.join(", ")),
            ));
        }
        if seen.contains(&key) {
            return Err(Problem::new(here, format!("option {} is given more than once", quote(&key))));
        }
        let invalid = |expected: String| Problem::new(value_at, invalid_option(&key, &value, &expected));
        let o = &mut opts.options;
        match key.as_str() {
            "id" => opts.id = Some((check_id(&value).map_err(invalid)?, value_at)),
            "fill" => o.backfill_period = time_phrase(&value).map_err(invalid)?,
            "max" => o.max_attempts = Some(check_max_attempts(integer(&value)).map_err(invalid)?),
            "queue" => o.queue_name = Some(check_queue(&value).map_err(invalid)?),
            "jobKey" => o.job_key = Some(check_job_key(&value).map_err(invalid)?),
            "jobKeyMode" => o.job_key_mode = Some(job_key_mode(&value).map_err(invalid)?),
            "tz" => {
                o.time_zone = Some(check_zone(&value).map_err(invalid)?);
                opts.tz_at = Some(here);
            }
            _ => o.priority = Some(check_priority(integer(&value)).map_err(invalid)?),
        }
        seen.push(key);
    }
    Ok(opts)
}

/// The payload text (starting with `{`, without line breaks): ending in `}`, a JSON5 object.
fn payload_text(text: &str) -> Check<Map<String, serde_json::Value>> {
    if !text.ends_with('}') {
        let last = text.char_indices().last().map_or(0, |(at, _)| at);
        return Err(Problem::new(last, "expected the payload to end with '}'"));
    }
    json5::parse_object(text)
        .map_err(|(at, message)| Problem::new(at, format!("invalid JSON5 payload: {message}")))
}
