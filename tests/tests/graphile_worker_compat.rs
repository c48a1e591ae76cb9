//! Formica against the real graphile-worker 0.18.0 (Node). Ignored by default: run through
//! `scripts/compat-graphile-worker`, which installs it from npm and sets
//! `FORMICA_GRAPHILE_WORKER` (its CLI) and `FORMICA_GRAPHILE_WORKER_16` (the same CLI with
//! its migrations cut at 16).

use formica_tests::node::node_url;
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

/// Jobs that failed for good (by hand, or cancelled in bulk) and were retried in bulk by
/// filter are run by graphile-worker (Node) to completion: a retry leaves rows its own
/// `reschedule_jobs` would. Jobs outside the filter stay failed.
#[tokio::test]
#[ignore = "needs graphile-worker from npm: scripts/compat-graphile-worker"]
async fn graphile_worker_runs_the_jobs_formica_retried_in_bulk() {
    use formica::{BulkAction, BulkFilter};
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client.batch_execute("create table done (n int)").await.unwrap();
    let utils = db.utils();
    let mut failed = Vec::new();
    for n in 0..20 {
        failed.push(utils.add_raw_job("record", json!({ "n": n }), JobSpec::default()).await.unwrap().id);
    }
    let other = utils.add_raw_job("other", json!({}), JobSpec::default()).await.unwrap().id;
    utils.permanently_fail_jobs(&failed[..10], Some("outage")).await.unwrap();
    utils.permanently_fail_jobs(&[other], Some("outage")).await.unwrap();
    let cancel = BulkAction::Cancel { reason: "outage".into() };
    let rest = BulkFilter { ids: Some(failed[10..].to_vec()), ..BulkFilter::default() };
    assert_eq!(utils.bulk(&cancel, &rest).await.unwrap(), 10);

    let filter = BulkFilter { task: Some("record".into()), failed: true, ..BulkFilter::default() };
    assert_eq!(utils.bulk_dry_run(&BulkAction::Retry, &filter).await.unwrap(), 20);
    assert_eq!(utils.bulk(&BulkAction::Retry, &filter).await.unwrap(), 20);
    let tasks = std::env::temp_dir().join(format!("formica-compat-{}", db.name));
    std::fs::create_dir_all(tasks.join("tasks")).unwrap();
    let task = "module.exports = async (payload, helpers) => {\n\
                  await helpers.query('insert into done values ($1)', [payload.n]);\n\
                };\n";
    std::fs::write(tasks.join("tasks/record.js"), task).unwrap();
    std::fs::write(tasks.join("tasks/other.js"), task).unwrap();
    graphile_worker("FORMICA_GRAPHILE_WORKER", &db, &tasks, &["--once"]);
    let done: Vec<i32> =
        client.query("select n from done order by n", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(done, (0..20).collect::<Vec<_>>(), "every retried job ran once");
    let left: Vec<i64> = client
        .query("select id from graphile_worker.jobs", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, vec![other], "the retried jobs completed; the job outside the filter stays failed");
    let _ = std::fs::remove_dir_all(tasks);
}

/// A batch job whose items partly fail leaves the same row whichever of Formica and
/// graphile-worker (Node) ran it: only the failed items as its payload, the attempt counted,
/// the backoff, the lock released, `last_error` starting with `Batch failures:`; and
/// graphile-worker runs the retry of the job Formica left to completion.
#[tokio::test]
#[ignore = "needs graphile-worker from npm: scripts/compat-graphile-worker"]
async fn a_partly_failed_batch_job_is_left_alike_by_graphile_worker_and_formica() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    let utils = db.utils();
    let items = json!([{ "n": 1 }, { "n": 2, "fail": true }, { "n": 3, "fail": true }]);
    let by_formica = utils.add_raw_job("formica_batch", items.clone(), JobSpec::default()).await.unwrap().id;
    let by_node = utils.add_raw_job("node_batch", items, JobSpec::default()).await.unwrap().id;
    // Both fail the items marked `fail` on the first attempt only.
    let worker = db.worker_options().define_raw_batch_job("formica_batch", |ctx, items| async move {
        let fails = |item: &serde_json::Value| ctx.job().attempts == 1 && item.get("fail").is_some();
        Ok(items
            .iter()
            .map(|i| if fails(i) { Err(format!("no route to {}", i["n"]).into()) } else { Ok(()) })
            .collect())
    });
    worker.init().await.unwrap().run_once().await.unwrap();
    let tasks = std::env::temp_dir().join(format!("formica-compat-{}", db.name));
    std::fs::create_dir_all(tasks.join("tasks")).unwrap();
    let task = "module.exports = async (payload, helpers) => payload.map((item) =>\n\
                  item.fail && helpers.job.attempts === 1\n\
                    ? Promise.reject(new Error('no route to ' + item.n)) : Promise.resolve());\n";
    std::fs::write(tasks.join("tasks/node_batch.js"), task).unwrap();
    graphile_worker("FORMICA_GRAPHILE_WORKER", &db, &tasks, &["--once"]);

    let row = "select payload, attempts, locked_by, locked_at, split_part(last_error, E'\\n', 1), \
                 extract(epoch from run_at - now())::float8 from graphile_worker._private_jobs where id = $1";
    type Row = (serde_json::Value, i16, Option<String>, Option<chrono::DateTime<chrono::Utc>>, String);
    let read = |r: tokio_postgres::Row| -> (Row, f64) {
        ((r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)), r.get(5))
    };
    let (node, node_delay) = read(client.query_one(row, &[&by_node]).await.unwrap());
    let (formica, formica_delay) = read(client.query_one(row, &[&by_formica]).await.unwrap());
    assert_eq!(node.0, json!([{ "n": 2, "fail": true }, { "n": 3, "fail": true }]), "graphile-worker's row");
    assert_eq!((node.1, node.4.as_str()), (1, "Batch failures:"));
    assert_eq!(formica, node, "Formica leaves the row graphile-worker leaves");
    for delay in [node_delay, formica_delay] {
        assert!(delay > 0.0 && delay <= 1f64.exp(), "due after e^1 s from the failure: {delay}");
    }

    // graphile-worker runs the retry of the job Formica left: only the failed items, which pass.
    std::fs::write(tasks.join("tasks/formica_batch.js"), task).unwrap();
    client
        .batch_execute(&format!(
            "update graphile_worker._private_jobs set run_at = now() where id = {by_formica}"
        ))
        .await
        .unwrap();
    graphile_worker("FORMICA_GRAPHILE_WORKER", &db, &tasks, &["--once"]);
    let left = format!("select count(*) from graphile_worker.jobs where id = {by_formica}");
    assert_eq!(db.count(&left).await, 0, "the retry completed the job");
    let _ = std::fs::remove_dir_all(tasks);
}

