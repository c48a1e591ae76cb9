//! `formica workflows` and `formica workflow show|cancel|retry|delete|signal`: workflows
//! (docs/guide/workflows.md) from the command line, read through `WorkerUtils::workflows`
//! and `workflow` as the dashboard reads them.

use crate::output::{print_json, print_table, table, visible, visible_lines, Output};
use crate::Failure;
use clap::{Args, Subcommand};
use formica_tokio::inspect::{
    WorkflowDetail, WorkflowFilter, WorkflowJobSeen, WorkflowSummary, WORKFLOW_JOB_COLUMNS,
};
use formica_tokio::{SignalSent, WorkerUtils};
use serde_json::json;

/// `formica workflows`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only workflows in this state: running, completed, failed or cancelled.
    #[arg(long)]
    state: Option<String>,
    /// Only workflows of this name.
    #[arg(long)]
    name: Option<String>,
    /// At most this many (the newest).
    #[arg(long, default_value_t = 100)]
    limit: i64,
}

/// `formica workflow ...`.
#[derive(Debug, Subcommand)]
pub enum WorkflowCommand {
    /// Show one workflow: its state, and each job with its state, job id, attempts, what it
    /// depends on and its last error.
    Show {
        /// The workflow id.
        id: i64,
    },
    /// Cancel a workflow: nothing of it is released any more, its waiting jobs are
    /// cancelled, and its released ones cancelled as `formica cancel` cancels a job (one
    /// running is aborted by its worker).
    Cancel {
        /// The workflow id.
        id: i64,
        /// Why (stored as `cancelled: <reason>` on its released jobs).
        #[arg(long, default_value = "by request")]
        reason: String,
    },
    /// Run a workflow's failed jobs again, and put back to wait the jobs cancelled because
    /// of them (refused for a cancelled workflow).
    Retry {
        /// The workflow id.
        id: i64,
    },
    /// Delete a finished workflow and its rows now (workers delete finished ones past their
    /// history's retention by themselves). Refused while a job of it waits or is released,
    /// unless `--force`.
    Delete {
        /// The workflow id.
        id: i64,
        /// Delete it unfinished: its waiting jobs never run, and its released jobs stay in
        /// the queue and run as jobs nothing waits for (cancel it first to stop them).
        #[arg(long)]
        force: bool,
    },
    /// Send a signal to a workflow: each job waiting for it gets it (and its payload), and is
    /// released now if what it depends on has settled. Sent twice, or for no waiting job,
    /// it changes nothing and says so (exit status 1); no such workflow, likewise.
    Signal {
        /// The workflow id.
        id: i64,
        /// The signal's name.
        name: String,
        /// Its payload, as JSON (the released jobs find it under "signal"."payload").
        #[arg(long)]
        payload: Option<String>,
    },
}

/// List workflows, newest first.
pub async fn list(args: ListArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let filter = WorkflowFilter { state: args.state, name: args.name, limit: args.limit };
    let workflows = utils.workflows(&filter).await?;
    let rows = workflows.iter().map(summary_row).collect();
    let headers =
        ["id", "name", "state", "jobs", "waiting", "released", "completed", "failed", "cancelled", "created"];
    print_table(out, &headers, rows, json!(workflows));
    Ok(())
}

fn summary_row(w: &WorkflowSummary) -> Vec<String> {
    let counts = [w.total, w.waiting, w.released, w.completed, w.failed, w.cancelled];
    [w.id.to_string(), w.name.clone(), w.state.clone()]
        .into_iter()
        .chain(counts.iter().map(i32::to_string))
        .chain([seconds(&w.created_at)])
        .collect()
}

fn seconds(at: &formica_tokio::chrono::DateTime<formica_tokio::chrono::Utc>) -> String {
    at.to_rfc3339_opts(formica_tokio::chrono::SecondsFormat::Secs, true)
}

