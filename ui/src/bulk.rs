//! Bulk actions on the jobs page: retry, reschedule, cancel or delete the jobs picked by
//! hand, or all the jobs matching the page's filter, through `WorkerUtils::bulk` as
//! `formica retry` and its siblings do. The page's script asks the API for a dry run
//! first, so the confirmation states how many jobs will change; jobs a worker is running
//! are never picked.

use crate::data::JobQuery;
use crate::html::esc;
use crate::{Error, State};
use axum::extract::State as Ext;
use axum::Json;
use chrono::{DateTime, Utc};
use formica::{BulkAction, BulkFilter, RescheduleJobOptions};
use serde::Deserialize;
use serde_json::{json, Value};

/// `POST /api/jobs/bulk`: an action on the jobs a filter picks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Bulk {
    /// `retry`, `reschedule`, `cancel` or `delete`.
    action: String,
    /// The jobs: `{"ids": [...]}` for those picked by hand, else the page's filter.
    filter: BulkFilter,
    /// Only count them.
    #[serde(default)]
    dry_run: bool,
    /// Why (cancel).
    reason: Option<String>,
    /// When they run (reschedule).
    run_at: Option<DateTime<Utc>>,
    /// Their priority (reschedule).
    priority: Option<i16>,
}

impl Bulk {
    fn action(&self) -> Result<BulkAction, Error> {
        let reason = self.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
        Ok(match self.action.as_str() {
            "retry" => BulkAction::Retry,
            "reschedule" => BulkAction::Reschedule(RescheduleJobOptions {
                run_at: self.run_at,
                priority: self.priority,
                ..RescheduleJobOptions::default()
            }),
            "cancel" => {
                BulkAction::Cancel { reason: reason.unwrap_or("cancelled from the dashboard").to_owned() }
            }
            "delete" => BulkAction::Delete,
            other => {
                return Err(Error::BadRequest(format!(
                    "unknown action {other:?}: expected retry, reschedule, cancel or delete"
                )))
            }
        })
    }
}

/// Count (`dry_run`) or change the jobs; answers `{"action", "dry_run", "jobs": n}`.
pub(crate) async fn bulk(Ext(s): Ext<State>, Json(body): Json<Bulk>) -> Result<Json<Value>, Error> {
    let action = body.action()?;
    if body.filter.is_everything() {
        return Err(Error::BadRequest(
            "give a filter or pick jobs: a bulk action never picks every job".into(),
        ));
    }
    let jobs = if body.dry_run {
        s.utils.bulk_dry_run(&action, &body.filter).await?
    } else {
        s.utils.bulk(&action, &body.filter).await?
    };
    Ok(Json(json!({ "action": action.name(), "dry_run": body.dry_run, "jobs": jobs })))
}

/// The filter of the jobs page's `query` (its state as the only state).
pub(crate) fn filter_of(query: &JobQuery) -> BulkFilter {
    let query = query.cleaned();
    BulkFilter {
        task: query.task,
        queue: query.queue,
        states: query.state.into_iter().collect(),
        key: query.key,
        error: query.error,
        ..BulkFilter::default()
    }
}

/// The jobs page's bulk bar: each action on the jobs ticked, and on all the jobs matching
/// the page's filter (when it has one). Nothing in read-only mode.
pub(crate) fn bar(query: &JobQuery) -> String {
    if !crate::guard::may_act() {
        return String::new();
    }
    let filter = filter_of(query);
    // Run again with fresh attempts: jobs failed for good are redriven (their dead letters,
    // if any, were sent when they failed).
    let retry = match query.state.as_deref() {
        Some("permanently_failed") => "Redrive",
        _ => "Retry",
    };
    let actions =
        [("retry", retry), ("reschedule", "Reschedule"), ("cancel", "Cancel"), ("delete", "Delete")];
    let buttons = |filter: Option<&BulkFilter>, whom: &str| -> String {
        actions
            .iter()
            .map(|(action, label)| {
                let data = match filter {
                    Some(f) => format!(r#" data-filter="{}""#, esc(&json!(f).to_string())),
                    None => r#" data-picked="""#.to_owned(),
                };
                let confirm = format!("{label} {{n}} {whom}? Jobs a worker is running are left alone.");
                format!(
                    r#"<button data-bulk="{action}"{data} data-confirm="{}" data-form="bulk">{label}</button>"#,
                    esc(&confirm)
                )
            })
            .collect()
    };
    let all = if filter.is_everything() {
        r#"<span class="none">filter the page to act on all the jobs matching it</span>"#.to_owned()
    } else {
        buttons(Some(&filter), "jobs matching this filter")
    };
    format!(
        r#"<form id="bulk" class="filters inline"><b>Ticked jobs:</b> {}<b>All matching this filter:</b> {all}
<label>reason <input name="reason" placeholder="cancelled from the dashboard"></label><label>run_at <input name="run_at" placeholder="{}"></label></form>"#,
        buttons(None, "ticked jobs"),
        esc(&Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
    )
}

/// The tick box of a job's row.
pub(crate) fn tick(id: i64) -> String {
    format!(r#"<input type="checkbox" class="pick" value="{id}" aria-label="job {id}">"#)
}
