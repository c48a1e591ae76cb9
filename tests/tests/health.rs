//! The queue's health (`formica::inspect::health`, behind `formica doctor`, the metrics and
//! the dashboard's banner), each condition made for real on PostgreSQL: a transaction held
//! open on another connection, a replication slot nobody reads, a jobs table of dead rows
//! with autovacuum off for it, bloated indexes, a dropped index and an altered function;
//! and a fresh schema is healthy, its facts those of graphile-worker 0.18's fixture.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica::inspect::{self, Check, Severity, Thresholds};
use formica::WorkerUtils;
use formica_tests::TestDb;
use std::time::{Duration, Instant};

/// The check `name` of a fresh health read with `thresholds`.
async fn check(utils: &WorkerUtils, thresholds: &Thresholds, name: &str) -> Check {
    let health = inspect::health(utils, thresholds).await.expect("health");
    health.check(name).cloned().unwrap_or_else(|| panic!("no check {name} in {health:?}"))
}

/// Read the check `name` until `done` holds (the statistics reach the views within a
/// second or so), or panic after 15 s with the last one.
async fn check_until(
    utils: &WorkerUtils,
    t: &Thresholds,
    name: &str,
    done: impl Fn(&Check) -> bool,
) -> Check {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found = check(utils, t, name).await;
        if done(&found) {
            return found;
        }
        assert!(Instant::now() < deadline, "{name} never as expected: {found:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn has(check: &Check, text: &str) -> bool {
    check.evidence.iter().any(|line| line.contains(text))
}

#[tokio::test]
async fn a_fresh_schema_is_healthy_and_its_facts_are_graphile_worker_018s() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    // The shipped facts are a fresh schema's, whatever its name...
    let client = db.client().await;
    let facts = |schema: &'static str| {
        let client = &client;
        async move {
            let rows = client.query(formica_sql::health::SCHEMA_FACTS, &[&schema]).await.unwrap();
            rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>()
        }
    };
    let expected: Vec<&str> = formica_sql::health::EXPECTED.lines().collect();
    let ours = facts("graphile_worker").await;
    assert!(ours == expected, "formica-sql/health/graphile_worker_018.facts should be:\n{}", ours.join("\n"));
    let health = inspect::health(&utils, &Thresholds::default()).await.unwrap();
    let names: Vec<&str> = health.checks.iter().map(|c| c.name).collect();
    assert_eq!(names, inspect::CHECKS);
    assert_eq!(health.wrong().count(), 0, "{health:#?}");
    let schema = health.check("schema").unwrap();
    assert_eq!((schema.severity, schema.value), (Severity::Ok, Some(0.0)), "{schema:#?}");

    db.utils_for("Other Schema").migrate().await.unwrap();
    assert_eq!(facts("Other Schema").await, ours);

    // ...and their indexes and functions those of graphile-worker 0.18's dump (whose
    // function bodies are left out: the bodies' digests are Formica's own functions').
    let reference = TestDb::new().await;
    let reference_client = reference.client().await;
    reference_client.batch_execute(include_str!("../fixtures/graphile_worker_schema.sql")).await.unwrap();
    let rows =
        reference_client.query(formica_sql::health::SCHEMA_FACTS, &[&"graphile_worker"]).await.unwrap();
    let shape = |facts: Vec<String>| -> Vec<String> {
        facts.into_iter().filter(|f| !f.starts_with("body ")).collect()
    };
    let theirs = shape(rows.iter().map(|r| r.get::<_, String>(0)).collect());
    assert!(!theirs.is_empty());
    assert_eq!(shape(ours), theirs, "the indexes and functions of graphile-worker 0.18's dump");
}

