//! `formica doctor`: each health check with its evidence, `--json` like the other
//! commands, and an exit status for cron and CI (0 healthy, 3 a warning, 4 critical), on a
//! database where a transaction is held open for real.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

fn doctor(db: &TestDb, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "doctor"])
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run formica doctor")
}

/// The check `name` of a `--json` report.
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    let checks = report["checks"].as_array().expect("checks");
    checks.iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no {name} in {report}"))
}

#[tokio::test]
async fn doctor_prints_each_check_and_exits_by_the_worst_severity() {
    let db = TestDb::migrated().await;
    let healthy = doctor(&db, &[]);
    let text = String::from_utf8_lossy(&healthy.stdout);
    assert_eq!(healthy.status.code(), Some(0), "{text}{}", String::from_utf8_lossy(&healthy.stderr));
    for name in ["horizon", "dead_rows", "autovacuum", "bloat", "fetch_cost", "schema"] {
        assert!(text.lines().any(|l| l.split_whitespace().nth(1) == Some(name)), "{name} in:\n{text}");
    }
    assert!(text.contains("unknown  fetch_cost  pg_stat_statements is not installed"), "{text}");

    let held = db.client().await;
    held.batch_execute("set application_name = 'doctor-test'; begin; select txid_current()").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let warned = doctor(&db, &["--json", "--horizon-warning", "1s"]);
    assert_eq!(warned.status.code(), Some(3), "{}", String::from_utf8_lossy(&warned.stderr));
    let report: Value = serde_json::from_slice(&warned.stdout).unwrap();
    let horizon = check(&report, "horizon");
    assert_eq!(horizon["severity"], "warning", "{report}");
    let evidence = horizon["evidence"].to_string();
    assert!(evidence.contains("doctor-test") && evidence.contains("idle in transaction"), "{evidence}");
    assert!(String::from_utf8_lossy(&warned.stderr).contains("the worst check is warning"));

    let critical = doctor(&db, &["--horizon-warning", "1s", "--horizon-critical", "1s"]);
    assert_eq!(critical.status.code(), Some(4));
    let text = String::from_utf8_lossy(&critical.stdout);
    assert!(text.lines().any(|l| l.starts_with("critical horizon")), "{text}");
    assert!(text.contains("application_name \"doctor-test\""), "{text}");

    let refused = doctor(&db, &["--horizon-warning", "soon"]);
    assert_eq!(refused.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("soon"));
    held.batch_execute("commit").await.unwrap();
}

/// The worker's metrics carry the health checks: a dropped index of the jobs table shows as
/// `formica_health_severity` 2 for `schema`, with the differences as its value.
#[cfg(feature = "prometheus")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_s_metrics_carry_each_check_s_severity_and_value() {
    use std::io::{Read, Write};
    let db = TestDb::migrated().await;
    db.client().await.batch_execute("drop index graphile_worker.jobs_no_queue_index").await.unwrap();
    let tasks = std::env::temp_dir().join(format!("formica-doctor-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&tasks).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--tasks", tasks.to_str().unwrap(), "--log-format", "json"])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env("RUST_LOG", "error,formica::metrics=info")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start formica");
    let addr = formica_tests::metrics_address(child.stderr.take().unwrap());
    let _worker = crate::common::Worker(child);
    let scrape = || {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut body = String::new();
        stream.read_to_string(&mut body).unwrap();
        body
    };
    let value = |scrape: &str, metric: &str| -> Option<f64> {
        let line = scrape
            .lines()
            .find(|l| l.starts_with(metric) && l.contains("formica_health_check=\"schema\""))?;
        line.rsplit(' ').next()?.parse().ok()
    };
    // The first scrape asks for the gauges; the sample follows within a second or so.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let found = loop {
        let body = scrape();
        if let Some(severity) = value(&body, "formica_health_severity{") {
            break (severity, value(&body, "formica_health_value{"), body);
        }
        assert!(std::time::Instant::now() < deadline, "no health gauges within 15 s:\n{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!((found.0, found.1), (2.0, Some(1.0)), "{}", found.2);
    assert!(found.2.contains("formica_health_severity{formica_health_check=\"horizon\""), "{}", found.2);
    let _ = std::fs::remove_dir_all(&tasks);
}