/// graphile-worker (Node) and Formica share the database while Formica's recovery runs:
/// a lapsed Formica worker's job is freed and run, while the jobs and queue that the Node
/// worker holds (it never heartbeats) keep their locks, and graphile-worker's schema and
/// ledger stay its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs graphile-worker from npm: scripts/compat-graphile-worker"]
async fn formica_s_recovery_leaves_graphile_worker_s_locks_alone() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client.batch_execute("create table started (n int)").await.unwrap();
    let utils = db.utils();
    for n in 0..2 {
        let spec = if n == 0 { JobSpec::builder().queue_name("node").build() } else { JobSpec::default() };
        utils.add_raw_job("hold", json!({ "n": n }), spec).await.expect("add");
    }
    let tasks = std::env::temp_dir().join(format!("formica-compat-{}", db.name));
    std::fs::create_dir_all(tasks.join("tasks")).unwrap();
    std::fs::write(
        tasks.join("tasks/hold.js"),
        "module.exports = async (payload, helpers) => {\n\
           await helpers.query('insert into started values ($1)', [payload.n]);\n\
           await new Promise((resolve) => setTimeout(resolve, 120000));\n\
         };\n",
    )
    .unwrap();
    let node = formica_tests::node::worker(&db, &tasks, &["-j", "2"]);
    db.wait_for_count("select count(*) from started", 2, std::time::Duration::from_secs(30)).await;
    let locks = "select (select array_agg(locked_by || ' ' || locked_at order by id) from graphile_worker._private_jobs), \
                 (select array_agg(locked_by || ' ' || locked_at) from graphile_worker._private_job_queues)";
    let row = client.query_one(locks, &[]).await.unwrap();
    let node_locks: (Vec<String>, Vec<String>) = (row.get(0), row.get(1));

    // A Formica worker that died holding a job: its lease lapsed, and was suspected, a
    // minute ago.
    let dead = utils.add_raw_job("orphan", json!({}), JobSpec::default()).await.unwrap().id;
    client
        .batch_execute(&format!(
            "update graphile_worker._private_jobs set locked_by = 'formica-dead', locked_at = now(), \
               attempts = 1 where id = {dead};
             insert into formica_graphile_worker.leases values ('formica-dead', now() - interval '1 minute', now() - interval '1 minute');"
        ))
        .await
        .unwrap();
    let worker = db
        .worker_options()
        .poll_interval(std::time::Duration::from_millis(200))
        .define_raw_job("orphan", |_, _| Box::pin(async { Ok(()) }))
        .init()
        .await
        .expect("init");
    let rt: std::sync::Arc<dyn formica::Runtime> = std::sync::Arc::new(formica_tokio::TokioRuntime);
    let running = formica_tests::Running::spawn(&rt, worker);
    db.wait_for_count(
        &format!("select count(*) from graphile_worker.jobs where id = {dead}"),
        0,
        std::time::Duration::from_secs(10),
    )
    .await;
    // Several more sweeps (at start, then every few seconds), by Formica.
    tokio::time::sleep((formica::RECOVERY_PERIOD * 2).to_std().unwrap()).await;
    let row = client.query_one(locks, &[]).await.unwrap();
    assert_eq!((row.get(0), row.get(1)), node_locks, "graphile-worker's locks are untouched");
    assert_eq!(db.count("select count(*) from started").await, 2, "and its jobs did not run again");
    running.stop(std::time::Duration::from_secs(10)).await;
    drop(node);
    assert_eq!(schema_facts(&client, "graphile_worker").await, reference_facts().await);
    assert_eq!(ledger(&client, "graphile_worker").await, expected_ledger());
    let _ = std::fs::remove_dir_all(tasks);
}