#[tokio::test]
async fn a_transaction_held_open_is_named_with_its_backend_until_it_ends() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let held = db.client().await;
    held.batch_execute("set application_name = 'held-by-a-test'; begin; select txid_current()")
        .await
        .unwrap();
    let pid: i32 = held.query_one("select pg_backend_pid()", &[]).await.unwrap().get(0);
    tokio::time::sleep(Duration::from_millis(1100)).await;

    let warn = Thresholds { horizon_warning: Duration::from_secs(1), ..Thresholds::default() };
    let horizon = check(&utils, &warn, "horizon").await;
    assert_eq!(horizon.severity, Severity::Warning, "{horizon:#?}");
    assert!(has(&horizon, &format!("session pid {pid} ")), "{horizon:#?}");
    assert!(has(&horizon, "\"held-by-a-test\"") && has(&horizon, "idle in transaction"), "{horizon:#?}");
    assert!(horizon.value.unwrap() >= 1.0, "{horizon:#?}");

    let critical = Thresholds { horizon_critical: Duration::from_secs(1), ..warn.clone() };
    assert_eq!(check(&utils, &critical, "horizon").await.severity, Severity::Critical);
    let default = check(&utils, &Thresholds::default(), "horizon").await;
    assert_eq!(default.severity, Severity::Ok, "a second is not five minutes: {default:#?}");

    held.batch_execute("commit").await.unwrap();
    let after = check(&utils, &critical, "horizon").await;
    assert_eq!(after.severity, Severity::Ok, "{after:#?}");
    assert!(after.evidence.is_empty(), "{after:#?}");
}

#[tokio::test]
async fn a_replication_slot_nobody_reads_warns_with_the_wal_it_keeps() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    // Slots are the server's, not a database's: the name is this test's database's.
    let slot = format!("{}_slot", db.name);
    client.query("select pg_create_physical_replication_slot($1, true)", &[&slot]).await.unwrap();
    // Any WAL kept warns here; by default, a gigabyte (a standby that was away a moment is
    // not a problem: one that keeps the server's disk filling is).
    let default = check(&utils, &Thresholds::default(), "horizon").await;
    let warn = Thresholds { slot_wal_warning: 0, ..Thresholds::default() };
    let horizon = check(&utils, &warn, "horizon").await;
    client.query("select pg_drop_replication_slot($1)", &[&slot]).await.unwrap();
    assert_eq!(default.severity, Severity::Ok, "{default:#?}");
    assert_eq!(horizon.severity, Severity::Warning, "{horizon:#?}");
    assert!(has(&horizon, &format!("physical replication slot {slot:?} (inactive): keeps ")), "{horizon:#?}");
    let critical = Thresholds { slot_wal_warning: 0, slot_wal_critical: 0, ..Thresholds::default() };
    client.query("select pg_create_physical_replication_slot($1, true)", &[&slot]).await.unwrap();
    let horizon = check(&utils, &critical, "horizon").await;
    client.query("select pg_drop_replication_slot($1)", &[&slot]).await.unwrap();
    assert_eq!(horizon.severity, Severity::Critical, "{horizon:#?}");
}

#[tokio::test]
async fn a_prepared_transaction_left_behind_is_named() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    let gid = format!("{}_tx", db.name);
    // scripts/with-postgres allows prepared transactions (max_prepared_transactions = 8).
    client
        .batch_execute(&format!("begin; select txid_current(); prepare transaction '{gid}'"))
        .await
        .unwrap_or_else(|e| panic!("prepare a transaction (max_prepared_transactions > 0?): {e}"));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let warn = Thresholds { horizon_warning: Duration::from_secs(1), ..Thresholds::default() };
    let horizon = check(&utils, &warn, "horizon").await;
    client.batch_execute(&format!("rollback prepared '{gid}'")).await.unwrap();
    assert_eq!(horizon.severity, Severity::Warning, "{horizon:#?}");
    assert!(has(&horizon, &format!("prepared transaction {gid:?}: prepared 1 s ago")), "{horizon:#?}");
    assert_eq!(check(&utils, &warn, "horizon").await.severity, Severity::Ok, "rolled back");
}

