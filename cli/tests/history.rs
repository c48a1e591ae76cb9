//! A `formica` worker process SIGKILLed while it runs a job leaves no history row for it;
//! the job's next run, on another worker, ends it and writes exactly one. `--no-history`
//! keeps none.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_tests::TestDb;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common;
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

/// A finished job is shown from the history by `formica job ID` (outcome, finish, attempts,
/// error, output) and listed by `formica history` with its filters; `formica jobs --state`
/// lists the jobs in one state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_are_shown_by_job_and_history_and_jobs_filter_by_state() {
    use formica_tokio::JobSpec;
    let db = TestDb::migrated().await;
    let tasks = std::env::temp_dir().join(format!("formica-history-show-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tasks);
    common::write_task(&tasks, "ok.sh", "#!/bin/sh\nexit 0\n");
    common::write_task(&tasks, "bad.sh", "#!/bin/sh\necho out of paper >&2\nexit 1\n");
    let utils = db.utils();
    let done = utils.add_raw_job("ok", serde_json::json!({ "n": 1 }), JobSpec::default()).await.unwrap();
    let once = JobSpec::builder().max_attempts(1).build();
    let failed = utils.add_raw_job("bad", serde_json::json!({}), once).await.unwrap();
    let out = common::output_within_60s(
        common::worker_command(&db.url, &tasks, &["--once"]).stdout(std::process::Stdio::null()),
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // What an output task would have returned (a program returns none).
    let client = db.client().await;
    let set_output =
        "update formica_graphile_worker.job_history set output = '{\"sent\": 3}' where job_id = $1";
    client.execute(set_output, &[&done.id]).await.unwrap();

    let shown = common::ok(&db.url, &["job", &done.id.to_string()]);
    for expected in
        ["completed (finished; from the history)", "finished_at", "attempts    1/25", "\"sent\": 3"]
    {
        assert!(shown.contains(expected), "{expected}: {shown}");
    }
    let id = failed.id.to_string();
    let shown = common::json(&db.url, &["job", &id]);
    assert_eq!(shown["state"], "permanently_failed", "a job still in the queue is shown from it: {shown}");
    let missing = common::formica(&db.url, &["job", "987654321"]);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success() && stderr.contains("no job 987654321: it is not in the queue"),
        "{stderr}"
    );

    let all = common::json(&db.url, &["history"]);
    let ids: Vec<i64> = all.as_array().unwrap().iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, [failed.id, done.id], "newest first");
    let bad = common::json(&db.url, &["history", "--outcome", "failed"]);
    assert_eq!((bad[0]["id"].as_i64(), bad.as_array().unwrap().len()), (Some(failed.id), 1), "{bad}");
    assert!(bad[0]["last_error"].as_str().unwrap().contains("out of paper"), "{bad}");
    assert_eq!(
        common::json(&db.url, &["history", "--task", "ok"])[0]["output"],
        serde_json::json!({ "sent": 3 })
    );
    assert_eq!(common::json(&db.url, &["history", "--limit", "1"]).as_array().unwrap().len(), 1);
    let text = common::ok(&db.url, &["history", "--task", "bad"]);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.contains("bad   failed   1/1") && text.contains("exit status: 1"), "{text}");

    let later = JobSpec::builder()
        .run_at(formica_tokio::chrono::Utc::now() + formica_tokio::chrono::Duration::hours(1))
        .build();
    let scheduled = utils.add_raw_job("ok", serde_json::json!({}), later).await.unwrap();
    let ready = utils.add_raw_job("absent", serde_json::json!({}), JobSpec::default()).await.unwrap();
    for (state, expected) in
        [("scheduled", scheduled.id), ("ready", ready.id), ("permanently_failed", failed.id)]
    {
        let listed = common::json(&db.url, &["jobs", "--state", state]);
        let ids: Vec<i64> = listed.as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect();
        assert_eq!(ids, [expected], "{state}");
    }
    assert_eq!(common::json(&db.url, &["jobs", "--state", "running"]), serde_json::json!([]));
    let bogus = common::formica(&db.url, &["jobs", "--state", "done"]);
    let stderr = String::from_utf8_lossy(&bogus.stderr);
    assert!(stderr.contains("invalid value 'done'") && stderr.contains("permanently_failed"), "{stderr}");
    let _ = std::fs::remove_dir_all(&tasks);
}

/// A worker whose role may not write the history is refused naming the command's flag
/// (`--no-history`), not the library's option; with it, the worker runs, and at the default
/// level it logs no routine flow line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_cannot_write_the_history_is_told_to_run_with_no_history() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    let role = format!("cli_no_history_{}", std::process::id());
    client
        .batch_execute(&format!(
            "drop role if exists {role}; create role {role} login password 'pw'; \
             grant usage on schema graphile_worker, formica_graphile_worker to {role}; \
             grant all on all tables in schema graphile_worker, formica_graphile_worker to {role}; \
             grant usage on all sequences in schema graphile_worker to {role}; \
             grant execute on all functions in schema graphile_worker to {role}; \
             revoke insert on formica_graphile_worker.job_history from {role}"
        ))
        .await
        .unwrap();
    let words =
        db.url.split_whitespace().filter(|kv| !kv.starts_with("user=") && !kv.starts_with("password="));
    let url = format!("{} user={role} password=pw", words.collect::<Vec<_>>().join(" "));
    let tasks = std::env::temp_dir().join(format!("formica-history-refused-{}", std::process::id()));
    write_task(&tasks, "#!/bin/sh\nexit 0\n");
    let run = |flags: &[&str]| {
        let mut command = common::worker_command(&url, &tasks, &[&["--once"], flags].concat());
        common::output_within_60s(command.env("RUST_LOG", "info"))
    };
    let refused = run(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let expected = "cannot insert into \"formica_graphile_worker\".job_history: grant it insert, or run with --no-history";
    assert!(!refused.status.success() && stderr.contains(expected), "{stderr}");
    assert!(!stderr.contains("WorkerOptions"), "{stderr}");
    let ran = run(&["--no-history"]);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success() && stderr.contains("worker started"), "{stderr}");
    assert!(!stderr.contains("nothing paused"), "routine, at DEBUG: {stderr}");
    client.batch_execute(&format!("drop owned by {role}; drop role {role}")).await.unwrap();
    let _ = std::fs::remove_dir_all(&tasks);
}
