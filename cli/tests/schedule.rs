//! `formica schedule` on a real PostgreSQL: put, list and remove runtime schedules, and a
//! `formica --runtime-schedules` worker that schedules one put while it runs.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use serde_json::Value;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::common;

fn formica(db: &TestDb, args: &[&str]) -> Output {
    common::formica(&db.url, args)
}

fn json(db: &TestDb, args: &[&str]) -> Value {
    common::json(&db.url, args)
}

/// A worker process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn schedule_put_list_remove_and_a_worker_that_takes_runtime_schedules() {
    let db = TestDb::migrated().await;
    assert_eq!(json(&db, &["schedule", "put", "@every 1s beat {from: 'cli'}"])["added"], true);
    assert_eq!(json(&db, &["schedule", "put", "@every 1s beat {from: 'cli', v: 2}"])["added"], false);
    let listed = json(&db, &["schedule", "list"]);
    assert_eq!(listed[0]["line"], r#"@every 1s beat {"from":"cli","v":2}"#, "{listed}");
    for (line, says) in
        [("@every 0s beat", "period"), ("@every 1w beat", "period"), ("@every 1s beat ?tz=UTC", "'tz'")]
    {
        let bad = formica(&db, &["schedule", "put", line]);
        assert!(
            !bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains(says),
            "{line}: {bad:?}"
        );
    }
    assert_eq!(json(&db, &["schedule", "list"]).as_array().map(Vec::len), Some(1), "nothing bad stored");

    let dir = std::env::temp_dir().join(format!("formica-schedule-{}", db.name));
    std::fs::create_dir_all(dir.join("tasks")).unwrap();
    let worker = Running(
        Command::new(env!("CARGO_BIN_EXE_formica"))
            .args(["-c", &db.url, "--runtime-schedules"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start formica"),
    );
    let beats = "select count(*) from graphile_worker.jobs where task_identifier = 'beat'";
    let mut seen = 0;
    for _ in 0..100 {
        seen = db.count(beats).await;
        if seen >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen >= 2, "the worker schedules the runtime schedule: {seen} jobs");
    assert_eq!(json(&db, &["schedule", "remove", "beat"])["removed"], "beat");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = db.count(beats).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(db.count(beats).await, after, "removed: no more jobs");
    drop(worker);
    let _ = std::fs::remove_dir_all(&dir);
    let missing = formica(&db, &["schedule", "remove", "beat"]);
    assert!(!missing.status.success(), "removing what is not there fails");
}
