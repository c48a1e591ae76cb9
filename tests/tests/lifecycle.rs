//! A running worker beside maintenance of its schema, on both runtimes: its task's row
//! garbage-collected (`GC_TASK_IDENTIFIERS`) and the whole schema dropped and installed again.
//! Both used to leave new jobs waiting: the worker fetched by task ids cached at start, and
//! took the reinstall's breaking-migration notices for a schema newer than it.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{CleanupTask, Event, Runtime};
use formica_tests::{on_both_runtimes, Running, TestDb};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Jobs of `hello` still in the table.
const HELLO_JOBS: &str = "select count(*) from graphile_worker.jobs where task_identifier = 'hello'";

/// A worker running `hello` (a no-op) that polls every 200 ms, with the events it emitted.
async fn hello_worker(rt: &Arc<dyn Runtime>, db: &TestDb) -> (Running, Arc<Mutex<Vec<Event>>>) {
    let events: Arc<Mutex<Vec<Event>>> = Default::default();
    let seen = events.clone();
    let options = db
        .worker_options()
        .poll_interval(Duration::from_millis(200))
        .on_event(move |e| seen.lock().unwrap().push(e.clone()))
        .define_raw_job("hello", |_, _| async { Ok(()) });
    (Running::listening(rt, options).await, events)
}

async fn add_hello(db: &TestDb) {
    db.client().await.batch_execute("select graphile_worker.add_job('hello', '{}')").await.unwrap();
}

async fn hello_task_id(db: &TestDb) -> Option<i32> {
    let client = db.client().await;
    let rows = client
        .query("select id from graphile_worker._private_tasks where identifier = 'hello'", &[])
        .await
        .unwrap();
    rows.first().map(|row| row.get(0))
}

async fn a_task_row_garbage_collected_under_a_running_worker_hides_none_of_its_new_jobs(
    rt: Arc<dyn Runtime>,
) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let (running, _) = hello_worker(&rt, &db).await;
    add_hello(&db).await;
    db.wait_for_count(HELLO_JOBS, 0, Duration::from_secs(10)).await;
    let before = hello_task_id(&db).await.expect("add_job made the task's row");
    // No job of `hello` is left: its row goes.
    db.utils().cleanup(&[CleanupTask::GcTaskIdentifiers], &[]).await.unwrap();
    assert_eq!(hello_task_id(&db).await, None, "the row was garbage-collected");
    for _ in 0..3 {
        add_hello(&db).await;
    }
    let after = hello_task_id(&db).await.expect("add_job made the row again");
    assert_ne!(before, after, "a new row, with a new id");
    db.wait_for_count(HELLO_JOBS, 0, Duration::from_secs(10)).await;
    running.stop(Duration::from_secs(10)).await;
}

async fn a_schema_installed_again_under_a_running_worker_leaves_it_running_and_new_jobs_run(
    rt: Arc<dyn Runtime>,
) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let (running, events) = hello_worker(&rt, &db).await;
    add_hello(&db).await;
    db.wait_for_count(HELLO_JOBS, 0, Duration::from_secs(10)).await;
    db.client().await.batch_execute("drop schema graphile_worker cascade").await.unwrap();
    db.utils().migrate().await.expect("installed again");
    for _ in 0..3 {
        add_hello(&db).await;
    }
    db.wait_for_count(HELLO_JOBS, 0, Duration::from_secs(10)).await;
    let events = events.lock().unwrap().clone();
    let reinstalled: Vec<i64> = events
        .iter()
        .filter_map(|e| match e {
            Event::SchemaReinstalled { migration } => Some(*migration),
            _ => None,
        })
        .collect();
    assert_eq!(reinstalled, vec![1, 3, 11, 13, 14, 16, 19], "the breaking ones, announced again");
    assert!(!events.iter().any(|e| matches!(e, Event::BreakingMigration { .. } | Event::Shutdown { .. })));
    running.stop(Duration::from_secs(10)).await;
}

on_both_runtimes!(
    a_task_row_garbage_collected_under_a_running_worker_hides_none_of_its_new_jobs,
    a_schema_installed_again_under_a_running_worker_leaves_it_running_and_new_jobs_run,
);
