//! The JSON API under `/api/`: the pages' data as JSON, and the actions, each one
//! [`WorkerUtils`](formica::WorkerUtils) call as in the `formica` command.

use crate::data::{self, JobQuery};
use crate::{Error, State};
use axum::extract::{Path, Query, State as Ext};
use axum::routing::{get, post};
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use formica::inspect;
use formica::{Job, RescheduleJobOptions};
use serde::Deserialize;
use serde_json::{json, Value};

type Answer = Result<Json<Value>, Error>;

pub fn routes() -> Router<State> {
    Router::new()
        .route("/overview", get(overview))
        .route("/jobs", get(jobs).post(crate::adding::add))
        .route("/jobs/{id}", get(job))
        .route("/jobs/{id}/why", get(why))
        .route("/queues", get(queues))
        .route("/workers", get(workers))
        .route("/cron", get(cron))
        .route("/health", get(health))
        .route("/jobs/{id}/run_now", post(run_now))
        .route("/jobs/{id}/reschedule", post(reschedule))
        .route("/jobs/{id}/remove", post(remove))
        .route("/jobs/{id}/fail", post(fail))
        .route("/jobs/{id}/cancel", post(cancel))
        .route("/workers/unlock", post(unlock))
        .route("/cron/{identifier}/run_now", post(crate::adding::run_now))
        .route("/jobs/bulk", post(crate::bulk::bulk))
}

fn answer(value: impl serde::Serialize) -> Answer {
    Ok(Json(
        serde_json::to_value(value)
            .map_err(|e| Error::Database(format!("cannot write the answer as JSON: {e}")))?,
    ))
}

async fn overview(Ext(s): Ext<State>) -> Answer {
    answer(data::overview(&s.reads, &s.utils, &s.throughput).await?)
}

async fn jobs(Ext(s): Ext<State>, Query(query): Query<JobQuery>) -> Answer {
    answer(inspect::jobs(&s.reads, &query.selection()?).await?)
}

/// The job, or `{"id": .., "undecodable": "column ...: ..."}` if its row cannot be read.
async fn job(Ext(s): Ext<State>, Path(id): Path<i64>) -> Answer {
    match inspect::job(&s.reads, id).await?.ok_or_else(|| gone(id))? {
        Ok(detail) => answer(detail),
        Err(undecodable) => Ok(Json(inspect::undecodable_json(&undecodable))),
    }
}

/// Why the job is not running, and when it will (`formica why`).
async fn why(Ext(s): Ext<State>, Path(id): Path<i64>) -> Answer {
    answer(inspect::why(&s.utils, &inspect::JobRef::Id(id)).await?)
}

async fn queues(Ext(s): Ext<State>) -> Answer {
    answer(inspect::queues(&s.reads).await?)
}

async fn workers(Ext(s): Ext<State>) -> Answer {
    answer(inspect::workers(&s.reads).await?)
}

async fn cron(Ext(s): Ext<State>) -> Answer {
    answer(inspect::cron(&s.reads, s.options.crontab.as_ref()).await?)
}

/// The queue's health checks, read now (`formica doctor --json`'s answer).
async fn health(Ext(s): Ext<State>) -> Answer {
    answer(inspect::health(&s.utils, &inspect::Thresholds::default()).await?)
}

fn gone(id: i64) -> Error {
    Error::NotFound(format!("no job {id}: it completed, was removed, or never existed"))
}

/// The jobs an action changed, or why it changed none: the utilities skip jobs a worker
/// holds, and jobs that are gone.
async fn changed(s: &State, id: i64, jobs: Vec<Job>) -> Answer {
    if jobs.is_empty() {
        return Err(match inspect::job(&s.utils, id).await? {
            Some(_) => {
                Error::Conflict(format!("job {id} is running: a worker holds it, so it was left as it is"))
            }
            None => gone(id),
        });
    }
    Ok(Json(json!({ "jobs": jobs })))
}

/// Run the job as soon as a worker is free: its run time becomes now, its attempts stay.
async fn run_now(Ext(s): Ext<State>, Path(id): Path<i64>) -> Answer {
    let options = RescheduleJobOptions { run_at: Some(Utc::now()), ..Default::default() };
    let jobs = s.utils.reschedule_jobs(&[id], &options).await?;
    changed(&s, id, jobs).await
}

