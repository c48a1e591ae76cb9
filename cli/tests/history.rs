//! A `formica` worker process SIGKILLed while it runs a job leaves no history row for it;
//! the job's next run, on another worker, ends it and writes exactly one. `--no-history`
//! keeps none.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_tests::TestDb;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::Worker;

fn worker(db: &TestDb, tasks: &Path) -> Worker {
    common::worker(&db.url, tasks, &["--poll-interval", "200"])
}

fn write_task(dir: &Path, script: &str) {
    common::write_task(dir, "report.sh", script);
}

const HISTORY: &str = "select count(*) from formica_graphile_worker.job_history";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_s_job_has_no_history_until_its_next_run_ends_it_then_one_row() {
    let db = TestDb::migrated().await;
    let root = std::env::temp_dir().join(format!("formica-history-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (first, second) = (root.join("first"), root.join("second"));
    // The first worker's task has done its work and is about to return when it is killed.
    write_task(&first, "#!/bin/sh\ntouch \"$(dirname \"$0\")/worked\"\nsleep 30\n");
    write_task(&second, "#!/bin/sh\nexit 0\n");
    let job = db.utils().add_raw_job("report", serde_json::json!({}), Default::default()).await.unwrap();

    let mut a = worker(&db, &first);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !first.join("worked").exists() {
        assert!(Instant::now() < deadline, "the task did not run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dead: String = db
        .client()
        .await
        .query_one("select locked_by from graphile_worker._private_jobs where id = $1", &[&job.id])
        .await
        .unwrap()
        .get(0);
    assert!(Command::new("kill").args(["-KILL", &a.0.id().to_string()]).status().unwrap().success());
    a.0.wait().unwrap();
    assert_eq!(db.count(HISTORY).await, 0, "no outcome, no row");

    // Freed at once, as an operator who knows it is dead would; another worker runs it.
    let out = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "unlock", &dead, "--even-if-alive"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _b = worker(&db, &second);
    db.wait_for_count(HISTORY, 1, Duration::from_secs(20)).await;
    let row = db
        .client()
        .await
        .query_one("select job_id, outcome, attempts from formica_graphile_worker.job_history", &[])
        .await
        .unwrap();
    let (id, outcome, attempts): (i64, String, i16) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((id, outcome.as_str(), attempts), (job.id, "completed", 2), "the killed attempt counts");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(db.count(HISTORY).await, 1, "exactly one");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_run_with_no_history_keeps_none() {
    let db = TestDb::migrated().await;
    let tasks = std::env::temp_dir().join(format!("formica-no-history-{}", std::process::id()));
    write_task(&tasks, "#!/bin/sh\nexit 0\n");
    db.utils().add_raw_job("report", serde_json::json!({}), Default::default()).await.unwrap();
    let run = |flags: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_formica"))
            .args(["-c", &db.url, "--tasks", tasks.to_str().unwrap(), "--once"])
            .args(flags)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["--no-history"]);
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0, "it ran");
    assert_eq!(db.count(HISTORY).await, 0);
    db.utils().add_raw_job("report", serde_json::json!({}), Default::default()).await.unwrap();
    run(&[]);
    assert_eq!(db.count(HISTORY).await, 1, "kept by default");
    let _ = std::fs::remove_dir_all(&tasks);
}
