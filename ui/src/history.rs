//! The history page: jobs that ended, filtered as on the jobs page, with charts of the last
//! hour and day drawn as inline SVG; a finished job's runs; and the overview's counts of the
//! last hour, from the history (so they survive the dashboard's restarts).

use crate::html::{
    error_cell, error_page, esc, filter_form, labelled_select, opt_time, page, table, text_field, time, url,
};
use crate::State;
use axum::extract::{Path, Query, State as Ext};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use formica::JobOutcome;
use formica::{HistoryBucket, HistoryFilter};
use serde::Deserialize;
use std::fmt::Write;
use std::time::Duration;

pub(crate) fn routes() -> Router<State> {
    Router::new().route("/history", get(history)).route("/history/{id}", get(runs))
}

/// The page's filters, as the query string gives them (empty fields are any).
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct HistoryQuery {
    task: Option<String>,
    queue: Option<String>,
    outcome: Option<String>,
    error: Option<String>,
}

impl HistoryQuery {
    fn filter(&self) -> HistoryFilter {
        let given = |v: &Option<String>| v.as_ref().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        HistoryFilter {
            task: given(&self.task),
            queue: given(&self.queue),
            outcome: given(&self.outcome),
            error: given(&self.error),
            job_id: None,
        }
    }
}

const ROWS: u32 = 100;
const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(86_400);

