//! `--poll-interval` below the minimum (10 ms) is refused with a message naming it: a
//! zero interval used to make an idle worker look for jobs without pause, keeping most of a
//! core busy.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_tests::TestDb;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run a worker with `--poll-interval <ms>` (and `extra`) on `db` with an empty tasks folder;
/// its exit code and standard error, or `None` if it still ran after 20 s (then killed).
fn worker(db: &TestDb, ms: &str, extra: &[&str]) -> Option<(Option<i32>, String)> {
    let tasks = std::env::temp_dir().join(format!("formica-poll-tasks-{}", db.name));
    std::fs::create_dir_all(&tasks).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--tasks", tasks.to_str().unwrap(), "--poll-interval", ms])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start formica");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    Some((out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned()))
}

#[tokio::test]
async fn a_poll_interval_under_ten_milliseconds_is_refused_and_ten_is_accepted() {
    let db = TestDb::migrated().await;
    for (ms, shown) in [("0", "0s"), ("9", "9ms")] {
        let (code, stderr) = worker(&db, ms, &[]).expect("a refused worker exits at once");
        assert_ne!(code, Some(0), "--poll-interval {ms} must fail: {stderr}");
        let said =
            format!("formica: invalid configuration: poll_interval is {shown}: it must be from 10ms to");
        assert!(stderr.contains(&said), "--poll-interval {ms}: {stderr}");
    }
    let (code, stderr) = worker(&db, "10", &["--once"]).expect("--once exits");
    assert_eq!(code, Some(0), "--poll-interval 10 is accepted: {stderr}");
}
