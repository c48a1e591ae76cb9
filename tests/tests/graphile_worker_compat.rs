//! Formica against the real graphile-worker 0.18.0 (Node). Ignored by default: run through
//! `scripts/compat-graphile-worker`, which installs it from npm and sets
//! `FORMICA_GRAPHILE_WORKER` (its CLI) and `FORMICA_GRAPHILE_WORKER_16` (the same CLI with
//! its migrations cut at 16).

use formica_tests::{expected_ledger, ledger, reference_facts, schema_facts, TestDb};
use formica_tokio::JobSpec;
use serde_json::json;
use std::path::Path;
use std::process::Command;

/// Run graphile-worker's CLI (`var` names which copy) in `cwd` against `db`.
fn graphile_worker(var: &str, db: &TestDb, cwd: &Path, args: &[&str]) -> std::process::Output {
    let cli =
        std::env::var(var).unwrap_or_else(|_| panic!("{var} is not set: run scripts/compat-graphile-worker"));
    let out = Command::new("node")
        .arg(cli)
        .arg("-c")
        .arg(node_url(db))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "graphile-worker {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A postgres:// URL for node-postgres (which does not take key=value strings).
fn node_url(db: &TestDb) -> String {
    let server: tokio_postgres::Config =
        std::env::var("DATABASE_URL").expect("DATABASE_URL").parse().expect("url");
    let host = match &server.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    let port = server.get_ports().first().copied().unwrap_or(5432);
    let user = server.get_user().unwrap_or("postgres");
    format!("postgres://{user}@{host}:{port}/{}", db.name)
}

#[tokio::test]
#[ignore = "needs graphile-worker from npm: scripts/compat-graphile-worker"]
async fn formica_accepts_a_database_graphile_worker_migrated() {
    let db = TestDb::new().await;
    graphile_worker("FORMICA_GRAPHILE_WORKER", &db, Path::new("."), &["--schema-only"]);
    let client = db.client().await;
    assert_eq!(schema_facts(&client, "graphile_worker").await, reference_facts().await);
    let report = db.utils().migrate().await.expect("Formica accepts it");
    assert!(report.applied.is_empty());
    assert_eq!(ledger(&client, "graphile_worker").await, expected_ledger());
}

#[tokio::test]
#[ignore = "needs graphile-worker from npm: scripts/compat-graphile-worker"]
async fn formica_upgrades_graphile_worker_16_to_the_same_schema_as_graphile_worker() {
    let db = TestDb::new().await;
    graphile_worker("FORMICA_GRAPHILE_WORKER_16", &db, Path::new("."), &["--schema-only"]);
    let client = db.client().await;
    assert_eq!(ledger(&client, "graphile_worker").await.last().map(|l| l.0), Some(16));
    let report = db.utils().migrate().await.expect("upgrade from 16");
    assert_eq!(report.applied, vec![17, 18, 19, 20]);
    assert_eq!(schema_facts(&client, "graphile_worker").await, reference_facts().await);
    assert_eq!(ledger(&client, "graphile_worker").await, expected_ledger());
    // graphile-worker then has nothing left to do on it.
    graphile_worker("FORMICA_GRAPHILE_WORKER", &db, Path::new("."), &["--schema-only"]);
    assert_eq!(ledger(&client, "graphile_worker").await, expected_ledger());
}

#[tokio::test]
#[ignore = "needs graphile-worker from npm: scripts/compat-graphile-worker"]
async fn graphile_worker_runs_jobs_formica_added_to_a_schema_formica_installed() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client.batch_execute("create table done (n int, queue text)").await.unwrap();
    let utils = db.utils();
    for n in 0..5 {
        let spec =
            if n % 2 == 0 { JobSpec::builder().queue_name("serial").build() } else { JobSpec::default() };
        utils.add_raw_job("record", json!({ "n": n }), spec).await.expect("add");
    }
    let tasks = std::env::temp_dir().join(format!("formica-compat-{}", db.name));
    std::fs::create_dir_all(tasks.join("tasks")).unwrap();
    std::fs::write(
        tasks.join("tasks/record.js"),
        "module.exports = async (payload, helpers) => {\n\
           await helpers.query('insert into done values ($1, $2)', [payload.n, await helpers.getQueueName()]);\n\
         };\n",
    )
    .unwrap();
    graphile_worker("FORMICA_GRAPHILE_WORKER", &db, &tasks, &["--once"]);
    let mut done: Vec<(i32, Option<String>)> = client
        .query("select n, queue from done", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    done.sort();
    let serial = || Some("serial".to_owned());
    assert_eq!(done, vec![(0, serial()), (1, None), (2, serial()), (3, None), (4, serial())]);
    let left: i64 = client.query_one("select count(*) from graphile_worker.jobs", &[]).await.unwrap().get(0);
    assert_eq!(left, 0, "every job completed");
    assert_eq!(
        ledger(&client, "graphile_worker").await,
        expected_ledger(),
        "graphile-worker migrated nothing"
    );
    let _ = std::fs::remove_dir_all(tasks);
}
