//! Printing results: aligned tables for people, JSON for scripts (`--json`). Text from the
//! database (payloads, errors, keys...) may hold control characters a terminal would obey
//! (ESC starts a command): every human-readable line goes through [`visible`] (or
//! [`visible_lines`]), and JSON through [`json_text`].

use formica_tokio::inspect::{self, Counts, JobDetail, Overview, Undecodable, WorkerSeen};
use formica_tokio::rows::Decoded;
use formica_tokio::sql::JOB_STATES;
use formica_tokio::Job;
use serde_json::{json, Value};
use std::fmt::Write;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Aligned columns.
    Human,
    /// One JSON document.
    Json,
}

/// `text` safe to print to a terminal, on one line: each control character (C0, DEL, C1)
/// shown escaped, as `\u{1b}`, `\n` or `\t`.
pub fn visible(text: &str) -> String {
    escaped(text, false)
}

/// [`visible`], but line breaks are kept: for a value printed on lines of its own (a
/// payload, an error's full text).
pub fn visible_lines(text: &str) -> String {
    escaped(text, true)
}

fn escaped(text: &str, keep_line_breaks: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && !(keep_line_breaks && c == '\n') {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// serde_json's `json` text (compact or pretty) with no control character left raw: serde
/// escapes C0 inside strings, not DEL and C1, which only strings can hold; they become
/// `\u007f`, `\u009b`... Line breaks, outside strings, stay.
pub fn json_text(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_control() && c != '\n' {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Print `json` for scripts.
pub fn print_json(json: &Value) {
    println!("{}", json_text(&json.to_string()));
}

/// Print `rows` under `headers`, or `json` in JSON mode.
pub fn print_table(out: Output, headers: &[&str], rows: Vec<Vec<String>>, json: Value) {
    match out {
        Output::Json => print_json(&json),
        Output::Human => print!("{}", table(headers, &rows)),
    }
}

/// `headers` and `rows` as aligned text columns, each cell on one line (escaped).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> =
        rows.iter().map(|row| row.iter().map(|cell| visible(cell)).collect()).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_owned() + "\n"
    };
    let mut text = line(headers.to_vec());
    for row in &rows {
        text += &line(row.iter().map(String::as_str).collect());
    }
    text
}

/// Print the rows of a listing that could not be read, after the rest (in JSON mode they
/// are in the listing itself).
fn print_undecodable(out: Output, rows: &[Undecodable]) {
    if out == Output::Human && !rows.is_empty() {
        println!("\ncould not be read (the rest is above):");
        for row in rows {
            println!("{}", visible(&inspect::describe(row)));
        }
    }
}

/// Print a listing: its jobs, then the rows that could not be read (in JSON, one array:
/// the jobs, then `{"id": .., "undecodable": ".."}` for each such row).
pub fn print_listing(out: Output, listing: &Decoded) {
    if out == Output::Json {
        let mut all: Vec<Value> = listing.jobs.iter().map(|job| json!(job)).collect();
        all.extend(listing.undecodable.iter().map(inspect::undecodable_json));
        return print_json(&Value::Array(all));
    }
    print_jobs(out, &listing.jobs);
    print_undecodable(out, &listing.undecodable);
}

/// The first line of `text`, at most `max` characters, with `…` if anything was left out.
pub fn short(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or_default();
    if first.chars().count() > max || first.len() < text.len() {
        first.chars().take(max).collect::<String>() + "…"
    } else {
        first.to_owned()
    }
}

fn seconds(at: &formica_tokio::chrono::DateTime<formica_tokio::chrono::Utc>) -> String {
    at.to_rfc3339_opts(formica_tokio::chrono::SecondsFormat::Secs, true)
}

/// Print jobs.
pub fn print_jobs(out: Output, jobs: &[Job]) {
    let rows = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.to_string(),
                j.task_identifier.clone(),
                j.queue_name.clone().unwrap_or_default(),
                j.priority.to_string(),
                seconds(&j.run_at),
                format!("{}/{}", j.attempts, j.max_attempts),
                j.key.clone().unwrap_or_default(),
                j.locked_by.clone().unwrap_or_default(),
                j.last_error.as_deref().map(|e| short(e, 60)).unwrap_or_default(),
            ]
        })
        .collect();
    let headers = ["id", "task", "queue", "priority", "run_at", "attempts", "key", "locked_by", "last_error"];
    print_table(out, &headers, rows, json!(jobs));
}