/// New values for a job; absent ones stay as they are.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reschedule {
    run_at: Option<DateTime<Utc>>,
    priority: Option<i16>,
    attempts: Option<i16>,
    max_attempts: Option<i16>,
}

async fn reschedule(Ext(s): Ext<State>, Path(id): Path<i64>, Json(body): Json<Reschedule>) -> Answer {
    let options = RescheduleJobOptions {
        run_at: body.run_at,
        priority: body.priority,
        attempts: body.attempts,
        max_attempts: body.max_attempts,
    };
    if options == RescheduleJobOptions::default() {
        return Err(Error::BadRequest(
            "give at least one of run_at, priority, attempts, max_attempts".into(),
        ));
    }
    if options.max_attempts.is_some_and(|m| m < 1) {
        return Err(Error::BadRequest("max_attempts must be at least 1".into()));
    }
    let jobs = s.utils.reschedule_jobs(&[id], &options).await?;
    changed(&s, id, jobs).await
}

/// Delete the job (as `formica complete`: jobs a worker holds are skipped).
async fn remove(Ext(s): Ext<State>, Path(id): Path<i64>) -> Answer {
    let jobs = s.utils.complete_jobs(&[id]).await?;
    changed(&s, id, jobs).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fail {
    reason: Option<String>,
}

async fn fail(Ext(s): Ext<State>, Path(id): Path<i64>, body: Option<Json<Fail>>) -> Answer {
    let reason = body.and_then(|Json(b)| b.reason).filter(|r| !r.trim().is_empty());
    let jobs = s.utils.permanently_fail_jobs(&[id], reason.as_deref()).await?;
    changed(&s, id, jobs).await
}

/// Cancel the job (as `formica cancel`): a waiting one fails for good with the reason; for
/// a running one a request is recorded, which its worker reads within a heartbeat: its task
/// is aborted and it fails for good unless it succeeds first. The answer says which, and
/// for whom the request was recorded.
async fn cancel(Ext(s): Ext<State>, Path(id): Path<i64>, body: Option<Json<Fail>>) -> Answer {
    let reason = body.and_then(|Json(b)| b.reason).filter(|r| !r.trim().is_empty());
    let cancelled =
        s.utils.cancel_job(id, reason.as_deref().unwrap_or("cancelled from the dashboard")).await?;
    if let Some(r) = cancelled.recorded.first() {
        let message = if r.leased {
            format!("recorded for worker {}, which aborts it within ~3 s", r.worker_id)
        } else {
            format!("recorded for {}, which has no Formica lease: it runs on, and fails as cancelled when released", r.worker_id)
        };
        return Ok(Json(
            json!({ "recorded": { "worker": r.worker_id, "leased": r.leased }, "message": message }),
        ));
    }
    if cancelled.failed.is_empty() {
        return Err(gone(id));
    }
    Ok(Json(json!({ "failed": cancelled.failed, "message": "failed for good" })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Unlock {
    worker_id: String,
    /// Unlock even a worker whose lease says it is alive (its running jobs may run twice).
    #[serde(default)]
    even_if_alive: bool,
}

/// Free everything a dead worker holds; a worker with a live lease only if forced (409
/// otherwise, naming it and until when it is alive).
async fn unlock(Ext(s): Ext<State>, Json(body): Json<Unlock>) -> Answer {
    if body.worker_id.trim().is_empty() {
        return Err(Error::BadRequest("worker_id is empty".into()));
    }
    let ids = [body.worker_id.as_str()];
    let unlocked = if body.even_if_alive {
        s.utils.force_unlock_workers_even_if_alive(&ids).await
    } else {
        s.utils.force_unlock_workers(&ids).await
    };
    match unlocked {
        Err(e @ formica::Error::WorkersAlive(_)) => Err(Error::Conflict(format!(
            "{e}. Unlock it anyway (\"even_if_alive\") only if you know it is dead."
        ))),
        unlocked => {
            unlocked?;
            Ok(Json(json!({ "unlocked": body.worker_id })))
        }
    }
}
