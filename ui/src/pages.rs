//! The HTML pages, rendered on the server from the same data as the API (built of
//! `html`'s pieces: every value from the database or the request goes through `html::esc` on
//! its way into the HTML); the pages' script (`assets/app.js`) asks for confirmation and
//! calls the API's actions, and refreshes a page's `<main>` in place when asked to.

use crate::data::{self, JobQuery};
use crate::held::Holds;
use crate::html::esc;
use crate::html::{
    age, button, error_cell, error_page, filter_form, labelled_select, opt_time, page, stamp, table,
    text_field, time, unreadable, url,
};
use crate::State;
use axum::extract::{Path, Query, State as Ext};
use axum::http::header;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use chrono::Utc;
use formica::inspect::{self, CrontabSource, JobRow};
use formica::sql::JOB_STATES;
use std::fmt::Write;

const STYLE: &str = include_str!("../assets/style.css");
const SCRIPT: &str = include_str!("../assets/app.js");

pub(crate) fn routes() -> Router<State> {
    Router::new()
        .route("/", get(overview))
        .route("/jobs", get(jobs))
        .route("/jobs/{id}", get(job))
        .route("/queues", get(queues))
        .route("/workers", get(crate::workers::page_of_workers))
        .route("/cron", get(cron))
}

/// The stylesheet and the script, served without reading the database's clock.
pub(crate) fn asset_routes() -> Router<State> {
    Router::new()
        .route("/assets/style.css", get(|| async { ([(header::CONTENT_TYPE, "text/css")], STYLE) }))
        .route("/assets/app.js", get(|| async { ([(header::CONTENT_TYPE, "text/javascript")], SCRIPT) }))
}

