//! Printing results: aligned tables for people, JSON for scripts (`--json`).

use formica_tokio::tokio_postgres::Row;
use formica_tokio::Job;
use serde_json::{json, Value};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Aligned columns.
    Human,
    /// One JSON document.
    Json,
}

/// Print `rows` under `headers`, or `json` in JSON mode.
pub fn print_table(out: Output, headers: &[&str], rows: Vec<Vec<String>>, json: Value) {
    match out {
        Output::Json => println!("{json}"),
        Output::Human => print!("{}", table(headers, &rows)),
    }
}

/// `headers` and `rows` as aligned text columns.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_owned() + "\n"
    };
    let mut text = line(headers.to_vec());
    for row in rows {
        text += &line(row.iter().map(String::as_str).collect());
    }
    text
}

fn short(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or_default();
    if first.chars().count() > max || first.len() < text.len() {
        first.chars().take(max).collect::<String>() + "…"
    } else {
        first.to_owned()
    }
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
                j.run_at.to_rfc3339_opts(formica_tokio::chrono::SecondsFormat::Secs, true),
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
pub fn print_job(out: Output, detail: &formica_ui::data::JobDetail) {
    if out == Output::Json {
        println!("{}", json!(detail));
        return;
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
    ];
    for (name, value) in fields {
        println!("{name:<11} {value}");
    }
    println!("payload:\n{}", serde_json::to_string_pretty(&j.payload).unwrap_or_default());
    println!("last_error:\n{}", j.last_error.as_deref().unwrap_or("(none)"));
}

/// Print `formica status`.
pub fn print_status(out: Output, counts: &[Row], workers: &[Row], version: Option<i32>) {
    const KINDS: [&str; 5] = ["ready", "scheduled", "running", "failed", "permanently_failed"];
    let count_rows: Vec<(String, Option<String>, Vec<i64>)> = counts
        .iter()
        .map(|r| {
            (
                r.get("task_identifier"),
                r.get("queue_name"),
                KINDS.iter().map(|k| r.get::<_, i64>(*k)).collect(),
            )
        })
        .collect();
    let worker_rows: Vec<(String, i64, i64)> =
        workers.iter().map(|r| (r.get("locked_by"), r.get("jobs"), r.get("queues"))).collect();
    match out {
        Output::Json => {
            let tasks: Vec<Value> = count_rows
                .iter()
                .map(|(task, queue, n)| {
                    let mut v = json!({ "task": task, "queue": queue });
                    for (k, n) in KINDS.iter().zip(n) {
                        v[*k] = json!(n);
                    }
                    v
                })
                .collect();
            let workers: Vec<Value> = worker_rows
                .iter()
                .map(|(id, j, q)| json!({ "worker": id, "jobs": j, "queues": q }))
                .collect();
            println!("{}", json!({ "schema_version": version, "tasks": tasks, "workers": workers }));
        }
        Output::Human => {
            println!("schema version: {}", version.map_or("not installed".into(), |v| v.to_string()));
            let mut headers = vec!["task", "queue"];
            headers.extend(KINDS);
            let rows: Vec<Vec<String>> = count_rows
                .iter()
                .map(|(t, q, n)| {
                    [t.clone(), q.clone().unwrap_or_default()]
                        .into_iter()
                        .chain(n.iter().map(i64::to_string))
                        .collect()
                })
                .collect();
            print!("{}", table(&headers, &rows));
            let rows: Vec<Vec<String>> =
                worker_rows.iter().map(|(id, j, q)| vec![id.clone(), j.to_string(), q.to_string()]).collect();
            println!();
            print!("{}", table(&["worker", "locked jobs", "locked queues"], &rows));
        }
    }
}
