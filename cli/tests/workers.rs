//! Workers an operator can see: every `formica` worker, idle or busy, is listed by
//! `formica status` and the dashboard's Workers page from its lease (host, pid, start, last
//! heartbeat, lease expiry, jobs held, version) within a heartbeat of starting; one killed
//! with SIGKILL is marked lapsed once its lease expires and is gone once a live worker's
//! sweep frees it. The metrics server and the dashboard answer a container's probes:
//! `/healthz` while the process runs, `/readyz` only while the database answers (and, for
//! a worker, its lease holds).

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::dashboard::Dashboard;
use formica_tests::proxy::Proxy;
use formica_tests::TestDb;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use common::Worker;

fn worker(db: &TestDb, tasks: &Path) -> Worker {
    common::worker(&db.url, tasks, &[])
}

/// The workers `formica --json status` lists.
fn status(db: &TestDb) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--json", "status"])
        .output()
        .unwrap();
    assert!(out.status.success(), "formica status: {}", String::from_utf8_lossy(&out.stderr));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    status["workers"].as_array().unwrap().clone()
}

/// The worker of process `pid` in `workers`.
fn of_pid(workers: &[Value], pid: u32) -> Option<Value> {
    workers.iter().find(|w| w["lease"]["pid"] == pid).cloned()
}

async fn wait_for<T>(within: Duration, what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(t) = found() {
            return t;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn std(d: formica_tokio::chrono::Duration) -> Duration {
    d.to_std().unwrap()
}

/// An idle worker (no job at all) is listed by `status` and the dashboard with its host,
/// pid and version, and renews its heartbeat every few seconds. Killed with SIGKILL, it is
/// marked lapsed on both once its lease expires, then gone once the other worker's sweep
/// frees it (lease, grace and two sweep periods, plus slack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_is_listed_within_a_heartbeat_then_lapsed_then_gone_after_sigkill() {
    let db = TestDb::migrated().await;
    let tasks: PathBuf = std::env::temp_dir().join(format!("formica-workers-{}", std::process::id()));
    std::fs::create_dir_all(&tasks).unwrap();
    let ui = Dashboard::start(db.utils(), formica_ui::Options::default()).await;
    let heartbeat = std(formica_tokio::HEARTBEAT_INTERVAL);
    let startup = Duration::from_secs(10);

    let mut doomed = worker(&db, &tasks);
    let survivor = worker(&db, &tasks);
    let pid = doomed.0.id();
    let seen =
        wait_for(startup + heartbeat, "the idle worker in `status`", || of_pid(&status(&db), pid)).await;
    let lease = &seen["lease"];
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_owned();
    assert_eq!(lease["host"], Value::from(host.clone()));
    assert_eq!(lease["version"], Value::from(env!("CARGO_PKG_VERSION")));
    assert_eq!(lease["lapsed"], Value::from(false));
    assert_eq!(seen["jobs"], Value::from(0), "idle");
    let id = seen["worker"].as_str().unwrap().to_owned();
    let first_beat = lease["heartbeat_at"].clone();
    wait_for(heartbeat + Duration::from_secs(2), "a renewed heartbeat", || {
        of_pid(&status(&db), pid).filter(|w| w["lease"]["heartbeat_at"] != first_beat)
    })
    .await;
    let page = ui.get("/workers").await;
    assert_eq!(page.status, 200);
    for shown in [&id, &host, &pid.to_string(), env!("CARGO_PKG_VERSION"), "alive until"] {
        assert!(page.body.contains(shown), "{shown} on the Workers page: {}", page.body);
    }
    assert!(!page.body.contains("lapsed</b>"), "nobody lapsed yet");

    assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
    doomed.0.wait().unwrap();
    let lapsed = of_pid(&status(&db), pid).unwrap();
    assert_eq!(lapsed["lease"]["lapsed"], Value::from(false), "alive until its lease expires");
    let lease_bound = std(formica_tokio::LEASE) + Duration::from_secs(1);
    wait_for(lease_bound, "the killed worker marked lapsed", || {
        of_pid(&status(&db), pid).filter(|w| w["lease"]["lapsed"] == true)
    })
    .await;
    let page = ui.get("/workers").await;
    assert!(page.body.contains("<b>lapsed</b>"), "marked on the Workers page: {}", page.body);
    let swept =
        std(formica_tokio::SUSPICION_GRACE + formica_tokio::RECOVERY_PERIOD * 8 / 3) + Duration::from_secs(5);
    wait_for(swept, "the killed worker gone", || of_pid(&status(&db), pid).is_none().then_some(())).await;
    assert!(!ui.get("/workers").await.body.contains(&id), "gone from the Workers page");
    assert!(of_pid(&status(&db), survivor.0.id()).is_some(), "the survivor is still listed");
    let _ = std::fs::remove_dir_all(&tasks);
}

/// A database whose records are at migration 2 gets migration 3's lease columns, and
/// leases written before it read with no host, pid or version until renewed.
#[tokio::test]
async fn a_database_at_records_migration_2_gets_the_lease_columns() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "alter table formica_graphile_worker.leases drop column host, drop column pid, \
               drop column version, drop column started_at, drop column heartbeat_at; \
             delete from formica_graphile_worker.migrations where id = 3; \
             insert into formica_graphile_worker.leases (worker_id, expires_at) values ('old', now() + interval '1 minute')",
        )
        .await
        .unwrap();
    db.migrate_records_to_the_last_step().await;
    let old = status(&db);
    assert_eq!(old.len(), 1);
    assert_eq!(old[0]["worker"], Value::from("old"));
    assert_eq!(old[0]["lease"]["host"], Value::Null, "unknown until it renews");
    assert_eq!(old[0]["lease"]["lapsed"], Value::from(false));
}

