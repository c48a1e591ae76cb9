//! A task can never make its own job run twice: the lease is renewed beside the worker's
//! loop, on a thread of its own, and the loop runs on a thread no task runs on. On a real
//! PostgreSQL, on tokio (multi-threaded and current-thread) and async-std.

use formica::{Event, JobSpec, Runtime, WorkerHandle};
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How long a blocking handler holds its thread: longer than a lease, its grace and the
/// sweeps (23 s), in which a worker whose heartbeats stopped loses its jobs.
const BLOCK: Duration = Duration::from_secs(30);

/// Pending once, then ready: a handler that awaits before it blocks.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            return Poll::Ready(());
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// What the handlers and hooks saw.
#[derive(Default)]
struct Seen {
    /// Per job: the attempt of each run of its handler.
    runs: Mutex<BTreeMap<i64, Vec<i16>>>,
    /// Per job: how many times a worker started it.
    starts: Mutex<BTreeMap<i64, usize>>,
    lease_lapsed: AtomicBool,
    /// When the first worker's loop took its stop.
    shutdown_at: Mutex<Option<Instant>>,
}

impl Seen {
    fn running(&self) -> usize {
        self.runs.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// Four jobs whose handlers block their thread for [`BLOCK`] (one before any await, three
/// after one), on two workers of concurrency 4 sharing the application's runtime: each job
/// starts once, runs once, on its first attempt, and completes; no lease lapses; and while
/// every thread of the runtime is blocked, a worker still takes its stop at once.
async fn blocking_handlers_run_once(runtime: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(runtime.clone()).await;
    let seen = Arc::new(Seen::default());
    let worker = |seen: Arc<Seen>| {
        let hook_seen = seen.clone();
        db.worker_options()
            .concurrency(4)
            .graceful_shutdown_timeout(Duration::from_secs(600))
            .define_raw_job("block", move |ctx, payload| {
                let seen = seen.clone();
                async move {
                    if payload["await_first"] == json!(true) {
                        YieldOnce(false).await;
                    }
                    let job = ctx.job();
                    seen.runs.lock().unwrap().entry(job.id).or_default().push(job.attempts);
                    std::thread::sleep(BLOCK);
                    Ok(())
                }
            })
            .on_event(move |event| match event {
                Event::JobStart { job_id, .. } => {
                    *hook_seen.starts.lock().unwrap().entry(*job_id).or_default() += 1
                }
                Event::LeaseLapsing => hook_seen.lease_lapsed.store(true, Ordering::SeqCst),
                Event::Shutdown { .. } => {
                    hook_seen.shutdown_at.lock().unwrap().get_or_insert_with(Instant::now);
                }
                _ => {}
            })
    };
    // The workers start, and the test connects, before any handler blocks the runtime's
    // threads: while they block, `run` could not start, nor a connection be opened in time.
    let a = Running::listening(&runtime, worker(seen.clone())).await;
    let b = Running::listening(&runtime, worker(seen.clone())).await;
    let client = db.client().await;
    // The four jobs in one transaction: one before any await, three after one.
    let add = |await_first: bool| {
        format!("select graphile_worker.add_job('block', '{{\"await_first\": {await_first}}}');")
    };
    let adds: String = [false, true, true, true].into_iter().map(add).collect();
    client.batch_execute(&adds).await.unwrap();
    // Beside the runtime (whose threads the handlers block): once a handler blocks, stop a.
    let stopped = watch_the_stop(seen.clone(), a.handle());
    let started = Instant::now();
    let left = "select count(*) from graphile_worker.jobs";
    while client.query_one(left, &[]).await.unwrap().get::<_, i64>(0) > 0 {
        assert!(started.elapsed() < BLOCK * 6, "the jobs were not all completed in time");
        formica_tests::sleep(runtime.as_ref(), Duration::from_millis(100)).await;
    }
    let took = stopped.join().unwrap();
    assert!(took < Duration::from_secs(2), "a's loop took its stop {took:?} after it was sent");
    a.stop(Duration::from_secs(30)).await;
    b.stop(Duration::from_secs(30)).await;
    let runs = seen.runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert!(runs.values().all(|attempts| attempts == &vec![1]), "each ran once, on attempt 1: {runs:?}");
    let starts = seen.starts.lock().unwrap().clone();
    assert!(starts.values().all(|n| *n == 1) && starts.len() == 4, "each started once: {starts:?}");
    assert!(!seen.lease_lapsed.load(Ordering::SeqCst), "no lease lapsed");
}

/// On a thread of its own: once a handler runs, stop the worker of `handle`, and return
/// how long its loop took to take the stop.
fn watch_the_stop(seen: Arc<Seen>, handle: WorkerHandle) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        while seen.running() == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        let sent = Instant::now();
        handle.stop();
        while seen.shutdown_at.lock().unwrap().is_none() && sent.elapsed() < BLOCK {
            std::thread::sleep(Duration::from_millis(5));
        }
        seen.shutdown_at.lock().unwrap().map_or(BLOCK, |at| at - sent)
    })
}

