//! `formica history`, and a finished job's history row for `formica job ID`: what happened to
//! jobs that ended for good (docs/guide/history.md).

use crate::output::{print_json, print_table, short, visible, visible_lines, Output};
use crate::Failure;
use clap::Args;
use formica_tokio::chrono::{DateTime, SecondsFormat, Utc};
use formica_tokio::HistoryFilter;
use formica_tokio::{FinalState, JobOutcome, WorkerUtils};
use serde_json::{json, Value};

/// `formica history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Only jobs of this task.
    #[arg(long)]
    task: Option<String>,
    /// Only jobs that ended so.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(
        [FinalState::Completed, FinalState::Failed, FinalState::Cancelled].map(FinalState::as_str)
    ))]
    outcome: Option<String>,
    /// At most this many rows.
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

/// List the newest finished jobs `args` picks.
pub async fn list(args: HistoryArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let filter = HistoryFilter { task: args.task, outcome: args.outcome, ..HistoryFilter::default() };
    let runs = utils.history(&filter, args.limit).await?;
    let rows = runs
        .iter()
        .map(|r| {
            vec![
                r.job_id.to_string(),
                r.task_identifier.clone(),
                r.outcome.as_str().to_owned(),
                format!("{}/{}", r.attempts, r.max_attempts),
                time(&r.finished_at, SecondsFormat::Secs),
                r.last_error.as_deref().map(|e| short(e, 60)).unwrap_or_default(),
            ]
        })
        .collect();
    let json = Value::Array(runs.iter().map(outcome_json).collect());
    print_table(out, &["id", "task", "outcome", "attempts", "finished_at", "last_error"], rows, json);
    Ok(())
}

/// Print one finished job whole, from its history row.
pub fn print_outcome(out: Output, run: &JobOutcome) {
    if out == Output::Json {
        return print_json(&outcome_json(run));
    }
    let none = || "(none)".to_owned();
    let at = |t: &DateTime<Utc>| time(t, SecondsFormat::Millis);
    let fields = [
        ("id", run.job_id.to_string()),
        ("task", run.task_identifier.clone()),
        ("outcome", format!("{} (finished; from the history)", run.outcome.as_str())),
        ("queue", run.queue_name.clone().unwrap_or_else(none)),
        ("attempts", format!("{}/{}", run.attempts, run.max_attempts)),
        ("key", run.key.clone().unwrap_or_else(none)),
        ("added_at", at(&run.added_at)),
        ("started_at", run.started_at.as_ref().map_or_else(none, at)),
        ("finished_at", at(&run.finished_at)),
        ("worker", run.worker_id.clone().unwrap_or_else(none)),
    ];
    for (name, value) in fields {
        println!("{name:<11} {}", visible(&value));
    }
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    println!("payload:\n{}", visible_lines(&formica_tokio::payload_as_shown(&run.payload)));
    println!("last_error:\n{}", visible_lines(run.last_error.as_deref().unwrap_or("(none)")));
    println!("output:\n{}", visible_lines(&run.output.as_ref().map_or_else(none, pretty)));
}

fn outcome_json(run: &JobOutcome) -> Value {
    json!({
        "id": run.job_id, "task_identifier": run.task_identifier, "queue_name": run.queue_name,
        "key": run.key, "payload": run.payload, "attempts": run.attempts,
        "max_attempts": run.max_attempts, "outcome": run.outcome.as_str(),
        "last_error": run.last_error, "added_at": run.added_at, "started_at": run.started_at,
        "finished_at": run.finished_at, "worker_id": run.worker_id, "output": run.output,
    })
}

fn time(at: &DateTime<Utc>, format: SecondsFormat) -> String {
    at.to_rfc3339_opts(format, true)
}
