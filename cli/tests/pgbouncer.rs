//! Formica through a real pgBouncer in transaction mode (see `formica_tests::pgbouncer`):
//! the CLI's subcommands, migrating a fresh database, and a worker draining 10,000 jobs,
//! every job run once. Server sessions are shared between clients, so a named prepared
//! statement left on one would make another fail with `prepared statement "s1" already
//! exists`.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_tests::pgbouncer::PgBouncer;
use formica_tests::TestDb;
use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common;
use common::ok;

#[tokio::test]
async fn migration_and_every_subcommand_work_through_pgbouncer() {
    let bouncer = PgBouncer::start();
    let db = TestDb::new().await;
    let url = bouncer.url(&db.name);
    // A fresh database, migrated through pgBouncer.
    assert_eq!(ok(&url, &["--schema-only"]).trim(), "Schema updated");
    // 200 adds, 10 processes at a time sharing 4 server connections.
    for round in 0..20 {
        let children: Vec<_> = (0..10)
            .map(|i| {
                let n = round * 10 + i;
                Command::new(env!("CARGO_BIN_EXE_formica"))
                    .args([
                        "-c",
                        &url,
                        "add",
                        "task",
                        &format!(r#"{{"n":{n}}}"#),
                        "--job-key",
                        &format!("k{n}"),
                    ])
                    .env("RUST_LOG", "warn")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("run formica add")
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "formica add: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 200);

    let jobs: serde_json::Value =
        serde_json::from_str(&ok(&url, &["jobs", "--json", "--limit", "500"])).unwrap();
    let ids: Vec<String> = jobs.as_array().unwrap().iter().map(|j| j["id"].to_string()).collect();
    assert_eq!(ids.len(), 200);
    ok(&url, &["status"]);
    ok(&url, &["status", "--json"]);
    ok(&url, &["reschedule", &ids[0], "--priority", "3"]);
    ok(&url, &["fail", &ids[1], "--reason", "no"]);
    ok(&url, &["complete", &ids[2]]);
    // A job the three before did not touch.
    let key = jobs[3]["key"].as_str().expect("every job has a key").to_owned();
    ok(&url, &["remove", &key]);
    ok(&url, &["unlock", "nobody"]);
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 198);
    // The CLI's worker runs the rest (one is failed for good), then cleans up.
    let tasks = std::env::temp_dir().join(format!("formica-pgbouncer-tasks-{}", db.name));
    std::fs::create_dir_all(&tasks).unwrap();
    std::fs::write(tasks.join("task"), "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tasks.join("task"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tasks = tasks.display().to_string();
    ok(&url, &["--once", "--no-prepared-statements", "--tasks", &tasks]);
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 1);
    ok(
        &url,
        &[
            "--once",
            "--no-prepared-statements",
            "--tasks",
            &tasks,
            "--cleanup",
            "DELETE_PERMAFAILED_JOBS,GC_JOB_QUEUES,GC_TASK_IDENTIFIERS",
        ],
    );
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0);
    let _ = std::fs::remove_dir_all(&tasks);
    let log = bouncer.log();
    assert!(!log.contains("already exists"), "pgBouncer's log: {log}");
}

#[tokio::test]
async fn a_worker_drains_10000_jobs_through_pgbouncer_each_once() {
    let bouncer = PgBouncer::start();
    let db = TestDb::new().await;
    let url = bouncer.url(&db.name);
    let rt: Arc<dyn formica_tokio::Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let utils = formica_tokio::WorkerUtils::new(
        formica_tokio::Pool::from_url(rt.clone(), &url, 4).unwrap(),
        "graphile_worker",
    );
    utils.migrate().await.unwrap();
    for batch in 0..10 {
        let jobs: Vec<formica_tokio::RawJob> = (0..1000)
            .map(|i| formica_tokio::RawJob {
                identifier: "count".into(),
                payload: serde_json::json!({ "n": batch * 1000 + i }),
                spec: formica_tokio::JobSpec::default(),
            })
            .collect();
        utils.add_raw_jobs(&jobs).await.unwrap();
    }
    let runs: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let seen = runs.clone();
    let worker = formica_tokio::WorkerOptions::default()
        .database_url(&url)
        .prepared_statements(false)
        .define_raw_job("count", move |_, payload| {
            let seen = seen.clone();
            async move {
                *seen.lock().unwrap().entry(payload["n"].as_i64().unwrap()).or_default() += 1;
                Ok(())
            }
        })
        .init()
        .await
        .unwrap();
    formica_tests::timeout(rt.as_ref(), Duration::from_secs(300), worker.run_once())
        .await
        .expect("drained within 5 minutes")
        .unwrap();
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 10_000, "every job ran");
    assert!(runs.values().all(|&n| n == 1), "no job ran twice");
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0);
}