async fn history(Ext(s): Ext<State>, Query(query): Query<HistoryQuery>) -> Response {
    let filter = query.filter();
    let (rows, hour, day) = match tokio::try_join!(
        s.reads.history(&filter, ROWS),
        s.reads.history_buckets(HOUR, MINUTE),
        s.reads.history_buckets(DAY, HOUR),
    ) {
        Ok(read) => read,
        Err(e) => return error_page(&s, e),
    };
    let outcomes =
        [("", "any"), ("completed", "completed"), ("failed", "failed"), ("cancelled", "cancelled")];
    let mut html = filter_form(
        "/history",
        &[
            text_field("task", &filter.task, "any"),
            text_field("queue", &filter.queue, "any"),
            labelled_select("outcome", filter.outcome.as_deref(), &outcomes),
            text_field("error", &filter.error, "text in last_error"),
        ],
    );
    html.push_str(r#"<div class="charts">"#);
    html.push_str(&chart("chart-hour", "Last hour, by minute", &hour, MINUTE, 60));
    html.push_str(&chart("chart-day", "Last day, by hour", &day, HOUR, 24));
    html.push_str("</div>");
    let _ = write!(html, "<h2>The newest {ROWS} jobs that match</h2>");
    html.push_str(&table(&HEADERS, &rows.iter().map(row).collect::<Vec<_>>()));
    page(&s, "History", &html)
}

const HEADERS: [&str; 8] =
    ["id", "task", "queue", "outcome", "attempts", "waited", "finished_at", "last_error"];

fn row(o: &JobOutcome) -> Vec<String> {
    let waited =
        o.started_at.map(|s| format!("{:.1} s", (s - o.added_at).num_milliseconds() as f64 / 1000.0));
    vec![
        format!(r#"<a href="/history/{0}">{0}</a>"#, o.job_id),
        esc(&o.task_identifier),
        esc(o.queue_name.as_deref().unwrap_or("")),
        format!(r#"<span class="outcome {0}">{0}</span>"#, o.outcome.as_str()),
        format!("{} of {}", o.attempts, o.max_attempts),
        waited.unwrap_or_default(),
        time(&o.finished_at),
        error_cell(o.last_error.as_deref()),
    ]
}

/// A finished job's runs (the job page sends a job no longer in the queue here).
async fn runs(Ext(s): Ext<State>, Path(id): Path<i64>) -> Response {
    page_of_runs(&s, id).await
}

pub(crate) async fn page_of_runs(s: &State, id: i64) -> Response {
    let filter = HistoryFilter { job_id: Some(id), ..Default::default() };
    let runs = match s.reads.history(&filter, ROWS).await {
        Ok(runs) => runs,
        Err(e) => return error_page(s, e),
    };
    let Some(last) = runs.first() else {
        let text = format!("no job {id} in the queue nor in the history: it was removed, pruned, ended without history, or never existed");
        return error_page(s, crate::Error::NotFound(text));
    };
    let mut html = format!(
        r#"<p>Job {id} is no longer in the queue. Its finished runs, newest first (<a href="/history?task={}">more of task {}</a>):</p>"#,
        url(&last.task_identifier),
        esc(&last.task_identifier)
    );
    for run in &runs {
        let output = run.output.as_ref().map(|o| serde_json::to_string_pretty(o).unwrap_or_default());
        let payload = formica::payload_as_shown(&run.payload);
        let facts = [
            (
                "outcome",
                format!(r#"<span class="outcome {0}" id="outcome">{0}</span>"#, run.outcome.as_str()),
            ),
            ("task", esc(&run.task_identifier)),
            ("queue", esc(run.queue_name.as_deref().unwrap_or("(none)"))),
            ("key", esc(run.key.as_deref().unwrap_or("(none)"))),
            ("attempts", format!("{} of {}", run.attempts, run.max_attempts)),
            ("added_at", time(&run.added_at)),
            ("started_at", opt_time(&run.started_at)),
            ("finished_at", time(&run.finished_at)),
            ("worker", esc(run.worker_id.as_deref().unwrap_or(""))),
            ("last_error", esc(run.last_error.as_deref().unwrap_or("(none)"))),
        ];
        html.push_str("<dl>");
        for (name, value) in facts {
            let _ = write!(html, "<dt>{name}</dt><dd>{value}</dd>");
        }
        let _ = write!(html, "</dl><h2>Payload</h2><pre>{}</pre>", esc(&payload));
        if let Some(output) = output {
            let _ = write!(html, r#"<h2>Output</h2><pre id="output">{}</pre>"#, esc(&output));
        }
    }
    html.push_str(&logs(s, id).await);
    page(s, &format!("Job {id}"), &html)
}

/// Job `id`'s log lines, if it has any (docs/guide/job-logs.md), or why they cannot be read:
/// on its page in the queue and in the history alike.
pub(crate) async fn logs(s: &State, id: i64) -> String {
    match s.utils.job_logs(id).await {
        Ok(lines) if lines.is_empty() => String::new(),
        Ok(lines) => {
            let text: Vec<String> = lines.iter().map(ToString::to_string).collect();
            format!(r#"<h2>Logs</h2><pre id="logs">{}</pre>"#, esc(&text.join("\n")))
        }
        Err(e) => format!(r#"<h2>Logs</h2><p class="error" id="logs">{}</p>"#, esc(&e.to_string())),
    }
}

/// An SVG bar chart of `buckets` (`count` of `width` each, ending now): jobs completed,
/// failed and cancelled stacked, and the mean wait as a line, each to its own scale: the
/// jobs on the left axis, the wait on the right, the time (before now) along the bottom,
/// and each bar's total above it where there is room (else the tallest bar's).
fn chart(id: &str, title: &str, buckets: &[HistoryBucket], width: Duration, count: i64) -> String {
    const W: f64 = 640.0;
    const H: f64 = 178.0;
    // The plot's margins: labels left, right and below, room for a value above a bar.
    const L: f64 = 40.0;
    const R: f64 = 48.0;
    const T: f64 = 24.0;
    const B: f64 = 30.0;
    let (pw, ph) = (W - L - R, H - T - B);
    let step = width.as_secs().max(1) as i64;
    let now = chrono::Utc::now().timestamp();
    let first = (now / step - (count - 1)) * step;
    let slot = pw / count as f64;
    let total = |b: &HistoryBucket| b.completed + b.failed + b.cancelled;
    let top = buckets.iter().map(total).max().unwrap_or(0).max(1);
    let longest = buckets.iter().filter_map(|b| b.wait_seconds).fold(0.0, f64::max).max(0.001);
    let (mut bars, mut values, mut wait) = (String::new(), String::new(), Vec::new());
    let (mut done, mut failed) = (0, 0);
    for b in buckets {
        let i = (b.start.timestamp() - first) / step;
        if !(0..count).contains(&i) {
            continue;
        }
        done += b.completed;
        failed += b.failed + b.cancelled;
        let x = L + i as f64 * slot;
        let mut y = T + ph;
        for (n, class) in [(b.completed, "completed"), (b.failed, "failed"), (b.cancelled, "cancelled")] {
            let h = n as f64 / top as f64 * ph;
            y -= h;
            if n > 0 {
                let _ = write!(
                    bars,
                    r#"<rect class="{class}" x="{x:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}"><title>{n} {class}</title></rect>"#,
                    (slot - 1.0).max(1.0)
                );
            }
        }
        let n = total(b);
        if n > 0 && (slot >= 16.0 || n == top) {
            let _ = write!(
                values,
                r#"<text class="value" x="{:.1}" y="{:.1}">{n}</text>"#,
                x + slot / 2.0,
                y - 3.0
            );
        }
        if let Some(s) = b.wait_seconds {
            wait.push(format!("{:.1},{:.1}", x + slot / 2.0, T + ph - s / longest * ph));
        }
    }
    let (bottom, right) = (T + ph, L + pw);
    let mut axes = format!(
        r#"<path class="axis" d="M{L},{T} V{bottom} H{right} V{T}"/><text class="axis-title" x="2" y="10">jobs</text><text class="axis-title end" x="{W}" y="10">mean wait</text><text class="axis-title" x="{:.1}" y="{}">time before now</text>"#,
        L + pw / 2.0 - 40.0,
        H - 2.0
    );
    for n in [0, top / 2, top].into_iter().collect::<std::collections::BTreeSet<_>>() {
        let y = bottom - n as f64 / top as f64 * ph;
        let _ = write!(axes, r#"<text class="tick end" x="{}" y="{:.1}">{n}</text>"#, L - 4.0, y + 3.0);
    }
    for (w, y) in [(0.0, bottom), (longest, T)] {
        let _ = write!(axes, r#"<text class="tick" x="{}" y="{:.1}">{w:.1} s</text>"#, right + 4.0, y + 3.0);
    }
    for i in (0..=4).map(|q| q * count / 4) {
        let ago = (count - i) * step;
        let label = if ago == 0 { "now".to_owned() } else { format!("-{}", age_label(ago)) };
        let _ = write!(
            axes,
            r#"<text class="tick middle" x="{:.1}" y="{}">{label}</text>"#,
            L + i as f64 * slot,
            bottom + 12.0
        );
    }
    format!(
        r#"<figure class="chart" id="{id}"><figcaption>{title}: <b class="completed-count">{done}</b> completed, <b class="failed-count">{failed}</b> failed or cancelled; line: mean wait from add to start (max {longest:.1} s)</figcaption>
<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{title}">{axes}{bars}{values}<polyline class="wait" points="{}"/></svg></figure>"#,
        wait.join(" ")
    )
}

/// A span of `seconds` on a chart's time axis: `15 min`, `6 h`.
fn age_label(seconds: i64) -> String {
    crate::html::age(seconds).replace(' ', "\u{a0}")
}

/// The overview's line of the last hour from the history, or nothing if it has none.
pub(crate) async fn last_hour(s: &State) -> String {
    match s.reads.history_buckets(HOUR, HOUR).await {
        Ok(buckets) if !buckets.is_empty() => {
            let sum = |f: fn(&HistoryBucket) -> i64| buckets.iter().map(f).sum::<i64>();
            format!(
                r#"<p class="facts" id="history-hour">From the <a href="/history">history</a>, last hour: <b>{}</b> completed, <b>{}</b> failed, <b>{}</b> cancelled.</p>"#,
                sum(|b| b.completed),
                sum(|b| b.failed),
                sum(|b| b.cancelled)
            )
        }
        _ => String::new(),
    }
}