/// Print one job whole: every field, the payload as pretty JSON, the full last error.
pub fn print_job(out: Output, detail: &JobDetail) {
    if out == Output::Json {
        return print_json(&json!(detail));
    }
    let j = &detail.row.job;
    let time = |t: &formica_tokio::chrono::DateTime<formica_tokio::chrono::Utc>| {
        t.to_rfc3339_opts(formica_tokio::chrono::SecondsFormat::Millis, true)
    };
    let none = || "(none)".to_owned();
    let flags: Vec<&str> = j.flags.iter().map(String::as_str).collect();
    let lock = match (&j.locked_by, &j.locked_at) {
        (Some(by), Some(at)) => format!("{by} since {}", time(at)),
        _ => none(),
    };
    let queue = match (&j.queue_name, &detail.queue_locked_by, &detail.queue_locked_at) {
        (Some(q), Some(by), Some(at)) => format!("{q} (held by {by} since {})", time(at)),
        (Some(q), _, _) => q.clone(),
        _ => none(),
    };
    let fields = [
        ("id", j.id.to_string()),
        ("task", j.task_identifier.clone()),
        ("state", detail.row.state.clone()),
        ("queue", queue),
        ("run_at", time(&j.run_at)),
        ("attempts", format!("{}/{}", j.attempts, j.max_attempts)),
        ("priority", j.priority.to_string()),
        ("key", j.key.clone().unwrap_or_else(none)),
        ("flags", if flags.is_empty() { none() } else { flags.join(", ") }),
        ("locked", lock),
        ("created_at", time(&j.created_at)),
        ("updated_at", time(&j.updated_at)),
        ("revision", j.revision.to_string()),
        (
            "progress",
            detail
                .progress
                .as_ref()
                .map_or_else(none, |p| format!("{} at {}", p.progress, time(&p.updated_at))),
        ),
    ];
    for (name, value) in fields {
        println!("{name:<11} {}", visible(&value));
    }
    println!("payload:\n{}", visible_lines(&formica_tokio::payload_as_shown(&j.payload)));
    println!("last_error:\n{}", visible_lines(j.last_error.as_deref().unwrap_or("(none)")));
}

/// A job's log lines after the job (as text only: `--json` prints the job alone), if it has
/// any.
pub fn print_logs(out: Output, lines: &[formica_tokio::JobLogLine]) {
    if out == Output::Json || lines.is_empty() {
        return;
    }
    let text: Vec<String> = lines.iter().map(ToString::to_string).collect();
    println!("logs:\n{}", visible_lines(&text.join("\n")));
}

/// A worker's line of `status`: who and where it is, its lease, and what it holds.
fn worker_row(w: &WorkerSeen) -> Vec<String> {
    let lease = w.lease.as_ref();
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let state = lease.map_or("no lease".into(), |l| l.state(seconds));
    vec![
        w.worker_id.clone(),
        or_dash(lease.and_then(|l| l.host.clone())),
        or_dash(lease.and_then(|l| l.pid).map(|p| p.to_string())),
        or_dash(lease.map(|l| seconds(&l.started_at))),
        or_dash(lease.map(|l| seconds(&l.heartbeat_at))),
        state,
        w.jobs.to_string(),
        w.queues.to_string(),
        or_dash(lease.and_then(|l| l.version.clone())),
    ]
}

/// Print `formica status`: counts per task, queue and state, the workers holding locks, and
/// the schema version.
pub fn print_status(out: Output, overview: &Overview, workers: &[WorkerSeen], version: Option<i32>) {
    // Every state, in JOB_STATES' order (the read model gives each count, zeros included).
    let by_state = |c: &Counts| -> Vec<i64> {
        JOB_STATES.iter().map(|state| c.states.get(*state).copied().unwrap_or(0)).collect()
    };
    match out {
        Output::Json => {
            let tasks: Vec<Value> = overview
                .counts
                .iter()
                .map(|c| {
                    let mut v = json!({ "task": c.task, "queue": c.queue });
                    for (state, n) in JOB_STATES.iter().zip(by_state(c)) {
                        v[*state] = json!(n);
                    }
                    v
                })
                .collect();
            let workers: Vec<Value> = workers
                .iter()
                .map(|w| {
                    json!({ "worker": w.worker_id, "jobs": w.jobs, "queues": w.queues, "alive_until": w.alive_until, "lease": w.lease })
                })
                .collect();
            let all = json!({ "schema_version": version, "tasks": tasks, "workers": workers, "unreadable": overview.unreadable });
            print_json(&all);
        }
        Output::Human => {
            println!("schema version: {}", version.map_or("not installed".into(), |v| v.to_string()));
            let mut headers = vec!["task", "queue"];
            headers.extend(JOB_STATES);
            let rows: Vec<Vec<String>> = overview
                .counts
                .iter()
                .map(|c| {
                    [c.task.clone(), c.queue.clone().unwrap_or_default()]
                        .into_iter()
                        .chain(by_state(c).iter().map(i64::to_string))
                        .collect()
                })
                .collect();
            print!("{}", table(&headers, &rows));
            for item in &overview.unreadable {
                println!("could not be read: {}", visible(item));
            }
            let rows: Vec<Vec<String>> = workers.iter().map(worker_row).collect();
            println!();
            let headers: Vec<&str> = inspect::WORKER_COLUMNS.into_iter().chain(["version"]).collect();
            print!("{}", table(&headers, &rows));
        }
    }
}
