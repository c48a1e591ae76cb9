//! The Flow page and its actions (docs/guide/flow-control.md): the pauses and caps in
//! force, with who set them and when, why jobs wait (how many ready jobs each holds back),
//! and forms to pause, resume, cap and lift, each one `WorkerUtils` call as in the
//! `formica` command. The dashboard is the author of what it sets (`dashboard`).

use crate::html::{button, error_page, esc, page, select, table, time};
use crate::{Error, State};
use axum::extract::State as Ext;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use formica::flow::{Cap, Partition, Pause};
use formica::inspect::{self, Overview};
use serde::Deserialize;
use serde_json::{json, Value};

/// The page.
pub fn page_routes() -> Router<State> {
    Router::new().route("/flow", get(flow))
}

/// The actions, under `/api`.
pub fn api_routes() -> Router<State> {
    Router::new()
        .route("/flow/pause", post(pause))
        .route("/flow/resume", post(resume))
        .route("/flow/cap", post(cap))
        .route("/flow/uncap", post(uncap))
}

/// Ready jobs of `task` (any task if `None`) in `queue` (any queue if `None`).
fn ready(overview: &Overview, task: Option<&str>, queue: Option<&str>) -> i64 {
    overview
        .counts
        .iter()
        .filter(|c| task.is_none_or(|t| c.task == t) && queue.is_none_or(|q| c.queue.as_deref() == Some(q)))
        .map(|c| c.states.get("ready").copied().unwrap_or_default())
        .sum()
}

async fn flow(Ext(s): Ext<State>) -> Response {
    let read = async {
        Ok::<_, formica::Error>((
            s.utils.paused().await?,
            s.utils.caps().await?,
            inspect::overview(&s.utils).await?,
            s.utils.rate_limits().await?,
        ))
    };
    let (paused, caps, overview, limits) = match read.await {
        Ok(read) => read,
        Err(e) => return error_page(&s, e),
    };
    let pause_rows: Vec<Vec<String>> = paused
        .iter()
        .map(|p| {
            let pause = p.pause();
            let label = pause.as_ref().map_or_else(|| format!("{}:{}", p.scope, p.name), Pause::label);
            let (task, queue) = match p.scope.as_str() {
                "task" => (Some(p.name.as_str()), None),
                "queue" => (None, Some(p.name.as_str())),
                _ => (None, None),
            };
            let body = json!({ "scope": p.scope, "name": p.name }).to_string();
            let confirm = format!("Resume {label}? Workers start its jobs again within a second.");
            vec![
                format!("paused: {}", esc(&label)),
                esc(p.reason.as_deref().unwrap_or("-")),
                esc(&p.paused_by),
                time(&p.paused_at),
                ready(&overview, task, queue).to_string(),
                button(&s, "Resume", "/api/flow/resume", &confirm, &[("body", &body)]),
            ]
        })
        .collect();
    let cap_rows: Vec<Vec<String>> = caps
        .iter()
        .map(|c| {
            let per = c
                .cap
                .partition
                .as_ref()
                .map(|p| format!(" per {} {}", p.kind(), p.argument()))
                .unwrap_or_default();
            let label = format!("capped: {} at most {} running{per}", c.cap.task, c.cap.max_running);
            let body = json!({ "task": c.cap.task }).to_string();
            let confirm = format!("Lift the cap of {}?", c.cap.task);
            vec![
                esc(&label),
                "-".into(),
                esc(&c.set_by),
                time(&c.set_at),
                ready(&overview, Some(&c.cap.task), None).to_string(),
                button(&s, "Lift", "/api/flow/uncap", &confirm, &[("body", &body)]),
            ]
        })
        .collect();
    let limit_rows = crate::rate_limit::rows(&s, &limits, |task| ready(&overview, Some(task), None));
    let rows: Vec<Vec<String>> = pause_rows.into_iter().chain(cap_rows).chain(limit_rows).collect();
    let mut body = String::from(
        "<p>Why jobs wait: each pause, cap or rate limit in force, and the ready jobs it may hold back. \
         Formica workers obey them within a second; graphile-worker's workers do not.</p>",
    );
    body += &table(&["control", "reason", "by", "since", "ready jobs", ""], &rows);
    if !s.options.read_only {
        let scope = select(
            "scope",
            Some("task"),
            &[("task", "task"), ("queue", "named queue"), ("all", "everything")],
        );
        body += &format!(
            r#"<h2>Pause</h2><form id="pause" class="inline">{scope} <input name="name" placeholder="task or queue name"> <input name="reason" placeholder="reason"> {}</form>"#,
            button(
                &s,
                "Pause",
                "/api/flow/pause",
                "Pause it? Running jobs finish; no Formica worker starts another until resumed.",
                &[("form", "pause")]
            )
        );
        let per = select(
            "per",
            Some(""),
            &[
                ("", "the whole task"),
                ("field", "per payload field"),
                ("key_prefix", "per job key prefix (before the separator)"),
            ],
        );
        body += &format!(
            r#"<h2>Cap</h2><form id="cap" class="inline"><input name="task" placeholder="task"> <input name="max" type="number" min="1" placeholder="most running"> {per} <input name="argument" placeholder="field or separator"> {}</form>"#,
            button(
                &s,
                "Set cap",
                "/api/flow/cap",
                "Set this cap? Formica workers keep to it within a second.",
                &[("form", "cap")]
            )
        );
        body += &crate::rate_limit::form(&s);
    }
    page(&s, "Flow", &body)
}