/// `n` jobs of task `t`, added in one statement.
async fn add_jobs(client: &tokio_postgres::Client, n: i32) {
    client
        .query(
            "select count(*) from graphile_worker.add_jobs(array(
               select row('t', '{}'::json, null, null, null, null, null, null)::graphile_worker.job_spec
               from generate_series(1, $1)))",
            &[&n],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn dead_rows_autovacuum_off_and_bloated_indexes_are_reported_with_their_tables() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    client
        .batch_execute("alter table graphile_worker._private_jobs set (autovacuum_enabled = false)")
        .await
        .unwrap();
    add_jobs(&client, 20_000).await;
    client.batch_execute("delete from graphile_worker._private_jobs").await.unwrap();

    let t = Thresholds { dead_rows_min: 1_000, bloat_min_bytes: 100 << 10, ..Thresholds::default() };
    let dead = check_until(&utils, &t, "dead_rows", |c| c.value.is_some_and(|v| v >= 20_000.0)).await;
    assert_eq!(dead.severity, Severity::Critical, "more dead rows than live: {dead:#?}");
    assert!(has(&dead, "table _private_jobs: 20000 dead rows beside 0 live"), "{dead:#?}");
    let autovacuum = check(&utils, &t, "autovacuum").await;
    assert_eq!(autovacuum.severity, Severity::Warning, "{autovacuum:#?}");
    assert!(has(&autovacuum, "table _private_jobs: autovacuum is off"), "{autovacuum:#?}");
    let default = check(&utils, &Thresholds::default(), "dead_rows").await;
    assert_eq!(default.severity, Severity::Critical, "20,000 is past the default minimum too");

    // Vacuumed, the table gives its empty pages back; its indexes keep theirs.
    client.batch_execute("vacuum graphile_worker._private_jobs").await.unwrap();
    let bloat = check(&utils, &t, "bloat").await;
    assert_eq!(bloat.severity, Severity::Critical, "{bloat:#?}");
    assert!(has(&bloat, "index jobs_main_index of table _private_jobs: "), "{bloat:#?}");
    let bloated = inspect::bloated_indexes(&utils, &t).await.unwrap();
    assert!(bloated.contains(&"jobs_main_index".to_owned()), "{bloated:?}");
    let quiet = check(&utils, &Thresholds::default(), "bloat").await;
    assert_eq!(quiet.severity, Severity::Ok, "under a megabyte is below the default minimum: {quiet:#?}");

    // Rebuilt, the index is packed again.
    client.batch_execute("reindex index graphile_worker.jobs_main_index").await.unwrap();
    let bloated = inspect::bloated_indexes(&utils, &t).await.unwrap();
    assert!(!bloated.contains(&"jobs_main_index".to_owned()), "{bloated:?}");
}

#[tokio::test]
async fn a_dropped_index_and_an_altered_function_are_schema_drift() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    client
        .batch_execute(
            "drop index graphile_worker.jobs_no_queue_index;
             create or replace function graphile_worker.force_unlock_workers(worker_ids text[]) returns void
               language sql as $$ select 1 $$;
             create function graphile_worker.mine() returns int language sql as 'select 1';",
        )
        .await
        .unwrap();
    let schema = check(&utils, &Thresholds::default(), "schema").await;
    assert_eq!(schema.severity, Severity::Critical, "{schema:#?}");
    assert_eq!(schema.value, Some(3.0), "{schema:#?}");
    assert!(has(&schema, "critical: missing index jobs_no_queue_index: CREATE INDEX"), "{schema:#?}");
    assert!(
        has(&schema, "critical: changed body force_unlock_workers(worker_ids text[]): md5 "),
        "{schema:#?}"
    );
    assert!(
        has(&schema, "warning: not graphile-worker 0.18's function mine(): returns integer"),
        "{schema:#?}"
    );
}

/// Without pg_stat_statements the check says so; with it (a server started with
/// `WITH_POSTGRES_OPTIONS="-c shared_preload_libraries=pg_stat_statements"`), a worker's
/// fetches are counted and their buffers judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fetch_cost_comes_from_pg_stat_statements_when_it_is_loaded_and_is_unknown_without() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let fetch = check(&utils, &Thresholds::default(), "fetch_cost").await;
    assert_eq!(fetch.severity, Severity::Unknown, "{fetch:#?}");
    assert!(fetch.summary.contains("pg_stat_statements is not installed"), "{fetch:#?}");
    let client = db.client().await;
    let preloaded: String =
        client.query_one("select current_setting('shared_preload_libraries')", &[]).await.unwrap().get(0);
    if !preloaded.contains("pg_stat_statements") {
        // Installed but not loaded: the read fails, and the check says why.
        if client.batch_execute("create extension pg_stat_statements").await.is_ok() {
            let fetch = check(&utils, &Thresholds::default(), "fetch_cost").await;
            assert_eq!(fetch.severity, Severity::Unknown, "{fetch:#?}");
            assert!(fetch.summary.contains("pg_stat_statements cannot be read"), "{fetch:#?}");
        }
        return;
    }
    client.batch_execute("create extension pg_stat_statements").await.unwrap();
    add_jobs(&client, 50).await;
    let options = db.worker_options().define_raw_job("t", |_: formica::JobContext, _| async { Ok(()) });
    let running = formica_tests::Running::listening(&db.runtime, options).await;
    db.wait_for_count("select count(*) from graphile_worker._private_jobs", 0, Duration::from_secs(20)).await;
    running.stop(Duration::from_secs(10)).await;
    let fetch = check(&utils, &Thresholds::default(), "fetch_cost").await;
    assert_eq!(fetch.severity, Severity::Ok, "{fetch:#?}");
    assert!(fetch.value.is_some_and(|buffers| buffers > 0.0), "{fetch:#?}");
    assert!(fetch.summary.contains(" fetches read "), "{fetch:#?}");
    let strict = Thresholds { fetch_buffers_warning: 0.5, ..Thresholds::default() };
    assert_eq!(check(&utils, &strict, "fetch_cost").await.severity, Severity::Warning);
}

