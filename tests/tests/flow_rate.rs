//! Rate limits on real PostgreSQL (`WorkerUtils::set_control` with a `Control::rate_limit`; docs/guide/flow-control.md).
//!
//! - a limit of 50 per second, 4 workers, 2,000 quick jobs: no sliding one-second window of
//!   the tasks' own start times holds more than 50 plus the documented burst, every job
//!   runs once on its first attempt, and the drain takes the 39 s the limit implies (the
//!   first 50 at once, then 50 a second), within 10%;
//! - a limit set at runtime reaches a running worker, a lifted one lets it go; a limit per
//!   customer holds for each customer; the limits are listed with their author.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::controls::{Control, ControlKind, ControlLimit, Partition};
use formica::{JobContext, JobSpec, RawJob, Runtime};
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LEFT: &str = "select count(*) from graphile_worker._private_jobs";

/// A start seen by the task: when, its customer and its attempt.
type Starts = Arc<Mutex<Vec<(Instant, String, i16)>>>;

/// The longest lag seen from a job's lock (the fetch transaction's start, by the database
/// clock, on this machine) to its task's start, in milliseconds.
static LAG_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Options of a worker running task `r`: each job records its start and returns at once.
fn options(db: &TestDb, starts: &Starts) -> formica::WorkerOptions {
    let starts = starts.clone();
    db.worker_options().concurrency(10).poll_interval(Duration::from_millis(50)).define_raw_job(
        "r",
        move |ctx: JobContext, payload| {
            let customer = payload["customer"].as_str().unwrap_or_default().to_owned();
            starts.lock().unwrap().push((Instant::now(), customer, ctx.job().attempts));
            if let Some(locked_at) = ctx.job().locked_at {
                let lag = chrono::Utc::now() - locked_at;
                LAG_MS.fetch_max(lag.num_milliseconds(), std::sync::atomic::Ordering::Relaxed);
            }
            Box::pin(async { Ok(()) })
        },
    )
}

async fn add(db: &TestDb, n: usize, customers: usize) {
    let jobs: Vec<RawJob> = (0..n)
        .map(|i| RawJob::new("r", json!({ "customer": format!("k{}", i % customers) }), JobSpec::default()))
        .collect();
    for chunk in jobs.chunks(500) {
        db.utils().add_raw_jobs(chunk).await.unwrap();
    }
}

/// The most starts in any window `[t, t + period)` of these instants.
fn most_in_window(times: &[Instant], period: Duration) -> usize {
    let mut times = times.to_vec();
    times.sort();
    (0..times.len()).map(|i| times[i..].partition_point(|t| *t < times[i] + period)).max().unwrap_or_default()
}

async fn a_limit_of_50_per_second_holds_across_4_workers_over_2000_jobs(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let limit = Control::rate_limit("r", 50, 1_000);
    db.utils().set_control(&limit, Some("test")).await.unwrap();
    add(&db, 2000, 1).await;
    let starts: Starts = Arc::default();
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(Running::listening(&rt, options(&db, &starts)).await);
    }
    db.wait_for_count(LEFT, 0, Duration::from_secs(120)).await;
    for worker in workers {
        worker.stop(Duration::from_secs(10)).await;
    }
    let starts = starts.lock().unwrap().clone();
    assert_eq!(starts.len(), 2000, "every job ran once");
    assert!(starts.iter().all(|(_, _, attempt)| *attempt == 1), "a held-back job spent no attempt");
    let times: Vec<Instant> = starts.iter().map(|(at, _, _)| *at).collect();
    let most = most_in_window(&times, Duration::from_secs(1));
    let (first, last) = (times.iter().min().unwrap(), times.iter().max().unwrap());
    let drain = last.duration_since(*first).as_secs_f64();
    let lag = LAG_MS.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "at most {most} starts in a sliding second; drained in {drain:.2} s (39 s implied); lag <= {lag} ms"
    );
    assert!(most <= 50 + BURST, "{most} starts in one second, limit 50 + burst {BURST}");
    assert!((drain - 39.0).abs() <= 3.9, "drained in {drain:.2} s, 39 s implied");
    let limits = db.utils().controls().await.unwrap();
    assert_eq!((limits.len(), &limits[0].control, limits[0].set_by.as_str()), (1, &limit, "test"));
}

/// The burst over the limit documented for the tasks' own start times
/// (docs/guide/flow-control.md): the starts locked in the lag from lock to start before the
/// window, at most one period's worth while that lag is under the period.
const BURST: usize = 50;

