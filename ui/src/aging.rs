//! The agings on the Flow page (docs/guide/priority-aging.md): each task whose waiting jobs
//! age, with who set it and when and its ready jobs, and the forms to set and lift one
//! (`/api/flow/age`, `/api/flow/unage`, an admin's: aging changes the order jobs run in).
//! Each action is one `WorkerUtils` call as in `formica age` and `unage`.

use crate::html::{button, esc, table, time};
use crate::{Error, State};
use axum::extract::State as Ext;
use axum::routing::post;
use axum::{Json, Router};
use formica::{Aging, AgingSet};
use serde::Deserialize;
use serde_json::{json, Value};

/// The actions, under `/api`.
pub fn api_routes() -> Router<State> {
    Router::new().route("/flow/age", post(set)).route("/flow/unage", post(remove))
}

/// The section: the agings in force (with the ready jobs of each task, by `ready`), and the
/// form to set one.
pub(crate) fn section(agings: &[AgingSet], ready: impl Fn(&str) -> i64) -> String {
    let rows: Vec<Vec<String>> = agings
        .iter()
        .map(|a| {
            let task = &a.aging.task;
            let body = json!({ "task": task }).to_string();
            let confirm = format!("Lift the aging of {task}? Its waiting jobs get their own priority back.");
            vec![
                esc(&a.aging.label()),
                esc(&a.set_by),
                time(&a.set_at),
                ready(task).to_string(),
                button("Lift", "/api/flow/unage", &confirm, &[("body", &body)]),
            ]
        })
        .collect();
    let set = button(
        "Set aging",
        "/api/flow/age",
        "Age this task's waiting jobs? Workers' next pass changes their priority.",
        &[("form", "age")],
    );
    let form = if set.is_empty() {
        String::new()
    } else {
        format!(
            r#"<form id="age" class="inline"><input name="task" placeholder="task"> every <input name="every_ms" type="number" min="1" value="60000"> ms ready, priority number <input name="step" type="number" min="1" value="1"> lower, down to <input name="best" type="number" value="-10"> {set}</form>"#
        )
    };
    format!(
        r#"<h2>Priority aging</h2><p>A waiting job of a task listed here has its priority number lowered (it runs sooner) for each period it has been ready, down to the best, by the workers' aging chore; graphile-worker's workers fetch by the changed priority too.</p>{}{form}"#,
        table(&["aging", "by", "since", "ready jobs", ""], &rows)
    )
}

/// The form's fields.
#[derive(Deserialize)]
struct AgeBody {
    task: String,
    every_ms: u32,
    step: u16,
    best: i16,
}

async fn set(Ext(s): Ext<State>, Json(body): Json<AgeBody>) -> Result<Json<Value>, Error> {
    let aging = Aging {
        task: body.task.trim().to_owned(),
        every_ms: body.every_ms,
        step: body.step,
        best: body.best,
    };
    let since = s.utils.set_aging(&aging, Some(crate::AUTHOR)).await?;
    Ok(Json(json!({ "aging": aging.label(), "since": since })))
}

#[derive(Deserialize)]
struct Lift {
    task: String,
}

async fn remove(Ext(s): Ext<State>, Json(body): Json<Lift>) -> Result<Json<Value>, Error> {
    if !s.utils.remove_aging(&body.task).await? {
        return Err(Error::Conflict(format!("{} was not aged", body.task)));
    }
    Ok(Json(json!({ "unaged": body.task })))
}
