//! `--read-connection`: the read subcommands read the replica, the actions change the
//! primary. The stand-in replica is a second database on the same server, populated with
//! jobs of its own (a streaming replica would be heavy for a test): what each command shows
//! tells which database it read. And `formica dead-letter set|list|remove`.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use serde_json::{json, Value};

use crate::common;

fn json(url: &str, args: &[&str]) -> Value {
    let out = common::formica(url, &[&["--json"], args].concat());
    assert!(out.status.success(), "formica {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tasks(listing: &Value) -> Vec<String> {
    let jobs = listing.as_array().or_else(|| listing["jobs"].as_array()).expect("a listing");
    jobs.iter().map(|j| j["task_identifier"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_to_the_replica_and_actions_to_the_primary() {
    let primary = TestDb::migrated().await;
    let replica = TestDb::migrated().await;
    primary.utils().add_raw_job("on_primary", json!({}), Default::default()).await.unwrap();
    replica.utils().add_raw_job("on_replica", json!({}), Default::default()).await.unwrap();
    replica.utils().set_dead_letter("charge", "seen_on_replica", None).await.unwrap();
    let read = ["--read-connection", replica.url.as_str()];

    assert_eq!(tasks(&json(&primary.url, &[&["jobs"], &read[..]].concat())), ["on_replica"]);
    assert_eq!(tasks(&json(&primary.url, &["jobs"])), ["on_primary"], "without it, the primary");
    let status = json(&primary.url, &[&["status"], &read[..]].concat());
    assert!(
        status.to_string().contains("on_replica") && !status.to_string().contains("on_primary"),
        "{status}"
    );

    // Actions change the primary, whatever reads.
    json(&primary.url, &[&["add", "added"], &read[..]].concat());
    json(
        &primary.url,
        &[&["dead-letter", "set", "charge", "charge_failed", "--by", "ops"], &read[..]].concat(),
    );
    let added = "select count(*) from graphile_worker.jobs where task_identifier = 'added'";
    assert_eq!((primary.count(added).await, replica.count(added).await), (1, 0));
    let listed = json(&primary.url, &[&["dead-letter", "list"], &read[..]].concat());
    assert_eq!(listed[0]["target"], "seen_on_replica", "listed from the replica: {listed}");
    let listed = json(&primary.url, &["dead-letter", "list"]);
    assert_eq!(
        (&listed[0]["task"], &listed[0]["target"], &listed[0]["set_by"]),
        (&json!("charge"), &json!("charge_failed"), &json!("ops"))
    );
    assert_eq!(listed[0]["sent"], 0);
    json(&primary.url, &["dead-letter", "remove", "charge"]);
    let refused = common::formica(&primary.url, &["dead-letter", "remove", "charge"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("has no dead letter"));
    let refused = common::formica(&primary.url, &["dead-letter", "set", "a", "a"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("cannot be its own dead letter"));
}
