//! The Workflows pages (docs/guide/workflows.md): the workflows with their states and job
//! counts, and one workflow's jobs drawn as a graph, each job a node coloured and labelled
//! by its state and linked to its job's page, with an arrow from each job to those that
//! depend on it. Read through `WorkerUtils::workflows` and `workflow`, as `formica
//! workflows` reads them. Cancel, Retry and Send signal call `WorkerUtils::cancel_workflow`,
//! `retry_workflow` and `signal_workflow`, as `formica workflow cancel`, `retry` and
//! `signal` do. Each job says what it waits for (jobs, a signal, a timer).

use crate::html::{
    button, error_page, esc, filter_form, first_line, labelled_select, opt_time, page, table, text_field,
    time,
};
use crate::{Error, State};
use axum::extract::{Path, Query, State as Ext};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use formica::inspect::{
    WaitingFor, WorkflowFilter, WorkflowJobSeen, WorkflowSummary, WORKFLOW_JOB_COLUMNS, WORKFLOW_STATES,
};
use formica::SignalSent;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write;

/// The pages.
pub fn page_routes() -> Router<State> {
    Router::new().route("/workflows", get(list)).route("/workflows/{id}", get(show))
}

/// The reads, under `/api`.
pub fn api_routes() -> Router<State> {
    Router::new()
        .route("/workflows", get(list_json))
        .route("/workflows/{id}", get(show_json))
        .route("/workflows/{id}/cancel", post(cancel))
        .route("/workflows/{id}/retry", post(retry))
        .route("/workflows/{id}/signal", post(signal))
}

/// A workflow action's error as the API answers it: no such workflow is a 404, retrying a
/// cancelled one a 409.
fn refused(e: formica::Error) -> Error {
    match e {
        formica::Error::WorkflowNotFound(_) => Error::NotFound(e.to_string()),
        formica::Error::WorkflowCancelled(_) => Error::Conflict(e.to_string()),
        e => e.into(),
    }
}

#[derive(Debug, Default, Deserialize)]
struct CancelBody {
    reason: Option<String>,
}

async fn cancel(
    Ext(s): Ext<State>,
    Path(id): Path<i64>,
    Json(body): Json<CancelBody>,
) -> Result<Json<Value>, Error> {
    let reason = body.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
    let cancelled = s
        .utils
        .cancel_workflow(id, reason.unwrap_or("cancelled from the dashboard"))
        .await
        .map_err(refused)?;
    let recorded: Vec<i64> = cancelled.released.recorded.iter().map(|r| r.job_id).collect();
    Ok(Json(json!({
        "id": id, "waiting": cancelled.waiting, "failed": cancelled.released.failed, "recorded": recorded,
    })))
}

async fn retry(Ext(s): Ext<State>, Path(id): Path<i64>) -> Result<Json<Value>, Error> {
    let retried = s.utils.retry_workflow(id).await.map_err(refused)?;
    Ok(Json(json!({ "id": id, "rerun": retried.rerun, "waiting": retried.waiting })))
}

#[derive(Debug, Default, Deserialize)]
struct SignalBody {
    name: String,
    /// JSON text, as typed (empty: none).
    payload: Option<String>,
}

/// `POST /api/workflows/{id}/signal`: the signal received (200, with the jobs that got it
/// and those released); sent twice or for no waiting job, a 409 saying which; no such
/// workflow, a 404.
async fn signal(
    Ext(s): Ext<State>,
    Path(id): Path<i64>,
    Json(body): Json<SignalBody>,
) -> Result<Json<Value>, Error> {
    let name = body.name.trim();
    if name.is_empty() {
        return Err(Error::BadRequest("a signal needs a name".into()));
    }
    let payload = match body.payload.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
        Some(text) => Some(
            serde_json::from_str::<Value>(text)
                .map_err(|e| Error::BadRequest(format!("the payload is not JSON ({e}): {text}")))?,
        ),
        None => None,
    };
    let sent = s.utils.signal_workflow(id, name, payload.as_ref()).await?;
    match (sent.unreceived(id, name), sent) {
        (_, SignalSent::Received { jobs, released }) => {
            Ok(Json(json!({ "id": id, "signal": name, "received": jobs, "released": released })))
        }
        (Some(said), SignalSent::NoWorkflow) => Err(Error::NotFound(said)),
        (said, _) => Err(Error::Conflict(said.unwrap_or_default())),
    }
}