#[test]
fn blocking_handlers_run_once_on_tokio_with_two_threads() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(blocking_handlers_run_once(Arc::new(formica_tokio::TokioRuntime)));
}

#[test]
fn blocking_handlers_run_once_on_tokio_current_thread() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(blocking_handlers_run_once(Arc::new(formica_tokio::TokioRuntime)));
}

/// The async-std tests of this binary share async-std's global executor, one thread a core,
/// which the blocking test holds for [`BLOCK`]: they take turns, or the other's task may not
/// even start before its timeout.
static ASYNC_STD_TURN: Mutex<()> = Mutex::new(());

fn async_std_turn() -> std::sync::MutexGuard<'static, ()> {
    ASYNC_STD_TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn blocking_handlers_run_once_on_async_std() {
    let _turn = async_std_turn();
    async_std::task::block_on(blocking_handlers_run_once(Arc::new(formica_async_std::AsyncStdRuntime)));
}

/// A handler that spins forever, deaf to its abort signal, past a short `task_timeout`:
/// its job fails that attempt for good (a retry would run beside it), once; the worker goes
/// on and runs the next job.
async fn an_endless_handler_fails_its_job_once_and_the_worker_goes_on(runtime: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(runtime.clone()).await;
    let spins = Arc::new(Mutex::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let (counted, released) = (spins.clone(), release.clone());
    let options = db
        .worker_options()
        .concurrency(2)
        .task_timeout("spin", Duration::from_secs(1))
        .define_raw_job("spin", move |_, _| {
            *counted.lock().unwrap() += 1;
            let released = released.clone();
            async move {
                // Ends only when the test is over, so the thread is not lost to the others.
                while !released.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                Ok(())
            }
        })
        .define_raw_job("quick", |_, _| async { Ok(()) });
    let worker = Running::listening(&runtime, options).await;
    let utils = db.utils();
    let spin = utils.add_raw_job("spin", json!({}), JobSpec::default()).await.unwrap();
    // Waits are generous: the blocking tests of this binary may hold async-std's threads a while.
    db.wait_for_count(
        "select count(*) from graphile_worker.jobs where attempts >= max_attempts and locked_by is null",
        1,
        BLOCK * 3,
    )
    .await;
    let row = db
        .client()
        .await
        .query_one("select last_error, attempts from graphile_worker.jobs where id = $1", &[&spin.id])
        .await
        .unwrap();
    let error: String = row.get(0);
    assert!(error.starts_with("timed out after") && error.contains("did not stop"), "{error}");
    utils.add_raw_job("quick", json!({}), JobSpec::default()).await.unwrap();
    db.wait_for_count(
        "select count(*) from graphile_worker.jobs where task_identifier = 'quick'",
        0,
        BLOCK * 3,
    )
    .await;
    assert_eq!(*spins.lock().unwrap(), 1, "the spinning job ran once");
    worker.stop(BLOCK * 3).await;
    release.store(true, Ordering::Relaxed);
}

#[test]
fn an_endless_handler_fails_its_job_once_and_the_worker_goes_on_on_tokio() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(an_endless_handler_fails_its_job_once_and_the_worker_goes_on(Arc::new(
        formica_tokio::TokioRuntime,
    )));
}

#[test]
fn an_endless_handler_fails_its_job_once_and_the_worker_goes_on_on_async_std() {
    let _turn = async_std_turn();
    async_std::task::block_on(an_endless_handler_fails_its_job_once_and_the_worker_goes_on(Arc::new(
        formica_async_std::AsyncStdRuntime,
    )));
}
