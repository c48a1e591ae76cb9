//! `formica pause`, `formica resume` and `formica paused`: flow control from the command
//! line (docs/guide/flow-control.md).

use crate::output::{print_table, Output};
use crate::Failure;
use clap::Args;
use formica_tokio::flow::{Pause, Paused};
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
            vec![label(p), p.reason.clone().unwrap_or_default(), p.paused_by.clone(), p.paused_at.to_rfc3339()]
        })
        .collect();
    print_table(out, &["paused", "reason", "by", "since"], rows, json!(paused));
    Ok(())
}
