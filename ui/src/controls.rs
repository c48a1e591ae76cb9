//! The Flow page and its actions (docs/guide/flow-control.md, docs/guide/fairness.md,
//! docs/guide/bounded-queues.md): the pauses, caps, rate limits, fairness and bounds in force
//! (a task may have several), with who set them and when, why jobs wait (how many ready jobs
//! each holds back), and forms to pause, resume, cap, rate limit, make fair, bound and lift;
//! and where failed jobs
//! go, the dead letters (docs/guide/dead-letters.md), with forms to set and remove them.
//! Each action is one `WorkerUtils` call as in the `formica` command. The dashboard is the
//! author of what it sets (`dashboard`).

use crate::html::{button, error_page, esc, page, select, table, time};
use crate::{Error, State};
use axum::extract::State as Ext;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use formica::controls::{Control, ControlKind, ControlLimit, ControlSet, Partition, Pause};
use formica::dead_letters::DeadLetter;
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
        .route("/flow/cap", post(|s, body| set(s, body, ControlKind::Cap)))
        .route("/flow/uncap", post(|s, body| remove(s, body, ControlKind::Cap)))
        .route("/flow/limit", post(|s, body| set(s, body, ControlKind::RateLimit)))
        .route("/flow/unlimit", post(|s, body| remove(s, body, ControlKind::RateLimit)))
        .route("/flow/bound", post(|s, body| set(s, body, ControlKind::Bound)))
        .route("/flow/unbound", post(|s, body| remove(s, body, ControlKind::Bound)))
        .route("/flow/fair", post(|s, body| set(s, body, ControlKind::Fair)))
        .route("/flow/unfair", post(|s, body| remove(s, body, ControlKind::Fair)))
        .route("/dead_letters", get(dead_letters).post(set_dead_letter))
        .route("/dead_letters/remove", post(remove_dead_letter))
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

/// How the page, the lift button and the answers name a kind: (set, lift path, lifted
/// answer key, not-set phrase).
fn words(kind: ControlKind) -> (&'static str, &'static str, &'static str, &'static str) {
    match kind {
        ControlKind::Cap => ("capped", "/api/flow/uncap", "uncapped", "capped"),
        ControlKind::RateLimit => ("limited", "/api/flow/unlimit", "unlimited", "rate limited"),
        ControlKind::Fair => ("fair", "/api/flow/unfair", "unfair", "fair"),
        ControlKind::Bound => ("bounded", "/api/flow/unbound", "unbounded", "bounded"),
    }
}

/// A control's row: control, reason, by, since, ready jobs, and the Lift button.
fn control_row(set: &ControlSet, overview: &Overview) -> Vec<String> {
    let c = &set.control;
    let per = c.partition.as_ref().map(|p| format!(" per {} {}", p.kind(), p.argument()));
    let label = match c.limit {
        ControlLimit::Running { max } => {
            format!("capped: {} at most {max} running{}", c.task, per.clone().unwrap_or_default())
        }
        ControlLimit::Starts { .. } => format!("rate limited: {}", c.label()),
        ControlLimit::Fair { .. } => format!("fair: {}", c.label()),
        ControlLimit::Waiting { .. } => format!("bounded (adds refused over it): {}", c.label()),
    };
    let partition = c.partition.as_ref().map(|p| (p.kind(), p.argument()));
    let body = json!({ "task": c.task, "per": partition.map(|p| p.0), "argument": partition.map(|p| p.1) })
        .to_string();
    let of = match c.kind() {
        ControlKind::Fair | ControlKind::Bound => c.task.clone(),
        ControlKind::Cap | ControlKind::RateLimit => format!("{}{}", c.task, per.unwrap_or_default()),
    };
    let confirm = format!("Lift the {} of {of}?", c.kind().as_str());
    vec![
        esc(&label),
        "-".into(),
        esc(&set.set_by),
        time(&set.set_at),
        ready(overview, Some(&c.task), None).to_string(),
        button("Lift", words(c.kind()).1, &confirm, &[("body", &body)]),
    ]
}

