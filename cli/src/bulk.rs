//! The bulk verbs: `formica retry`, `delete`, and `cancel`/`reschedule` given a filter, on
//! every job the filter picks (`formica::BulkFilter`), with `--dry-run` to say how many first.

use crate::output::{print_json, Output};
use crate::Failure;
use clap::Args;
use formica_tokio::chrono::{DateTime, Duration, Utc};
use formica_tokio::DEFAULT_BULK_BATCH_SIZE;
use formica_tokio::{BulkAction, BulkFilter, WorkerUtils};
use serde_json::json;

/// Which jobs a bulk verb picks, and how it runs. Jobs a worker holds are never picked.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Bulk options (jobs a worker holds are never picked)")]
pub struct Selection {
    /// Only jobs of this task.
    #[arg(long)]
    task: Option<String>,
    /// Only jobs of this named queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only jobs in these states (comma-separated): ready, scheduled, failed (waiting to
    /// retry), permanently_failed.
    #[arg(long, value_delimiter = ',')]
    state: Vec<String>,
    /// Only jobs that have failed at least once.
    #[arg(long)]
    failed: bool,
    /// Only jobs whose last error contains this text (case-insensitive).
    #[arg(long)]
    error: Option<String>,
    /// Only jobs added since then (a row records no time of failure): a time ago such as
    /// 30m, 1h, 2d, or an RFC 3339 time.
    #[arg(long, value_parser = parse_when)]
    since: Option<DateTime<Utc>>,
    /// Only jobs added before then (as --since).
    #[arg(long, value_parser = parse_when)]
    before: Option<DateTime<Utc>>,
    /// Only jobs with at least this many attempts.
    #[arg(long)]
    attempts_at_least: Option<i16>,
    /// Only jobs with at most this many attempts.
    #[arg(long)]
    attempts_at_most: Option<i16>,
    /// Only the job with this key.
    #[arg(long)]
    key: Option<String>,
    /// Every job (no other filter needed): without it, a filter is required.
    #[arg(long)]
    all: bool,
    /// Only say how many jobs would change.
    #[arg(long)]
    dry_run: bool,
    /// Jobs changed per statement (each its own short transaction).
    #[arg(long, default_value_t = DEFAULT_BULK_BATCH_SIZE, value_parser = clap::value_parser!(u32).range(1..))]
    batch_size: u32,
}

impl Selection {
    /// Whether a filter (or `--all`, or `--dry-run`) is given: the verb then works by filter.
    pub fn given(&self) -> bool {
        self.all || self.dry_run || self.filter(&[]) != BulkFilter::default()
    }

    /// The filter, with `ids` if any.
    fn filter(&self, ids: &[i64]) -> BulkFilter {
        BulkFilter {
            ids: (!ids.is_empty()).then(|| ids.to_vec()),
            task: self.task.clone(),
            queue: self.queue.clone(),
            states: self.state.clone(),
            failed: self.failed,
            error: self.error.clone(),
            since: self.since,
            before: self.before,
            attempts_at_least: self.attempts_at_least,
            attempts_at_most: self.attempts_at_most,
            key: self.key.clone(),
        }
    }
}

/// A time given as how long ago (`90s`, `30m`, `1h`, `2d`) or as RFC 3339.
fn parse_when(text: &str) -> Result<DateTime<Utc>, String> {
    // Checked all the way: a time ago beyond chrono's range is refused, not a panic.
    let ago = |n: &str, unit: fn(i64) -> Option<Duration>| {
        let n = n.parse::<i64>().ok()?;
        Some(
            unit(n)
                .and_then(|span| Utc::now().checked_sub_signed(span))
                .ok_or_else(|| format!("{text:?} is further back than any time a job can have been added")),
        )
    };
    let relative = match text.char_indices().last() {
        Some((at, 's')) => ago(&text[..at], Duration::try_seconds),
        Some((at, 'm')) => ago(&text[..at], Duration::try_minutes),
        Some((at, 'h')) => ago(&text[..at], Duration::try_hours),
        Some((at, 'd')) => ago(&text[..at], Duration::try_days),
        _ => None,
    };
    match relative {
        Some(at) => at,
        None => text.parse().map_err(|_| {
            format!("expected a time ago such as 30m, 1h or 2d, or an RFC 3339 time such as 2030-01-31T09:30:00Z, not {text:?}")
        }),
    }
}

/// Apply `action` to the jobs `ids` and `selection` pick (or with `--dry-run` count them),
/// and say how many.
pub async fn run(
    action: BulkAction,
    ids: &[i64],
    selection: &Selection,
    utils: &WorkerUtils,
    out: Output,
) -> Result<(), Failure> {
    let filter = selection.filter(ids);
    if filter.is_everything() && !selection.all {
        return Err(Failure::Command(format!(
            "give a filter (ids, --task, --queue, --state, --failed, --error, --since, ...) or --all: \
             `formica {}` does not act on every job unless told so",
            action.name()
        )));
    }
    let verb = action.name();
    let jobs = if selection.dry_run {
        utils.bulk_dry_run(&action, &filter).await?
    } else {
        utils.bulk_in_batches_of(&action, &filter, selection.batch_size).await?
    };
    match out {
        Output::Json => print_json(&json!({ "action": verb, "dry_run": selection.dry_run, "jobs": jobs })),
        Output::Human if selection.dry_run => println!("{verb}: {jobs} jobs would change (dry run)"),
        Output::Human => println!("{verb}: {jobs} jobs changed"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_given_as_a_time_ago_or_in_rfc_3339() {
        let hour_ago = parse_when("1h").unwrap();
        let off = (Utc::now() - Duration::hours(1) - hour_ago).num_seconds();
        assert!((0..5).contains(&off), "{off}");
        assert!(parse_when("2d").unwrap() < parse_when("47h").unwrap());
        assert_eq!(parse_when("2030-01-31T09:30:00Z").unwrap().to_rfc3339(), "2030-01-31T09:30:00+00:00");
        assert!(parse_when("soon").unwrap_err().contains("30m"));
        assert!(parse_when("h").is_err());
        for huge in ["100000000d", "200000000000d", "9223372036854775807s", "-9223372036854775808m"] {
            assert!(parse_when(huge).unwrap_err().contains(huge), "{huge}");
        }
    }
}
