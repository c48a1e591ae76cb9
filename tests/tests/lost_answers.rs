//! A fetch whose answer is lost on real PostgreSQL: a proxy cuts the connection after the
//! server ran the fetch (its jobs are locked by the worker) and before the answer arrives.
//! The worker gives those jobs back and runs them, without stopping first.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica::{Event, JobContext, JobSpec, RawJob, Runtime, TaskResult};
use formica_tests::proxy::Proxy;
use formica_tests::{wait_until, Running, TestDb};
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_locked_by_a_fetch_whose_answer_was_lost_are_given_back_and_run() {
    let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let db = TestDb::migrated_on(rt.clone()).await;
    let (proxy, url) = Proxy::in_front_of(&db.url);
    let runs: Arc<Mutex<HashMap<i64, usize>>> = Arc::default();
    let fetch_errors = Arc::new(AtomicUsize::new(0));
    let (counted, errors) = (runs.clone(), fetch_errors.clone());
    let worker = formica::WorkerOptions::<()>::with_runtime(rt.clone())
        .database_url(&url)
        // Unprepared, each fetch carries its text: the proxy knows it when it sees it.
        .prepared_statements(false)
        .concurrency(4)
        .poll_interval(Duration::from_millis(300))
        .define_raw_job("count", move |ctx: JobContext, _| {
            *counted.lock().unwrap().entry(ctx.job().id).or_default() += 1;
            Box::pin(async { TaskResult::Ok(()) })
        })
        .on_event(move |e: &Event| {
            if matches!(e, Event::DatabaseError { statement: "fetch jobs", .. }) {
                errors.fetch_add(1, Ordering::SeqCst);
            }
        })
        .init()
        .await
        .expect("init");
    let running = Running::spawn(&rt, worker);
    // Idle: its first fetches found nothing.
    tokio::time::sleep(Duration::from_secs(1)).await;

    proxy.lose_answer_to(b"locked_queues");
    let jobs: Vec<RawJob> = (0..3)
        .map(|i| RawJob { identifier: "count".into(), payload: json!({ "n": i }), spec: JobSpec::default() })
        .collect();
    let ids: Vec<i64> = db.utils().add_raw_jobs(&jobs).await.unwrap().iter().map(|j| j.id).collect();
    wait_until(rt.as_ref(), Duration::from_secs(10), "a fetch's answer was lost", || {
        proxy.lost_answers() == 1
    })
    .await;
    // The proxy counts the answer lost as it cuts; the worker learns it a moment later.
    wait_until(rt.as_ref(), Duration::from_secs(10), "the worker saw its fetch fail", || {
        fetch_errors.load(Ordering::SeqCst) > 0
    })
    .await;
    wait_until(rt.as_ref(), Duration::from_secs(10), "the jobs ran on the live worker", || {
        runs.lock().unwrap().len() == ids.len()
    })
    .await;
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(5)).await;
    assert!(runs.lock().unwrap().values().all(|n| *n == 1), "each ran once: {runs:?}");
    assert_eq!(fetch_errors.load(Ordering::SeqCst), 1, "only the fetch whose answer was lost failed");
    running.stop(Duration::from_secs(10)).await;
    drop(proxy);
}