/// Run one `formica workflow` subcommand.
pub async fn run(command: WorkflowCommand, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    match command {
        WorkflowCommand::Show { id } => {
            let Some(detail) = utils.workflow(id).await? else {
                return Err(Failure::Command(format!("no workflow {id}")));
            };
            print_detail(out, &detail);
        }
        WorkflowCommand::Cancel { id, reason } => {
            let cancelled = utils.cancel_workflow(id, &reason).await?;
            let released = &cancelled.released;
            let mut rows = vec![vec!["waiting".to_owned(), format!("{} cancelled", cancelled.waiting)]];
            rows.extend(
                released.failed.iter().map(|job| vec![format!("job {job}"), "failed for good".into()]),
            );
            rows.extend(released.recorded.iter().map(|r| {
                vec![format!("job {}", r.job_id), format!("running on {}: its worker aborts it", r.worker_id)]
            }));
            let recorded: Vec<_> = released
                .recorded
                .iter()
                .map(|r| json!({ "id": r.job_id, "worker": r.worker_id, "leased": r.leased }))
                .collect();
            let json = json!({
                "id": id, "cancelled": true, "waiting": cancelled.waiting,
                "failed": released.failed, "recorded": recorded,
            });
            print_table(out, &["cancelled", ""], rows, json);
        }
        WorkflowCommand::Retry { id } => {
            let retried = utils.retry_workflow(id).await?;
            let rows = retried
                .rerun
                .iter()
                .map(|job| vec![job.clone(), "runs again".to_owned()])
                .chain(retried.waiting.iter().map(|job| vec![job.clone(), "waits again".to_owned()]))
                .collect();
            let json = json!({ "id": id, "rerun": retried.rerun, "waiting": retried.waiting });
            print_table(out, &["job", "retried"], rows, json);
        }
        WorkflowCommand::Delete { id, force } => {
            let deleted = utils.delete_workflow(id, force).await?;
            let mut rows = vec![vec![format!("workflow {id}"), "deleted".to_owned()]];
            if deleted.waiting > 0 {
                rows.push(vec![format!("{} waiting jobs", deleted.waiting), "never run".to_owned()]);
            }
            if deleted.released > 0 {
                let what = "stay in the queue, waited for by nothing".to_owned();
                rows.push(vec![format!("{} released jobs", deleted.released), what]);
            }
            if let Some((workflow, job)) = &deleted.failed_parent {
                let what = format!("failed: its sub-workflow {id} was deleted");
                rows.push(vec![format!("job {job:?} of workflow {workflow}"), what]);
            }
            let parent =
                deleted.failed_parent.map(|(workflow, job)| json!({ "workflow": workflow, "job": job }));
            let json = json!({
                "id": id, "deleted": true, "waiting": deleted.waiting, "released": deleted.released,
                "failed_parent": parent,
            });
            print_table(out, &["deleted", ""], rows, json);
        }
        WorkflowCommand::Signal { id, name, payload } => {
            signal(utils, out, id, &name, payload.as_deref()).await?
        }
    }
    Ok(())
}

/// `formica workflow signal`: the jobs that got it, or why none did (an error).
async fn signal(
    utils: &WorkerUtils,
    out: Output,
    id: i64,
    name: &str,
    payload: Option<&str>,
) -> Result<(), Failure> {
    let payload = match payload {
        Some(text) => Some(
            serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| Failure::Command(format!("--payload is not JSON ({e}): {text}")))?,
        ),
        None => None,
    };
    let sent = utils.signal_workflow(id, name, payload.as_ref()).await?;
    if let Some(refused) = sent.unreceived(id, name) {
        return Err(Failure::Command(refused));
    }
    let SignalSent::Received { jobs, released } = sent else { return Ok(()) };
    let rows = (jobs.iter())
        .map(|job| {
            let what = if released.contains(job) { "released" } else { "got it; waits for its jobs" };
            vec![job.clone(), what.to_owned()]
        })
        .collect();
    let json = json!({ "id": id, "signal": name, "received": jobs, "released": released });
    print_table(out, &["job", "signal"], rows, json);
    Ok(())
}

/// Print a workflow whole: its facts, then a line per job.
fn print_detail(out: Output, detail: &WorkflowDetail) {
    if out == Output::Json {
        return print_json(&json!(detail));
    }
    let w = &detail.summary;
    let cancelled = match (&w.cancelled_at, &w.cancel_reason) {
        (Some(at), reason) => format!("{} ({})", seconds(at), reason.as_deref().unwrap_or("no reason given")),
        (None, _) => "(no)".to_owned(),
    };
    let fields = [
        ("id", w.id.to_string()),
        ("name", w.name.clone()),
        ("state", w.state.clone()),
        ("created_at", seconds(&w.created_at)),
        ("cancelled", cancelled),
    ];
    for (name, value) in fields {
        println!("{name:<10} {}", visible(&value));
    }
    println!();
    let rows: Vec<Vec<String>> = detail.jobs.iter().map(job_row).collect();
    let headers = [&WORKFLOW_JOB_COLUMNS[..], &["last_error"]].concat();
    print!("{}", table(&headers, &rows));
    for job in detail.jobs.iter().filter(|j| j.last_error.as_deref().is_some_and(|e| e.contains('\n'))) {
        println!(
            "\n{} last_error:\n{}",
            visible(&job.name),
            visible_lines(job.last_error.as_deref().unwrap_or(""))
        );
    }
}

fn job_row(j: &WorkflowJobSeen) -> Vec<String> {
    let state = match &j.job_state {
        Some(job_state) if j.state == "released" => format!("released ({job_state})"),
        _ => j.state.clone(),
    };
    let (attempts, policy) = (j.attempts_text(), j.policy());
    let error = j.last_error.as_deref().and_then(|e| e.lines().next()).unwrap_or_default();
    vec![
        j.name.clone(),
        j.task.clone(),
        state,
        j.job_id.map(|id| id.to_string()).unwrap_or_default(),
        attempts,
        j.depends_on.join(", "),
        policy,
        j.waits_for_text(),
        error.chars().take(60).collect(),
    ]
}
