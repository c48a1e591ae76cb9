//! `formica doctor`: the queue's health checks (`formica::inspect::health`), each with its
//! evidence, and an exit status for cron and CI: 0 when nothing is wrong, 3 when a check
//! warns, 4 when one is critical (1 stays a failure to check at all, 2 a mistake in the
//! command line).

use crate::output::{print_json, visible, Output};
use crate::Failure;
use clap::Args;
use formica_tokio::inspect::{self, Health, Severity, Thresholds};
use formica_tokio::WorkerUtils;
use std::time::Duration;

/// `formica doctor`'s thresholds (the others keep their defaults, docs/guide/health.md).
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A transaction open this long warns (`5m`; a number and ms, s, m or h).
    #[arg(long, value_parser = crate::controls::period_ms)]
    horizon_warning: Option<u32>,
    /// A transaction open this long is critical (`1h`).
    #[arg(long, value_parser = crate::controls::period_ms)]
    horizon_critical: Option<u32>,
    /// A table past autovacuum's trigger point and not vacuumed for this long is behind
    /// (`10m`).
    #[arg(long, value_parser = crate::controls::period_ms)]
    autovacuum_behind: Option<u32>,
    /// Dead rows count only from this many on (default 10000).
    #[arg(long)]
    dead_rows_min: Option<u32>,
    /// Bloat counts only from this many bytes on (default 64 MiB).
    #[arg(long)]
    bloat_min_bytes: Option<u64>,
}

impl DoctorArgs {
    fn thresholds(&self) -> Thresholds {
        let mut t = Thresholds::default();
        let ms = |ms: u32| Duration::from_millis(ms.into());
        if let Some(v) = self.horizon_warning {
            t.horizon_warning = ms(v);
        }
        if let Some(v) = self.horizon_critical {
            t.horizon_critical = ms(v);
        }
        if let Some(v) = self.autovacuum_behind {
            t.autovacuum_behind = ms(v);
        }
        if let Some(v) = self.dead_rows_min {
            t.dead_rows_min = v.into();
        }
        if let Some(v) = self.bloat_min_bytes {
            t.bloat_min_bytes = i64::try_from(v).unwrap_or(i64::MAX);
        }
        t
    }
}

/// Make the checks, print them, and fail with [`Failure::Unhealthy`] if one is wrong.
pub async fn run(args: DoctorArgs, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let health = inspect::health(utils, &args.thresholds()).await?;
    match out {
        Output::Json => print_json(&serde_json::to_value(&health)?),
        Output::Human => print!("{}", report(&health)),
    }
    match health.worst() {
        worst @ (Severity::Warning | Severity::Critical) => Err(Failure::Unhealthy(worst)),
        Severity::Ok | Severity::Unknown => Ok(()),
    }
}

/// The checks for people: `ok horizon: ...`, the evidence indented below each.
fn report(health: &Health) -> String {
    let mut text = String::new();
    for check in &health.checks {
        text.push_str(&format!(
            "{:<8} {:<11} {}\n",
            check.severity.name(),
            check.name,
            visible(&check.summary)
        ));
        for line in &check.evidence {
            text.push_str(&format!("{:<21}{}\n", "", visible(line)));
        }
    }
    text
}
