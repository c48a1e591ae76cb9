//! Adding jobs from the dashboard: a job typed into the jobs page's form, and a run now of a
//! cron item or a runtime schedule (a job of its task, with its payload and options, due
//! now). Both go through [`WorkerUtils::add_raw_job`](formica::WorkerUtils::add_raw_job)
//! as `formica add` does, after the page's confirmation.

use crate::html::{button, esc, stamp};
use crate::{Error, State};
use axum::extract::{Path, State as Ext};
use axum::Json;
use chrono::{DateTime, Utc};
use formica::cron::{CronItem, Slot};
use formica::{inspect, JobSpec};
use serde::Deserialize;
use serde_json::{json, Value};

/// `POST /api/jobs`: a job as the form gives it, every field text but the numbers.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Add {
    task: String,
    /// The payload as JSON text, as typed (default `{}`).
    payload: Option<String>,
    queue: Option<String>,
    /// RFC 3339 (default now).
    run_at: Option<String>,
    job_key: Option<String>,
    priority: Option<i16>,
    max_attempts: Option<i16>,
}

/// Empty text is no value: a form's untouched field.
fn given(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
}

impl Add {
    /// The task, payload and spec, or what is wrong with them, naming the value.
    fn job(self) -> Result<(String, Value, JobSpec), Error> {
        let task = self.task.trim().to_owned();
        if task.is_empty() {
            return Err(Error::BadRequest("name the task of the job".into()));
        }
        let payload = match given(self.payload) {
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| Error::BadRequest(format!("the payload is not JSON ({e}): {text}")))?,
            None => json!({}),
        };
        let run_at = given(self.run_at)
            .map(|text| {
                text.parse::<DateTime<Utc>>().map_err(|e| {
                    Error::BadRequest(format!(
                        "run_at {text:?} is not an RFC 3339 time such as 2030-01-31T09:30:00Z ({e})"
                    ))
                })
            })
            .transpose()?;
        if self.max_attempts.is_some_and(|m| m < 1) {
            return Err(Error::BadRequest("max_attempts must be at least 1".into()));
        }
        let spec = JobSpec {
            queue_name: given(self.queue),
            run_at,
            max_attempts: self.max_attempts,
            job_key: given(self.job_key),
            priority: self.priority,
            ..JobSpec::default()
        };
        Ok((task, payload, spec))
    }
}

/// Add the job; answers `{"job": ...}`.
pub(crate) async fn add(Ext(s): Ext<State>, Json(body): Json<Add>) -> Result<Json<Value>, Error> {
    let (task, payload, spec) = body.job()?;
    let job = s.utils.add_raw_job(&task, payload, spec).await?;
    Ok(Json(json!({ "job": job })))
}

/// The jobs page's form adding a job, confirmed naming its task. Nothing for a viewer.
pub(crate) fn form() -> String {
    let add = button(
        "Add job",
        "/api/jobs",
        "Add a job of task {task}? It runs from run_at (now if empty).",
        &[("form", "add-job")],
    );
    if add.is_empty() {
        return String::new();
    }
    format!(
        r#"<details><summary>Add a job</summary><form id="add-job" class="filters inline">
<label>task <input name="task" placeholder="send_email"></label>
<label>payload <textarea name="payload" rows="2" cols="40" placeholder="{{}}"></textarea></label>
<label>queue <input name="queue" placeholder="none"></label>
<label>run_at <input name="run_at" placeholder="{}"></label>
<label>job_key <input name="job_key" placeholder="none"></label>
<label>priority <input name="priority" type="number" placeholder="0"></label>
<label>max_attempts <input name="max_attempts" type="number" min="1" placeholder="25"></label>{add}</form></details>"#,
        esc(&stamp(&Utc::now()))
    )
}

/// `POST /api/cron/{identifier}/run_now`: a job of the cron item or runtime schedule
/// `identifier` now, as its slot would add it (its `_cron.ts` is now); its next slots stay
/// as they were. A crontab item is looked for first, as the cron page lists them.
pub(crate) async fn run_now(
    Ext(s): Ext<State>,
    Path(identifier): Path<String>,
) -> Result<Json<Value>, Error> {
    let item = find(&s, &identifier).await?;
    let slot = Slot { at: Utc::now(), backfilled: false };
    let job = s.utils.add_raw_job(item.task(), item.job_payload(slot), item.job_spec(slot)).await?;
    Ok(Json(json!({ "job": job })))
}

async fn find(s: &State, identifier: &str) -> Result<CronItem, Error> {
    let crontab = inspect::cron(&s.utils, s.options.crontab.as_ref()).await?;
    let line = match crontab.items.into_iter().find(|c| c.identifier == identifier).and_then(|c| c.spec) {
        Some(line) => line,
        None => {
            let schedules = s.utils.schedules().await?;
            let schedule = schedules.into_iter().find(|r| r.identifier == identifier);
            schedule.map(|r| r.line).ok_or_else(|| {
                Error::NotFound(format!(
                    "no cron item or runtime schedule {identifier:?} in a crontab the dashboard can see"
                ))
            })?
        }
    };
    let parsed = formica::cron::parse(&line)
        .map_err(|e| Error::Conflict(format!("the line of {identifier:?} cannot be read ({e}): {line}")))?;
    parsed
        .into_items()
        .into_iter()
        .next()
        .ok_or_else(|| Error::Conflict(format!("{identifier:?} has no item")))
}

/// The Run now button of the cron item or runtime schedule `identifier`.
pub(crate) fn run_now_button(identifier: &str) -> String {
    button(
        "Run now",
        &format!("/api/cron/{}/run_now", crate::html::url(identifier)),
        &format!(
            "Run {identifier} now? A job of its task is added, due now; its next runs stay as they are."
        ),
        &[],
    )
}