/// graphile-worker knows nothing of Formica's flow controls: with its task paused and
/// capped at 1 (rows of Formica's records schema), a Node worker still runs every job, and
/// graphile-worker's schema and ledger stay exactly its own.
#[tokio::test]
#[ignore = "needs graphile-worker from npm: scripts/compat-graphile-worker"]
async fn graphile_worker_ignores_a_pause_and_a_cap_in_force() {
    use formica_tokio::controls::{Control, Pause};
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client.batch_execute("create table done (n int)").await.unwrap();
    let utils = db.utils();
    utils.pause(&Pause::task("record"), Some("compat"), None).await.unwrap();
    utils.set_control(&Control::cap("record", 1), None).await.unwrap();
    for n in 0..5 {
        utils.add_raw_job("record", json!({ "n": n }), JobSpec::default()).await.expect("add");
    }
    let tasks = std::env::temp_dir().join(format!("formica-compat-flow-{}", db.name));
    std::fs::create_dir_all(tasks.join("tasks")).unwrap();
    std::fs::write(
        tasks.join("tasks/record.js"),
        "module.exports = async (payload, helpers) => {\n\
           await helpers.query('insert into done values ($1)', [payload.n]);\n\
         };\n",
    )
    .unwrap();
    graphile_worker("FORMICA_GRAPHILE_WORKER", &db, &tasks, &["--once"]);
    let done: i64 = client.query_one("select count(*) from done", &[]).await.unwrap().get(0);
    assert_eq!(done, 5, "graphile-worker ran the paused, capped task's jobs");
    assert_eq!(utils.paused().await.unwrap().len(), 1, "the pause is still in force for Formica");
    assert_eq!(schema_facts(&client, "graphile_worker").await, reference_facts().await);
    assert_eq!(ledger(&client, "graphile_worker").await, expected_ledger());
    let _ = std::fs::remove_dir_all(tasks);
}

