//! `formica pause`, `resume` and `paused`: a pause from the command line is listed with its
//! reason and author, and resuming what is not paused is refused; `formica cap`, `uncap`
//! and `caps`, `limit`, `unlimit` and `limits`, `fair`, `unfair` and `fairness`, and
//! `bound`, `unbound` and `bounds` likewise for each kind of control (and `age`, `unage` and `agings` for agings), each listed with
//! its partition (a rate limit with its period, a bound with its wait), each bad value
//! refused naming it; an add over a bound refused.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use formica_tokio::controls::{Control, ControlKind, Partition, Pause};
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

/// The controls of `kind` in force, through `WorkerUtils`.
async fn controls(db: &TestDb, kind: ControlKind) -> Vec<Control> {
    let all = db.utils().controls().await.unwrap().into_iter().map(|c| c.control);
    all.filter(|c| c.kind() == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_paused_from_the_command_line() {
    let db = TestDb::migrated().await;
    let paused =
        json(&formica(&db, &["pause", "--queue", "mail", "--reason", "provider down", "--by", "ops"]));
    assert_eq!(paused["paused"], "queue:mail");
    json(&formica(&db, &["pause", "--all"]));
    let list = json(&formica(&db, &["paused"]));
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    assert_eq!(
        (&list[0]["scope"], &list[0]["name"], &list[0]["reason"]),
        (&"queue".into(), &"mail".into(), &"provider down".into())
    );
    assert_eq!(list[0]["paused_by"], "ops");
    assert_eq!((&list[1]["scope"], &list[1]["name"]), (&"all".into(), &"".into()));
    let through_utils: Vec<Option<Pause>> =
        db.utils().paused().await.unwrap().iter().map(|p| p.pause()).collect();
    assert_eq!(through_utils, vec![Some(Pause::queue("mail")), Some(Pause::all())]);
    assert_eq!(json(&formica(&db, &["resume", "--all"]))["resumed"], "all");
    let again = formica(&db, &["resume", "--all"]);
    assert!(!again.status.success(), "resuming what is not paused is refused");
    assert!(String::from_utf8_lossy(&again.stderr).contains("all was not paused"));
    let both = formica(&db, &["pause", "--task", "a", "--queue", "b"]);
    assert!(!both.status.success(), "one target at a time");
    let none = formica(&db, &["pause"]);
    assert!(!none.status.success(), "a target is required");
    for scope in ["--task", "--queue"] {
        let empty = formica(&db, &["pause", scope, ""]);
        let stderr = String::from_utf8_lossy(&empty.stderr);
        assert!(!empty.status.success() && stderr.contains("needs its name, not \"\""), "{scope}: {stderr}");
    }
    assert_eq!(db.utils().paused().await.unwrap().len(), 1, "nothing more was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cap_uncap_and_caps_from_the_command_line() {
    let db = TestDb::migrated().await;
    let set = json(&formica(
        &db,
        &["cap", "--task", "import", "--max", "2", "--per-field", "customer_id", "--by", "ops"],
    ));
    assert_eq!((&set["task"], &set["max"]), (&"import".into(), &2.into()));
    // The answer names the partition, as `limit`'s does.
    assert_eq!(set["capped"], "import<=2 per field customer_id");
    assert_eq!(set["partition"], serde_json::json!({ "kind": "field", "argument": "customer_id" }));
    json(&formica(&db, &["cap", "--task", "mail", "--max", "5", "--per-key-prefix", ":"]));
    let caps = json(&formica(&db, &["caps"]));
    let caps = caps.as_array().unwrap();
    assert_eq!(caps.len(), 2, "{caps:?}");
    assert_eq!(caps[0]["partition"], serde_json::json!({ "kind": "field", "argument": "customer_id" }));
    assert_eq!(caps[0]["set_by"], "ops");
    assert_eq!(caps[1]["partition"]["kind"], "key_prefix");
    let through_utils = controls(&db, ControlKind::Cap).await;
    assert_eq!(through_utils[1].partition, Some(Partition::KeyPrefix(":".into())));
    // A task may have a cap per partition: lifting one names its partition.
    let whole = formica(&db, &["uncap", "--task", "mail"]);
    assert!(
        !whole.status.success() && String::from_utf8_lossy(&whole.stderr).contains("mail was not capped")
    );
    let lifted = json(&formica(&db, &["uncap", "--task", "mail", "--per-key-prefix", ":"]));
    assert_eq!(lifted["uncapped"], "mail per key_prefix :");
    let again = formica(&db, &["uncap", "--task", "mail", "--per-key-prefix", ":"]);
    assert!(
        !again.status.success()
            && String::from_utf8_lossy(&again.stderr).contains("mail per key_prefix : was not capped")
    );
    assert!(!formica(&db, &["cap", "--task", "x", "--max", "0"]).status.success(), "a cap of 0 is refused");
    let both =
        formica(&db, &["cap", "--task", "x", "--max", "1", "--per-field", "a", "--per-key-prefix", ":"]);
    assert!(!both.status.success(), "one partition at a time");
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
    let through_utils = controls(&db, ControlKind::RateLimit).await;
    assert_eq!(through_utils[0].partition, Some(Partition::Field("customer_id".into())));
    let per_customer = ["unlimit", "--task", "import", "--per-field", "customer_id"];
    assert_eq!(json(&formica(&db, &per_customer))["unlimited"], "import per field customer_id");
    let again = formica(&db, &per_customer);
    assert!(
        !again.status.success()
            && String::from_utf8_lossy(&again.stderr)
                .contains("import per field customer_id was not rate limited")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn age_unage_and_agings_from_the_command_line() {
    let db = TestDb::migrated().await;
    let set = json(&formica(
        &db,
        &["age", "--task", "report", "--every", "30s", "--step", "2", "--best", "-10", "--by", "ops"],
    ));
    assert_eq!(set["aging"], "report -2/30s to -10");
    assert_eq!((&set["every_ms"], &set["best"]), (&30_000.into(), &(-10).into()));
    let agings = json(&formica(&db, &["agings"]));
    assert_eq!((agings[0]["task"].as_str(), agings[0]["set_by"].as_str()), (Some("report"), Some("ops")));
    let through_utils = db.utils().agings().await.unwrap();
    assert_eq!(
        through_utils[0].aging,
        formica_tokio::Aging::new("report", chrono::Duration::seconds(30), 2, -10)
    );
    assert_eq!(json(&formica(&db, &["unage", "--task", "report"]))["unaged"], "report");
    let again = formica(&db, &["unage", "--task", "report"]);
    assert!(
        !again.status.success() && String::from_utf8_lossy(&again.stderr).contains("report was not aged")
    );
    let zero = formica(&db, &["age", "--task", "x", "--every", "1s", "--step", "0", "--best", "0"]);
    assert!(
        !zero.status.success() && String::from_utf8_lossy(&zero.stderr).contains("step 0"),
        "a step of 0 is refused naming it"
    );
}

/// Each bad value of a cap or rate limit is refused naming it, as a flow control (not as a
/// connection setting), and nothing is stored.
#[tokio::test]
async fn a_bad_control_is_refused_naming_the_value() {
    let db = TestDb::migrated().await;
    let cases: [(&str, &[&str], &str); 8] = [
        (
            "cap",
            &["--task", "", "--max", "1"],
            r#"invalid flow control: a cap needs a task identifier, not """#,
        ),
        ("cap", &["--task", " ", "--max", "1"], r#"a cap needs a task identifier, not " ""#),
        ("cap", &["--task", "x", "--max", "0"], r#"max 0: the cap of "x" takes 1 to 2147483647"#),
        (
            "cap",
            &["--task", "x", "--max", "1", "--per-field", ""],
            r#"the cap of "x" per field needs its payload field, not """#,
        ),
        (
            "limit",
            &["--task", "", "--max", "1"],
            r#"invalid flow control: a rate limit needs a task identifier, not """#,
        ),
        ("limit", &["--task", "x", "--max", "0"], r#"max 0: the rate limit of "x" takes 1 to 2147483647"#),
        ("limit", &["--task", "x", "--max", "3000000000"], "max 3000000000: "),
        (
            "limit",
            &["--task", "x", "--max", "1", "--per-key-prefix", ""],
            r#"per key_prefix needs its separator, not """#,
        ),
    ];
    for (verb, args, expected) in cases {
        let out = formica(&db, &[&[verb], args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && out.status.code() != Some(101), "{verb} {args:?}: {stderr}");
        assert!(
            stderr.contains(expected) && !stderr.contains("connection settings"),
            "{verb} {args:?}: {stderr}"
        );
    }
    assert!(db.utils().controls().await.unwrap().is_empty(), "nothing was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_unbound_and_bounds_from_the_command_line() {
    let db = TestDb::migrated().await;
    let set = json(&formica(
        &db,
        &["bound", "--task", "import", "--max", "2", "--per-field", "customer_id", "--wait", "5s"],
    ));
    assert_eq!(set["bounded"], "import waiting<=2 wait 5s per field customer_id");
    assert_eq!((&set["max"], &set["wait_ms"]), (&2.into(), &5_000.into()));
    json(&formica(&db, &["bound", "--task", "mail", "--max", "1000"]));
    let bounds = json(&formica(&db, &["bounds"]));
    let tasks: Vec<&Value> = bounds.as_array().unwrap().iter().map(|b| &b["task"]).collect();
    assert_eq!(tasks, vec!["import", "mail"]);
    let per = Partition::Field("customer_id".into());
    assert_eq!(
        controls(&db, ControlKind::Bound).await,
        vec![Control::bound("import", 2, 5_000).per(per), Control::bound("mail", 1_000, 0)]
    );
    // The add a bound refuses, from the command line too.
    for _ in 0..2 {
        json(&formica(&db, &["add", "import", r#"{"customer_id": "c1"}"#]));
    }
    json(&formica(&db, &["bound", "--task", "import", "--max", "2", "--per-field", "customer_id"]));
    let full = formica(&db, &["add", "import", r#"{"customer_id": "c1"}"#]);
    let stderr = String::from_utf8_lossy(&full.stderr);
    assert!(!full.status.success() && stderr.contains("queue full"), "{stderr}");
    assert_eq!(json(&formica(&db, &["unbound", "--task", "mail"]))["unbounded"], "mail");
    let again = formica(&db, &["unbound", "--task", "mail"]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("mail was not bounded"));
    let zero = formica(&db, &["bound", "--task", "x", "--max", "0"]);
    let stderr = String::from_utf8_lossy(&zero.stderr);
    assert!(!zero.status.success() && stderr.contains("max 0"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_unfair_and_fairness_from_the_command_line_beside_several_caps() {
    let db = TestDb::migrated().await;
    let set = json(&formica(
        &db,
        &["fair", "--task", "import", "--per-field", "customer_id", "--weight", "acme=3", "--by", "ops"],
    ));
    assert_eq!(set["fair"], "import fair per field customer_id (acme×3)");
    assert_eq!(set["weights"], serde_json::json!({ "acme": 3 }));
    // Two caps on the task: the whole task's and one per customer, both kept.
    json(&formica(&db, &["cap", "--task", "import", "--max", "20"]));
    json(&formica(&db, &["cap", "--task", "import", "--max", "1", "--per-field", "customer_id"]));
    assert_eq!(controls(&db, ControlKind::Cap).await.len(), 2, "a cap per partition");
    let listed = json(&formica(&db, &["fairness"]));
    assert_eq!((listed[0]["task"].as_str(), listed[0]["set_by"].as_str()), (Some("import"), Some("ops")));
    let fair = controls(&db, ControlKind::Fair).await;
    assert_eq!(
        fair,
        vec![Control::fair("import", Partition::Field("customer_id".into())).weighted("acme", 3)]
    );
    for refused in [
        vec!["fair", "--task", "import"],
        vec!["fair", "--task", "import", "--per-field", "c", "--weight", "acme=0"],
        vec!["fair", "--task", "import", "--per-field", "c", "--weight", "acme"],
    ] {
        assert!(!formica(&db, &refused).status.success(), "{refused:?} is refused");
    }
    assert_eq!(json(&formica(&db, &["unfair", "--task", "import"]))["unfair"], "import");
    let again = formica(&db, &["unfair", "--task", "import"]);
    assert!(
        !again.status.success() && String::from_utf8_lossy(&again.stderr).contains("import was not fair")
    );
    assert_eq!(controls(&db, ControlKind::Cap).await.len(), 2, "lifting fairness left the caps");
}
