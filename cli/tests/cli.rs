//! The `formica` command end to end: the binary against a real PostgreSQL.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_tests::TestDb;
use serde_json::Value;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common;
use common::output_within_60s;

fn formica(db: &TestDb, args: &[&str]) -> Output {
    common::formica(&db.url, args)
}

fn ok(db: &TestDb, args: &[&str]) -> String {
    common::ok(&db.url, args)
}

fn json(db: &TestDb, args: &[&str]) -> Value {
    common::json(&db.url, args)
}

#[tokio::test]
async fn add_jobs_and_status_print_what_the_database_holds() {
    let db = TestDb::new().await;
    assert_eq!(ok(&db, &["--schema-only"]).trim(), "Schema updated");
    let added = json(
        &db,
        &[
            "add",
            "send",
            r#"{"to":"a"}"#,
            "--queue",
            "q",
            "--priority",
            "-3",
            "--max-attempts",
            "4",
            "--job-key",
            "k",
            "--flags",
            "x,y",
            "--run-at",
            "2031-01-02T03:04:05Z",
        ],
    );
    let job = &added[0];
    assert_eq!(job["task_identifier"], "send");
    assert_eq!(job["payload"]["to"], "a");
    assert_eq!(
        (job["queue_name"].as_str(), job["priority"].as_i64(), job["max_attempts"].as_i64()),
        (Some("q"), Some(-3), Some(4))
    );
    assert_eq!(job["flags"], serde_json::json!(["x", "y"]));
    assert_eq!(job["run_at"], "2031-01-02T03:04:05Z");
    ok(&db, &["add", "other"]);

    let table = ok(&db, &["jobs", "--task", "send"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("id") && lines[1].contains("send") && lines[1].contains(" q "), "{table}");
    assert_eq!(json(&db, &["jobs"]).as_array().map(Vec::len), Some(2));

    let status = json(&db, &["status"]);
    assert_eq!(status["schema_version"], 20);
    let tasks = status["tasks"].as_array().expect("tasks");
    let send = tasks.iter().find(|t| t["task"] == "send").expect("send counted");
    assert_eq!((send["scheduled"].as_i64(), send["ready"].as_i64()), (Some(1), Some(0)));
    let other = tasks.iter().find(|t| t["task"] == "other").expect("other counted");
    assert_eq!(other["ready"], 1);

    let id = job["id"].as_i64().unwrap().to_string();
    let failed = json(&db, &["fail", &id, "--reason", "obsolete"]);
    assert_eq!(failed[0]["last_error"], "obsolete");
    let moved = json(&db, &["reschedule", &id, "--attempts", "0", "--priority", "9"]);
    assert_eq!((moved[0]["attempts"].as_i64(), moved[0]["priority"].as_i64()), (Some(0), Some(9)));
    assert_eq!(json(&db, &["remove", "k"])[0]["id"].as_i64(), job["id"].as_i64());
    assert_eq!(json(&db, &["jobs"]).as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn bad_input_gives_a_clear_error_and_changes_nothing() {
    let db = TestDb::new().await;
    ok(&db, &["--schema-only"]);
    let bad_crontab = std::env::temp_dir().join(format!("formica-bad-crontab-{}", db.name));
    std::fs::write(&bad_crontab, "this is not a crontab line\n").unwrap();
    let bad_crontab = bad_crontab.display().to_string();
    let no_tasks = std::env::temp_dir().join(format!("formica-no-tasks-{}", db.name));
    std::fs::create_dir_all(&no_tasks).unwrap();
    let no_tasks = no_tasks.display().to_string();
    // Each concern names itself: not every mistake is a connection setting.
    let crontab_prefix = format!("formica: crontab file {bad_crontab}: ");
    // A file where the tasks folder should be.
    let tasks_prefix = format!("formica: tasks folder {bad_crontab}: ");
    let missing = std::env::temp_dir().join(format!("formica-missing-tasks-{}", db.name));
    let missing = missing.display().to_string();
    let missing_prefix = format!("formica: tasks folder {missing}: no such folder (--tasks names");
    let rfc_3339 = "expected an RFC 3339 time with its UTC offset, such as 2030-01-31T09:30:00Z";
    let cases: [(&[&str], &str); 16] = [
        (&["add", "t", "{not json"], "formica: invalid payload JSON: "),
        (&["--once", "--tasks", &bad_crontab], &tasks_prefix),
        // A mistyped folder does not start a worker that runs nothing.
        (&["--once", "--tasks", &missing], &missing_prefix),
        (&["--tasks", &missing], &missing_prefix),
        (&["--cleanup", "GC_JOB_QUEUES", "--tasks", &missing], &missing_prefix),
        (
            &["--once", "--tasks", &no_tasks, "-j", "0"],
            "invalid value '0' for '--jobs <JOBS>': must be at least 1",
        ),
        (
            &["--once", "--tasks", &no_tasks, "-m", "0"],
            "'--max-pool-size <MAX_POOL_SIZE>': must be at least 1",
        ),
        (&["add", "t", "--run-at", "tomorrow"], rfc_3339),
        (&["reschedule", "1", "--run-at", "tomorrow"], rfc_3339),
        (&["--schema-only", "--cleanup", "GC_JOB_QUEUES"], "cannot be used with"),
        (&["--once", "jobs"], "--once applies without a subcommand: it cannot be used with `formica jobs`"),
        (&["--tasks", &no_tasks, "add", "t"], "--tasks applies without a subcommand"),
        (&["--once", "--tasks", &no_tasks, "--crontab", &bad_crontab], &crontab_prefix),
        (&["add", "t", "--job-key-mode", "merge"], "GWBKM"),
        (&["add", &"t".repeat(129)], "GWBID"),
        (&["--no-such-flag"], "unexpected argument"),
    ];
    for (args, expected) in cases {
        let out = formica(&db, args);
        assert!(!out.status.success(), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    assert_eq!(json(&db, &["jobs"]), serde_json::json!([]));
    // A missing tasks folder is found before the database is touched: none is migrated.
    let fresh = TestDb::new().await;
    for args in [&["--cleanup", "GC_JOB_QUEUES", "--tasks", &missing][..], &["--once", "--tasks", &missing]] {
        assert!(!formica(&fresh, args).status.success(), "{args:?} must fail");
    }
    let schemas = fresh.count("select count(*) from pg_namespace where nspname = 'graphile_worker'").await;
    assert_eq!(schemas, 0, "the database was left unmigrated");
    let out = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", "postgres://localhost:notaport/db", "status"])
        .output()
        .expect("run formica");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("formica: invalid connection settings: "), "{err}");
    let _ = std::fs::remove_file(&bad_crontab);
    let _ = std::fs::remove_dir_all(&no_tasks);
}

#[tokio::test]
async fn commands_on_job_ids_name_the_ids_that_matched_no_job_and_fail() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let mut ids = Vec::new();
    for key in ["a", "b", "c", "d"] {
        let spec = formica_tokio::JobSpec::builder().job_key(key).build();
        ids.push(utils.add_raw_job("t", serde_json::json!({}), spec).await.unwrap().id.to_string());
    }
    let cases: [(&[&str], &str, &str); 4] = [
        (&["complete", &ids[0], "99999"], "job 99999 not completed: no such job", &ids[0]),
        (&["fail", "99999", &ids[1], "99998"], "jobs 99998, 99999 not failed: no such job", &ids[1]),
        (&["reschedule", &ids[2], "99999", "--priority", "3"], "job 99999 not rescheduled: ", &ids[2]),
        (&["cancel", &ids[3], "99999"], "job 99999 not cancelled: no such job", &ids[3]),
    ];
    for (args, expected, done) in cases {
        let out = formica(&db, &[args, &["--json"]].concat());
        assert!(!out.status.success(), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with(&format!("formica: {expected}")), "{args:?}: {err}");
        // What matched was done, and is printed: the jobs, or for cancel the ids by outcome.
        let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON output");
        let printed_ids: Vec<String> = match &printed {
            Value::Array(jobs) => jobs.iter().map(|job| job["id"].to_string()).collect(),
            cancelled => {
                cancelled["failed"].as_array().expect("cancel output").iter().map(Value::to_string).collect()
            }
        };
        assert_eq!(printed_ids, [done.to_owned()], "{args:?}");
    }
    let out = formica(&db, &["remove", "no-such-key"]);
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "formica: no job has the key \"no-such-key\"\n");
    let state = db
        .client()
        .await
        .query(
            "select key, priority, attempts = max_attempts from graphile_worker._private_jobs order by id",
            &[],
        )
        .await
        .unwrap();
    let state: Vec<(String, i16, bool)> = state.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    let expected = [("b", 0, true), ("c", 3, false), ("d", 0, true)].map(|(k, p, f)| (k.to_owned(), p, f));
    assert_eq!(state, expected, "a completed; b failed; c rescheduled; d cancelled");
    // All ids matched: success.
    ok(&db, &["reschedule", &ids[2], "--priority", "4"]);
}

/// `--cleanup` cleans and exits, as graphile-worker's does: it keeps the tasks folder's
/// identifiers and runs no job.
#[tokio::test]
async fn cleanup_cleans_keeping_the_folder_s_tasks_then_exits_without_running_jobs() {
    let db = TestDb::migrated().await;
    let dir = tasks_folder("cleanup");
    let utils = db.utils();
    let waiting = utils.add_raw_job("sleep", serde_json::json!({}), Default::default()).await.unwrap();
    let client = db.client().await;
    client
        .batch_execute("insert into graphile_worker._private_tasks (identifier) values ('fail'), ('unused')")
        .await
        .unwrap();
    let out = formica(&db, &["--cleanup", "GC_TASK_IDENTIFIERS", "--tasks", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let identifiers: Vec<String> = client
        .query("select identifier from graphile_worker._private_tasks order by identifier", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(identifiers, ["fail", "sleep"], "'fail' is in the folder; 'unused' is not");
    let left =
        db.count(&format!("select count(*) from graphile_worker.jobs where id = {}", waiting.id)).await;
    assert_eq!(left, 1, "no job ran");
    assert!(!dir.join("slept").exists());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_newer_breaking_schema_exits_57() {
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute("insert into graphile_worker.migrations (id, breaking) values (21, true)")
        .await
        .unwrap();
    let out = formica(&db, &["--schema-only"]);
    assert_eq!(out.status.code(), Some(57), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("breaking migration 21"));
}

/// A running worker told (on `worker:migrate`) of a breaking migration newer than it knows
/// stops and exits with graphile-worker's code for it, 57: a supervisor can tell why.
#[tokio::test]
async fn a_running_worker_told_of_a_newer_breaking_migration_stops_and_exits_57() {
    let db = TestDb::migrated().await;
    let dir = tasks_folder("breaking");
    let mut child = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--tasks", dir.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start formica");
    // Announced until it exits: the first ones may come before its listener is up.
    let client = db.client().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        client
            .batch_execute(
                r#"select pg_notify('worker:migrate', '{"migrationNumber": 999, "breaking": true}')"#,
            )
            .await
            .unwrap();
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("formica still runs 30 s after the notice");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(57), "{stderr}");
    assert!(stderr.contains("breaking migration 999"), "{stderr}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A tasks folder with a task that records its environment and stdin, one that fails with
/// a message on stderr, one that sleeps, and files that are not tasks.
fn tasks_folder(name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("formica-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("nested")).unwrap();
    let write = |path: &str, text: &str, mode: u32| {
        let path = dir.join(path);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    write(
        "nested/record.sh",
        "#!/bin/sh\nout=\"$(dirname \"$0\")/../record-$GRAPHILE_WORKER_JOB_ID.txt\"\n\
         { echo \"$GRAPHILE_WORKER_PAYLOAD_FORMAT|$GRAPHILE_WORKER_TASK_IDENTIFIER|$GRAPHILE_WORKER_JOB_KEY|$GRAPHILE_WORKER_JOB_ATTEMPTS|$GRAPHILE_WORKER_JOB_MAX_ATTEMPTS|$GRAPHILE_WORKER_JOB_PRIORITY\"; cat; } > \"$out\"\n",
        0o755,
    );
    write("fail.sh", "#!/bin/sh\necho 'first line' >&2\necho 'the disk is on fire' >&2\nexit 3\n", 0o755);
    write(
        "sleep.sh",
        "#!/bin/sh\ntouch \"$(dirname \"$0\")/started\"\nsleep 1\ntouch \"$(dirname \"$0\")/slept\"\n",
        0o755,
    );
    write("notes.txt", "not executable", 0o644);
    write("bad name.sh", "#!/bin/sh\n", 0o755);
    dir
}

/// Waits until the task program has begun: a locked job may still wait in the worker's
/// local queue, and a graceful stop rightly gives those back unstarted.
async fn wait_for_file(path: &std::path::Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "{} never appeared", path.display());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn executable_tasks_get_the_job_in_env_and_stdin_and_failures_keep_stderr() {
    let db = TestDb::migrated().await;
    let dir = tasks_folder("exec");
    let utils = db.utils();
    let spec = formica_tokio::JobSpec::builder().job_key("key-1").priority(2).max_attempts(4).build();
    let ok = utils.add_raw_job("nested/record", serde_json::json!({"x": [1, 2]}), spec).await.unwrap();
    let failing = utils.add_raw_job("fail", serde_json::json!({}), Default::default()).await.unwrap();
    // Added by another client, with its own spacing and key order: the program gets that text.
    let stored = r#"{"y" :  [1, 2], "x": "\u00e9"}"#;
    let sql = "select (graphile_worker.add_job('nested/record', $1::text::json)).id";
    let as_stored: i64 = db.client().await.query_one(sql, &[&stored]).await.unwrap().get(0);
    let out = formica(&db, &["--once", "--tasks", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let logs = String::from_utf8_lossy(&out.stderr);
    assert!(
        logs.contains("notes.txt") && logs.contains("not executable"),
        "skipped files are reported: {logs}"
    );
    assert!(logs.contains("bad name.sh"), "{logs}");

    let record = std::fs::read_to_string(dir.join(format!("record-{}.txt", ok.id))).expect("the task ran");
    let (env, stdin) = record.split_once('\n').unwrap();
    assert_eq!(env, "json|nested/record|key-1|1|4|2");
    assert_eq!(
        serde_json::from_str::<Value>(stdin.trim()).unwrap(),
        serde_json::json!({"payload": {"x": [1, 2]}})
    );
    let record = std::fs::read_to_string(dir.join(format!("record-{as_stored}.txt"))).expect("it ran");
    let stdin = record.split_once('\n').unwrap().1;
    assert_eq!(stdin, format!(r#"{{"payload":{stored}}}"#), "the payload's text as stored, byte for byte");

    let row = db
        .client()
        .await
        .query_one(
            "select attempts, last_error from graphile_worker._private_jobs where id = $1",
            &[&failing.id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i16>(0), 1);
    let error: String = row.get(1);
    assert!(error.contains("exit status: 3") && error.contains("the disk is on fire"), "{error}");
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 1, "only the failed job is left");
    let _ = std::fs::remove_dir_all(dir);
}

/// `formica --once` on `dir`, killed (and the test failed) if it has not exited within 30 s.
fn run_once_within_30s(db: &TestDb, dir: &std::path::Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--once", "--tasks", dir.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start formica");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("formica --once did not finish: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[tokio::test]
async fn programs_may_write_any_bytes_their_output_is_read_to_the_end_and_stored_escaped() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::migrated().await;
    let dir = std::env::temp_dir().join(format!("formica-cli-bytes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    // Writes after the bytes that are not text: they must still find the pipe open.
    write("chatty.sh", "#!/bin/sh\nprintf 'a\\377b\\n'\nprintf 'x\\000y\\n'\nsleep 0.2\necho after\n");
    write(
        "garbled.sh",
        "#!/bin/sh\nprintf 'nul \\000 here\\n' >&2\nprintf 'byte \\377 here\\n' >&2\nsleep 0.2\necho still >&2\nexit 4\n",
    );
    write("plain.sh", "#!/bin/sh\necho 'plainly failed' >&2\nexit 3\n");
    let utils = db.utils();
    let chatty = utils.add_raw_job("chatty", serde_json::json!({}), Default::default()).await.unwrap();
    let garbled = utils.add_raw_job("garbled", serde_json::json!({}), Default::default()).await.unwrap();
    let plain = utils.add_raw_job("plain", serde_json::json!({}), Default::default()).await.unwrap();

    let out = run_once_within_30s(&db, &dir);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let client = db.client().await;
    let failure = |id: i64| {
        let client = &client;
        async move {
            let row = client
                .query_opt(
                    "select attempts, last_error, locked_at is null from graphile_worker._private_jobs where id = $1",
                    &[&id],
                )
                .await
                .unwrap();
            row.map(|r| (r.get::<_, i16>(0), r.get::<_, String>(1), r.get::<_, bool>(2)))
        }
    };
    assert_eq!(failure(chatty.id).await, None, "the chatty program succeeded");
    let (attempts, error, unlocked) = failure(garbled.id).await.expect("the garbled job failed");
    assert_eq!((attempts, unlocked), (1, true));
    assert!(error.contains("exit status: 4"), "{error}");
    assert!(error.ends_with("nul \\0 here\nbyte \\xFF here\nstill"), "{error}");
    let (attempts, error, unlocked) = failure(plain.id).await.expect("the plain job failed");
    assert_eq!((attempts, unlocked), (1, true));
    assert!(error.ends_with("plainly failed"), "{error}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn sigterm_lets_the_running_task_finish_then_exits() {
    let db = TestDb::migrated().await;
    let dir = tasks_folder("sigterm");
    db.utils().add_raw_job("sleep", serde_json::json!({}), Default::default()).await.unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--tasks", dir.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("start formica");
    wait_for_file(&dir.join("started")).await;
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = child.wait().expect("formica exits");
    assert!(exit.success(), "{exit:?}");
    assert!(dir.join("slept").exists(), "the running task finished before exit");
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0, "and its job completed");
    let _ = std::fs::remove_dir_all(dir);
}

/// Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the worker
/// stops gracefully, and its task programs, in process groups of their own, do not get it
/// and finish their jobs.
#[tokio::test]
async fn ctrl_c_to_the_process_group_stops_the_worker_after_its_programs_finish() {
    use std::os::unix::process::CommandExt;
    let db = TestDb::migrated().await;
    let dir = tasks_folder("sigint");
    db.utils().add_raw_job("sleep", serde_json::json!({}), Default::default()).await.unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--tasks", dir.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        // A group of its own, as a shell gives a foreground job (and the test is spared).
        .process_group(0)
        .spawn()
        .expect("start formica");
    wait_for_file(&dir.join("started")).await;
    let group = format!("-{}", child.id());
    let status = Command::new("kill").args(["-s", "INT", "--", &group]).status().unwrap();
    assert!(status.success());
    let exit = child.wait().expect("formica exits");
    assert!(exit.success(), "{exit:?}");
    assert!(dir.join("slept").exists(), "the task program was not interrupted");
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0, "and its job completed");
    let _ = std::fs::remove_dir_all(dir);
}

/// `formica` with no connection, in `dir`, its log lines on stderr.
fn private(dir: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_formica"));
    command
        .current_dir(dir)
        .env_remove("DATABASE_URL")
        .env_remove("PGHOST")
        .env_remove("PGDATABASE")
        .env("RUST_LOG", "info");
    command
}

/// Where the private database of `dir` lives: `.formica/`, or as root the folder
/// `.formica/cluster` points to.
fn private_cluster(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_link(dir.join(".formica/cluster")).unwrap_or_else(|_| dir.join(".formica"))
}

/// Whether the private database of `dir` is running (its server holds the pid file).
fn private_server_runs(dir: &std::path::Path) -> bool {
    private_cluster(dir).join("data/postmaster.pid").exists()
}

/// Remove `dir` and its private database (as root, outside it).
fn remove_private(dir: &std::path::Path) {
    let cluster = private_cluster(dir);
    if !cluster.starts_with(dir) {
        let _ = std::fs::remove_dir_all(cluster);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A `formica` process, killed if the test fails before stopping it.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start a `formica` worker on the private database of `dir` and wait until it runs.
fn start_private_worker(dir: &std::path::Path) -> Running {
    use std::io::BufRead;
    let mut child = Running(private(dir).stderr(Stdio::piped()).spawn().expect("start formica"));
    let mut stderr = std::io::BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("worker started") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "formica exited before running");
    }
    // Keep reading so the worker never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    child
}

/// Send `signal` to `worker` and wait for it to exit (successfully unless killed).
fn stop(mut worker: Running, signal: &str) {
    let status = Command::new("kill").args(["-s", signal, &worker.0.id().to_string()]).status().unwrap();
    assert!(status.success());
    let exit = worker.0.wait().unwrap();
    assert!(signal == "KILL" || exit.success(), "{exit:?}");
}

#[test]
fn formica_processes_in_one_folder_share_the_private_database_and_the_last_one_stops_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("formica-shared-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tasks")).unwrap();
    let task = dir.join("tasks/touch.sh");
    std::fs::write(&task, "#!/bin/sh\ntouch \"$(dirname \"$0\")/../touched-$GRAPHILE_WORKER_JOB_ID\"\n")
        .unwrap();
    std::fs::set_permissions(&task, std::fs::Permissions::from_mode(0o755)).unwrap();
    let add = |n: u32| {
        let out = output_within_60s(private(&dir).args(["add", "touch", "--json"]));
        assert!(out.status.success(), "add {n}: {}", String::from_utf8_lossy(&out.stderr));
        let job: Value = serde_json::from_slice(&out.stdout).unwrap();
        dir.join(format!("touched-{}", job[0]["id"]))
    };
    let wait_for = |file: &std::path::Path| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !file.exists() {
            assert!(std::time::Instant::now() < deadline, "no worker ran the job of {}", file.display());
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    // Two at once in a new folder: one creates and starts the database, the other waits
    // and joins it.
    let at_once: Vec<_> = (0..2)
        .map(|_| {
            private(&dir).args(["add", "touch"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for child in at_once {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(!private_server_runs(&dir), "the last of the two stopped it");

    let first = start_private_worker(&dir);
    let second = start_private_worker(&dir);
    // The one that started the server leaves first: the other keeps its database.
    stop(first, "TERM");
    assert!(private_server_runs(&dir), "the second worker still uses the private database");
    wait_for(&add(1));
    assert!(private_server_runs(&dir), "a `formica add` beside a worker leaves it running");

    // A user that crashes counts no more: the last one to leave stops the server.
    let crashed = start_private_worker(&dir);
    stop(crashed, "KILL");
    wait_for(&add(2));
    stop(second, "TERM");
    assert!(!private_server_runs(&dir), "the last user stopped the private database");

    // And a crashed last user leaves it for the next user to stop.
    let crashed = start_private_worker(&dir);
    stop(crashed, "KILL");
    assert!(private_server_runs(&dir));
    let out = output_within_60s(private(&dir).args(["jobs"]).env("RUST_LOG", "formica=debug"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reused=true"));
    assert!(!private_server_runs(&dir), "the next user, the last to leave, stopped it");
    remove_private(&dir);
}

#[test]
fn with_nothing_configured_a_private_database_is_started_reused_and_stopped() {
    let dir = std::env::temp_dir().join(format!("formica-embedded-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = |args: &[&str]| {
        let out = private(&dir).args(args).output().expect("run formica");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (_, logs) = run(&["add", "hello", r#"{"n":1}"#]);
    assert!(logs.contains("created the private PostgreSQL database of .formica/"), "{logs}");
    assert!(private_cluster(&dir).join("data/PG_VERSION").exists());
    // The second run finds the job the first one added: the same database, reused, quietly
    // (at the default level, INFO: starting and stopping it is routine).
    let (jobs, logs) = run(&["jobs", "--json"]);
    assert_eq!(logs, "", "nothing the user must know");
    let jobs: Value = serde_json::from_str(&jobs).unwrap();
    assert_eq!(jobs[0]["task_identifier"], "hello");
    assert!(!private_server_runs(&dir), "the server was stopped");
    remove_private(&dir);
}

/// As root, the server runs as `postgres`, which cannot enter a project under a `0700`
/// folder (root's home): the cluster lives in a folder `postgres` owns outside the project,
/// `0700`, named after the project's path and pointed to by `.formica/cluster`; the
/// project's folders keep their modes.
#[test]
fn as_root_a_private_database_works_in_a_folder_the_postgres_user_cannot_enter() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() != b"0") {
        return; // Only root runs the server as another user.
    }
    let parent = std::env::temp_dir().join(format!("formica-private-0700-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    let dir = parent.join("project");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700)).unwrap();
    let modes = || [&parent, &dir].map(|d| std::fs::metadata(d).unwrap().mode() & 0o777);
    let before = modes();
    let run = |args: &[&str]| {
        let out = output_within_60s(private(&dir).args(args));
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["add", "hello", r#"{"n":1}"#]);
    let jobs: Value = serde_json::from_str(&run(&["jobs", "--json"])).unwrap();
    assert_eq!(jobs[0]["task_identifier"], "hello", "the second run found the first one's job");
    let cluster = private_cluster(&dir);
    assert!(!cluster.starts_with(&parent), "outside the project: {}", cluster.display());
    let postgres = Command::new("id").args(["-u", "postgres"]).output().unwrap().stdout;
    let postgres: u32 = String::from_utf8_lossy(&postgres).trim().parse().unwrap();
    let meta = std::fs::metadata(&cluster).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (postgres, 0o700), "{}", cluster.display());
    assert!(!private_server_runs(&dir), "the server was stopped");
    assert_eq!(modes(), before, "the project's folders were left as they were");
    assert_eq!(before[0], 0o700);
    remove_private(&dir);
    let _ = std::fs::remove_dir_all(&parent);
}

#[test]
fn crontab_check_and_parse_print_items_or_the_mistake_with_line_and_column() {
    let dir = std::env::temp_dir().join(format!("formica-crontab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good");
    std::fs::write(&good, "# nightly\n0 4 * * 7 report ?id=nightly&fill=2h&max=3 {to: 'ops'}\n").unwrap();
    let bad = dir.join("bad");
    std::fs::write(&bad, "* * * * * ok\n\n*/0 * * * * broken\n").unwrap();
    let crontab = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_formica")).arg("crontab").args(args).output().unwrap()
    };

    let out = crontab(&["check", good.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], r#"0 4 * * 0 report ?id=nightly&fill=2h&max=3 {"to":"ops"}"#);
    assert_eq!(lines.len(), 6, "the item and its next five runs: {text}");
    assert!(lines[1..].iter().all(|l| l.ends_with("04:00 UTC (Sun)")), "{text}");

    let out = crontab(&["parse", good.to_str().unwrap(), "--json"]);
    assert!(out.status.success());
    let items: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        items,
        serde_json::json!([{
            "identifier": "nightly", "task": "report",
            "minutes": [0], "hours": [4], "dates": (1..=31).collect::<Vec<_>>(),
            "months": (1..=12).collect::<Vec<_>>(), "dows": [0],
            "options": { "backfillPeriod": 7_200_000, "maxAttempts": 3 },
            "payload": { "to": "ops" },
        }])
    );

    let out = crontab(&["check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let error = String::from_utf8(out.stderr).unwrap();
    assert!(error.contains("line 3, column 3"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn crontab_check_reads_zones_and_says_which_items_graphile_worker_refuses() {
    let file = std::env::temp_dir().join(format!("formica-crontab-tz-{}", std::process::id()));
    std::fs::write(&file, "0 8 * * 1-5 utc_report\nCRON_TZ=Europe/Paris\n0 8 * * 1-5 paris_report\n")
        .unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_formica")).args(["crontab", "check"]).arg(&file).output().unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "0 8 * * 1-5 utc_report", "{text}");
    assert!(lines[1..6].iter().all(|l| l.contains("08:00 UTC")), "{text}");
    assert_eq!(lines[6], "0 8 * * 1-5 paris_report ?tz=Europe/Paris", "{text}");
    assert!(lines[7].contains("graphile-worker 0.18 refuses this line (unknown option: tz)"), "{text}");
    assert!(
        lines[8..].iter().all(|l| l.contains("06:00 UTC") || l.contains("07:00 UTC")),
        "08:00 Paris: {text}"
    );
    assert!(!lines[..6].iter().any(|l| l.contains("refuses")), "a UTC item is Node's too: {text}");
}

#[tokio::test]
async fn job_shows_one_job_whole_and_status_counts_it_once() {
    let db = TestDb::new().await;
    ok(&db, &["--schema-only"]);
    let id = json(&db, &["add", "mail", r#"{"to":"<ada>"}"#, "--job-key", "m1"])[0]["id"].as_i64().unwrap();
    let error = format!("Error: exit status 3\n{}\nstderr ends with: mailbox full", "x".repeat(200));
    db.client()
        .await
        .execute(
            "update graphile_worker._private_jobs set attempts = 1, last_error = $2, run_at = now() + interval '1 hour' where id = $1",
            &[&id, &error],
        )
        .await
        .unwrap();
    let shown = ok(&db, &["job", &id.to_string()]);
    assert!(shown.contains(&error), "the whole error: {shown}");
    assert!(shown.contains("\"to\": \"<ada>\"") && shown.contains("state       failed"), "{shown}");
    let whole = json(&db, &["job", &id.to_string()]);
    assert_eq!(
        (whole["last_error"].as_str(), whole["state"].as_str()),
        (Some(error.as_str()), Some("failed"))
    );
    let missing = formica(&db, &["job", "999999"]);
    assert!(!missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("no job 999999"));

    // Scheduled for later and failed: one state, failed.
    let status = json(&db, &["status"]);
    let mail = &status["tasks"][0];
    let counted: i64 = ["ready", "scheduled", "running", "failed", "permanently_failed"]
        .iter()
        .map(|k| mail[*k].as_i64().unwrap())
        .sum();
    assert_eq!((counted, mail["failed"].as_i64()), (1, Some(1)), "{status}");
}

#[tokio::test]
async fn ui_serves_the_dashboard_and_refuses_to_bind_beyond_loopback_unprotected() {
    use std::io::{Read, Write};
    let db = TestDb::new().await;
    ok(&db, &["--schema-only"]);
    let refused = formica(&db, &["ui", "--bind", "0.0.0.0:0"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("without --token or --read-only"));

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "ui", "--bind", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("run formica ui");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut stream = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Err(e) => panic!("formica ui did not listen: {e}"),
        }
    };
    write!(stream, "GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"totals\""), "{answer}");
}

#[tokio::test]
async fn json_logs_print_one_line_per_job_outcome_with_the_job_fields() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::migrated().await;
    let dir = std::env::temp_dir().join(format!("formica-cli-logs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in
        [("ok.sh", "#!/bin/sh\ncat >/dev/null\n"), ("fail.sh", "#!/bin/sh\necho broken >&2\nexit 3\n")]
    {
        std::fs::write(dir.join(name), text).unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let utils = db.utils();
    let spec = |queue: Option<&str>, max_attempts| {
        let builder = formica_tokio::JobSpec::builder().max_attempts(max_attempts);
        match queue {
            Some(q) => builder.queue_name(q).build(),
            None => builder.build(),
        }
    };
    let mut expected = std::collections::BTreeMap::new();
    for queue in [None, None, Some("q")] {
        let job = utils.add_raw_job("ok", serde_json::json!({}), spec(queue, 5)).await.unwrap();
        expected.insert(job.id, "task succeeded");
    }
    let retried = utils.add_raw_job("fail", serde_json::json!({}), spec(None, 3)).await.unwrap();
    expected.insert(retried.id, "job failed, will retry");
    for _ in 0..2 {
        let job = utils.add_raw_job("fail", serde_json::json!({}), spec(None, 1)).await.unwrap();
        expected.insert(job.id, "job failed permanently (out of attempts)");
    }

    let out = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--once", "--tasks", dir.to_str().unwrap(), "--log-format", "json"])
        .env("RUST_LOG", "info")
        .output()
        .expect("run formica");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let logs = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let messages = |text: &str| lines.iter().filter(|l| l["message"] == text).count();
    assert_eq!((messages("worker started"), messages("worker stopped")), (1, 1), "{logs}");

    let mut outcomes = std::collections::BTreeMap::new();
    for line in lines.iter().filter(|l| l["job_id"].is_i64()) {
        let id = line["job_id"].as_i64().unwrap();
        assert!(
            outcomes.insert(id, line["message"].as_str().unwrap()).is_none(),
            "two lines for job {id}: {logs}"
        );
        assert!(line["duration_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{line}");
        assert!(line["worker_id"].as_str().is_some_and(|w| w.starts_with("formica-")), "{line}");
        let task = if expected[&id] == "task succeeded" { "ok" } else { "fail" };
        assert_eq!((line["task"].as_str(), line["attempt"].as_i64()), (Some(task), Some(1)), "{line}");
        if task == "fail" {
            assert!(line["error"].as_str().is_some_and(|e| e.contains("broken")), "{line}");
            assert_eq!(line["level"], if id == retried.id { "WARN" } else { "ERROR" }, "{line}");
        }
    }
    assert_eq!(outcomes, expected, "one line per outcome: {logs}");
    let retry = lines.iter().find(|l| l["job_id"] == retried.id).unwrap();
    assert!(
        retry["retry_at"].as_str().is_some_and(|at| chrono::DateTime::parse_from_rfc3339(at).is_ok()),
        "{retry}"
    );
    assert_eq!(retry["max_attempts"], 3);
    assert_eq!(
        lines.iter().filter(|l| l["queue"] == "q").count(),
        1,
        "the queue is named where there is one"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The value of the series of `metric` whose labels include every one of `labels`, summed.
#[cfg(feature = "prometheus")]
fn metric(scrape: &str, metric: &str, labels: &[&str]) -> f64 {
    scrape
        .lines()
        .filter(|line| line.split(['{', ' ']).next() == Some(metric))
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[cfg(feature = "prometheus")]
fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: formica\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

/// The queue depth query scans the jobs table: a big backlog makes it dear, so a worker
/// runs it only once something reads the gauges.
#[cfg(feature = "prometheus")]
#[tokio::test]
async fn the_queue_depth_is_sampled_only_once_something_reads_the_metrics() {
    let db = TestDb::migrated().await;
    let scans = || async {
        // The worker's backends report their counts within about a second.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        db.count("select seq_scan from pg_stat_user_tables where relid = 'graphile_worker._private_jobs'::regclass")
            .await
    };
    let dir = tasks_folder("depth");
    let mut child = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--tasks", dir.to_str().unwrap(), "--log-format", "json"])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .args(["--queue-depth-interval", "10"])
        .env("RUST_LOG", "warn,formica::metrics=info")
        .stderr(Stdio::piped())
        .spawn()
        .expect("start formica");
    let addr = formica_tests::metrics_address(child.stderr.take().unwrap());
    // The sweeps scan the table too, a few times at most in 2.5 s; a sample every 10 ms would
    // scan it about 250 times.
    let started = scans().await;
    let unread = scans().await;
    assert!(unread - started <= 5, "{} scans of the jobs table with nobody reading", unread - started);
    scrape(&addr);
    let read = scans().await;
    assert!(read - unread >= 50, "only {} scans every 10 ms once the gauges were read", read - unread);
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(feature = "prometheus")]
#[tokio::test]
async fn metrics_endpoint_counts_what_happened_and_the_queue_depth_matches_the_database() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::migrated().await;
    let dir = std::env::temp_dir().join(format!("formica-cli-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in [("ok.sh", "#!/bin/sh\ncat >/dev/null\n"), ("fail.sh", "#!/bin/sh\nexit 3\n")] {
        std::fs::write(dir.join(name), text).unwrap();
        std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (ok_jobs, failing_jobs) = (950, 50);
    let job = |identifier: &str, max_attempts| formica_tokio::RawJob {
        identifier: identifier.into(),
        payload: serde_json::json!({}),
        spec: formica_tokio::JobSpec::builder().max_attempts(max_attempts).build(),
    };
    let mut jobs: Vec<_> = (0..ok_jobs).map(|_| job("ok", 5)).collect();
    jobs.extend((0..failing_jobs).map(|_| job("fail", 1)));
    // A job with no worker for its task stays runnable, and the gauge says so.
    jobs.push(job("elsewhere", 5));
    db.utils().add_raw_jobs(&jobs).await.unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--tasks", dir.to_str().unwrap(), "-j", "16", "--log-format", "json"])
        .args(["--metrics-addr", "127.0.0.1:0", "--queue-depth-interval", "100"])
        .env("RUST_LOG", "warn,formica::metrics=info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start formica");
    let addr = formica_tests::metrics_address(child.stderr.take().unwrap());

    let settled = "select count(*) from graphile_worker.jobs where locked_at is null \
                   and (task_identifier = 'elsewhere' or attempts >= max_attempts)";
    db.wait_for_count(settled, failing_jobs + 1, std::time::Duration::from_secs(120)).await;
    let permafailed_in_sql = db
        .count("select count(*) from graphile_worker.jobs where task_identifier = 'fail' and attempts >= max_attempts")
        .await;
    assert_eq!(permafailed_in_sql, failing_jobs);
    // The gauge is sampled every 100 ms: wait for a sample taken after the drain.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let body = loop {
        let body = scrape(&addr);
        let depth = |task: &str, state: &str| {
            let (task, state) =
                (format!("messaging_destination_name=\"{task}\""), format!("formica_job_state=\"{state}\""));
            metric(&body, "formica_queue_depth", &[&task, &state])
        };
        let sampled =
            (depth("fail", "permanently_failed"), depth("ok", "runnable"), depth("elsewhere", "runnable"));
        if sampled == (permafailed_in_sql as f64, 0.0, 1.0) {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "queue depth {sampled:?} never matched the database:\n{body}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    assert!(child.wait().unwrap().success());

    let ok = "messaging_destination_name=\"ok\"";
    let fail = "messaging_destination_name=\"fail\"";
    assert_eq!(metric(&body, "formica_jobs_completed_total", &[ok]), ok_jobs as f64, "{body}");
    assert_eq!(metric(&body, "formica_jobs_completed_total", &[fail]), 0.0, "{body}");
    assert_eq!(metric(&body, "formica_jobs_failed_total", &[fail]), failing_jobs as f64, "{body}");
    assert_eq!(
        metric(&body, "formica_jobs_permanently_failed_total", &[fail]),
        failing_jobs as f64,
        "{body}"
    );
    assert_eq!(metric(&body, "formica_jobs_retried_total", &[]), 0.0, "{body}");
    let processed = metric(&body, "messaging_process_duration_seconds_count", &[]);
    assert_eq!(processed, (ok_jobs + failing_jobs) as f64, "one duration per job run: {body}");
    let fetched = metric(&body, "messaging_client_consumed_messages_total", &[]);
    assert_eq!(fetched, (ok_jobs + failing_jobs) as f64, "every job was fetched once: {body}");
    assert_eq!(
        metric(&body, "formica_fetch_jobs_sum", &[]),
        fetched,
        "the batch sizes add up to the jobs fetched"
    );
    assert!(metric(&body, "messaging_client_operation_duration_seconds_count", &[]) >= 1.0, "{body}");
    assert_eq!(metric(&body, "db_client_connection_max", &[]), 10.0, "{body}");
    assert!(body.contains("db_client_connection_count{"), "{body}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn text_logs_to_a_pipe_have_no_colour_codes() {
    let db = TestDb::new().await;
    let out = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--schema-only"])
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .output()
        .expect("run formica");
    assert!(out.status.success());
    let logs = String::from_utf8(out.stderr).unwrap();
    assert!(logs.contains("INFO") && logs.contains("applied migrations"), "{logs}");
}