/// The jobs table's indexes bloated: 20,000 jobs added and deleted, then vacuumed.
async fn bloat_the_indexes(client: &tokio_postgres::Client) {
    add_jobs(client, 20_000).await;
    client.batch_execute("delete from graphile_worker._private_jobs").await.unwrap();
    client.batch_execute("vacuum graphile_worker._private_jobs").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opt_in_chore_rebuilds_the_bloated_indexes_one_pass_at_a_time() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    bloat_the_indexes(&client).await;
    let t = Thresholds { bloat_min_bytes: 100 << 10, ..Thresholds::default() };
    let before = inspect::bloated_indexes(&utils, &t).await.unwrap();
    assert!(before.contains(&"jobs_main_index".to_owned()), "{before:?}");
    let oid = |name: &'static str| {
        let client = &client;
        async move {
            let row = client
                .query_one("select to_regclass('graphile_worker.' || $1::text)::oid", &[&name])
                .await
                .unwrap();
            row.get::<_, Option<u32>>(0)
        }
    };
    let main_before = oid("jobs_main_index").await;

    // Another pass holds the schema's lock: this one does nothing.
    let holder = db.client().await;
    let key = "hashtext('formica reindex \"formica_graphile_worker\"')";
    holder.query(&format!("select pg_advisory_lock({key})"), &[]).await.unwrap();
    assert_eq!(utils.reindex_bloated(&t).await.unwrap(), None, "another pass runs");
    holder.query(&format!("select pg_advisory_unlock({key})"), &[]).await.unwrap();

    // A worker with the chore rebuilds them, the most bloated first, a pass at a time.
    let rebuilt = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = rebuilt.clone();
    let options =
        db.worker_options().health_thresholds(t.clone()).reindex_bloated(Duration::from_secs(60)).on_event(
            move |event| {
                if let formica::Event::IndexRebuilt { index } = event {
                    seen.lock().unwrap().push(index.clone());
                }
            },
        );
    let running = formica_tests::Running::listening(&db.runtime, options).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while rebuilt.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no index rebuilt within 15 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.stop(Duration::from_secs(10)).await;
    let rebuilt = rebuilt.lock().unwrap().clone();
    assert_eq!(
        rebuilt.len(),
        1,
        "the first pass rebuilds one index, the next comes a minute later: {rebuilt:?}"
    );
    assert_eq!(rebuilt[0], before[0], "the most bloated first");
    let after = inspect::bloated_indexes(&utils, &t).await.unwrap();
    assert!(!after.contains(&rebuilt[0]), "{after:?}");
    assert_eq!(after.len(), before.len() - 1, "{before:?} then {after:?}");
    if rebuilt[0] == "jobs_main_index" {
        assert_ne!(oid("jobs_main_index").await, main_before, "a new index under the same name");
    }
    // Nothing left behind: the schema is still graphile-worker's.
    let schema = check(&utils, &Thresholds::default(), "schema").await;
    assert_eq!(schema.severity, Severity::Ok, "{schema:#?}");
}

#[tokio::test]
async fn a_pass_drops_the_invalid_copy_an_interrupted_rebuild_left() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    bloat_the_indexes(&client).await;
    add_jobs(&client, 2).await;
    // What a rebuild killed part way leaves: an invalid index named as its copy (a
    // concurrent build that fails leaves its index invalid; two jobs share a task id).
    let failed = client
        .batch_execute("create unique index concurrently jobs_main_index_ccnew on graphile_worker._private_jobs (task_id)")
        .await;
    assert!(failed.is_err(), "the build fails on the duplicates");
    let invalid =
        "select count(*) from pg_index i join pg_class c on c.oid = i.indexrelid where not i.indisvalid";
    assert_eq!(db.count(invalid).await, 1);
    let t = Thresholds { bloat_min_bytes: 100 << 10, ..Thresholds::default() };
    let rebuilt = utils.reindex_bloated(&t).await.unwrap();
    assert_eq!(rebuilt.as_deref(), Some("jobs_main_index"), "the most bloated");
    assert_eq!(db.count(invalid).await, 0, "the copy left behind is gone");
    let schema = check(&utils, &Thresholds::default(), "schema").await;
    assert_eq!(schema.severity, Severity::Ok, "{schema:#?}");
}

