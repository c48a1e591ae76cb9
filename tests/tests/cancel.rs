//! Cancelling jobs (`WorkerUtils::cancel_jobs`), on both runtimes: a waiting job fails for
//! good at once, a running one is aborted by its worker and fails for good, and a job whose
//! task succeeded before the request is completed: one outcome each, with the reason. And
//! a task's timeout (`WorkerOptions::task_timeout`): the task is aborted, that attempt fails.
//!
//! On tokio: a request is a row, so no number of jobs, size of id or length of reason is too
//! much for it; a worker whose listener hears nothing finds it after a heartbeat; and the
//! records migration that adds the table is applied to a database that lacks it.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{AbortSignal, Cancelled, JobContext, JobSpec, RawJob, Recorded, Runtime};
use formica_tests::proxy::Proxy;
use formica_tests::{on_both_runtimes, timeout, Running, TestDb};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The job's row: (attempts, max_attempts, last_error, locked_by), if it is still there.
async fn row(db: &TestDb, id: i64) -> Option<(i16, i16, Option<String>, Option<String>)> {
    let client = db.client().await;
    let rows = client
        .query(
            "select attempts, max_attempts, last_error, locked_by from graphile_worker._private_jobs where id = $1",
            &[&id],
        )
        .await
        .unwrap();
    rows.first().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
}

/// The cancel requests left.
const REQUESTS: &str = "select count(*) from formica_graphile_worker.cancel_requests";

async fn a_waiting_job_is_failed_for_good_with_the_reason(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let utils = db.utils();
    let job = utils.add_raw_job("later", json!({}), JobSpec::default()).await.unwrap();
    let cancelled = utils.cancel_jobs(&[job.id, 999_999], "not needed").await.unwrap();
    assert_eq!(cancelled, Cancelled { failed: vec![job.id], recorded: vec![] }, "unknown ids are left out");
    let (attempts, max_attempts, last_error, locked_by) =
        row(&db, job.id).await.expect("kept, with its reason");
    assert_eq!(
        (attempts, last_error.as_deref(), locked_by),
        (max_attempts, Some("cancelled: not needed"), None)
    );
}

/// A worker running `slow` tasks that wait for a minute; each hands its abort signal out.
async fn worker_with_slow_tasks(
    db: &TestDb,
    rt: &Arc<dyn Runtime>,
    signals: &Arc<Mutex<Vec<AbortSignal>>>,
    url: Option<&str>,
) -> Running {
    let signals = signals.clone();
    let options = db.worker_options().database_url(url.unwrap_or(&db.url));
    let options = options.define_raw_job("slow", move |ctx: JobContext, _payload| {
        signals.lock().unwrap().push(ctx.abort_signal().clone());
        let rt = ctx.utils().pool().runtime().clone();
        Box::pin(async move {
            formica_tests::sleep(rt.as_ref(), Duration::from_secs(60)).await;
            Ok(())
        })
    });
    Running::listening(rt, options).await
}

async fn a_running_job_s_abort_signal_fires_and_it_fails_for_good_with_the_reason(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let signals = Arc::new(Mutex::new(Vec::new()));
    let running = worker_with_slow_tasks(&db, &rt, &signals, None).await;
    let utils = db.utils();
    let spec = JobSpec::builder().queue_name("q").build();
    let job = utils.add_raw_job("slow", json!({}), spec).await.unwrap();
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(10), "the task started", || {
        signals.lock().unwrap().len() == 1
    })
    .await;
    let cancelled = utils.cancel_job(job.id, "operator said so").await.unwrap();
    let recorded = Recorded { job_id: job.id, worker_id: running.worker_id().to_owned(), leased: true };
    assert_eq!(cancelled, Cancelled { failed: vec![], recorded: vec![recorded] });
    let signal = signals.lock().unwrap()[0].clone();
    timeout(rt.as_ref(), Duration::from_secs(10), signal.aborted()).await.expect("the abort signal fires");
    db.wait_for_count(
        &format!(
            "select count(*) from graphile_worker._private_jobs where id = {} and locked_by is null",
            job.id
        ),
        1,
        Duration::from_secs(10),
    )
    .await;
    let (attempts, max_attempts, last_error, _) = row(&db, job.id).await.expect("kept, with its reason");
    assert_eq!((attempts, last_error.as_deref()), (max_attempts, Some("cancelled: operator said so")));
    assert_eq!(
        db.count("select count(*) from graphile_worker._private_job_queues where locked_by is not null")
            .await,
        0
    );
    running.stop(Duration::from_secs(10)).await;
}