async fn a_limit_set_and_lifted_at_runtime_reaches_a_running_worker(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let starts: Starts = Arc::default();
    let worker = Running::listening(&rt, options(&db, &starts)).await;
    let utils = db.utils();
    let limit = Control::rate_limit("r", 2, 60_000);
    utils.set_control(&limit, None).await.unwrap();
    formica_tests::sleep(rt.as_ref(), Duration::from_millis(300)).await;
    add(&db, 10, 1).await;
    formica_tests::sleep(rt.as_ref(), Duration::from_millis(1_000)).await;
    assert_eq!(starts.lock().unwrap().len(), 2, "the limit reached the running worker");
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs where attempts > 0").await, 0);
    assert!(utils.remove_control("r", ControlKind::RateLimit, None).await.unwrap());
    assert!(!utils.remove_control("r", ControlKind::RateLimit, None).await.unwrap(), "nothing left to lift");
    db.wait_for_count(LEFT, 0, Duration::from_secs(10)).await;
    assert_eq!(starts.lock().unwrap().len(), 10, "lifted, the rest ran");
    let zero = Control { limit: ControlLimit::Starts { max: 0, period_ms: 60_000 }, ..limit };
    assert!(
        matches!(utils.set_control(&zero, None).await, Err(formica::Error::Control(_))),
        "a limit of 0 would stop the task: pause it instead"
    );
    worker.stop(Duration::from_secs(10)).await;
}

async fn a_limit_per_customer_holds_for_each_customer(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let limit = Control::rate_limit("r", 3, 60_000).per(Partition::Field("customer".into()));
    db.utils().set_control(&limit, None).await.unwrap();
    add(&db, 50, 5).await;
    let starts: Starts = Arc::default();
    let workers = [
        Running::listening(&rt, options(&db, &starts)).await,
        Running::listening(&rt, options(&db, &starts)).await,
    ];
    db.wait_for_count(LEFT, 50 - 15, Duration::from_secs(10)).await;
    formica_tests::sleep(rt.as_ref(), Duration::from_millis(500)).await;
    assert_eq!(db.count(LEFT).await, 35, "3 starts per customer, no more");
    let starts = starts.lock().unwrap().clone();
    for customer in (0..5).map(|k| format!("k{k}")) {
        assert_eq!(starts.iter().filter(|(_, c, _)| *c == customer).count(), 3, "{customer}");
    }
    for worker in workers {
        worker.stop(Duration::from_secs(10)).await;
    }
}

/// A worker that polls every 5 s drains a limit of 2 a second at 2 a second: once a fetch
/// finds the limit full, it fetches again when its oldest start leaves the second, not at the
/// next poll (at whose pace the 12 jobs took 18.5 s).
async fn a_limit_of_2_per_second_drains_at_2_per_second_between_polls(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let limit = Control::rate_limit("r", 2, 1_000);
    db.utils().set_control(&limit, None).await.unwrap();
    add(&db, 12, 1).await;
    let starts: Starts = Arc::default();
    let worker = Running::listening(&rt, options(&db, &starts).poll_interval(Duration::from_secs(5))).await;
    db.wait_for_count(LEFT, 0, Duration::from_secs(60)).await;
    worker.stop(Duration::from_secs(10)).await;
    let times: Vec<Instant> = starts.lock().unwrap().iter().map(|(at, _, _)| *at).collect();
    let (first, last) = (times.iter().min().unwrap(), times.iter().max().unwrap());
    let drain = last.duration_since(*first).as_secs_f64();
    eprintln!("12 jobs at 2 a second drained in {drain:.2} s (5 s implied; at the poll's pace 18.5 s here)");
    assert_eq!(times.len(), 12, "every job ran once");
    assert!(most_in_window(&times, Duration::from_secs(1)) <= 2 + 2, "the limit holds");
    assert!((4.0..=10.0).contains(&drain), "drained in {drain:.2} s, 5 s implied");
}

formica_tests::on_both_runtimes!(
    a_limit_of_50_per_second_holds_across_4_workers_over_2000_jobs,
    a_limit_set_and_lifted_at_runtime_reaches_a_running_worker,
    a_limit_per_customer_holds_for_each_customer,
    a_limit_of_2_per_second_drains_at_2_per_second_between_polls,
    a_job_added_just_after_start_does_not_wait_a_period,
);

/// A job added just after a worker started starts at once when its task's rate limit has
/// room. Before records step 21 it was, about one run in five, locked by the worker's first
/// fetch yet left out of its answer (the fetch's names were read under a snapshot older
/// than its lock, which missed the task row the add made): it never started, and its start
/// counted against the limit for a period (so the next job waited that long).
async fn a_job_added_just_after_start_does_not_wait_a_period(rt: Arc<dyn Runtime>) {
    for run in 0..10 {
        let db = TestDb::migrated_on(rt.clone()).await;
        db.utils().set_control(&Control::rate_limit("r", 5, 3_000), None).await.unwrap();
        let starts: Starts = Arc::default();
        let options = options(&db, &starts).poll_interval(Duration::from_secs(10));
        let worker = Running::listening(&rt, options).await;
        let added = Instant::now();
        add(&db, 1, 1).await;
        db.wait_for_count(LEFT, 0, Duration::from_secs(5)).await;
        let waited = starts.lock().unwrap()[0].0.duration_since(added);
        worker.stop(Duration::from_secs(10)).await;
        assert!(waited < Duration::from_secs(1), "run {run}: waited {waited:?} with room in the limit");
    }
}