/// LISTEN does not work through pgBouncer in transaction mode: a cancel request is a row,
/// which the worker reads after a heartbeat, and `formica cancel` says it was recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_cancelled_through_pgbouncer_and_the_command_says_recorded() {
    let bouncer = PgBouncer::start();
    let db = TestDb::new().await;
    let url = bouncer.url(&db.name);
    let rt: Arc<dyn formica_tokio::Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let utils = formica_tokio::WorkerUtils::new(
        formica_tokio::Pool::from_url(rt.clone(), &url, 4).unwrap(),
        "graphile_worker",
    );
    utils.migrate().await.unwrap();
    let started = Arc::new(Mutex::new(0));
    let count = started.clone();
    let worker = formica_tokio::WorkerOptions::default()
        .database_url(&url)
        .prepared_statements(false)
        .define_raw_job("slow", move |_, _| {
            *count.lock().unwrap() += 1;
            async move {
                tokio::time::sleep(Duration::from_secs(120)).await;
                Ok(())
            }
        })
        .init()
        .await
        .unwrap();
    let handle = worker.handle();
    let run = tokio::spawn(worker.run());
    let job = utils.add_raw_job("slow", serde_json::json!({}), Default::default()).await.unwrap();
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(10), "the task started", || {
        *started.lock().unwrap() == 1
    })
    .await;
    let out = ok(&url, &["cancel", &job.id.to_string(), "--reason", "through the bouncer"]);
    assert!(out.contains("recorded for worker") && out.contains("aborts it within ~3 s"), "{out}");
    let failed = format!(
        "select count(*) from graphile_worker._private_jobs where id = {} and locked_by is null \
         and attempts = max_attempts and last_error = 'cancelled: through the bouncer'",
        job.id
    );
    db.wait_for_count(&failed, 1, Duration::from_secs(15)).await;
    handle.stop();
    tokio::time::timeout(Duration::from_secs(10), run).await.unwrap().unwrap().unwrap();
}

/// Without `--no-prepared-statements`, the worker finds at start that a pooler answers in the
/// server's place, and sends its statements unnamed before any is named (saying so once at
/// WARN): 50 jobs run once each, none is left, and no statement is refused. pgBouncer
/// discards each server session's statements as the session goes back to its pool, so a
/// session never shows another's statements: the worker must find the pooler without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_the_flag_falls_back_to_unnamed_statements_at_start_and_runs_each_job_once() {
    let bouncer = PgBouncer::start_with("server_reset_query_always = 1");
    let db = TestDb::new().await;
    let url = bouncer.url(&db.name);
    ok(&url, &["--schema-only"]);
    let dir = std::env::temp_dir().join(format!("formica-pgbouncer-prepared-{}", db.name));
    let _ = std::fs::remove_dir_all(&dir);
    let runs = dir.join("runs");
    common::write_task(
        &dir.join("tasks"),
        "note",
        &format!("#!/bin/sh\necho \"$GRAPHILE_WORKER_JOB_ID\" >> {}\n", runs.display()),
    );
    db.client()
        .await
        .batch_execute("select graphile_worker.add_job('note', json_build_object('n', n)) from generate_series(1, 50) as n")
        .await
        .unwrap();
    let tasks = dir.join("tasks").display().to_string();
    let out = common::output_within_60s(
        Command::new(env!("CARGO_BIN_EXE_formica"))
            .args(["-c", &url, "--once", "-j", "4", "--tasks", &tasks])
            .env("RUST_LOG", "warn"),
    );
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    let mut ran: Vec<i64> =
        std::fs::read_to_string(&runs).unwrap_or_default().lines().map(|l| l.parse().unwrap()).collect();
    ran.sort_unstable();
    let before = ran.len();
    ran.dedup();
    assert_eq!((before, ran.len()), (50, 50), "every job ran once: {ran:?}\n{log}");
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0, "{log}");
    assert_eq!(log.matches("falling back to unnamed statements").count(), 1, "warned once: {log}");
    assert!(!log.contains("does not exist"), "found before any job was touched: {log}");
    // Connected directly, the worker keeps its statements named and says nothing.
    db.client().await.batch_execute("select graphile_worker.add_job('note', '{}')").await.unwrap();
    let direct = common::output_within_60s(
        Command::new(env!("CARGO_BIN_EXE_formica"))
            .args(["-c", &db.url, "--once", "--tasks", &tasks])
            .env("RUST_LOG", "warn"),
    );
    let log = String::from_utf8_lossy(&direct.stderr).into_owned();
    assert!(direct.status.success() && !log.contains("falling back"), "{log}");
    assert_eq!(std::fs::read_to_string(&runs).unwrap_or_default().lines().count(), 51);
    let _ = std::fs::remove_dir_all(&dir);
}