async fn a_job_whose_task_succeeded_before_the_cancel_is_completed_only(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let done = Arc::new(Mutex::new(0));
    let counter = done.clone();
    // Completions wait two seconds to be written: the job is still held when the request
    // comes, though its task has ended.
    let worker = db
        .worker_options()
        .complete_job_batch_delay(Duration::from_secs(2))
        .define_raw_job("quick", move |_ctx: JobContext, _payload| {
            *counter.lock().unwrap() += 1;
            Box::pin(async { Ok(()) })
        })
        .init()
        .await
        .expect("init");
    let running = Running::spawn(&rt, worker);
    let utils = db.utils();
    let job = utils.add_raw_job("quick", json!({}), JobSpec::default()).await.unwrap();
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(10), "the task ran", || {
        *done.lock().unwrap() == 1
    })
    .await;
    let cancelled = utils.cancel_job(job.id, "too late").await.unwrap();
    assert_eq!(cancelled.recorded.iter().map(|r| r.job_id).collect::<Vec<_>>(), vec![job.id], "still held");
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    assert_eq!(row(&db, job.id).await, None, "completed, and nothing else recorded");
    // The request of a job gone is forgotten by the next recovery sweep.
    db.wait_for_count(REQUESTS, 0, Duration::from_secs(10)).await;
    running.stop(Duration::from_secs(10)).await;
}

async fn a_task_past_its_timeout_is_aborted_and_that_attempt_fails(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let signals = Arc::new(Mutex::new(Vec::<AbortSignal>::new()));
    let handed = signals.clone();
    let worker = db
        .worker_options()
        .task_timeout("slow", Duration::from_millis(300))
        .define_raw_job("slow", move |ctx: JobContext, _payload| {
            handed.lock().unwrap().push(ctx.abort_signal().clone());
            let rt = ctx.utils().pool().runtime().clone();
            Box::pin(async move {
                formica_tests::sleep(rt.as_ref(), Duration::from_secs(60)).await;
                Ok(())
            })
        })
        .init()
        .await
        .expect("init");
    let running = Running::spawn(&rt, worker);
    let job = db.utils().add_raw_job("slow", json!({}), JobSpec::default()).await.unwrap();
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(10), "the task started", || {
        signals.lock().unwrap().len() == 1
    })
    .await;
    let signal = signals.lock().unwrap()[0].clone();
    timeout(rt.as_ref(), Duration::from_secs(10), signal.aborted()).await.expect("the abort signal fires");
    db.wait_for_count(
        &format!(
            "select count(*) from graphile_worker._private_jobs where id = {} and last_error is not null",
            job.id
        ),
        1,
        Duration::from_secs(10),
    )
    .await;
    let (attempts, max_attempts, last_error, locked_by) = row(&db, job.id).await.unwrap();
    assert_eq!((attempts, last_error.as_deref(), locked_by), (1, Some("timed out after 300ms"), None));
    assert!(max_attempts > 1, "it will be retried");
    running.stop(Duration::from_secs(10)).await;
}

on_both_runtimes!(
    a_waiting_job_is_failed_for_good_with_the_reason,
    a_running_job_s_abort_signal_fires_and_it_fails_for_good_with_the_reason,
    a_job_whose_task_succeeded_before_the_cancel_is_completed_only,
    a_task_past_its_timeout_is_aborted_and_that_attempt_fails,
);

/// Set the jobs' ids near 2^53, where each takes 16 digits.
async fn large_ids(db: &TestDb) {
    let client = db.client().await;
    client.batch_execute("select setval('graphile_worker.jobs_id_seq1', 9007199254740000)").await.unwrap();
}

/// Add `n` jobs of `task`; their ids.
async fn add(db: &TestDb, task: &str, n: usize) -> Vec<i64> {
    let jobs: Vec<RawJob> =
        (0..n).map(|i| RawJob::new(task, json!({ "i": i }), JobSpec::default())).collect();
    db.utils().add_raw_jobs(&jobs).await.unwrap().into_iter().map(|j| j.id).collect()
}