#[tokio::test]
async fn the_dashboard_shows_a_banner_on_every_page_while_a_check_is_wrong_and_answers_the_checks() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let healthy =
        formica_tests::dashboard::Dashboard::start(utils.clone(), formica_ui::Options::default()).await;
    let page = healthy.get("/").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains(r#"id="health""#), "no banner while healthy: {}", page.body);

    db.client().await.batch_execute("drop index graphile_worker.jobs_main_index").await.unwrap();
    // A dashboard started now reads the health anew (a running one within 30 s).
    let ui = formica_tests::dashboard::Dashboard::start(utils.clone(), formica_ui::Options::default()).await;
    for path in ["/", "/jobs", "/workers", "/flow"] {
        let page = ui.get(path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        let banner = page.body.split(r#"<div class="banner critical" id="health">"#).nth(1);
        let banner =
            banner.and_then(|b| b.split("</div>").next()).unwrap_or_else(|| panic!("{path}: {}", page.body));
        assert!(
            banner.contains("<strong>schema</strong> (critical): missing index jobs_main_index"),
            "{banner}"
        );
    }
    let api = ui.get("/api/health").await;
    assert_eq!(api.status, 200);
    let schema =
        api.json()["checks"].as_array().unwrap().iter().find(|c| c["name"] == "schema").cloned().unwrap();
    assert_eq!(schema["severity"], "critical", "{schema}");
    assert_eq!(schema["value"], 1.0, "{schema}");
}

/// The vacuums of the jobs table this database's statistics counted, autovacuum's left out
/// (PostgreSQL 15 counts a vacuum in the shared statistics as it ends).
async fn vacuums(db: &TestDb) -> i64 {
    db.count("select vacuum_count from pg_stat_user_tables where relid = 'graphile_worker._private_jobs'::regclass")
        .await
}

/// A worker that drains `jobs` jobs with no local queue (each fetch up to 4 jobs: many
/// fetches a job), with or without its vacuums; returns once it drained them.
async fn drain_in_small_fetches(db: &TestDb, jobs: i32, vacuum: bool) {
    add_jobs(&db.client().await, jobs).await;
    let worker = db
        .worker_options()
        .concurrency(4)
        .local_queue_size(0)
        .vacuum_jobs(vacuum)
        .define_raw_job("t", |_, _| async { Ok(()) })
        .init()
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(60), worker.run_once()).await.expect("drained").unwrap();
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_fetching_small_batches_vacuums_the_jobs_table_as_it_drains_and_one_told_not_to_does_not() {
    // 6,000 jobs in fetches of 4 step over some 4,500,000 dead entries: 45 ms at 10 ns
    // each, past the least a vacuum is taken to cost (10 ms) after about 700 fetches.
    let off = TestDb::migrated().await;
    drain_in_small_fetches(&off, 6_000, false).await;
    assert_eq!(vacuums(&off).await, 0, "told not to");

    let on = TestDb::migrated().await;
    drain_in_small_fetches(&on, 6_000, true).await;
    let passes = vacuums(&on).await;
    assert!((1..=8).contains(&passes), "each pass weighed against the last: {passes}");

    // A role that does not own the table vacuums nothing, and says so.
    let role = format!("no_vacuum_{}", std::process::id());
    let client = on.client().await;
    client
        .batch_execute(&format!(
            "drop role if exists {role}; create role {role} login password 'pw'; \
             grant usage on schema graphile_worker to {role}; \
             grant all on all tables in schema graphile_worker to {role}"
        ))
        .await
        .unwrap();
    let url = on.url_as(&role);
    let as_role =
        WorkerUtils::new(formica::Pool::from_url(on.runtime.clone(), &url, 1).unwrap(), "graphile_worker");
    assert!(!as_role.vacuum_jobs().await.unwrap(), "not the owner");
    assert!(on.utils().vacuum_jobs().await.unwrap(), "the owner");
    assert_eq!(vacuums(&on).await, passes + 1);
    drop(as_role);
    client.batch_execute(&format!("drop owned by {role}; drop role {role}")).await.unwrap();
}
