//! The `formica` command end to end: the binary against a real PostgreSQL.

use formica_tests::TestDb;
use serde_json::Value;
use std::process::{Command, Output};

fn formica(db: &TestDb, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run formica")
}

fn ok(db: &TestDb, args: &[&str]) -> String {
    let out = formica(db, args);
    assert!(out.status.success(), "formica {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn json(db: &TestDb, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    serde_json::from_str(&ok(db, &args)).expect("JSON output")
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
    let cases: [(&[&str], &str); 4] = [
        (&["add", "t", "{not json"], "payload is not valid JSON"),
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
