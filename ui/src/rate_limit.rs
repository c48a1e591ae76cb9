//! The rate limits on the Flow page (docs/guide/flow-control.md): a row per limit in force
//! ("rate limited: send_email 100/min") with the ready jobs it may hold back and a button to
//! lift it, the form to set one, and their actions, each one `WorkerUtils` call as in the
//! `formica limit` and `unlimit` commands.

use crate::html::{button, esc, select, time};
use crate::{Error, State};
use axum::extract::State as Ext;
use axum::routing::post;
use axum::{Json, Router};
use formica::flow::Partition;
use formica::rate_limit::{Limit, LimitSet};
use serde::Deserialize;
use serde_json::{json, Value};

/// The actions, under `/api`.
pub fn api_routes() -> Router<State> {
    Router::new().route("/flow/limit", post(limit)).route("/flow/unlimit", post(unlimit))
}

/// The Flow page's rows for `limits`: control, reason, by, since, ready jobs (`ready` of a
/// task), and the Lift button.
pub fn rows(s: &State, limits: &[LimitSet], ready: impl Fn(&str) -> i64) -> Vec<Vec<String>> {
    let row = |l: &LimitSet| {
        let body = json!({ "task": l.limit.task }).to_string();
        let confirm = format!("Lift the rate limit of {}?", l.limit.task);
        vec![
            esc(&format!("rate limited: {}", l.limit.label())),
            "-".into(),
            esc(&l.set_by),
            time(&l.set_at),
            ready(&l.limit.task).to_string(),
            button(s, "Lift", "/api/flow/unlimit", &confirm, &[("body", &body)]),
        ]
    };
    limits.iter().map(row).collect()
}

/// The form setting a limit.
pub fn form(s: &State) -> String {
    let per = select(
        "per",
        Some(""),
        &[("", "the whole task"), ("field", "per payload field"), ("key_prefix", "per job key prefix")],
    );
    format!(
        r#"<h2>Rate limit</h2><form id="limit" class="inline"><input name="task" placeholder="task"> <input name="max" type="number" min="1" placeholder="most starts"> per <input name="period_ms" type="number" min="1" value="1000"> ms {per} <input name="argument" placeholder="field or separator"> {}</form>"#,
        button(
            s,
            "Set limit",
            "/api/flow/limit",
            "Set this rate limit? Formica workers keep to it within a second.",
            &[("form", "limit")]
        )
    )
}

#[derive(Deserialize)]
struct LimitBody {
    task: String,
    max: u32,
    period_ms: u32,
    #[serde(default)]
    per: String,
    #[serde(default)]
    argument: String,
}

async fn limit(Ext(s): Ext<State>, Json(body): Json<LimitBody>) -> Result<Json<Value>, Error> {
    let partition = match body.per.as_str() {
        "" => None,
        "field" => Some(Partition::Field(body.argument.clone())),
        "key_prefix" => Some(Partition::KeyPrefix(body.argument.clone())),
        other => return Err(Error::BadRequest(format!("unknown partition {other:?}: field or key_prefix"))),
    };
    let limit = Limit {
        task: body.task.trim().to_owned(),
        max_starts: body.max,
        period_ms: body.period_ms,
        partition,
    };
    let since = s.utils.set_rate_limit(&limit, Some(crate::AUTHOR)).await?;
    Ok(Json(json!({ "limited": limit.label(), "since": since })))
}

#[derive(Deserialize)]
struct Unlimit {
    task: String,
}

async fn unlimit(Ext(s): Ext<State>, Json(body): Json<Unlimit>) -> Result<Json<Value>, Error> {
    if !s.utils.remove_rate_limit(&body.task).await? {
        return Err(Error::Conflict(format!("{} was not rate limited", body.task)));
    }
    Ok(Json(json!({ "unlimited": body.task })))
}