/// Cancel `running` (held by a worker of `slow` tasks, started here) and `waiting` in one
/// call with `reason`: each waiting job fails at once, a request is recorded for each running
/// one, and every running one ends failed for good with the reason.
async fn cancel_in_one_call(db: &TestDb, running: usize, waiting: usize, reason: &str) {
    let rt = db.runtime.clone();
    large_ids(db).await;
    let signals = Arc::new(Mutex::new(Vec::new()));
    let options = db.worker_options().concurrency(running).local_queue_size(0);
    let signals_in = signals.clone();
    let options = options.define_raw_job("slow", move |ctx: JobContext, _payload| {
        signals_in.lock().unwrap().push(ctx.abort_signal().clone());
        let rt = ctx.utils().pool().runtime().clone();
        Box::pin(async move {
            formica_tests::sleep(rt.as_ref(), Duration::from_secs(120)).await;
            Ok(())
        })
    });
    let worker = Running::listening(&rt, options).await;
    let held = add(db, "slow", running).await;
    let later = add(db, "later", waiting).await;
    assert!(held.iter().all(|&id| id > 9_007_199_254_740_000));
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(60), "every task started", || {
        signals.lock().unwrap().len() == running
    })
    .await;
    let ids: Vec<i64> = held.iter().chain(&later).copied().collect();
    let cancelled = db.utils().cancel_jobs(&ids, reason).await.expect("no payload limit");
    assert_eq!(cancelled.failed, later);
    assert_eq!(cancelled.recorded.iter().map(|r| r.job_id).collect::<Vec<_>>(), held);
    assert!(cancelled.recorded.iter().all(|r| r.worker_id == worker.worker_id() && r.leased));
    let failed = format!(
        "select count(*) from graphile_worker._private_jobs where attempts = max_attempts \
         and locked_by is null and last_error = 'cancelled: ' || '{}'",
        reason.replace('\'', "''")
    );
    db.wait_for_count(&failed, (running + waiting) as i64, Duration::from_secs(30)).await;
    assert!(signals.lock().unwrap().iter().all(AbortSignal::is_aborted), "every task was aborted");
    worker.stop(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_running_jobs_with_large_ids_are_cancelled_in_one_call_with_waiting_ones() {
    let db = TestDb::migrated().await;
    cancel_in_one_call(&db, 1000, 5, "drain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_cancelled_with_an_8100_character_reason_with_waiting_ones() {
    let db = TestDb::migrated().await;
    cancel_in_one_call(&db, 1, 3, &"why ".repeat(2025)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_sent_while_the_listener_hears_nothing_still_cancels() {
    let db = TestDb::migrated().await;
    let rt = db.runtime.clone();
    let (proxy, url) = Proxy::in_front_of(&db.url);
    let signals = Arc::new(Mutex::new(Vec::new()));
    let running = worker_with_slow_tasks(&db, &rt, &signals, Some(&url)).await;
    let job = db.utils().add_raw_job("slow", json!({}), JobSpec::default()).await.unwrap();
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(10), "the task started", || {
        signals.lock().unwrap().len() == 1
    })
    .await;
    // The listener's connection forwards nothing from now on: no notification reaches it.
    assert_eq!(proxy.freeze_where_client_said(b"LISTEN"), 1);
    let cancelled = db.utils().cancel_job(job.id, "unheard").await.unwrap();
    assert_eq!(cancelled.recorded.len(), 1);
    let signal = signals.lock().unwrap()[0].clone();
    timeout(rt.as_ref(), Duration::from_secs(10), signal.aborted()).await.expect("found after a heartbeat");
    let done = format!(
        "select count(*) from graphile_worker._private_jobs where id = {} and locked_by is null",
        job.id
    );
    db.wait_for_count(&done, 1, Duration::from_secs(10)).await;
    let (attempts, max_attempts, last_error, _) = row(&db, job.id).await.unwrap();
    assert_eq!((attempts, last_error.as_deref()), (max_attempts, Some("cancelled: unheard")));
    running.stop(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_released_with_a_request_pending_ends_cancelled_and_the_request_goes() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    let job = db.utils().add_raw_job("t", json!({}), JobSpec::default()).await.unwrap();
    // Held by a worker that then gives it back (as a prefetched job is) before reading it.
    client
        .batch_execute(&format!(
            "update graphile_worker._private_jobs set locked_by = 'gone', locked_at = now(), attempts = 1 where id = {}",
            job.id
        ))
        .await
        .unwrap();
    let cancelled = db.utils().cancel_job(job.id, "first").await.unwrap();
    assert_eq!(
        cancelled.recorded,
        vec![Recorded { job_id: job.id, worker_id: "gone".into(), leased: false }]
    );
    db.utils().cancel_job(job.id, "second").await.unwrap();
    assert_eq!(db.count(REQUESTS).await, 1);
    client
        .batch_execute(&format!(
            "update graphile_worker._private_jobs set locked_by = null, locked_at = null, attempts = 0 where id = {}",
            job.id
        ))
        .await
        .unwrap();
    // A worker's recovery sweep, due at its start, settles it.
    let worker =
        db.worker_options().define_raw_job("other", |_, _| Box::pin(async { Ok(()) })).init().await.unwrap();
    let running = Running::spawn(&db.runtime, worker);
    db.wait_for_count(REQUESTS, 0, Duration::from_secs(10)).await;
    let (attempts, max_attempts, last_error, locked_by) = row(&db, job.id).await.unwrap();
    assert_eq!((attempts, last_error.as_deref(), locked_by), (max_attempts, Some("cancelled: first"), None));
    running.stop(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_with_only_the_first_records_migration_gets_the_cancel_requests_table() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "drop table formica_graphile_worker.cancel_requests; \
             delete from formica_graphile_worker.migrations where id = 2",
        )
        .await
        .unwrap();
    db.migrate_records_to_the_last_step().await;
    assert_eq!(db.count(REQUESTS).await, 0, "the table is there");
}
