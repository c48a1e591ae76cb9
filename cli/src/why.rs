//! `formica why <job>`: why a job is not running, and when it will (docs/guide/why.md): every
//! reason `formica::inspect::why` finds, one a line, with its evidence and its end where known,
//! where a running job runs, and the estimate of its start.

use crate::output::{print_json, visible, Output};
use crate::Failure;
use formica_tokio::chrono::{DateTime, SecondsFormat, Utc};
use formica_tokio::inspect::{self, JobRef, Why};
use formica_tokio::WorkerUtils;
use serde_json::json;

/// Print why `job` is not running.
pub async fn why(job: &JobRef, utils: &WorkerUtils, out: Output) -> Result<(), Failure> {
    let answer = inspect::why(utils, job).await?;
    match out {
        Output::Json => print_json(&json!(answer)),
        Output::Human => print!("{}", text(job, &answer)),
    }
    Ok(())
}

/// The answer for people: a line saying what the job is and whether it runs, then a line
/// each reason, then the estimate.
fn text(job: &JobRef, why: &Why) -> String {
    let at = |t: &DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    let queue = why.queue.as_ref().map(|q| format!(", queue {q}")).unwrap_or_default();
    let name = why.job_id.map_or(job.to_string(), |id| format!("job {id}"));
    let mut lines = vec![format!("{name} (task {}{queue}): {}", why.task, why.state.replace('_', " "))];
    if let Some(running) = &why.running {
        let place = match (&running.host, running.pid) {
            (Some(host), Some(pid)) => format!(" on {host} (pid {pid})"),
            _ => String::new(),
        };
        let since = running.since.as_ref().map(|t| format!(" since {}", at(t))).unwrap_or_default();
        let lease = running
            .alive_until
            .as_ref()
            .map_or("; it has no Formica lease (graphile-worker's?)".to_owned(), |t| {
                format!("; its lease is alive until {}", at(t))
            });
        lines.push(format!("running: worker {}{place}{since}{lease}", running.worker));
    } else if why.reasons.is_empty() {
        lines.push("nothing holds it: the next fetch of a worker that runs its task takes it".to_owned());
    }
    for reason in &why.reasons {
        let until = reason.until().map(|t| format!(" [until {}]", at(&t))).unwrap_or_default();
        lines.push(format!("- {}: {}{until}", reason.name(), reason.describe(&why.task, &at)));
    }
    if let Some(estimate) = &why.estimate {
        lines.push(estimate.describe(&at));
    }
    lines.iter().map(|line| visible(line) + "\n").collect()
}
