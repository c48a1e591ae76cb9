//! `formica dead-letter set|remove|list`: where a task's jobs go when they fail for good
//! (docs/guide/dead-letters.md), through `WorkerUtils`' dead letters.

use crate::output::{print_table, Output};
use crate::Failure;
use clap::Subcommand;
use formica_tokio::WorkerUtils;
use serde_json::json;

/// What to do with the dead letters.
#[derive(Debug, Subcommand)]
pub enum DeadLetterCommand {
    /// List the dead letters, with how many jobs each sent.
    List,
    /// Send the jobs of a task that fail for good to another task (replaces its dead letter).
    Set {
        /// The task whose jobs are sent.
        task: String,
        /// The task that receives them.
        target: String,
        /// Who sets it (default: the database role).
        #[arg(long)]
        by: Option<String>,
    },
    /// Send a task's jobs nowhere when they fail for good.
    Remove {
        /// The task.
        task: String,
    },
}

/// Run `command` on `utils`' database.
pub async fn run(command: DeadLetterCommand, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    match command {
        DeadLetterCommand::List => {
            let letters = utils.dead_letters().await?;
            let rows = letters
                .iter()
                .map(|d| {
                    let last = d.last_sent.map(|(job, at)| format!("job {job} at {}", at.to_rfc3339()));
                    vec![
                        d.task.clone(),
                        d.target.clone(),
                        d.sent.to_string(),
                        last.unwrap_or_default(),
                        d.set_by.clone(),
                        d.set_at.to_rfc3339(),
                    ]
                })
                .collect();
            print_table(out, &["task", "sent to", "sent", "last sent", "by", "since"], rows, json!(letters));
        }
        DeadLetterCommand::Set { task, target, by } => {
            let since = utils.set_dead_letter(&task, &target, by.as_deref()).await?;
            let json = json!({ "task": task, "target": target, "since": since });
            print_table(
                out,
                &["task", "sent to", "since"],
                vec![vec![task, target, since.to_rfc3339()]],
                json,
            );
        }
        DeadLetterCommand::Remove { task } => {
            if !utils.remove_dead_letter(&task).await? {
                return Err(Failure::Command(format!("task {task:?} has no dead letter")));
            }
            print_table(out, &["removed"], vec![vec![task.clone()]], json!({ "removed": task }));
        }
    }
    Ok(())
}