/// The form setting a control of `kind`.
fn control_form(kind: ControlKind) -> String {
    let partitions =
        [("field", "per payload field"), ("key_prefix", "per job key prefix (before the separator)")];
    let whole = [("", "the whole task")];
    let (title, id, bound, action, path) = match kind {
        ControlKind::Cap => (
            "Cap",
            "cap",
            r#"<input name="max" type="number" min="1" placeholder="most running">"#,
            "Set cap",
            "/api/flow/cap",
        ),
        ControlKind::RateLimit => (
            "Rate limit",
            "limit",
            r#"<input name="max" type="number" min="1" placeholder="most starts"> per <input name="period_ms" type="number" min="1" value="1000"> ms"#,
            "Set limit",
            "/api/flow/limit",
        ),
        ControlKind::Fair => (
            "Fairness",
            "fair",
            r#"<input name="weights" placeholder="weights: acme=3, beta=2 (others 1)">"#,
            "Make fair",
            "/api/flow/fair",
        ),
        ControlKind::Bound => (
            "Bound",
            "bound",
            r#"<input name="max" type="number" min="1" placeholder="most waiting"> an add over it waits <input name="wait_ms" type="number" min="0" value="0"> ms"#,
            "Set bound",
            "/api/flow/bound",
        ),
    };
    if !crate::guard::may(path) {
        return String::new();
    }
    let per = match kind {
        ControlKind::Fair => select("per", Some("field"), &partitions),
        ControlKind::Cap | ControlKind::RateLimit | ControlKind::Bound => {
            select("per", Some(""), &whole.iter().chain(&partitions).copied().collect::<Vec<_>>())
        }
    };
    let confirm = format!("Set this {}? Formica workers keep to it within a second.", kind.as_str());
    format!(
        r#"<h2>{title}</h2><form id="{id}" class="inline"><input name="task" placeholder="task"> {bound} {per} <input name="argument" placeholder="field or separator"> {}</form>"#,
        button(action, path, &confirm, &[("form", id)])
    )
}

async fn flow(Ext(s): Ext<State>) -> Response {
    let read = async {
        Ok::<_, formica::Error>((
            s.reads.paused().await?,
            s.reads.controls().await?,
            inspect::overview(&s.reads).await?,
            s.reads.dead_letters().await?,
            s.reads.agings().await?,
        ))
    };
    let (paused, controls, overview, letters, agings) = match read.await {
        Ok(read) => read,
        Err(e) => return error_page(&s, e),
    };
    let pause_rows = paused.iter().map(|p| {
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
            button("Resume", "/api/flow/resume", &confirm, &[("body", &body)]),
        ]
    });
    let control_rows = controls.iter().map(|c| control_row(c, &overview));
    let rows: Vec<Vec<String>> = pause_rows.chain(control_rows).collect();
    let mut body = String::from(
        "<p>Why jobs wait: each pause, cap or rate limit in force, and the ready jobs it may hold back \
         (a task may have several controls: a job starts when every one allows it; fairness holds \
         none back, it takes the task's jobs round robin across its tenants). \
         Formica workers obey them within a second; graphile-worker's workers do not. A bound holds \
         back adds instead: Formica refuses an add over it.</p>",
    );
    body += &table(&["control", "reason", "by", "since", "ready jobs", ""], &rows);
    if crate::guard::may_act() {
        let scope = select(
            "scope",
            Some("task"),
            &[("task", "task"), ("queue", "named queue"), ("all", "everything")],
        );
        body += &format!(
            r#"<h2>Pause</h2><form id="pause" class="inline">{scope} <input name="name" placeholder="task or queue name"> <input name="reason" placeholder="reason"> {}</form>"#,
            button(
                "Pause",
                "/api/flow/pause",
                "Pause it? Running jobs finish; no Formica worker starts another until resumed.",
                &[("form", "pause")]
            )
        );
        body += &control_form(ControlKind::Cap);
        body += &control_form(ControlKind::RateLimit);
        body += &control_form(ControlKind::Fair);
        body += &control_form(ControlKind::Bound);
    }
    body += &crate::aging::section(&agings, |task| ready(&overview, Some(task), None));
    body += &dead_letters_section(&letters);
    page(&s, "Flow", &body)
}

