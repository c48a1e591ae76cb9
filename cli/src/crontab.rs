//! `formica crontab check|parse <file>`: the crontab parser's verdict, with no database.

use chrono::{DateTime, Utc};
use clap::Subcommand;
use formica_tokio::cron::{self, CronItem, Crontab};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// What to do with a crontab file.
#[derive(Debug, Subcommand)]
pub enum CrontabCommand {
    /// Parse the file and print each item's canonical form, its next five runs (UTC) and
    /// whether graphile-worker's parser would refuse it, or the first mistake with its line
    /// and column.
    Check {
        /// The crontab file.
        file: PathBuf,
    },
    /// Parse the file and print its items as JSON.
    Parse {
        /// The crontab file.
        file: PathBuf,
    },
}

/// Run `command`; `Err` carries the message for stderr (exit 1).
pub fn run(command: CrontabCommand, now: DateTime<Utc>) -> Result<(), String> {
    use crate::output::{json_text, visible_lines};
    use std::fmt::Write;
    let mut out = String::new();
    match command {
        CrontabCommand::Check { file } => {
            for item in read(&file)?.items() {
                let _ = writeln!(out, "{item}");
                if let Some(why) = item.graphile_worker_refuses() {
                    let _ = writeln!(
                        out,
                        "  graphile-worker 0.18 refuses this line ({why}): run it on Formica workers only"
                    );
                }
                let runs = std::iter::successors(item.next_after(now), |&at| item.next_after(at)).take(5);
                let mut any = false;
                for at in runs {
                    let _ = writeln!(out, "  {}", at.format("%Y-%m-%d %H:%M UTC (%a)"));
                    any = true;
                }
                if !any {
                    out.push_str("  (never fires)\n");
                }
            }
            out = visible_lines(&out);
        }
        CrontabCommand::Parse { file } => {
            let items: Vec<Value> = read(&file)?.items().iter().map(item_json).collect();
            out = json_text(&serde_json::to_string_pretty(&items).map_err(|e| e.to_string())?) + "\n";
        }
    }
    // A closed pipe (`| head`) is the reader's choice, not an error.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes());
    Ok(())
}

fn read(file: &Path) -> Result<Crontab, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    cron::parse(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// An item with graphile-worker's field names; options that are unset are absent.
fn item_json(item: &CronItem) -> Value {
    let options = item.options();
    let mut opts = Map::new();
    let mut set = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            opts.insert(key.to_owned(), value);
        }
    };
    let backfill_ms = options.backfill_period.as_millis();
    set("backfillPeriod", (backfill_ms > 0).then(|| json!(backfill_ms)));
    set("maxAttempts", options.max_attempts.map(|n| json!(n)));
    set("queueName", options.queue_name.as_ref().map(|q| json!(q)));
    set("priority", options.priority.map(|p| json!(p)));
    set("jobKey", options.job_key.as_ref().map(|k| json!(k)));
    set("jobKeyMode", options.job_key_mode.map(|m| json!(m.as_str())));
    set("timeZone", options.time_zone.map(|z| json!(z.name())));
    set("intervalSeconds", item.interval().map(|p| json!(p.as_secs())));
    let list = |set: cron::FieldSet| set.iter().collect::<Vec<u32>>();
    json!({
        "identifier": item.identifier(),
        "task": item.task(),
        "minutes": list(item.minutes()),
        "hours": list(item.hours()),
        "dates": list(item.dates()),
        "months": list(item.months()),
        "dows": list(item.dows()),
        "options": opts,
        "payload": item.payload(),
    })
}
