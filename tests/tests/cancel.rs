//! Cancelling jobs (`WorkerUtils::cancel_jobs`), on both runtimes: a waiting job fails for
//! good at once, a running one is aborted by its worker and fails for good, and a job whose
//! task succeeded before the request is completed: one outcome each, with the reason. And
//! a task's timeout (`WorkerOptions::task_timeout`): the task is aborted, that attempt fails.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{AbortSignal, Cancelled, JobContext, JobSpec, Runtime};
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

async fn a_waiting_job_is_failed_for_good_with_the_reason(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let utils = db.utils();
    let job = utils.add_raw_job("later", json!({}), JobSpec::default()).await.unwrap();
    let cancelled = utils.cancel_jobs(&[job.id, 999_999], "not needed").await.unwrap();
    assert_eq!(cancelled, Cancelled { failed: vec![job.id], told: vec![] }, "unknown ids are left out");
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
) -> Running {
    let signals = signals.clone();
    let options = db.worker_options().define_raw_job("slow", move |ctx: JobContext, _payload| {
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
    let running = worker_with_slow_tasks(&db, &rt, &signals).await;
    let utils = db.utils();
    let spec = JobSpec::builder().queue_name("q").build();
    let job = utils.add_raw_job("slow", json!({}), spec).await.unwrap();
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(10), "the task started", || {
        signals.lock().unwrap().len() == 1
    })
    .await;
    let cancelled = utils.cancel_job(job.id, "operator said so").await.unwrap();
    assert_eq!(cancelled, Cancelled { failed: vec![], told: vec![job.id] });
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
    assert_eq!(cancelled, Cancelled { failed: vec![], told: vec![job.id] }, "still held when asked");
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    assert_eq!(row(&db, job.id).await, None, "completed, and nothing else recorded");
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
