//! `formica::sqlx::SqlxUtils`: jobs added and managed inside an application's sqlx
//! transaction, on both runtimes (sqlx runs on the one the test runs on): they exist only if
//! it commits, behave as `WorkerUtils`' jobs do (job keys included), wake a listening
//! worker at commit, and bad input is refused clearly.

use chrono::{Duration as Span, TimeZone, Utc};
use formica::sqlx::SqlxUtils;
use formica::{
    Error, Job, JobFilter, JobKeyMode, JobSpec, JobSpecError, RawJob, RescheduleJobOptions, Runtime,
};
use formica_tests::{on_both_runtimes, sleep, timeout, Running, TestDb, Typed};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use std::sync::Arc;
use std::time::Duration;

/// An application's sqlx pool on the test's database.
pub(crate) async fn sqlx_pool(db: &TestDb) -> PgPool {
    sqlx_pool_at(&db.url).await
}

/// An application's sqlx pool on the database of the connection string `url`.
pub(crate) async fn sqlx_pool_at(url: &str) -> PgPool {
    let config: tokio_postgres::Config = url.parse().expect("the test database's connection string");
    let mut options = PgConnectOptions::new().database(config.get_dbname().expect("a database name"));
    for host in config.get_hosts() {
        options = match host {
            tokio_postgres::config::Host::Tcp(host) => options.host(host),
            tokio_postgres::config::Host::Unix(path) => options.socket(path),
        };
    }
    if let Some(&port) = config.get_ports().first() {
        options = options.port(port);
    }
    if let Some(user) = config.get_user() {
        options = options.username(user);
    }
    if let Some(password) = config.get_password() {
        options = options.password(&String::from_utf8_lossy(password));
    }
    PgPoolOptions::new().max_connections(4).connect_with(options).await.expect("sqlx connects")
}

async fn count(db: &TestDb, schema: &str, filter: &str) -> i64 {
    db.count(&format!("select count(*) from {schema}._private_jobs where {filter}")).await
}

fn only(jobs: Vec<Job>) -> Job {
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    jobs.into_iter().next().expect("one job")
}

async fn a_job_added_in_a_transaction_exists_only_if_it_commits_and_runs(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    db.client().await.batch_execute("create table ran (n int, job_id bigint)").await.unwrap();
    let pool = sqlx_pool(&db).await;
    let jobs = SqlxUtils::default();

    let mut tx = pool.begin().await.unwrap();
    let spec = JobSpec::builder().job_key("order:1").build();
    let added = jobs.add_job(&mut tx, &Typed { n: 1 }, spec).await.expect("add in a transaction");
    assert_eq!((added.task_identifier.as_str(), added.key.as_deref()), ("typed", Some("order:1")));
    assert_eq!(count(&db, "graphile_worker", "true").await, 0, "not visible before commit");
    tx.rollback().await.unwrap();
    assert_eq!(count(&db, "graphile_worker", "true").await, 0, "rolled back with the transaction");

    let mut tx = pool.begin().await.unwrap();
    sqlx::query("create table orders (id int)").execute(&mut *tx).await.unwrap();
    sqlx::query("insert into orders values (2)").execute(&mut *tx).await.unwrap();
    let at = Utc.with_ymd_and_hms(2020, 1, 2, 3, 4, 5).unwrap();
    let spec = JobSpec::builder().job_key("order:2").queue_name("orders").run_at(at).priority(3).build();
    let added = jobs.add_job(&mut tx, &Typed { n: 2 }, spec).await.expect("add in a transaction");
    let raw = jobs
        .add_raw_job(&mut tx, "audit", json!({"order": 2}), JobSpec::default())
        .await
        .expect("raw add in a transaction");
    tx.commit().await.unwrap();

    let stored = db.utils().list_jobs(&JobFilter::default()).await.unwrap().jobs;
    assert_eq!(stored, vec![added.clone(), raw.clone()], "what was returned is what is stored");
    assert_eq!((added.task_identifier.as_str(), added.payload.value().clone()), ("typed", json!({"n": 2})));
    assert_eq!(added.key.as_deref(), Some("order:2"));
    assert_eq!((added.queue_name.as_deref(), added.run_at, added.priority), (Some("orders"), at, 3));
    assert_eq!((raw.task_identifier.as_str(), raw.payload.into_value()), ("audit", json!({"order": 2})));
    assert_eq!(db.count("select count(*) from orders").await, 1, "the caller's own write committed with it");

    let worker = db.worker_options().define_job::<Typed>().init().await.expect("init");
    worker.run_once().await.expect("run_once");
    assert_eq!(db.count(&format!("select count(*) from ran where n = 2 and job_id = {}", added.id)).await, 1);
    assert_eq!(count(&db, "graphile_worker", "true").await, 1, "only the job without a handler is left");
}

