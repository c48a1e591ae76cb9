//! Routing by flags on a real PostgreSQL, on both runtimes: a worker with accepted flags
//! runs only the jobs carrying one of them (and none carrying a forbidden flag), leaving the
//! rest, flagless jobs included, to other workers.

use formica::{JobContext, JobSpec, Runtime, TaskResult};
use formica_tests::{on_both_runtimes, timeout, TestDb};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

type Log = Arc<Mutex<Vec<i64>>>;

/// Runs every due job of task `t` with these flag lists, once; returns the `n` of each job run.
async fn run_once_with(
    rt: &Arc<dyn Runtime>,
    db: &TestDb,
    accepted: &[&str],
    forbidden: &[&str],
) -> Vec<i64> {
    let ran: Log = Default::default();
    let log = ran.clone();
    let worker = db
        .worker_options()
        .accepted_flags(accepted.iter().copied())
        .forbidden_flags(forbidden.iter().copied())
        .define_raw_job("t", move |_: JobContext, payload: Value| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(payload["n"].as_i64().unwrap());
                TaskResult::Ok(())
            }
        })
        .init()
        .await
        .expect("init");
    timeout(rt.as_ref(), Duration::from_secs(20), worker.run_once()).await.expect("returns").expect("ok");
    let mut ran = ran.lock().unwrap().clone();
    ran.sort();
    ran
}

async fn a_worker_with_accepted_flags_runs_only_jobs_carrying_one(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let flagged = |flags: &[&str]| JobSpec::builder().flags(flags.iter().copied()).build();
    for (n, spec) in [
        (0, flagged(&["gpu"])),
        (1, flagged(&["eu", "gpu"])),
        (2, flagged(&["gpu", "slow"])),
        (3, flagged(&["cpu"])),
        (4, JobSpec::default()),
        (5, flagged(&["eu"])),
    ] {
        utils.add_raw_job("t", json!({ "n": n }), spec).await.unwrap();
    }
    assert_eq!(
        run_once_with(&rt, &db, &["gpu", "eu"], &["slow"]).await,
        [0, 1, 5],
        "one accepted, none forbidden"
    );
    assert_eq!(run_once_with(&rt, &db, &["gpu"], &[]).await, [2], "of those left, the one with gpu");
    assert_eq!(run_once_with(&rt, &db, &[], &[]).await, [3, 4], "no allowlist: the rest, flagless included");
}

on_both_runtimes!(a_worker_with_accepted_flags_runs_only_jobs_carrying_one);
