//! What `formica` shows of rows it cannot trust: jobs whose row cannot be read are named
//! with their column and the rest is shown; control characters from the database never
//! reach the terminal raw; and `unlock` refuses a worker whose lease says it is alive.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_tests::spoiled::{good_and_undecodable_jobs, lease, lock};
use formica_tests::TestDb;
use serde_json::{json, Value};
use std::process::{Command, Output};

fn formica(db: &TestDb, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run formica")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

fn ok(db: &TestDb, args: &[&str]) -> String {
    let out = formica(db, args);
    assert!(out.status.success(), "formica {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    text(&out.stdout)
}

fn json(db: &TestDb, args: &[&str]) -> Value {
    serde_json::from_str(&ok(db, &[args, &["--json"]].concat())).expect("JSON output")
}

#[tokio::test]
async fn jobs_job_and_status_name_unreadable_rows_and_show_the_rest() {
    let db = TestDb::migrated().await;
    let [good, bad_payload, bad_run_at] = good_and_undecodable_jobs(&db).await;

    let table = ok(&db, &["jobs"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[1].starts_with(&format!("{good} ")), "the good job is listed: {table}");
    assert!(table.contains(&format!("job {bad_payload}: column payload: number out of range")), "{table}");
    assert!(table.contains(&format!("job {bad_run_at}: column run_at: ")), "{table}");
    let listed = json(&db, &["jobs"]);
    assert_eq!(listed[0]["id"], good);
    assert_eq!(listed[0]["payload"], json!({ "n": 0 }));
    assert_eq!((listed[1]["id"].as_i64(), listed[2]["id"].as_i64()), (Some(bad_payload), Some(bad_run_at)));
    assert!(listed[1]["undecodable"].as_str().unwrap().starts_with("column payload"), "{listed}");

    assert!(ok(&db, &["job", &good.to_string()]).contains("payload:\n{\n  \"n\": 0\n}"));
    for (id, column) in [(bad_payload, "payload"), (bad_run_at, "run_at")] {
        let out = formica(&db, &["job", &id.to_string()]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains(&format!("cannot read job {id}: column {column}: ")), "{stderr}");
    }

    let status = ok(&db, &["status"]);
    assert!(status.lines().any(|l| l.starts_with("t ") && l.contains(" 3 ")), "three ready jobs: {status}");
    assert!(status.contains("could not be read: the oldest ready job of task \"t\": run_at"), "{status}");
    assert_eq!(json(&db, &["status"])["tasks"][0]["ready"], 3);
}

/// Whether `output` holds a control character (C0 but a line break, DEL, C1).
fn raw_control(output: &str) -> Option<char> {
    output.chars().find(|&c| c.is_control() && c != '\n')
}

#[tokio::test]
async fn control_characters_from_the_database_are_shown_escaped_in_every_output() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    // ESC starting a colour, BEL, C1's CSI (U+009B) clearing the screen, DEL.
    let evil = "\u{1b}[31mred\u{7} \u{9b}2J\u{7f}";
    let spec = formica_tokio::JobSpec::builder().queue_name(evil).job_key(evil).build();
    let id = utils.add_raw_job(evil, json!({ "s": evil }), spec).await.unwrap().id;
    db.client()
        .await
        .execute(
            "update graphile_worker._private_jobs set last_error = $2, attempts = 1 where id = $1",
            &[&id, &format!("first line {evil}\nsecond line {evil}")],
        )
        .await
        .unwrap();
    let escaped = r"\u{1b}[31mred\u{7} \u{9b}2J\u{7f}";
    let id = id.to_string();
    for args in [vec!["jobs"], vec!["job", &id], vec!["status"], vec!["jobs", "--failed"]] {
        let shown = ok(&db, &args);
        assert_eq!(raw_control(&shown), None, "formica {args:?}: {shown:?}");
        assert!(shown.contains(escaped), "formica {args:?} shows them escaped: {shown}");
    }
    let whole = ok(&db, &["job", &id]);
    assert!(
        whole.contains(&format!("last_error:\nfirst line {escaped}\nsecond line {escaped}\n")),
        "{whole}"
    );
    for args in [vec!["jobs"], vec!["job", &id], vec!["status"]] {
        let out = ok(&db, &[&args[..], &["--json"]].concat());
        assert_eq!(raw_control(&out), None, "formica {args:?} --json: {out:?}");
        let value: Value = serde_json::from_str(&out).expect("JSON output");
        assert!(value.to_string().contains(&json!(evil).to_string()), "the text itself round-trips: {out}");
    }
    // An error quoting the text: a crontab's task identifier.
    let crontab = std::env::temp_dir().join(format!("formica-evil-crontab-{}", std::process::id()));
    std::fs::write(&crontab, format!("* * * * * {evil}\n")).unwrap();
    let out = formica(&db, &["crontab", "check", crontab.to_str().unwrap()]);
    let _ = std::fs::remove_file(&crontab);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(raw_control(&stderr), None, "{stderr:?}");
    assert!(stderr.contains("invalid task identifier") && stderr.contains(r"\u{1b}[31m"), "{stderr}");
}

#[tokio::test]
async fn unlock_refuses_a_worker_with_a_live_lease_unless_even_if_alive() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(utils.add_raw_job("t", json!({}), Default::default()).await.unwrap().id);
    }
    lease(&db, "alive", 60).await;
    lock(&db, ids[0], "alive").await;
    lock(&db, ids[1], "gone").await;
    let locked = "select count(*) from graphile_worker._private_jobs where locked_by is not null";

    let out = formica(&db, &["unlock", "alive", "gone"]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "refused");
    assert!(stderr.contains("worker \"alive\" is alive until"), "names the live worker: {stderr}");
    assert!(stderr.contains("run twice") && stderr.contains("--even-if-alive"), "{stderr}");
    assert!(!stderr.contains("\"gone\""), "only the live worker is named: {stderr}");
    assert_eq!(db.count(locked).await, 2, "nothing unlocked");
    let status = ok(&db, &["status"]);
    assert!(status.lines().any(|l| l.starts_with("alive ") && l.contains("alive until")), "{status}");

    assert_eq!(json(&db, &["unlock", "gone"])["unlocked"][0]["jobs"], 1, "no lease: unlocked as before");
    assert_eq!(json(&db, &["unlock", "alive", "--even-if-alive"])["unlocked"][0]["jobs"], 1);
    assert_eq!(db.count(locked).await, 0);
}