/// Where each task's jobs go when they fail for good, with how many went, and the forms to
/// set and remove a dead letter (an admin's).
fn dead_letters_section(letters: &[DeadLetter]) -> String {
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|d| {
            let last =
                d.last_sent.map(|(job, at)| format!(r#"<a href="/jobs/{job}">job {job}</a> {}"#, time(&at)));
            let body = json!({ "task": d.task }).to_string();
            let confirm = format!("Send the jobs of {} nowhere when they fail for good?", d.task);
            vec![
                esc(&d.task),
                esc(&d.target),
                d.sent.to_string(),
                last.unwrap_or_default(),
                esc(&d.set_by),
                time(&d.set_at),
                button("Remove", "/api/dead_letters/remove", &confirm, &[("body", &body)]),
            ]
        })
        .collect();
    let set = button(
        "Set dead letter",
        "/api/dead_letters",
        "Send the jobs of {task} that fail for good to {target}?",
        &[("form", "dead-letter")],
    );
    let form = if set.is_empty() {
        String::new()
    } else {
        format!(
            r#"<form id="dead-letter" class="inline"><input name="task" placeholder="task"> to <input name="target" placeholder="task receiving its failed jobs"> {set}</form>"#
        )
    };
    format!(
        r#"<h2>Dead letters</h2><p>A job of a task listed here that fails for good becomes a job of its dead letter task, whose payload carries its id, task, payload and last error. Redrive the failed jobs from the <a href="/jobs?state=permanently_failed">failed jobs</a> page once their cause is fixed.</p>{}{form}"#,
        table(&["task", "sent to", "sent", "last sent", "by", "since", ""], &rows)
    )
}

async fn dead_letters(Ext(s): Ext<State>) -> Result<Json<Value>, Error> {
    Ok(Json(json!(s.reads.dead_letters().await?)))
}

#[derive(Deserialize)]
struct SetDeadLetter {
    task: String,
    target: String,
}

async fn set_dead_letter(Ext(s): Ext<State>, Json(body): Json<SetDeadLetter>) -> Result<Json<Value>, Error> {
    let since = s.utils.set_dead_letter(&body.task, &body.target, Some(crate::AUTHOR)).await?;
    Ok(Json(json!({ "task": body.task.trim(), "target": body.target.trim(), "since": since })))
}

async fn remove_dead_letter(Ext(s): Ext<State>, Json(body): Json<Lift>) -> Result<Json<Value>, Error> {
    if !s.utils.remove_dead_letter(&body.task).await? {
        return Err(Error::Conflict(format!("{} had no dead letter", body.task)));
    }
    Ok(Json(json!({ "removed": body.task })))
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

/// A control's form: `max` for a cap, rate limit or bound, `period_ms` only for a rate limit,
/// `wait_ms` only for a bound, `weights` (`acme=3, beta=2`) only for fairness; `per` is
/// empty (the whole task), `field` or `key_prefix`.
#[derive(Deserialize)]
struct ControlBody {
    task: String,
    #[serde(default)]
    max: u32,
    #[serde(default)]
    period_ms: u32,
    #[serde(default)]
    wait_ms: u32,
    #[serde(default)]
    weights: String,
    #[serde(default)]
    per: String,
    #[serde(default)]
    argument: String,
}

/// `acme=3, beta=2` as weights; an error names the piece that is not `tenant=n`.
fn weights(text: &str) -> Result<std::collections::BTreeMap<String, u32>, Error> {
    let pieces = text.split(',').map(str::trim).filter(|piece| !piece.is_empty());
    pieces
        .map(|piece| {
            let (tenant, weight) = piece
                .rsplit_once('=')
                .and_then(|(t, w)| Some((t.trim(), w.trim().parse().ok()?)))
                .ok_or_else(|| Error::BadRequest(format!("weight {piece:?}: tenant=n, n a whole number")))?;
            Ok((tenant.to_owned(), weight))
        })
        .collect()
}

/// The partition a body names: `per` empty for the whole task.
fn partition_of(per: &str, argument: &str) -> Result<Option<Partition>, Error> {
    match per {
        "" => Ok(None),
        per => Ok(Some(Partition::parse(per, argument).map_err(|e| Error::BadRequest(e.to_string()))?)),
    }
}

async fn set(
    Ext(s): Ext<State>,
    Json(body): Json<ControlBody>,
    kind: ControlKind,
) -> Result<Json<Value>, Error> {
    let partition = partition_of(&body.per, &body.argument)?;
    let (task, max) = (body.task.trim().to_owned(), body.max);
    let limit = match kind {
        ControlKind::Cap => ControlLimit::Running { max },
        ControlKind::RateLimit => ControlLimit::Starts { max, period_ms: body.period_ms },
        ControlKind::Fair => ControlLimit::Fair { weights: weights(&body.weights)? },
        ControlKind::Bound => ControlLimit::Waiting { max, wait_ms: body.wait_ms },
    };
    let control = Control { task, partition, limit };
    let since = s.utils.set_control(&control, Some(crate::AUTHOR)).await?;
    let named = match kind {
        ControlKind::Cap => control.task,
        ControlKind::RateLimit | ControlKind::Fair | ControlKind::Bound => control.label(),
    };
    Ok(Json(json!({ words(kind).0: named, "since": since })))
}

/// Which control to lift (or dead letter to remove): the task, and for a cap or rate limit
/// the partition (none: the whole task's).
#[derive(Deserialize)]
struct Lift {
    task: String,
    #[serde(default)]
    per: Option<String>,
    #[serde(default)]
    argument: Option<String>,
}

async fn remove(Ext(s): Ext<State>, Json(body): Json<Lift>, kind: ControlKind) -> Result<Json<Value>, Error> {
    let (_, _, lifted, set) = words(kind);
    let partition =
        partition_of(body.per.as_deref().unwrap_or_default(), body.argument.as_deref().unwrap_or_default())?;
    if !s.utils.remove_control(&body.task, kind, partition.as_ref()).await? {
        return Err(Error::Conflict(format!("{} was not {set}", body.task)));
    }
    Ok(Json(json!({ lifted: body.task })))
}
