//! `formica limit`, `unlimit` and `limits`: a rate limit from the command line is listed
//! with its period, partition and author, and lifting what is not limited is refused.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use formica_tokio::flow::Partition;
use formica_tokio::rate_limit::Limit;
use serde_json::Value;
use std::process::Output;

use crate::common;

fn formica(db: &TestDb, args: &[&str]) -> Output {
    common::formica(&db.url, &[&["--json"], args].concat())
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "formica: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_unlimit_and_limits_from_the_command_line() {
    let db = TestDb::migrated().await;
    let set =
        json(&formica(&db, &["limit", "--task", "send_email", "--max", "100", "--per", "1m", "--by", "ops"]));
    assert_eq!(set["limited"], "send_email 100/min");
    json(&formica(&db, &["limit", "--task", "import", "--max", "2", "--per-field", "customer_id"]));
    let limits = json(&formica(&db, &["limits"]));
    let limits = limits.as_array().unwrap();
    assert_eq!(limits.len(), 2, "{limits:?}");
    assert_eq!((&limits[0]["task"], &limits[0]["period_ms"]), (&"import".into(), &1_000.into()));
    assert_eq!(limits[0]["partition"], serde_json::json!({ "kind": "field", "argument": "customer_id" }));
    assert_eq!(limits[1]["set_by"], "ops");
    let through_utils: Vec<Limit> =
        db.utils().rate_limits().await.unwrap().into_iter().map(|l| l.limit).collect();
    assert_eq!(through_utils[0].partition, Some(Partition::Field("customer_id".into())));
    assert_eq!(json(&formica(&db, &["unlimit", "--task", "import"]))["unlimited"], "import");
    let again = formica(&db, &["unlimit", "--task", "import"]);
    assert!(
        !again.status.success()
            && String::from_utf8_lossy(&again.stderr).contains("import was not rate limited")
    );
    assert!(
        !formica(&db, &["limit", "--task", "x", "--max", "0"]).status.success(),
        "a limit of 0 is refused"
    );
    assert!(
        !formica(&db, &["limit", "--task", "x", "--max", "1", "--per", "1d"]).status.success(),
        "no such unit"
    );
}

/// Each bad value of a rate limit is refused naming it, as a flow control (not as a
/// connection setting), and nothing is stored.
#[tokio::test]
async fn a_bad_rate_limit_is_refused_naming_the_value() {
    let db = TestDb::migrated().await;
    let cases: [(&[&str], &str); 4] = [
        (
            &["--task", "", "--max", "1"],
            r#"invalid flow control: a rate limit needs a task identifier, not """#,
        ),
        (&["--task", "x", "--max", "0"], r#"max 0: the rate limit of "x" takes 1 to 2147483647"#),
        (&["--task", "x", "--max", "3000000000"], "max 3000000000: "),
        (
            &["--task", "x", "--max", "1", "--per-key-prefix", ""],
            r#"per key_prefix needs its separator, not """#,
        ),
    ];
    for (args, expected) in cases {
        let out = formica(&db, &[&["limit"], args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && out.status.code() != Some(101), "{args:?}: {stderr}");
        assert!(stderr.contains(expected) && !stderr.contains("connection settings"), "{args:?}: {stderr}");
    }
    assert!(db.utils().rate_limits().await.unwrap().is_empty(), "nothing was stored");
}