/// `formica status` tells a worker that stopped cleanly (its lease ended by end_lease.sql,
/// as a stopping worker's keeper does) from one that died (its lease lapsed) and a live one.
#[tokio::test]
async fn status_tells_a_stopped_worker_from_a_dead_one_and_a_live_one() {
    let db = TestDb::migrated().await;
    for (worker, seconds) in [("stopped", 60), ("dead", -1), ("live", 60)] {
        lease(&db, worker, seconds).await;
    }
    let end = formica_tokio::sql::render(formica_tokio::sql::worker::END_LEASE, "graphile_worker");
    db.client().await.execute(&end, &[&"stopped"]).await.unwrap();
    let status = ok(&db, &["status"]);
    let line =
        |worker: &str| status.lines().find(|l| l.starts_with(worker)).unwrap_or_else(|| panic!("{status}"));
    assert!(line("stopped ").contains("stopped at") && !line("stopped ").contains("lapsed"), "{status}");
    assert!(line("dead ").contains("lapsed at"), "{status}");
    assert!(line("live ").contains("alive until"), "{status}");
    let workers = json(&db, &["status"])["workers"].clone();
    let stopped = workers.as_array().unwrap().iter().find(|w| w["worker"] == "stopped").unwrap();
    assert!(stopped["lease"]["stopped_at"].is_string() && stopped["lease"]["lapsed"] == false, "{stopped}");
}

/// What a job reports and how its payload is kept, as `formica job` shows them: its
/// progress and its log lines after the job, and `encrypted (key ...)` instead of a sealed
/// payload's bytes; `formica encryption rotate` reseals under the newest key.
#[tokio::test]
async fn job_shows_progress_logs_and_encrypted_and_encryption_rotate_reseals() {
    let db = TestDb::migrated().await;
    let key = |byte: u8| format!("{byte:02x}").repeat(32);
    let ring = formica_tokio::Keyring::parse(&format!("k1:{}", key(1))).unwrap();
    let sealing = db.utils().encrypt_payloads(formica_tokio::Encryption::new(ring).task("charge"));
    let later =
        formica_tokio::JobSpec::builder().run_at(chrono::Utc::now() + chrono::Duration::hours(1)).build();
    let job = sealing.add_raw_job("charge", json!({ "card": "4242" }), later).await.unwrap();
    let sql = "insert into formica_graphile_worker.job_progress (job_id, fraction, value) values ($1, 0.5, '{\"rows\": 5}');
        insert into formica_graphile_worker.job_logs (job_id, attempt, line, at, level, message)
        values ($1, 1, 0, '2026-01-02T03:04:05.006Z', 'INFO', 'charging')";
    for statement in sql.split(';') {
        db.client().await.execute(statement, &[&job.id]).await.unwrap();
    }
    let shown = ok(&db, &["job", &job.id.to_string()]);
    assert!(shown.contains("payload:\nencrypted (key \"k1\")\n") && !shown.contains("4242"), "{shown}");
    assert!(shown.contains("progress    50% {\"rows\":5} at "), "{shown}");
    assert!(shown.contains("logs:\n2026-01-02T03:04:05.006Z  INFO [attempt 1] charging"), "{shown}");
    let keys = format!("k1:{},k2:{}", key(1), key(2));
    assert_eq!(
        ok(&db, &["encryption", "rotate", "--keys", &keys]),
        "rewritten 1, skipped 0 (changed or held meanwhile)\n"
    );
    assert!(ok(&db, &["job", &job.id.to_string()]).contains("payload:\nencrypted (key \"k2\")\n"));
    let wrong = formica(&db, &["encryption", "rotate", "--keys", &format!("k3:{}", key(3))]);
    assert!(!wrong.status.success());
    assert!(text(&wrong.stderr)
        .contains(r#"encrypted with key "k2", which this worker's key ring does not have"#));
}