/// `GET path` on `addr`: the status code and the body.
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    (status, body.to_owned())
}

/// Waits until `path` on `addr` answers `status`; the body.
async fn wait_for_status(addr: &str, path: &str, status: u16, within: Duration) -> String {
    let what = format!("{path} answering {status}");
    wait_for(within, &what, || Some(get(addr, path)).filter(|(s, _)| *s == status).map(|(_, body)| body))
        .await
}

/// The value of `metric` (with `label`) in a Prometheus scrape.
fn metric(scrape: &str, metric: &str, label: &str) -> Option<f64> {
    let line =
        scrape.lines().find(|line| line.split(['{', ' ']).next() == Some(metric) && line.contains(label))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// The worker's metrics say it is up and how long the oldest due job of each task has
/// waited. Its metrics server answers `/healthz` 200 throughout, and `/readyz` 200 once the
/// worker runs, 503 with the reason while its database is cut off (new connections hang,
/// open ones are closed), and 200 again once it is back.
#[cfg(feature = "prometheus")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_show_the_worker_up_and_the_oldest_due_job_and_readyz_fails_while_the_database_is_cut_off(
) {
    let db = TestDb::migrated().await;
    let a_minute_ago = formica_tokio::chrono::Utc::now() - formica_tokio::chrono::Duration::seconds(60);
    let spec = formica_tokio::JobSpec::builder().run_at(a_minute_ago).build();
    db.utils().add_raw_job("elsewhere", serde_json::json!({}), spec).await.unwrap();
    let (proxy, url) = Proxy::in_front_of(&db.url);
    let tasks: PathBuf = std::env::temp_dir().join(format!("formica-probes-{}", std::process::id()));
    std::fs::create_dir_all(&tasks).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &url, "--tasks", tasks.to_str().unwrap(), "--log-format", "json"])
        .args(["--metrics-addr", "127.0.0.1:0", "--queue-depth-interval", "100"])
        .env("RUST_LOG", "error,formica::metrics=info")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start formica");
    let addr = formica_tests::metrics_address(child.stderr.take().unwrap());
    let _worker = Worker(child);

    assert_eq!(get(&addr, "/healthz").0, 200);
    assert_eq!(wait_for_status(&addr, "/readyz", 200, Duration::from_secs(15)).await, "ready\n");
    let scrape = wait_for_status(&addr, "/metrics", 200, Duration::from_secs(1)).await;
    assert_eq!(metric(&scrape, "formica_worker_up", "messaging_consumer_group_name"), Some(1.0), "{scrape}");
    let task = "messaging_destination_name=\"elsewhere\"";
    let age = wait_for(Duration::from_secs(5), "the oldest due job's age sampled", || {
        let scrape = get(&addr, "/metrics").1;
        metric(&scrape, "formica_queue_oldest_due_age_seconds", task).filter(|age| *age > 0.0)
    })
    .await;
    assert!((60.0..120.0).contains(&age), "the job due a minute ago: {age}");
    proxy.hang_new_connections(true);
    proxy.cut_all();
    let why = wait_for_status(&addr, "/readyz", 503, Duration::from_secs(5)).await;
    assert!(why.starts_with("not ready: "), "{why}");
    assert_eq!(get(&addr, "/healthz"), (200, "alive\n".to_owned()), "the process is alive");
    proxy.hang_new_connections(false);
    proxy.cut_all();
    wait_for_status(&addr, "/readyz", 200, std(formica_tokio::LEASE) + Duration::from_secs(5)).await;
    let _ = std::fs::remove_dir_all(&tasks);
}

/// The dashboard answers `/healthz` 200 throughout and `/readyz` 200 while its database
/// answers, 503 with the reason while it is cut off; both without the dashboard's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_s_readyz_fails_while_the_database_is_cut_off_and_healthz_does_not() {
    let db = TestDb::migrated().await;
    let (proxy, url) = Proxy::in_front_of(&db.url);
    let utils = formica_tokio::WorkerUtils::new(formica_tokio::pool(&url, 2).unwrap(), "graphile_worker");
    let options = formica_ui::Options { token: Some("secret".into()), ..Default::default() };
    let ui = Dashboard::start(utils, options).await;
    let addr = ui.addr.to_string();
    assert_eq!(get(&addr, "/workers").0, 401, "the pages need the token");
    assert_eq!(get(&addr, "/healthz"), (200, "alive\n".to_owned()));
    assert_eq!(get(&addr, "/readyz"), (200, "ready\n".to_owned()));
    proxy.hang_new_connections(true);
    proxy.cut_all();
    let why = wait_for_status(&addr, "/readyz", 503, Duration::from_secs(5)).await;
    assert!(why.starts_with("not ready: "), "{why}");
    assert_eq!(get(&addr, "/healthz").0, 200);
    proxy.hang_new_connections(false);
    wait_for_status(&addr, "/readyz", 200, Duration::from_secs(5)).await;
}
