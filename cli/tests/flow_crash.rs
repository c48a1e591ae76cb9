//! A worker process killed with SIGKILL while it holds every slot of a global cap: the
//! slots stay taken (no other worker starts a job of the task) until its lease lapses and
//! recovery frees its jobs, then the capped jobs run elsewhere, within the lease bound.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use formica_tokio::controls::Control;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common;
use common::{write_task, Worker};

fn worker(db: &TestDb, tasks: &Path) -> Worker {
    common::worker(&db.url, tasks, &["-j", "4", "--poll-interval", "200"])
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap_or_default().lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_s_capped_slots_return_after_the_lease_bound_not_before() {
    let db = TestDb::migrated().await;
    let root: PathBuf = std::env::temp_dir().join(format!("formica-flow-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (first, second) = (root.join("first"), root.join("second"));
    write_task(&first, "capped.sh", "#!/bin/sh\necho started >> \"$(dirname \"$0\")/started\"\nsleep 120\n");
    write_task(&second, "capped.sh", "#!/bin/sh\necho ran >> \"$(dirname \"$0\")/ran\"\n");
    let utils = db.utils();
    utils.set_control(&Control::cap("capped", 2), None).await.unwrap();
    for n in 0..4 {
        utils.add_raw_job("capped", serde_json::json!({ "n": n }), Default::default()).await.unwrap();
    }
    let mut dying = worker(&db, &first);
    let deadline = Instant::now() + Duration::from_secs(20);
    while lines(&first.join("started")) < 2 {
        assert!(Instant::now() < deadline, "the first worker started its 2 capped jobs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(lines(&first.join("started")), 2, "the cap held the first worker to 2 jobs");
    dying.0.kill().unwrap();
    dying.0.wait().unwrap();
    let killed = Instant::now();
    let _second = worker(&db, &second);
    // Its last heartbeat was at most 3 s before the kill: its lease holds 7 s after it at
    // least, and recovery waits 5 s more. Until then its 2 slots stay taken.
    let locked = "select count(*) from graphile_worker._private_jobs where locked_at is not null";
    while killed.elapsed() < Duration::from_secs(11) {
        assert_eq!(lines(&second.join("ran")), 0, "a capped job ran {:?} after the kill", killed.elapsed());
        assert_eq!(db.count(locked).await, 2, "the dead worker's jobs keep their slots");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // LEASE + SUSPICION_GRACE + 8/3 RECOVERY_PERIOD (23 s) after the last heartbeat, plus polls.
    let bound = Duration::from_secs(30);
    while lines(&second.join("ran")) < 4 {
        assert!(killed.elapsed() < bound, "the capped jobs ran again within {bound:?} of the kill");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("all 4 capped jobs ran {:?} after the kill", killed.elapsed());
    let _ = std::fs::remove_dir_all(&root);
}
