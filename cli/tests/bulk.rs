//! `formica retry`, `delete`, and `cancel`/`reschedule` by filter: a dry run says how many,
//! the real run changes as many (never a running job), and no filter at all is refused
//! unless `--all` says so.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use serde_json::{json, Value};
use std::process::Output;

use crate::common;

fn formica(db: &TestDb, args: &[&str]) -> Output {
    common::formica(&db.url, args)
}

fn ok(db: &TestDb, args: &[&str]) -> String {
    common::ok(&db.url, args)
}

fn json(db: &TestDb, args: &[&str]) -> Value {
    common::json(&db.url, args)
}

/// Jobs of `task` whose ids are returned, then `sql` applied to them.
async fn jobs(db: &TestDb, task: &str, n: usize, sql: &str) -> Vec<i64> {
    let utils = db.utils();
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            utils.add_raw_job(task, json!({ "i": i }), formica_tokio::JobSpec::default()).await.unwrap().id,
        );
    }
    let update = format!("update graphile_worker._private_jobs set {sql} where id = any($1)");
    db.client().await.execute(update.as_str(), &[&ids]).await.unwrap();
    ids
}

/// How many jobs match `sql` (a condition on `_private_jobs`).
async fn count(db: &TestDb, sql: &str) -> i64 {
    db.count(&format!("select count(*) from graphile_worker._private_jobs where {sql}")).await
}

#[tokio::test]
async fn retry_by_filter_says_how_many_in_a_dry_run_then_retries_as_many() {
    let db = TestDb::migrated().await;
    jobs(&db, "invoice", 5, "attempts = max_attempts, last_error = 'timeout'").await;
    jobs(
        &db,
        "invoice",
        2,
        "attempts = max_attempts, last_error = 'old', created_at = now() - interval '3 hours'",
    )
    .await;
    jobs(&db, "email", 3, "attempts = max_attempts, last_error = 'timeout'").await;
    jobs(&db, "invoice", 1, "attempts = 2, last_error = 'timeout', locked_at = now(), locked_by = 'w'").await;

    let args = ["retry", "--task", "invoice", "--failed", "--since", "1h"];
    let dry = json(&db, &[&args[..], &["--dry-run"]].concat());
    assert_eq!(dry, json!({ "action": "retry", "dry_run": true, "jobs": 5 }));
    assert_eq!(ok(&db, &[&args[..], &["--dry-run"]].concat()).trim(), "retry: 5 jobs would change (dry run)");
    assert_eq!(count(&db, "attempts = 0").await, 0, "the dry run changes nothing");
    assert_eq!(ok(&db, &args).trim(), "retry: 5 jobs changed");
    assert_eq!(
        count(&db, "attempts = 0 and run_at <= now() and last_error = 'timeout' and locked_at is null").await,
        5
    );
    assert_eq!(count(&db, "locked_by = 'w' and attempts = 2").await, 1, "the running job is untouched");
    assert_eq!(
        count(&db, "attempts = max_attempts").await,
        5,
        "the older ones and the other task's stay failed"
    );
}

#[tokio::test]
async fn cancel_reschedule_and_delete_by_filter_and_by_id() {
    let db = TestDb::migrated().await;
    let waiting = jobs(&db, "sync", 4, "run_at = now() + interval '1 day'").await;
    jobs(&db, "sync", 2, "attempts = max_attempts, last_error = 'gone'").await;

    let cancel = json(&db, &["cancel", "--task", "sync", "--reason", "outage"]);
    assert_eq!(cancel["jobs"], 4, "only the jobs that would still run: {cancel}");
    assert_eq!(count(&db, "last_error = 'cancelled: outage' and attempts = max_attempts").await, 4);
    assert_eq!(count(&db, "last_error = 'gone'").await, 2, "failed jobs keep their error");

    let to = "2031-01-02T03:04:05Z";
    let id = waiting[0].to_string();
    let moved =
        json(&db, &["reschedule", &id, "--state", "permanently_failed", "--run-at", to, "--priority", "3"]);
    assert_eq!(moved["jobs"], 1, "by id and filter: {moved}");
    assert_eq!(count(&db, "priority = 3 and run_at = '2031-01-02T03:04:05Z'").await, 1);

    let wrong = formica(&db, &["delete", "--state", "dead"]);
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("unknown state \"dead\""));
    assert_eq!(
        json(&db, &["delete", "--error", "GONE", "--attempts-at-least", "25", "--dry-run"])["jobs"],
        2
    );
    assert_eq!(json(&db, &["delete", "--error", "gone"])["jobs"], 2);
    assert_eq!(count(&db, "true").await, 4);
}

#[tokio::test]
async fn no_filter_is_refused_unless_all_is_given() {
    let db = TestDb::migrated().await;
    jobs(&db, "a", 3, "attempts = max_attempts, last_error = 'x'").await;
    for verb in ["retry", "delete", "cancel"] {
        let out = formica(&db, &[verb]);
        assert!(!out.status.success(), "{verb} with nothing");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("give") && stderr.contains("--all"), "{verb}: {stderr}");
    }
    assert_eq!(count(&db, "true").await, 3, "nothing was changed");
    assert_eq!(json(&db, &["delete", "--all", "--batch-size", "1"])["jobs"], 3);
    assert_eq!(count(&db, "true").await, 0);
}

/// A time ago beyond the calendar is refused naming it, before any database is touched (it
/// made the command panic, exit 101).
#[test]
fn a_time_ago_beyond_the_calendar_is_refused_naming_it() {
    for verb in ["retry", "delete", "cancel", "reschedule"] {
        let out = common::formica("postgres://localhost:1/none", &[verb, "--since", "100000000d"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{verb}: a usage error, not a panic (101): {stderr}");
        assert!(stderr.contains("invalid value '100000000d' for '--since <SINCE>'"), "{verb}: {stderr}");
    }
}