/// The job's NOTIFY goes out when the transaction commits, and wakes a worker that would
/// otherwise poll only an hour later.
async fn a_commit_notifies_and_wakes_a_listening_worker(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    db.client().await.batch_execute("create table ran (n int, job_id bigint)").await.unwrap();
    let pool = sqlx_pool(&db).await;
    let mut listener = PgListener::connect_with(&pool).await.unwrap();
    listener.listen("jobs:insert").await.unwrap();
    let options = db.worker_options().poll_interval(Duration::from_secs(3600)).define_job::<Typed>();
    let running = Running::listening(&rt, options).await;
    // Let the first (empty) fetch finish so the worker is idle, waiting on an hour's poll.
    sleep(rt.as_ref(), Duration::from_millis(100)).await;

    let mut tx = pool.begin().await.unwrap();
    SqlxUtils::default().add_job(&mut tx, &Typed { n: 5 }, JobSpec::default()).await.unwrap();
    let early = timeout(rt.as_ref(), Duration::from_millis(300), listener.recv()).await;
    assert!(early.is_none(), "notified before commit: {early:?}");
    tx.commit().await.unwrap();
    let note = timeout(rt.as_ref(), Duration::from_secs(10), listener.recv())
        .await
        .expect("notified at commit")
        .unwrap();
    assert!(note.payload().contains(r#""count":1"#), "{}", note.payload());
    db.wait_for_count("select count(*) from ran where n = 5", 1, Duration::from_secs(10)).await;
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    running.stop(Duration::from_secs(10)).await;
}

/// The same steps on a key through `SqlxUtils` in a transaction and through `WorkerUtils`
/// give the same jobs.
async fn job_keys_in_a_transaction_behave_as_outside(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let pool = sqlx_pool(&db).await;
    let (jobs, utils) = (SqlxUtils::default(), db.utils());
    let first = Utc.with_ymd_and_hms(2040, 1, 1, 0, 0, 0).unwrap();
    let second = first + Span::hours(1);
    let spec = |key: &str, mode: JobKeyMode, at| {
        JobSpec::builder().job_key(key).job_key_mode(mode).run_at(at).build()
    };
    let modes = [
        JobKeyMode::Replace,
        JobKeyMode::PreserveRunAt,
        JobKeyMode::UnsafeDedupe,
        JobKeyMode::ReplaceAndAbort,
    ];
    for mode in modes {
        let (in_tx, outside) = (format!("tx:{mode}"), format!("out:{mode}"));
        let mut tx = pool.begin().await.unwrap();
        let a = jobs.add_raw_job(&mut tx, "t", json!({"v": 1}), spec(&in_tx, mode, first)).await.unwrap();
        let b = jobs.add_raw_job(&mut tx, "t", json!({"v": 2}), spec(&in_tx, mode, second)).await.unwrap();
        tx.commit().await.unwrap();
        let c = utils.add_raw_job("t", json!({"v": 1}), spec(&outside, mode, first)).await.unwrap();
        let d = utils.add_raw_job("t", json!({"v": 2}), spec(&outside, mode, second)).await.unwrap();

        assert_eq!(a.id, b.id, "{mode}: the key's job is reused");
        let seen = |x: &Job| (x.payload.value().clone(), x.run_at, x.revision);
        assert_eq!(seen(&b), seen(&d), "{mode}: as outside a transaction");
        assert_eq!(seen(&a), seen(&c), "{mode}");
        let want = match mode {
            // No run to abort: replace_and_abort replaces as replace does.
            JobKeyMode::Replace | JobKeyMode::ReplaceAndAbort => (json!({"v": 2}), second, 1),
            JobKeyMode::PreserveRunAt => (json!({"v": 2}), first, 1),
            JobKeyMode::UnsafeDedupe => (json!({"v": 1}), first, 1),
        };
        assert_eq!(seen(&b), want, "{mode}");
        assert_eq!(count(&db, "graphile_worker", &format!("key = '{in_tx}'")).await, 1, "{mode}");
    }
}

/// `add_jobs` in a transaction: one batch, keys replacing waiting jobs, tasks and queues it
/// creates named, and nothing if it rolls back.
async fn add_jobs_in_a_transaction_handles_keys_and_names(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let pool = sqlx_pool(&db).await;
    let jobs = SqlxUtils::default();
    let old =
        db.utils().add_raw_job("t", json!({"v": 0}), JobSpec::builder().job_key("k").build()).await.unwrap();
    let batch = [
        RawJob {
            identifier: "t".into(),
            payload: json!({"v": 1}),
            spec: JobSpec::builder().job_key("k").build(),
        },
        RawJob {
            identifier: "fresh".into(),
            payload: json!({"v": 2}),
            spec: JobSpec::builder().queue_name("new-queue").build(),
        },
    ];

    let mut tx = pool.begin().await.unwrap();
    jobs.add_raw_jobs(&mut tx, &batch).await.expect("batch");
    tx.rollback().await.unwrap();
    assert_eq!(count(&db, "graphile_worker", "true").await, 1);
    assert_eq!(count(&db, "graphile_worker", "payload->>'v' = '0'").await, 1, "the old job is untouched");

    let mut tx = pool.begin().await.unwrap();
    let mut added = jobs.add_raw_jobs(&mut tx, &batch).await.expect("batch");
    let typed = jobs
        .add_jobs(&mut tx, &[(Typed { n: 1 }, &JobSpec::default()), (Typed { n: 2 }, &JobSpec::default())])
        .await
        .expect("typed batch");
    assert!(jobs.add_raw_jobs(&mut tx, &[]).await.expect("empty").is_empty());
    tx.commit().await.unwrap();

    added.sort_by_key(|j| j.id);
    let got: Vec<_> = added
        .iter()
        .map(|j| (j.task_identifier.as_str(), j.queue_name.as_deref(), j.payload.value().clone()))
        .collect();
    assert_eq!(got, vec![("t", None, json!({"v": 1})), ("fresh", Some("new-queue"), json!({"v": 2}))]);
    assert_eq!((added[0].id, added[0].revision), (old.id, 1), "the key's waiting job was replaced");
    assert_eq!(
        typed.iter().map(|j| j.payload.clone()).collect::<Vec<_>>(),
        vec![json!({"n": 1}), json!({"n": 2})]
    );
    assert!(typed.iter().all(|j| j.task_identifier == "typed"));
    assert_eq!(count(&db, "graphile_worker", "true").await, 4);
}

/// complete / permanently fail / reschedule / remove / cancel in a transaction: undone by a
/// rollback, done by a commit.
async fn managing_jobs_in_a_transaction_follows_it(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let pool = sqlx_pool(&db).await;
    let jobs = SqlxUtils::default();
    let utils = db.utils();
    let mut ids = Vec::new();
    for key in ["a", "b", "c", "d", "e"] {
        ids.push(
            utils.add_raw_job("t", json!({}), JobSpec::builder().job_key(key).build()).await.unwrap().id,
        );
    }
    let at = Utc.with_ymd_and_hms(2050, 6, 7, 8, 9, 10).unwrap();
    let reschedule = RescheduleJobOptions { run_at: Some(at), priority: Some(9), ..Default::default() };

    for commit in [false, true] {
        let mut tx = pool.begin().await.unwrap();
        assert_eq!(only(jobs.complete_jobs(&mut tx, &ids[0..1]).await.unwrap()).id, ids[0]);
        let failed = only(jobs.permanently_fail_jobs(&mut tx, &ids[1..2], Some("no")).await.unwrap());
        assert_eq!((failed.id, failed.last_error.as_deref()), (ids[1], Some("no")));
        let moved = only(jobs.reschedule_jobs(&mut tx, &ids[2..3], &reschedule).await.unwrap());
        assert_eq!((moved.id, moved.run_at, moved.priority), (ids[2], at, 9));
        assert_eq!(jobs.remove_job(&mut tx, "d").await.unwrap().map(|j| j.id), Some(ids[3]));
        assert_eq!(jobs.remove_job(&mut tx, "nobody").await.unwrap(), None);
        assert_eq!(jobs.cancel_jobs(&mut tx, &ids[4..5], "stop").await.unwrap().failed, vec![ids[4]]);
        let listed =
            jobs.list_jobs(&mut tx, &JobFilter { failed: true, ..Default::default() }).await.unwrap().jobs;
        assert_eq!(
            listed.iter().map(|j| j.id).collect::<Vec<_>>(),
            vec![ids[1], ids[4]],
            "seen in the transaction"
        );
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
            assert_eq!(count(&db, "graphile_worker", "attempts = 0 and priority = 0").await, 5, "all undone");
        }
    }
    assert_eq!(count(&db, "graphile_worker", "true").await, 3, "completed and removed are gone");
    assert_eq!(count(&db, "graphile_worker", "attempts = max_attempts").await, 2, "failed and cancelled");
    assert_eq!(count(&db, "graphile_worker", &format!("id = {} and priority = 9", ids[2])).await, 1);
}

async fn a_custom_schema_is_used_as_worker_utils_does(rt: Arc<dyn Runtime>) {
    let db = TestDb::new_on(rt.clone()).await;
    db.utils_for("app jobs").migrate().await.expect("migrate the custom schema");
    let pool = sqlx_pool(&db).await;
    let jobs = SqlxUtils::new("app jobs");
    assert_eq!(jobs.schema(), "app jobs");
    let mut conn = pool.acquire().await.unwrap();
    let job = jobs.add_raw_job(&mut conn, "t", json!({"x": 1}), JobSpec::default()).await.expect("add");
    assert_eq!(count(&db, "\"app jobs\"", &format!("id = {}", job.id)).await, 1);

    let elsewhere = SqlxUtils::default().add_raw_job(&mut conn, "t", json!({}), JobSpec::default()).await;
    let error = elsewhere.expect_err("graphile_worker is not installed in this database");
    assert!(matches!(error, Error::Sqlx(_)), "{error:?}");
    assert_eq!(error.sqlstate(), Some("3F000"), "{error}");
    assert!(error.to_string().contains("graphile_worker"), "{error}");
}

/// Specs are checked before the database is asked, so a refused one leaves the caller's
/// transaction usable; what PostgreSQL refuses comes back with its SQLSTATE.
async fn bad_input_is_refused_clearly(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let pool = sqlx_pool(&db).await;
    let jobs = SqlxUtils::default();
    let mut tx = pool.begin().await.unwrap();

    let long_key = JobSpec::builder().job_key("k".repeat(513)).build();
    match jobs.add_raw_job(&mut tx, "t", json!({}), long_key).await {
        Err(Error::Spec(e)) => assert_eq!(e.code(), "GWBJK", "{e}"),
        other => panic!("expected GWBJK, got {other:?}"),
    }
    // A mode read from text (a config file, a request) fails to parse into the same error.
    let unknown_mode = Error::from("merge".parse::<JobKeyMode>().expect_err("no such mode"));
    assert!(matches!(unknown_mode, Error::Spec(JobSpecError::InvalidJobKeyMode(_))), "{unknown_mode:?}");
    assert!(unknown_mode.to_string().contains("GWBKM"), "{unknown_mode}");
    assert!(unknown_mode.to_string().contains("merge"), "{unknown_mode}");
    let dedupe = JobSpec::builder().job_key("k").job_key_mode(JobKeyMode::UnsafeDedupe).build();
    let batch = [RawJob { identifier: "t".into(), payload: json!({}), spec: dedupe }];
    assert!(matches!(
        jobs.add_raw_jobs(&mut tx, &batch).await,
        Err(Error::Spec(JobSpecError::UnsafeDedupeInBatch))
    ));
    jobs.add_raw_job(&mut tx, "t", json!({"ok": true}), JobSpec::default())
        .await
        .expect("the transaction is usable");
    tx.commit().await.unwrap();
    assert_eq!(count(&db, "graphile_worker", "true").await, 1);

    let mut tx = pool.begin().await.unwrap();
    let same_key = || RawJob {
        identifier: "t".into(),
        payload: json!({}),
        spec: JobSpec::builder().job_key("twice").build(),
    };
    let error =
        jobs.add_raw_jobs(&mut tx, &[same_key(), same_key()]).await.expect_err("one key twice in a batch");
    assert!(matches!(error, Error::Sqlx(_)), "{error:?}");
    assert_eq!(error.sqlstate(), Some("21000"), "{error}");
    tx.rollback().await.unwrap();
    assert_eq!(count(&db, "graphile_worker", "key = 'twice'").await, 0);
}

/// A bound holds in a caller's transaction too: the add over it is `Error::QueueFull` and
/// that transaction stores nothing of it.
async fn a_bound_refuses_an_add_in_a_transaction(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let pool = sqlx_pool(&db).await;
    let jobs = SqlxUtils::default();
    db.utils().set_control(&formica::controls::Control::bound("t", 1, 0), None).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    jobs.add_raw_job(&mut tx, "t", json!({}), JobSpec::default()).await.unwrap();
    let refused = jobs.add_raw_job(&mut tx, "t", json!({}), JobSpec::default()).await;
    assert!(matches!(refused, Err(formica::Error::QueueFull { max: 1, count: 2, .. })), "{refused:?}");
    drop(tx);
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0, "rolled back");
}

on_both_runtimes!(
    a_bound_refuses_an_add_in_a_transaction,
    a_job_added_in_a_transaction_exists_only_if_it_commits_and_runs,
    a_commit_notifies_and_wakes_a_listening_worker,
    job_keys_in_a_transaction_behave_as_outside,
    add_jobs_in_a_transaction_handles_keys_and_names,
    managing_jobs_in_a_transaction_follows_it,
    a_custom_schema_is_used_as_worker_utils_does,
    bad_input_is_refused_clearly,
);