/// The list's filters: a state, a name (empty fields match any).
#[derive(Debug, Default, Deserialize)]
struct ListQuery {
    state: Option<String>,
    name: Option<String>,
}

impl ListQuery {
    fn filter(&self) -> WorkflowFilter {
        let given =
            |v: &Option<String>| v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned);
        WorkflowFilter { state: given(&self.state), name: given(&self.name), ..WorkflowFilter::default() }
    }
}

async fn list_json(Ext(s): Ext<State>, Query(query): Query<ListQuery>) -> Result<Json<Value>, Error> {
    Ok(Json(json!(s.reads.workflows(&query.filter()).await?)))
}

async fn show_json(Ext(s): Ext<State>, Path(id): Path<i64>) -> Result<Json<Value>, Error> {
    let detail = s.reads.workflow(id).await?.ok_or_else(|| Error::NotFound(format!("no workflow {id}")))?;
    Ok(Json(json!(detail)))
}

/// A state as the pages show it: coloured by its class.
fn state(name: &str) -> String {
    format!(r#"<span class="state wf-{0}">{0}</span>"#, esc(name))
}

async fn list(Ext(s): Ext<State>, Query(query): Query<ListQuery>) -> Response {
    let filter = query.filter();
    let workflows = match s.reads.workflows(&filter).await {
        Ok(w) => w,
        Err(e) => return error_page(&s, e),
    };
    let mut states = vec![("", "any")];
    states.extend(WORKFLOW_STATES.iter().map(|s| (*s, *s)));
    let mut html = filter_form(
        "/workflows",
        &[
            labelled_select("state", filter.state.as_deref(), &states),
            text_field("name", &filter.name, "any"),
        ],
    );
    let rows: Vec<Vec<String>> = workflows
        .iter()
        .map(|w| {
            let link = format!(r#"<a href="/workflows/{0}">{0}</a>"#, w.id);
            let counts = [w.total, w.waiting, w.released, w.completed, w.failed, w.cancelled];
            [link, esc(&w.name), state(&w.state)]
                .into_iter()
                .chain(counts.iter().map(i32::to_string))
                .chain([time(&w.created_at)])
                .collect()
        })
        .collect();
    let headers =
        ["id", "name", "state", "jobs", "waiting", "released", "completed", "failed", "cancelled", "created"];
    html += &table(&headers, &rows);
    if workflows.len() as i64 == filter.limit {
        let _ = write!(html, "<p>The newest {} shown.</p>", filter.limit);
    }
    page(&s, "Workflows", &html)
}

async fn show(Ext(s): Ext<State>, Path(id): Path<i64>) -> Response {
    let detail = match s.reads.workflow(id).await {
        Ok(Some(detail)) => detail,
        Ok(None) => return error_page(&s, Error::NotFound(format!("no workflow {id}"))),
        Err(e) => return error_page(&s, e),
    };
    let w = &detail.summary;
    let cancelled = match &w.cancelled_at {
        Some(at) => {
            format!("{} ({})", time(at), esc(w.cancel_reason.as_deref().unwrap_or("no reason given")))
        }
        None => "no".to_owned(),
    };
    let facts = [
        ("name", esc(&w.name)),
        ("state", format!(r#"<span id="state">{}</span>"#, state(&w.state))),
        ("created_at", time(&w.created_at)),
        ("cancelled", cancelled),
        (
            "jobs",
            format!(
                "{} ({} waiting, {} released, {} completed, {} failed, {} cancelled)",
                w.total, w.waiting, w.released, w.completed, w.failed, w.cancelled
            ),
        ),
    ];
    let mut html = String::from("<dl>");
    for (name, value) in facts {
        let _ = write!(html, "<dt>{name}</dt><dd>{value}</dd>");
    }
    html.push_str("</dl>");
    html += &actions(w, &detail.jobs);
    html += &graph(&detail.jobs);
    html += "<h2>Jobs</h2>";
    html += &table(
        &[&WORKFLOW_JOB_COLUMNS[..], &["released", "finished", "last_error"]].concat(),
        &detail.jobs.iter().map(job_row).collect::<Vec<_>>(),
    );
    page(&s, &format!("Workflow {id}"), &html)
}

/// Cancel while it runs; Retry while it has failed jobs and is not cancelled; Send signal
/// while a job waits for one. Nothing in read-only mode.
fn actions(w: &WorkflowSummary, jobs: &[WorkflowJobSeen]) -> String {
    if !crate::guard::may_act() {
        return String::new();
    }
    let mut html = String::new();
    if w.state == "running" {
        let confirm = format!(
            "Cancel workflow {}? Its waiting jobs are cancelled, its released ones fail as cancelled (running ones are aborted), and nothing of it runs afterwards.",
            w.id
        );
        let path = format!("/api/workflows/{}/cancel", w.id);
        html += r#"<label>reason <input name="reason" placeholder="cancelled from the dashboard"></label>"#;
        html += &button("Cancel workflow", &path, &confirm, &[("form", "workflow-actions")]);
    }
    if w.state != "cancelled" && w.failed > 0 {
        let confirm = format!(
            "Run the {} failed jobs of workflow {} again? The jobs cancelled because of them wait again.",
            w.failed, w.id
        );
        let path = format!("/api/workflows/{}/retry", w.id);
        html += &button("Retry failed jobs", &path, &confirm, &[]);
    }
    let mut awaited: Vec<&str> = (jobs.iter())
        .flat_map(|j| &j.waits_for)
        .filter_map(|wait| match wait {
            WaitingFor::Signal { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    awaited.sort_unstable();
    awaited.dedup();
    let mut signal = String::new();
    if let Some(first) = awaited.first() {
        let path = format!("/api/workflows/{}/signal", w.id);
        let send = button(
            "Send signal",
            &path,
            &format!("Send the signal {{name}} to workflow {}? The jobs waiting for it are released.", w.id),
            &[("form", "workflow-signal")],
        );
        if !send.is_empty() {
            signal = format!(
                r#"<form id="workflow-signal" class="filters inline"><label>signal <input name="name" value="{}"></label>
<label>payload <textarea name="payload" rows="1" cols="30" placeholder="none"></textarea></label>{send}</form>"#,
                esc(first)
            );
        }
    }
    if html.is_empty() && signal.is_empty() {
        return html;
    }
    let mut out = String::from("<h2>Actions</h2>");
    if !html.is_empty() {
        out += &format!(r#"<form id="workflow-actions" class="filters inline">{html}</form>"#);
    }
    out + &signal
}

fn job_row(j: &WorkflowJobSeen) -> Vec<String> {
    let job = j.job_id.map(|id| format!(r#"<a href="/jobs/{id}">{id}</a>"#)).unwrap_or_default();
    let (attempts, policy) = (j.attempts_text(), j.policy());
    vec![
        esc(&j.name),
        esc(&j.task),
        state(&label(j)),
        job,
        attempts,
        esc(&j.depends_on.join(", ")),
        esc(&policy),
        waits_cell(j),
        opt_time(&j.released_at),
        opt_time(&j.finished_at),
        crate::html::error_cell(j.last_error.as_deref()),
    ]
}

/// What a job waits for, a sub-workflow linked to its page.
fn waits_cell(j: &WorkflowJobSeen) -> String {
    let parts: Vec<String> = (j.waits_for.iter())
        .map(|wait| match wait {
            WaitingFor::Workflow { id } => format!(r#"<a href="/workflows/{id}">workflow {id}</a>"#),
            other => esc(&other.to_string()),
        })
        .collect();
    parts.join("; ")
}

/// A job's state for people: a released job's says what its graphile_worker job is doing.
fn label(j: &WorkflowJobSeen) -> String {
    match &j.job_state {
        Some(job_state) if j.state == "released" => format!("released ({})", job_state.replace('_', " ")),
        _ => j.state.clone(),
    }
}

/// Beyond this many jobs the graph would not help: the table alone is shown.
const GRAPH_MAX_JOBS: usize = 500;
const NODE_WIDTH: usize = 170;
const NODE_HEIGHT: usize = 44;
const COLUMN_GAP: usize = 70;
const ROW_GAP: usize = 14;
const MARGIN: usize = 10;

/// Each job's column and row: its column is its depth (0 for a job depending on nothing,
/// else one more than its deepest dependency), so every arrow points right; in a column,
/// jobs are ordered by the mean row of what they depend on, which keeps arrows short.
fn layout(jobs: &[WorkflowJobSeen]) -> Vec<(usize, usize)> {
    let index: HashMap<&str, usize> = jobs.iter().enumerate().map(|(i, j)| (j.name.as_str(), i)).collect();
    let dependencies: Vec<Vec<usize>> = jobs
        .iter()
        .map(|j| j.depends_on.iter().filter_map(|name| index.get(name.as_str()).copied()).collect())
        .collect();
    // Depths settle within one pass per job (the graph has no cycle: add refuses them).
    let mut depth = vec![0; jobs.len()];
    for _ in 0..jobs.len() {
        let mut changed = false;
        for (i, deps) in dependencies.iter().enumerate() {
            let d = deps.iter().map(|&dep| depth[dep] + 1).max().unwrap_or(0);
            changed |= d != depth[i];
            depth[i] = d;
        }
        if !changed {
            break;
        }
    }
    let columns = depth.iter().max().map_or(0, |d| d + 1);
    let mut row = vec![0usize; jobs.len()];
    for column in 0..columns {
        let mut members: Vec<(f64, usize)> = (0..jobs.len())
            .filter(|&i| depth[i] == column)
            .map(|i| {
                let deps = &dependencies[i];
                let mean = deps.iter().map(|&dep| row[dep] as f64).sum::<f64>() / deps.len().max(1) as f64;
                (mean, i)
            })
            .collect();
        members.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (r, (_, i)) in members.into_iter().enumerate() {
            row[i] = r;
        }
    }
    depth.into_iter().zip(row).collect()
}

/// The jobs as an SVG graph (see [`layout`]); a legend of the states' colours above it.
fn graph(jobs: &[WorkflowJobSeen]) -> String {
    if jobs.len() > GRAPH_MAX_JOBS {
        return format!("<p>{} jobs: too many to draw; the table lists them.</p>", jobs.len());
    }
    let at = layout(jobs);
    let x = |column: usize| MARGIN + column * (NODE_WIDTH + COLUMN_GAP);
    let y = |row: usize| MARGIN + row * (NODE_HEIGHT + ROW_GAP);
    let columns = at.iter().map(|p| p.0 + 1).max().unwrap_or(0);
    let rows = at.iter().map(|p| p.1 + 1).max().unwrap_or(0);
    let width = x(columns) - COLUMN_GAP + MARGIN;
    let height = y(rows) - ROW_GAP + MARGIN;
    let index: HashMap<&str, usize> = jobs.iter().enumerate().map(|(i, j)| (j.name.as_str(), i)).collect();
    let mut svg = format!(
        r#"<figure class="workflow"><svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="the workflow's jobs and what each depends on">
<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"/></marker></defs>"#
    );
    for (i, job) in jobs.iter().enumerate() {
        for dependency in job.depends_on.iter().filter_map(|name| index.get(name.as_str())) {
            let (from, to) = (at[*dependency], at[i]);
            let (x1, y1) = (x(from.0) + NODE_WIDTH, y(from.1) + NODE_HEIGHT / 2);
            let (x2, y2) = (x(to.0), y(to.1) + NODE_HEIGHT / 2);
            let middle = (x1 + x2) / 2;
            let _ = write!(
                svg,
                r#"<path class="edge" data-from="{}" data-to="{}" d="M {x1} {y1} C {middle} {y1}, {middle} {y2}, {x2} {y2}" marker-end="url(#arrow)"/>"#,
                esc(&jobs[*dependency].name),
                esc(&job.name),
            );
        }
    }
    for (job, (column, row)) in jobs.iter().zip(&at) {
        let (left, top) = (x(*column), y(*row));
        let mut title = match &job.last_error {
            Some(error) => format!("{}: {}\n{}", job.name, label(job), first_line(error, 200)),
            None => format!("{}: {}", job.name, label(job)),
        };
        if !job.waits_for.is_empty() {
            title += &format!("\nwaits for {}", job.waits_for_text());
        }
        let node = format!(
            r#"<g class="node wf-{state}" data-job="{name}"><title>{title}</title><rect x="{left}" y="{top}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="6"/><text x="{tx}" y="{ty1}" class="name">{short}</text><text x="{tx}" y="{ty2}" class="label">{label}</text></g>"#,
            state = esc(&job.state),
            name = esc(&job.name),
            title = esc(&title),
            tx = left + 8,
            ty1 = top + 18,
            ty2 = top + 35,
            short = esc(&first_line(&job.name, 22)),
            label = esc(&label(job)),
        );
        match job.job_id {
            Some(id) => {
                let _ = write!(svg, r#"<a href="/jobs/{id}">{node}</a>"#);
            }
            None => svg += &node,
        }
    }
    svg += "</svg></figure>";
    let legend: String = ["waiting", "released", "completed", "failed", "cancelled"]
        .iter()
        .map(|s| format!(r#"<span class="legend wf-{s}">{s}</span> "#))
        .collect();
    format!(r#"<h2>Graph</h2><p>{legend}</p>{svg}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(name: &str, depends_on: &[&str]) -> WorkflowJobSeen {
        WorkflowJobSeen {
            name: name.into(),
            task: "t".into(),
            state: "waiting".into(),
            job_id: None,
            job_state: None,
            attempts: None,
            max_attempts: None,
            last_error: None,
            released_at: None,
            finished_at: None,
            depends_on: depends_on.iter().map(|d| d.to_string()).collect(),
            callback: None,
            on_dependency_failure: "cancel".into(),
            signal: None,
            waits_for: Vec::new(),
        }
    }

    #[test]
    fn jobs_are_laid_out_in_columns_by_depth_whatever_their_order() {
        // D is listed first: depths do not depend on the order of the rows.
        let jobs =
            [job("D", &["B", "C"]), job("B", &["A"]), job("C", &["A"]), job("A", &[]), job("E", &["A", "D"])];
        let at = layout(&jobs);
        assert_eq!(at.iter().map(|p| p.0).collect::<Vec<_>>(), [2, 1, 1, 0, 3]);
        assert_eq!((at[1].1, at[2].1), (0, 1), "B then C in their column");
    }

    #[test]
    fn a_column_is_ordered_by_where_its_dependencies_are() {
        let jobs = [job("a", &[]), job("b", &[]), job("after_b", &["b"]), job("after_a", &["a"])];
        let at = layout(&jobs);
        assert_eq!((at[3], at[2]), ((1, 0), (1, 1)), "after_a beside a, after_b beside b");
    }
}