#[derive(Deserialize)]
struct Target {
    scope: String,
    #[serde(default)]
    name: String,
    reason: Option<String>,
}

impl Target {
    fn pause(&self) -> Result<Pause, Error> {
        let name = self.name.trim();
        match (self.scope.as_str(), name.is_empty()) {
            ("all", _) => Ok(Pause::all()),
            ("task", false) => Ok(Pause::task(name)),
            ("queue", false) => Ok(Pause::queue(name)),
            ("task" | "queue", true) => Err(Error::BadRequest(format!("name the {} to pause", self.scope))),
            (other, _) => Err(Error::BadRequest(format!("unknown scope {other:?}: task, queue or all"))),
        }
    }
}

async fn pause(Ext(s): Ext<State>, Json(body): Json<Target>) -> Result<Json<Value>, Error> {
    let pause = body.pause()?;
    let since = s.utils.pause(&pause, body.reason.as_deref(), Some(crate::AUTHOR)).await?;
    Ok(Json(json!({ "paused": pause.label(), "since": since })))
}

async fn resume(Ext(s): Ext<State>, Json(body): Json<Target>) -> Result<Json<Value>, Error> {
    let pause = body.pause()?;
    if !s.utils.resume(&pause).await? {
        return Err(Error::Conflict(format!("{} was not paused", pause.label())));
    }
    Ok(Json(json!({ "resumed": pause.label() })))
}

#[derive(Deserialize)]
struct CapBody {
    task: String,
    max: u32,
    #[serde(default)]
    per: String,
    #[serde(default)]
    argument: String,
}

async fn cap(Ext(s): Ext<State>, Json(body): Json<CapBody>) -> Result<Json<Value>, Error> {
    let partition = match body.per.as_str() {
        "" => None,
        "field" => Some(Partition::Field(body.argument.clone())),
        "key_prefix" => Some(Partition::KeyPrefix(body.argument.clone())),
        other => return Err(Error::BadRequest(format!("unknown partition {other:?}: field or key_prefix"))),
    };
    let cap = Cap { task: body.task.trim().to_owned(), max_running: body.max, partition };
    let since = s.utils.set_cap(&cap, Some(crate::AUTHOR)).await?;
    Ok(Json(json!({ "capped": cap.task, "since": since })))
}

#[derive(Deserialize)]
struct Uncap {
    task: String,
}

async fn uncap(Ext(s): Ext<State>, Json(body): Json<Uncap>) -> Result<Json<Value>, Error> {
    if !s.utils.remove_cap(&body.task).await? {
        return Err(Error::Conflict(format!("{} was not capped", body.task)));
    }
    Ok(Json(json!({ "uncapped": body.task })))
}
