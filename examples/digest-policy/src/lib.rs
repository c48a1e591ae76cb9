//! An application's scheduling policy, written as data so that the real worker and
//! `formica_core::sim` run the same decisions (see `tests/policy.rs`, which checks it
//! under faults, and the README's "Test your scheduling deterministically").
//!
//! The application sends each account a digest of its activity at most every ten minutes,
//! records its payments one at a time and in order, and reconciles every ten minutes.
//! In production each [`Decision`] becomes one `add_raw_job(task, payload, spec)` call;
//! in the simulation, one `world.db_mut().add_job(...)`.

use chrono::{DateTime, Duration, Utc};
use formica_core::cron::{Cron, CronItem};
use formica_core::job::{JobKeyMode, JobSpec};
use serde_json::{json, Value};

/// How long activity gathers before an account's digest goes out.
pub const DIGEST_DELAY: Duration = Duration::minutes(10);

/// Something that happened in the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The account did something its digest reports.
    Activity {
        /// The account.
        account: u32,
    },
    /// The account paid; payments are recorded in the order they came.
    Payment {
        /// The account.
        account: u32,
        /// The amount.
        cents: u32,
    },
}

/// A job to add: what the application decided, before anything is sent anywhere.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The task identifier.
    pub task: &'static str,
    /// The payload.
    pub payload: Value,
    /// Queue, key, run_at, attempts.
    pub spec: JobSpec,
}

/// The jobs to add when `event` happens at `now`.
///
/// - A digest per account: the job key `digest:<account>` keeps one pending; with
///   `preserve_run_at` later activity joins it without pushing it back.
/// - Everything of an account goes through its queue `account:<account>`, so its jobs
///   run one at a time, in order.
/// - Retries: five attempts for a digest, twenty for a payment.
pub fn decide(event: &Event, now: DateTime<Utc>) -> Vec<Decision> {
    match *event {
        Event::Activity { account } => vec![Decision {
            task: "send_digest",
            payload: json!({ "account": account }),
            spec: JobSpec::builder()
                .queue_name(format!("account:{account}"))
                .job_key(format!("digest:{account}"))
                .job_key_mode(JobKeyMode::PreserveRunAt)
                .run_at(now + DIGEST_DELAY)
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

/// The recurring jobs: reconcile every ten minutes, catching up on the last hour after
/// downtime.
pub fn crontab() -> Vec<CronItem> {
    let reconcile = Cron::for_task("reconcile", "*/10 * * * *")
        .fill(std::time::Duration::from_secs(3600))
        .max_attempts(5)
        .build()
        .expect("a valid cron item");
    vec![reconcile]
}

/// The tasks a worker of this application runs.
pub const TASKS: [&str; 3] = ["send_digest", "record_payment", "reconcile"];
