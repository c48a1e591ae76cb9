//! The pool cannot wedge: tasks that hold clients and add jobs finish at the default sizes,
//! an exhausted pool fails with an error naming the holders instead of hanging, idle
//! connections close, and an idle worker holds few connections, named in
//! `pg_stat_activity` by its worker id.

use formica::{JobSpec, Pool, PoolStatus, Runtime};
use formica_tests::{sleep, timeout, Running, TestDb};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

async fn tasks_holding_clients_and_adding_jobs_finish_at_the_default_sizes(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    for n in 0..10 {
        utils.add_raw_job("parent", serde_json::json!({ "n": n }), JobSpec::default()).await.unwrap();
    }
    let children = Arc::new(AtomicUsize::new(0));
    let counter = children.clone();
    let task_rt = rt.clone();
    // Default concurrency (10) and pool size (10): before the reserve, ten parents held all
    // ten connections and each waited forever for an eleventh to add its child.
    let worker = formica::WorkerOptions::<()>::with_runtime(rt.clone())
        .database_url(&db.url)
        .define_raw_job("parent", move |ctx, payload| {
            let rt = task_rt.clone();
            async move {
                let client = ctx.client().await?;
                client.query_one("select 1", &[]).await?;
                // Long enough for every parent to be holding its client.
                sleep(rt.as_ref(), Duration::from_millis(500)).await;
                ctx.utils().add_raw_job("child", payload, JobSpec::default()).await?;
                client.query_one("select 2", &[]).await?;
                Ok(())
            }
        })
        .define_raw_job("child", move |_, _| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .init()
        .await
        .unwrap();
    timeout(rt.as_ref(), Duration::from_secs(60), worker.run_once())
        .await
        .expect("the worker finished (the pool did not wedge)")
        .unwrap();
    assert_eq!(children.load(Ordering::SeqCst), 10);
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0, "all 20 jobs ran");
}

async fn an_exhausted_pool_fails_naming_the_holders(rt: Arc<dyn Runtime>) {
    let db = TestDb::new_on(rt.clone()).await;
    let pool = Pool::from_url(rt.clone(), &db.url, 2).unwrap().acquire_timeout(Duration::from_millis(300));
    let held_by_task = pool.get_for_task("job 7").await.unwrap();
    // Tasks may hold 1 of 2: the other is reserved for statements.
    let e = pool.get_for_task("job 8").await.err().expect("a second task client times out").to_string();
    assert!(e.starts_with("the connection pool is exhausted: job 8 waited"), "{e}");
    assert!(e.contains("tasks may hold 1 of its 2 connections"), "{e}");
    assert!(e.contains("job 7 for"), "{e}");
    let statement = pool.get().await.expect("the reserved connection serves a statement");
    assert_eq!(pool.status(), PoolStatus { size: 2, idle: 0, waiting: 0, held_by_tasks: 1, max_size: 2 });
    // A waiter is counted while it waits, and served when a connection comes back.
    let waiting = {
        let pool = pool.clone();
        let (tx, rx) = futures::channel::oneshot::channel();
        rt.spawn(Box::pin(async move {
            let _ = tx.send(pool.get().await.map(|_| ()).map_err(|e| e.to_string()));
        }));
        rx
    };
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(5), "a waiter is counted", || {
        pool.status().waiting == 1
    })
    .await;
    drop(statement);
    assert_eq!(waiting.await.unwrap(), Ok(()));
    let e = {
        let _a = pool.get().await.unwrap();
        pool.get().await.err().expect("a third client times out").to_string()
    };
    assert!(e.contains("all 2 connections are in use"), "{e}");
    assert!(e.contains("job 7 for") && e.contains("a statement for"), "{e}");
    drop(held_by_task);
    assert_eq!(pool.status().idle, 2);
}