/// Priority aging beside graphile-worker's own worker: a pass changes only the `priority`
/// column Node fetches by, so Node (one job at a time) runs a job aged ahead of fresher ones
/// of better priority first, and the job Node holds keeps its priority (a locked job is
/// never aged).
#[tokio::test]
#[ignore = "needs graphile-worker from npm: scripts/compat-graphile-worker"]
async fn graphile_worker_runs_aged_jobs_by_their_aged_priority_and_its_running_job_is_not_aged() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute("create table runs (name text, event text, id bigserial primary key)")
        .await
        .unwrap();
    let tasks = std::env::temp_dir().join(format!("formica-compat-aging-{}", db.name));
    std::fs::create_dir_all(tasks.join("tasks")).unwrap();
    std::fs::write(
        tasks.join("tasks/step.js"),
        "module.exports = async (payload, helpers) => {\n\
           await helpers.query('insert into runs (name, event) values ($1, $2)', [payload.name, 'start']);\n\
           await new Promise((resolve) => setTimeout(resolve, payload.ms));\n\
         };\n",
    )
    .unwrap();
    let utils = db.utils();
    let hours_ago = |h: i64, priority: i16| {
        JobSpec::builder().run_at(chrono::Utc::now() - chrono::Duration::hours(h)).priority(priority).build()
    };
    // Node takes `hold` and runs it for a while: it is locked while the jobs below are aged.
    let hold =
        utils.add_raw_job("step", json!({ "name": "hold", "ms": 3000 }), hours_ago(2, 5)).await.unwrap();
    let node = formica_tests::node::worker(&db, &tasks, &["-j", "1"]);
    db.wait_for_count("select count(*) from runs", 1, std::time::Duration::from_secs(30)).await;

    // `old` (priority 5, ready two hours) would run after the fresh ones (priority 0)...
    let old = utils.add_raw_job("step", json!({ "name": "old", "ms": 0 }), hours_ago(2, 5)).await.unwrap();
    for n in 0..3 {
        let fresh = JobSpec::builder().priority(0).build();
        utils.add_raw_job("step", json!({ "name": format!("fresh{n}"), "ms": 0 }), fresh).await.unwrap();
    }
    // ...but aged one step every ten minutes, down to -10, it is at -7 after a pass.
    let aging = formica::Aging::new("step", chrono::Duration::minutes(10), 1, -10);
    utils.set_aging(&aging, None).await.unwrap();
    assert_eq!(
        utils.age_priorities().await.unwrap(),
        1,
        "old only: hold is Node's, the fresh ones not ready a step"
    );
    let priority = |id: i64| {
        let client = &client;
        async move {
            let sql = "select priority from graphile_worker._private_jobs where id = $1";
            client.query_one(sql, &[&id]).await.unwrap().get::<_, i16>(0)
        }
    };
    assert_eq!((priority(hold.id).await, priority(old.id).await), (5, -7), "locked by Node: untouched");
    assert_eq!(db.count("select count(*) from runs").await, 1, "Node still runs hold");

    db.wait_for_count(
        "select count(*) from graphile_worker._private_jobs",
        0,
        std::time::Duration::from_secs(30),
    )
    .await;
    drop(node);
    let rows = client.query("select name from runs order by id", &[]).await.unwrap();
    let order: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    assert_eq!(order, ["hold", "old", "fresh0", "fresh1", "fresh2"], "Node ran old by its aged priority");
    assert_eq!(schema_facts(&client, "graphile_worker").await, reference_facts().await);
    let _ = std::fs::remove_dir_all(tasks);
}
