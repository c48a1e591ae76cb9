//! `formica schedule list|put|remove`: runtime schedules (see the driver's `schedules`),
//! scheduled by workers started with `--runtime-schedules`.

use crate::output::{print_json, print_table, Output};
use crate::Failure;
use clap::Subcommand;
use formica_tokio::WorkerUtils;
use serde_json::json;

/// What to do with the runtime schedules.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// List the runtime schedules with their last slot.
    List,
    /// Add a schedule, or replace the one with its identifier: one crontab line
    /// (`0 8 * * 1-5 report ?tz=Europe/Paris`) or an interval (`@every 30s poll`).
    Put {
        /// The line (quote it).
        line: String,
    },
    /// Remove a schedule by its identifier.
    Remove {
        /// Its identifier (its `?id=`, else its task).
        identifier: String,
    },
}

/// Run `command` on `utils`' database.
pub async fn run(command: ScheduleCommand, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    match command {
        ScheduleCommand::List => {
            let schedules = utils.schedules().await?;
            let rows = schedules
                .iter()
                .map(|s| {
                    let last = s.last_execution.map(|at| at.to_rfc3339()).unwrap_or_else(|| "-".to_owned());
                    vec![s.identifier.clone(), s.line.clone(), last]
                })
                .collect();
            print_table(out, &["identifier", "line", "last slot"], rows, json!(schedules));
        }
        ScheduleCommand::Put { line } => {
            let added = utils.put_schedule(line.as_str()).await?;
            match out {
                Output::Json => print_json(&json!({ "added": added })),
                Output::Human => println!("{}", if added { "added" } else { "replaced" }),
            }
        }
        ScheduleCommand::Remove { identifier } => {
            if !utils.remove_schedule(&identifier).await? {
                return Err(Failure::Command(format!("no runtime schedule {identifier:?}")));
            }
            match out {
                Output::Json => print_json(&json!({ "removed": identifier })),
                Output::Human => println!("removed"),
            }
        }
    }
    Ok(())
}
