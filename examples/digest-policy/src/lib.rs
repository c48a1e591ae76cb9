//! A scheduling policy written as data: on each event, which jobs to add. Production
//! turns each `Decision` into `utils.add_raw_job(task, payload, spec)` and gives `CRONTAB`
//! to `WorkerOptions::cron`; the tests give both to `formica_core::sim` and check
//! them under faults (`tests/readme.rs`, `tests/policy.rs`).

use chrono::{DateTime, Duration, Utc};
use formica_core::cron::{parse, CronItem};
use formica_core::job::{JobKeyMode, JobSpec};
use serde_json::{json, Value};

/// Something that happened in the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The account did something its next digest reports.
    Activity { account: u32 },
    /// The account paid; its payments are recorded in the order they came.
    Payment { account: u32, cents: u32 },
}

/// A job to add.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub task: &'static str,
    pub payload: Value,
    pub spec: JobSpec,
}

/// The tasks a worker of this application runs.
pub const TASKS: [&str; 3] = ["send_digest", "record_payment", "reconcile"];

/// The jobs to add when `event` happens at `now`. An account's jobs share its queue, so
/// they run one at a time, in order. Its digest goes out ten minutes after the first
/// activity: the job key keeps one pending, `preserve_run_at` lets later activity join it.
pub fn decide(event: &Event, now: DateTime<Utc>) -> Vec<Decision> {
    match *event {
        Event::Activity { account } => vec![Decision {
            task: "send_digest",
            payload: json!({ "account": account }),
            spec: JobSpec::builder()
                .queue_name(format!("account:{account}"))
                .job_key(format!("digest:{account}"))
                .job_key_mode(JobKeyMode::PreserveRunAt)
                .run_at(now + Duration::minutes(10))
                .max_attempts(5)
                .build(),
        }],
        Event::Payment { account, cents } => vec![Decision {
            task: "record_payment",
            payload: json!({ "account": account, "cents": cents }),
            spec: JobSpec::builder().queue_name(format!("account:{account}")).max_attempts(20).build(),
        }],
    }
}

/// Reconcile every ten minutes; after downtime, catch up on the last hour.
pub const CRONTAB: &str = "*/10 * * * * reconcile ?fill=1h&max=5";

/// [`CRONTAB`]'s items, for a simulated worker's `Config`.
pub fn crontab() -> Vec<CronItem> {
    parse(CRONTAB).expect("a valid crontab").into_items()
}