async fn idle_connections_close(rt: Arc<dyn Runtime>) {
    let db = TestDb::new_on(rt.clone()).await;
    let url = format!("{} application_name=idle_close_test", db.url);
    let pool = Pool::from_url(rt.clone(), &url, 5).unwrap().idle_timeout(Some(Duration::from_millis(300)));
    let clients = futures::future::try_join_all((0..3).map(|_| pool.get())).await.unwrap();
    drop(clients);
    assert_eq!((pool.status().size, pool.status().idle), (3, 3));
    let sessions = format!(
        "select count(*) from pg_stat_activity where datname = '{}' and application_name = 'idle_close_test'",
        db.name
    );
    assert_eq!(db.count(&sessions).await, 3);
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(5), "idle connections close", || {
        pool.status().size == 0
    })
    .await;
    db.wait_for_count(&sessions, 0, Duration::from_secs(5)).await;
    // And open again when needed.
    pool.get().await.unwrap().query_one("select 1", &[]).await.unwrap();
}

formica_tests::on_both_runtimes!(
    tasks_holding_clients_and_adding_jobs_finish_at_the_default_sizes,
    an_exhausted_pool_fails_naming_the_holders,
    idle_connections_close,
);

/// An idle worker at `-j 4` with the default pool (10) settles at its LISTEN connection, its
/// lease keeper's and at most one pooled connection (graphile-worker 0.18 holds 5), each
/// named by the worker id.
#[tokio::test]
async fn an_idle_worker_holds_few_connections_named_by_its_worker_id() {
    let db = TestDb::migrated().await;
    let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let worker = formica::WorkerOptions::<()>::with_runtime(rt.clone())
        .database_url(&db.url)
        .concurrency(4)
        .worker_id("idle-worker-under-test")
        .define_raw_job("nothing", |_, _| async { Ok(()) })
        .init()
        .await
        .unwrap();
    let running = Running::spawn(&rt, worker);
    let named = format!(
        "select count(*) from pg_stat_activity where datname = '{}' and application_name = 'idle-worker-under-test'",
        db.name
    );
    let all = format!(
        "select count(*) from pg_stat_activity where datname = '{}' and pid <> pg_backend_pid()",
        db.name
    );
    // Past the idle timeout (10 s) and a few polls.
    sleep(rt.as_ref(), formica::DEFAULT_IDLE_TIMEOUT + Duration::from_secs(4)).await;
    let client = db.client().await;
    let count = |sql: String| {
        let client = &client;
        async move { client.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    // The LISTEN connection, the lease keeper's own, and at most one pooled. On a loaded
    // machine a poll's connection may still be closing (or one opening, not yet named): the
    // state is read again for up to 10 s, and must then hold.
    let mut tries = 0;
    let (named_now, all_now) = loop {
        let (named_now, all_now) = (count(named.clone()).await, count(all.clone()).await);
        tries += 1;
        if (named_now == all_now && (2..=3).contains(&named_now)) || tries == 50 {
            break (named_now, all_now);
        }
        sleep(rt.as_ref(), Duration::from_millis(200)).await;
    };
    assert_eq!(named_now, all_now, "every session of the worker carries its id");
    assert!((2..=3).contains(&named_now), "an idle worker holds {named_now} connections");
    running.stop(Duration::from_secs(10)).await;
}

/// With neither `database_url` nor `pool`, a worker connects to `DATABASE_URL`.
#[tokio::test]
async fn without_a_url_the_worker_reads_database_url() {
    let server = std::env::var("DATABASE_URL").expect("DATABASE_URL (run through scripts/test)");
    let schema = format!("formica_env_fallback_{}", std::process::id());
    let worker = formica_tokio::WorkerOptions::default()
        .schema(&schema)
        .worker_id("env-fallback")
        .init()
        .await
        .unwrap();
    let pool = worker.create_utils().pool().clone();
    let expected: tokio_postgres::Config = server.parse().unwrap();
    assert_eq!(pool.config().get_ports(), expected.get_ports());
    assert_eq!(pool.config().get_application_name(), Some("env-fallback"));
    let client = pool.get().await.unwrap();
    let installed: i64 = client
        .query_one("select count(*) from information_schema.schemata where schema_name = $1", &[&schema])
        .await
        .unwrap()
        .get(0);
    assert_eq!(installed, 1, "the schema was installed through DATABASE_URL");
    client.batch_execute(&format!("drop schema {schema} cascade")).await.unwrap();
}
