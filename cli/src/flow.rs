//! `formica pause`, `resume`, `paused`, `cap`, `uncap` and `caps`: flow control from the
//! command line (docs/guide/flow-control.md).

use crate::output::{print_table, Output};
use crate::Failure;
use clap::Args;
use formica_tokio::flow::{Cap, Partition, Pause, Paused};
use formica_tokio::WorkerUtils;
use serde_json::json;

/// What `pause` and `resume` apply to: exactly one of a task, a named queue, or everything.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct Target {
    /// A task identifier.
    #[arg(long)]
    task: Option<String>,
    /// A named queue.
    #[arg(long)]
    queue: Option<String>,
    /// Every job.
    #[arg(long)]
    all: bool,
}

impl Target {
    fn pause(self) -> Pause {
        match (self.task, self.queue) {
            (Some(task), _) => Pause::task(task),
            (None, Some(queue)) => Pause::queue(queue),
            (None, None) => Pause::all(),
        }
    }
}

/// `formica pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    target: Target,
    /// Why (shown by `formica paused` and the dashboard).
    #[arg(long)]
    reason: Option<String>,
    /// Who pauses (default: the database role).
    #[arg(long)]
    by: Option<String>,
}

/// `formica resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    target: Target,
}

/// `formica cap`.
#[derive(Debug, Args)]
pub struct CapArgs {
    /// The task identifier.
    #[arg(long)]
    task: String,
    /// Most jobs of the task running at once across every Formica worker (per partition).
    #[arg(long)]
    max: u32,
    /// Cap each value of this payload field on its own (`customer_id`).
    #[arg(long, conflicts_with = "per_key_prefix")]
    per_field: Option<String>,
    /// Cap each job key prefix on its own: the key's text before the first occurrence of
    /// this separator (`:`).
    #[arg(long)]
    per_key_prefix: Option<String>,
    /// Who sets it (default: the database role).
    #[arg(long)]
    by: Option<String>,
}

/// Set a cap, and say so.
pub async fn cap(args: CapArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let partition = match (args.per_field, args.per_key_prefix) {
        (Some(field), _) => Some(Partition::Field(field)),
        (None, Some(separator)) => Some(Partition::KeyPrefix(separator)),
        (None, None) => None,
    };
    let cap = Cap { task: args.task, max_running: args.max, partition };
    let since = utils.set_cap(&cap, args.by.as_deref()).await?;
    let json = json!({ "task": cap.task, "max": cap.max_running, "since": since });
    print_table(
        out,
        &["capped", "max", "since"],
        vec![vec![cap.task, cap.max_running.to_string(), since.to_rfc3339()]],
        json,
    );
    Ok(())
}

/// Lift a cap; refused if there was none.
pub async fn uncap(task: String, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    if !utils.remove_cap(&task).await? {
        return Err(Failure::Command(format!("{task} was not capped")));
    }
    print_table(out, &["uncapped"], vec![vec![task.clone()]], json!({ "uncapped": task }));
    Ok(())
}

/// The caps in force.
pub async fn caps(utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let caps = utils.caps().await?;
    let per =
        |c: &Cap| c.partition.as_ref().map(|p| format!("{} {}", p.kind(), p.argument())).unwrap_or_default();
    let rows = caps
        .iter()
        .map(|c| {
            vec![
                c.cap.task.clone(),
                c.cap.max_running.to_string(),
                per(&c.cap),
                c.set_by.clone(),
                c.set_at.to_rfc3339(),
            ]
        })
        .collect();
    let json: Vec<_> = caps
        .iter()
        .map(|c| {
            json!({
                "task": c.cap.task, "max": c.cap.max_running,
                "partition": c.cap.partition.as_ref().map(|p| json!({ "kind": p.kind(), "argument": p.argument() })),
                "set_by": c.set_by, "set_at": c.set_at,
            })
        })
        .collect();
    print_table(out, &["task", "max", "per", "by", "since"], rows, json!(json));
    Ok(())
}

/// Pause, and say so.
pub async fn pause(args: PauseArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let pause = args.target.pause();
    let since = utils.pause(&pause, args.reason.as_deref(), args.by.as_deref()).await?;
    let json = json!({ "paused": pause.label(), "since": since });
    print_table(out, &["paused", "since"], vec![vec![pause.label(), since.to_rfc3339()]], json);
    Ok(())
}

/// Resume; refused if it was not paused (a typo would otherwise pass unnoticed).
pub async fn resume(args: ResumeArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let pause = args.target.pause();
    if !utils.resume(&pause).await? {
        return Err(Failure::Command(format!("{} was not paused", pause.label())));
    }
    print_table(out, &["resumed"], vec![vec![pause.label()]], json!({ "resumed": pause.label() }));
    Ok(())
}

/// The pauses in force.
pub async fn paused(utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let paused = utils.paused().await?;
    let label = |p: &Paused| p.pause().map_or_else(|| format!("{}:{}", p.scope, p.name), |p| p.label());
    let rows = paused
        .iter()
        .map(|p| {
            vec![
                label(p),
                p.reason.clone().unwrap_or_default(),
                p.paused_by.clone(),
                p.paused_at.to_rfc3339(),
            ]
        })
        .collect();
    print_table(out, &["paused", "reason", "by", "since"], rows, json!(paused));
    Ok(())
}
