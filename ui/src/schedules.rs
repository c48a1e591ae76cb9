//! Runtime schedules on the dashboard: the Cron page's section listing them, with a form to
//! put one (add or change) and a button to remove each, and the API actions behind them,
//! each one [`WorkerUtils`](formica::WorkerUtils) call as in `formica schedule`.

use crate::html::{button, esc, opt_time, table};
use crate::{Error, State};
use axum::extract::{Path, State as Ext};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

type Answer = Result<Json<Value>, Error>;

/// `/api/schedules` (list, put) and `/api/schedules/{identifier}/remove`.
pub(crate) fn routes() -> Router<State> {
    Router::new()
        .route("/schedules", get(list).post(put))
        .route("/schedules/{identifier}/remove", post(remove))
}

async fn list(Ext(s): Ext<State>) -> Answer {
    Ok(Json(json!(s.reads.schedules().await?)))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Put {
    line: String,
}

async fn put(Ext(s): Ext<State>, Json(body): Json<Put>) -> Answer {
    let added = s.utils.put_schedule(body.line.trim()).await?;
    Ok(Json(json!({ "added": added })))
}

async fn remove(Ext(s): Ext<State>, Path(identifier): Path<String>) -> Answer {
    if !s.utils.remove_schedule(&identifier).await? {
        return Err(Error::NotFound(format!("no runtime schedule {identifier:?}")));
    }
    Ok(Json(json!({ "removed": identifier })))
}

/// The Cron page's section on runtime schedules.
pub(crate) async fn section(s: &State) -> Result<String, Error> {
    let schedules = s.reads.schedules().await?;
    let rows: Vec<Vec<String>> = schedules
        .iter()
        .map(|r| {
            let path = format!("/api/schedules/{}/remove", crate::html::url(&r.identifier));
            let confirm = format!("Remove the runtime schedule {}?", r.identifier);
            vec![
                esc(&r.identifier),
                esc(&r.line),
                opt_time(&r.last_execution),
                crate::adding::run_now_button(&r.identifier) + &button("remove", &path, &confirm, &[]),
            ]
        })
        .collect();
    let form = if !crate::guard::may("/api/schedules") {
        String::new()
    } else {
        format!(
            r#"<form class="inline" id="schedule-form"><input name="line" size="60" placeholder="0 8 * * 1-5 report ?tz=Europe/Paris  or  @every 30s poll"></form>{}"#,
            button(
                "put",
                "/api/schedules",
                "Add this schedule (or replace the one with its identifier)?",
                &[("form", "schedule-form")]
            )
        )
    };
    Ok(format!(
        r#"<h2>Runtime schedules</h2><p>Scheduled by the workers started with runtime schedules, each slot once across them.</p>{}{form}"#,
        table(&["identifier", "line", "last slot", ""], &rows)
    ))
}