async fn overview(Ext(s): Ext<State>) -> Response {
    let o = match data::overview(&s.reads, &s.utils, &s.throughput).await {
        Ok(o) => o,
        Err(e) => return error_page(&s, e),
    };
    let mut html = String::from(r#"<div class="cards">"#);
    for state in JOB_STATES {
        let _ = write!(
            html,
            r#"<a class="card {state}" href="/jobs?state={state}"><span class="n" id="total-{state}">{}</span><span>{}</span></a>"#,
            o.queue.totals.get(state).copied().unwrap_or(0),
            state.replace('_', " ")
        );
    }
    html.push_str("</div>");
    // The count is of the deletions since the dashboard's oldest sample of PostgreSQL's
    // counter kept (at most an hour old): at its first sample there is no window yet.
    let window = (Utc::now() - o.completed_since).num_seconds();
    let completed = match window {
        w if w >= 3540 => format!(r#"<b id="completed">{}</b> jobs completed or removed in the last hour"#, o.completed),
        w if w >= 1 => format!(
            r#"<b id="completed">{}</b> jobs completed or removed in the last {} (since the dashboard's first sample)"#,
            o.completed,
            age(w)
        ),
        _ => r#"jobs completed or removed: <b id="completed">counting from now</b> (the dashboard just took its first sample; reload to see the count)"#.to_owned(),
    };
    let _ = write!(
        html,
        r#"<ul class="facts"><li>{completed}</li>
<li><b id="failed-last-hour">{}</b> jobs failed in the last hour</li>
<li>oldest ready job: <b id="oldest-ready">{}</b></li></ul>"#,
        o.queue.failed_last_hour,
        o.queue.oldest_ready_age_seconds.map_or("none".to_owned(), |s| format!("waiting {}", age(s))),
    );
    html.push_str(&crate::history::last_hour(&s).await);
    html.push_str(&unreadable(&o.queue.unreadable));
    let mut headers = vec!["task", "queue"];
    headers.extend(JOB_STATES);
    let rows: Vec<Vec<String>> = o
        .queue
        .counts
        .iter()
        .map(|c| {
            let filter = format!(
                "/jobs?task={}{}",
                url(&c.task),
                c.queue.as_deref().map(|q| format!("&queue={}", url(q))).unwrap_or_default()
            );
            let mut row = vec![
                format!(r#"<a href="{}">{}</a>"#, esc(&filter), esc(&c.task)),
                esc(c.queue.as_deref().unwrap_or("")),
            ];
            for state in JOB_STATES {
                let n = c.states.get(state).copied().unwrap_or(0);
                row.push(format!(r#"<a href="{}&state={state}">{n}</a>"#, esc(&filter)));
            }
            row
        })
        .collect();
    html.push_str("<h2>By task and queue</h2>");
    html.push_str(&table(&headers, &rows));
    page(&s, "Overview", &html)
}

fn job_rows(jobs: &[JobRow], holds: &Holds) -> Vec<Vec<String>> {
    jobs.iter()
        .map(|r| {
            let j = &r.job;
            vec![
                crate::bulk::tick(j.id),
                format!(r#"<a href="/jobs/{}">{}</a>"#, j.id, j.id),
                esc(&j.task_identifier),
                esc(j.queue_name.as_deref().unwrap_or("")),
                holds.state(&r.state, &j.task_identifier, j.queue_name.as_deref(), None),
                time(&j.run_at),
                format!("{}/{}", j.attempts, j.max_attempts),
                j.priority.to_string(),
                esc(j.key.as_deref().unwrap_or("")),
                error_cell(j.last_error.as_deref()),
            ]
        })
        .collect()
}

async fn jobs(Ext(s): Ext<State>, Query(query): Query<JobQuery>) -> Response {
    let query = query.cleaned();
    let selection = match query.selection() {
        Ok(selection) => selection,
        Err(e) => return error_page(&s, e),
    };
    let result = match inspect::jobs(&s.reads, &selection).await {
        Ok(r) => r,
        Err(e) => return error_page(&s, e),
    };
    let mut states = vec![("", "any")];
    states.extend(JOB_STATES.iter().map(|s| (*s, *s)));
    let sorts =
        [("newest", "newest first"), ("oldest", "oldest first"), ("next", "next to run (workers' order)")];
    let mut html = filter_form(
        "/jobs",
        &[
            text_field("task", &query.task, "any"),
            text_field("queue", &query.queue, "any"),
            labelled_select("state", query.state.as_deref(), &states),
            text_field("key", &query.key, "exact"),
            text_field("error", &query.error, "text in last_error"),
            labelled_select("sort", query.sort.as_deref(), &sorts),
        ],
    );
    html.push_str(&crate::adding::form());
    html.push_str(&crate::bulk::bar(&query));
    let headers = ["", "id", "task", "queue", "state", "run_at", "attempts", "priority", "key", "last_error"];
    html.push_str(&unreadable(&result.undecodable.iter().map(inspect::describe).collect::<Vec<_>>()));
    let holds = match Holds::read(&s, result.jobs.iter().map(|r| r.state.as_str())).await {
        Ok(holds) => holds,
        Err(e) => return error_page(&s, e),
    };
    html.push_str(&table(&headers, &job_rows(&result.jobs, &holds)));
    if let Some(next) = &result.next {
        let next_query = JobQuery { after: Some(next.clone()), ..query.clone() };
        let qs = serde_urlencoded(&next_query);
        let _ = write!(html, r#"<p><a id="next-page" href="/jobs?{}">Next page →</a></p>"#, esc(&qs));
    }
    page(&s, "Jobs", &html)
}

/// `query`'s given fields as a query string.
fn serde_urlencoded(query: &JobQuery) -> String {
    let fields = [
        ("task", &query.task),
        ("queue", &query.queue),
        ("state", &query.state),
        ("key", &query.key),
        ("error", &query.error),
        ("sort", &query.sort),
        ("after", &query.after),
    ];
    let mut parts: Vec<String> =
        fields.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", url(v)))).collect();
    if let Some(limit) = query.limit {
        parts.push(format!("limit={limit}"));
    }
    parts.join("&")
}

/// A job's progress: a bar for its fraction, its text, and when it was written (the page's
/// auto-refresh keeps it live).
fn progress(p: &formica::JobProgress) -> String {
    let bar = p
        .progress
        .fraction
        .map_or(String::new(), |f| format!(r#"<progress max="1" value="{f}"></progress> "#));
    format!(r#"<span id="progress">{bar}{} at {}</span>"#, esc(&p.progress.to_string()), time(&p.updated_at))
}

async fn job(Ext(s): Ext<State>, Path(id): Path<i64>) -> Response {
    let detail = match inspect::job(&s.reads, id).await {
        Ok(Some(Ok(d))) => d,
        Ok(Some(Err(bad))) => {
            let text = format!("This job's row cannot be read: {}", inspect::describe(&bad));
            return page(
                &s,
                &format!("Job {id}"),
                &format!(r#"<p class="error" id="undecodable">{}</p>"#, esc(&text)),
            );
        }
        // Gone from the queue: its finished runs, if the history has them.
        Ok(None) => return crate::history::page_of_runs(&s, id).await,
        Err(e) => return error_page(&s, e),
    };
    let j = &detail.row.job;
    let payload = formica::payload_as_shown(&j.payload);
    let flags: Vec<&str> = j.flags.iter().map(String::as_str).collect();
    let lock = match (&j.locked_by, &j.locked_at) {
        (Some(by), at) => format!("{} since {}", esc(by), opt_time(at)),
        _ => "no worker holds it".into(),
    };
    let queue_lock = match (&detail.queue_locked_by, &detail.queue_locked_at) {
        (Some(by), at) => format!(" (queue held by {} since {})", esc(by), opt_time(at)),
        _ => String::new(),
    };
    let holds = match Holds::read(&s, std::iter::once(detail.row.state.as_str())).await {
        Ok(holds) => holds,
        Err(e) => return error_page(&s, e),
    };
    let state = holds.state(&detail.row.state, &j.task_identifier, j.queue_name.as_deref(), Some("state"));
    let facts = [
        ("state", state),
        ("task", esc(&j.task_identifier)),
        ("queue", format!("{}{queue_lock}", esc(j.queue_name.as_deref().unwrap_or("(none)")))),
        ("run_at", time(&j.run_at)),
        ("attempts", format!("{} of {}", j.attempts, j.max_attempts)),
        ("priority", j.priority.to_string()),
        ("key", esc(j.key.as_deref().unwrap_or("(none)"))),
        ("flags", esc(&if flags.is_empty() { "(none)".to_owned() } else { flags.join(", ") })),
        ("locked", lock),
        ("created_at", time(&j.created_at)),
        ("updated_at", time(&j.updated_at)),
        ("revision", j.revision.to_string()),
        ("progress", detail.progress.as_ref().map_or_else(|| "(none)".into(), progress)),
    ];
    let mut html = String::from("<dl>");
    for (name, value) in facts {
        let _ = write!(html, "<dt>{name}</dt><dd>{value}</dd>");
    }
    html.push_str("</dl>");
    html.push_str(&crate::why::section(&s, id).await);
    if crate::guard::may_act() {
        let base = format!("/api/jobs/{id}");
        let _ = write!(
            html,
            r#"<h2>Actions</h2><div class="actions">{}{}</div>
<form id="reschedule" class="filters inline"><label>run_at <input name="run_at" placeholder="{}"></label><label>priority <input name="priority" type="number"></label><label>attempts <input name="attempts" type="number"></label><label>max_attempts <input name="max_attempts" type="number"></label>{}</form>
<form id="fail" class="filters inline"><label>reason <input name="reason" placeholder="Manually marked as failed"></label>{}</form>
<form id="cancel" class="filters inline"><label>reason <input name="reason" placeholder="cancelled from the dashboard"></label>{}</form>"#,
            // Out of attempts, a job due now still would not run: Reschedule's attempts can.
            if detail.row.state == "permanently_failed" {
                "<span>Out of attempts: to retry, reschedule with fewer attempts.</span>".to_owned()
            } else {
                button("Run now", &format!("{base}/run_now"), &format!("Run job {id} now?"), &[])
            },
            button("Remove", &format!("{base}/remove"), &format!("Delete job {id}? It will not run."), &[]),
            stamp(&Utc::now()),
            button(
                "Reschedule",
                &format!("{base}/reschedule"),
                &format!("Reschedule job {id}?"),
                &[("form", "reschedule")]
            ),
            button(
                "Permanently fail",
                &format!("{base}/fail"),
                &format!("Fail job {id} for good? It will not run again."),
                &[("form", "fail")]
            ),
            button(
                "Cancel",
                &format!("{base}/cancel"),
                &format!("Cancel job {id}? A running task is aborted; the job fails for good."),
                &[("form", "cancel")]
            ),
        );
    }
    let _ = write!(
        html,
        r#"<h2>Last error</h2><pre id="last-error">{}</pre>"#,
        esc(j.last_error.as_deref().unwrap_or("(none)"))
    );
    let _ = write!(html, r#"<h2>Payload</h2><pre id="payload">{}</pre>"#, esc(&payload));
    html.push_str(&crate::history::logs(&s, id).await);
    page(&s, &format!("Job {id}"), &html)
}

async fn queues(Ext(s): Ext<State>) -> Response {
    let queues = match inspect::queues(&s.reads).await {
        Ok(q) => q,
        Err(e) => return error_page(&s, e),
    };
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            vec![
                format!(r#"<a href="/jobs?queue={}">{}</a>"#, esc(&url(&q.name)), esc(&q.name)),
                esc(q.locked_by.as_deref().unwrap_or("")),
                opt_time(&q.locked_at),
            ]
        })
        .collect();
    page(&s, "Queues", &table(&["queue", "held by", "since"], &rows))
}

async fn cron(Ext(s): Ext<State>) -> Response {
    let cron = match inspect::cron(&s.reads, s.options.crontab.as_ref()).await {
        Ok(c) => c,
        Err(e) => return error_page(&s, e),
    };
    let (source, elsewhere) = match cron.source {
        CrontabSource::Workers => {
            ("The crontab of the running workers, as each records it beside its lease.", "(in no running worker's crontab)")
        }
        CrontabSource::Given => (
            "No running worker has a crontab: this is the crontab given to the dashboard (--crontab).",
            "(not in the crontab given to the dashboard)",
        ),
        CrontabSource::None => (
            "No running worker has a crontab, and the dashboard was given none (--crontab): only the items the database has seen are listed.",
            "(in no crontab)",
        ),
    };
    let rows: Vec<Vec<String>> = cron
        .items
        .iter()
        .map(|c| {
            vec![
                esc(&c.identifier),
                esc(c.spec.as_deref().unwrap_or(elsewhere)),
                esc(&c.workers.join(", ")),
                opt_time(&c.last_execution),
                c.next_runs.iter().map(time).collect::<Vec<_>>().join("<br>"),
                if c.spec.is_some() { crate::adding::run_now_button(&c.identifier) } else { String::new() },
            ]
        })
        .collect();
    let headers = ["identifier", "item", "run by", "last execution", "next runs", ""];
    let runtime = match crate::schedules::section(&s).await {
        Ok(section) => section,
        Err(e) => return error_page(&s, e),
    };
    let html = format!(
        r#"<p id="cron-source">{}</p>{}{}{runtime}"#,
        esc(source),
        unreadable(&cron.unreadable),
        table(&headers, &rows)
    );
    page(&s, "Cron", &html)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esc_leaves_no_markup() {
        assert_eq!(
            esc(r#"<script>alert("x" + 'y')</script> & co"#),
            "&lt;script&gt;alert(&quot;x&quot; + &#39;y&#39;)&lt;/script&gt; &amp; co"
        );
        assert_eq!(esc("plain ü"), "plain ü");
    }

    #[test]
    fn urls_encode_everything_but_unreserved_characters() {
        assert_eq!(url("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
        let q = JobQuery {
            task: Some("t 1".into()),
            after: Some("5".into()),
            limit: Some(10),
            ..Default::default()
        };
        assert_eq!(serde_urlencoded(&q), "task=t%201&after=5&limit=10");
    }
}
