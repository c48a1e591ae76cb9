//! Reliability on a real PostgreSQL: at-least-once execution when the database fails under
//! a running worker, and a worker that never goes silently idle.
//!
//! - database faults: the server restarted mid-run (a private cluster, see
//!   `formica_tests::cluster`), every backend of the worker terminated, connections that
//!   hang behind a proxy (`formica_tests::proxy`), a server that refuses new connections
//!   (its role's connection limit taken);
//! - liveness: a LISTEN connection that silently died, a flood of notifications, a task
//!   that never returns, and (ignored, long) memory over 200,000 jobs.
//!
//! Each run of a job is recorded in memory by the task, so a job that ran twice or never
//! is seen, and the jobs table must be empty at the end: no job lost, no completion
//! dropped.

use formica::{Event, JobContext, JobSpec, RawJob, Runtime, TaskResult};
use formica_tests::cluster::PrivateCluster;
use formica_tests::proxy::Proxy;
use formica_tests::{on_both_runtimes, sleep, wait_until, Running, TestDb};
use futures::future::BoxFuture;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Each job id and the instants its task started.
type Runs = Arc<Mutex<HashMap<i64, Vec<Instant>>>>;
/// The worker's events other than per-job ones, with when they happened.
type Events = Arc<Mutex<Vec<(Instant, Event)>>>;

/// A raw task that records its run, then sleeps `ms`.
fn recording_task(
    runs: &Runs,
    ms: u64,
) -> impl Fn(JobContext, serde_json::Value) -> BoxFuture<'static, TaskResult> + Send + Sync + 'static {
    let runs = runs.clone();
    move |ctx: JobContext, _| {
        let runs = runs.clone();
        Box::pin(async move {
            runs.lock().unwrap().entry(ctx.job().id).or_default().push(Instant::now());
            if ms > 0 {
                let rt = ctx.utils().pool().runtime().clone();
                sleep(rt.as_ref(), Duration::from_millis(ms)).await;
            }
            Ok(())
        })
    }
}

/// A hook keeping the worker's non-job events.
fn keep_events(events: &Events) -> impl Fn(&Event) + Send + Sync + 'static {
    let events = events.clone();
    move |e: &Event| {
        if matches!(
            e,
            Event::DatabaseError { .. } | Event::ListenerUp | Event::ListenerDown { .. } | Event::FetchEmpty
        ) {
            events.lock().unwrap().push((Instant::now(), e.clone()));
        }
    }
}

fn count_events(events: &Events, pick: impl Fn(&Event) -> bool) -> usize {
    events.lock().unwrap().iter().filter(|(_, e)| pick(e)).count()
}

fn distinct_runs(runs: &Runs) -> usize {
    runs.lock().unwrap().len()
}

/// How many times the listener came up.
fn listener_ups(events: &Events) -> usize {
    count_events(events, |e| matches!(e, Event::ListenerUp))
}

/// A worker from `options` with a task `count` that records its runs and then sleeps `ms`
/// (`recording_task`), and a hook keeping its events (`keep_events`), running.
async fn run_counting(
    rt: &Arc<dyn Runtime>,
    options: formica::WorkerOptions,
    ms: u64,
) -> (Runs, Events, Running) {
    let runs = Runs::default();
    let events = Events::default();
    let worker = options
        .define_raw_job("count", recording_task(&runs, ms))
        .on_event(keep_events(&events))
        .init()
        .await
        .expect("init");
    (runs, events, Running::spawn(rt, worker))
}

/// Wait until the listener of a worker started by `run_counting` is up.
async fn wait_for_listener(rt: &dyn Runtime, events: &Events) {
    wait_until(rt, Duration::from_secs(10), "the listener is up", || listener_ups(events) == 1).await
}

/// `n` jobs of task `task`, added in batches; their ids.
async fn add_jobs(utils: &formica::WorkerUtils, task: &str, n: usize) -> Vec<i64> {
    let jobs: Vec<RawJob> = (0..n)
        .map(|i| RawJob { identifier: task.into(), payload: json!({ "n": i }), spec: JobSpec::default() })
        .collect();
    let mut ids = Vec::with_capacity(n);
    for chunk in jobs.chunks(5_000) {
        ids.extend(utils.add_raw_jobs(chunk).await.expect("add jobs").iter().map(|j| j.id));
    }
    ids
}

/// The jobs of `ids` that never ran, and those that ran more than once with their runs.
fn lost_and_repeated(runs: &Runs, ids: &[i64]) -> (Vec<i64>, Vec<(i64, Vec<Instant>)>) {
    let runs = runs.lock().unwrap();
    let lost = ids.iter().copied().filter(|id| !runs.contains_key(id)).collect();
    let repeated = runs.iter().filter(|(_, r)| r.len() > 1).map(|(id, r)| (*id, r.clone())).collect();
    (lost, repeated)
}

/// Connect to `url` through the runtime, retrying while the server is coming back.
async fn client_for(rt: &dyn Runtime, url: &str) -> tokio_postgres::Client {
    let settings = formica::ConnectionSettings::parse(url).expect("valid connection string");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match formica::connect(rt, &settings).await {
            Ok(client) => return client,
            Err(e) => {
                assert!(Instant::now() < deadline, "cannot connect to {url}: {e}");
                sleep(rt, Duration::from_millis(100)).await;
            }
        }
    }
}

async fn count(rt: &dyn Runtime, url: &str, sql: &str) -> i64 {
    client_for(rt, url).await.query_one(sql, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio")
}

// ---------------------------------------------------------------------------------------
// 1a. The server restarts in the middle of a 20,000-job run.

#[test]
fn a_server_restart_mid_run_loses_no_job_and_listen_resumes() {
    let cluster = PrivateCluster::start();
    tokio_rt().block_on(server_restart(cluster, Arc::new(formica_tokio::TokioRuntime)));
}

async fn server_restart(cluster: PrivateCluster, rt: Arc<dyn Runtime>) {
    const JOBS: usize = 20_000;
    const CONCURRENCY: usize = 16;
    let url = cluster.url("postgres");
    let utils =
        formica::WorkerUtils::new(formica::Pool::from_url(rt.clone(), &url, 4).unwrap(), "graphile_worker");
    utils.migrate().await.expect("migrate");
    let ids = add_jobs(&utils, "count", JOBS).await;

    let options = formica::WorkerOptions::with_runtime(rt.clone())
        .database_url(&url)
        .concurrency(CONCURRENCY)
        .local_queue_size(64)
        .poll_interval(Duration::from_secs(2));
    let (runs, events, running) = run_counting(&rt, options, 3).await;
    let started = Instant::now();

    wait_until(rt.as_ref(), Duration::from_secs(60), "a quarter of the jobs ran", || {
        distinct_runs(&runs) >= JOBS / 4
    })
    .await;
    let stopping = Instant::now();
    let ran_before = distinct_runs(&runs);
    cluster.stop().expect("stop the server");
    let stopped = Instant::now();
    sleep(rt.as_ref(), Duration::from_secs(3)).await;
    let ran_while_down = distinct_runs(&runs) - ran_before;
    cluster.start_again().expect("start the server again");
    let restarted = Instant::now();
    println!(
        "{ran_before} jobs ran before the stop ({:?} in), the server was down {:?}, \
         {ran_while_down} started meanwhile (prefetched)",
        stopping - started,
        restarted - stopped
    );

    wait_until(rt.as_ref(), Duration::from_secs(90), "every job ran", || distinct_runs(&runs) >= JOBS).await;
    let all_ran = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = count(rt.as_ref(), &url, "select count(*) from graphile_worker.jobs").await;
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{left} jobs left in the table: completions were dropped");
        sleep(rt.as_ref(), Duration::from_millis(50)).await;
    }
    println!(
        "all {JOBS} ran {:?} after the restart; table empty {:?} after it; total {:?}",
        all_ran - restarted,
        restarted.elapsed(),
        started.elapsed()
    );

    // The outage was noticed and logged, and the listener came back with capped backoff.
    let database_errors = count_events(&events, |e| matches!(e, Event::DatabaseError { .. }));
    let downs: Vec<(Instant, chrono::DateTime<chrono::Utc>, String)> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(at, e)| match e {
            Event::ListenerDown { error, retry_at } => Some((*at, *retry_at, error.clone())),
            _ => None,
        })
        .collect();
    println!("{database_errors} database errors; listener down {} times: {:?}", downs.len(), downs.first());
    assert!(database_errors > 0, "the outage was reported as database errors");
    assert!(!downs.is_empty(), "the listener reported the outage");
    for (_, retry_at, _) in &downs {
        let wait = *retry_at - chrono::Utc::now();
        assert!(wait < chrono::Duration::seconds(61), "listener backoff is capped at 60 s: {wait}");
    }
    // The backoff grows (50 ms * e^failures): a few attempts in a 3 s outage, not one
    // every 100 ms.
    let attempts = downs.iter().filter(|(at, _, _)| *at > stopping && *at < restarted).count();
    assert!(attempts <= 8, "{attempts} listener reconnection attempts while the server was down: no backoff");
    let last_up = || {
        events.lock().unwrap().iter().rev().find(|(_, e)| matches!(e, Event::ListenerUp)).map(|(at, _)| *at)
    };
    // The jobs may all have run (by polling) before the backoff's next attempt is due: wait
    // for it, within the bound checked below. (`restarted` is when pg_ctl saw the server
    // up: the listener may be a little faster.)
    wait_until(
        rt.as_ref(),
        Duration::from_secs(30),
        "the listener connected again after the restart",
        || last_up().is_some_and(|at| at > stopped),
    )
    .await;
    let last_up = last_up().expect("listener up");
    assert!(
        last_up - restarted < Duration::from_secs(30),
        "reconnected {:?} after the restart",
        last_up - restarted
    );
    let listening = count(
        rt.as_ref(),
        &url,
        "select count(*) from pg_stat_activity where query ilike 'LISTEN%' and pid <> pg_backend_pid()",
    )
    .await;
    assert_eq!(listening, 1, "one LISTEN connection on the restarted server");
    // And it is used: new jobs run at once although the poll is 2 s.
    for _ in 0..3 {
        let before = Instant::now();
        let id = utils.add_raw_job("count", json!({}), JobSpec::default()).await.unwrap().id;
        wait_until(rt.as_ref(), Duration::from_secs(5), "a new job ran", || {
            runs.lock().unwrap().contains_key(&id)
        })
        .await;
        let latency = before.elapsed();
        assert!(latency < Duration::from_millis(700), "woken by NOTIFY, not the 2 s poll: {latency:?}");
    }

    running.stop(Duration::from_secs(20)).await;

    let (lost, repeated) = lost_and_repeated(&runs, &ids);
    assert!(lost.is_empty(), "{} jobs never ran: {:?}", lost.len(), &lost[..lost.len().min(10)]);
    println!("{} jobs ran twice", repeated.len());
    // A second run can only come from a job in flight when the server went away.
    for (id, starts) in &repeated {
        assert!(
            starts[0] > stopping - Duration::from_secs(2) && starts[0] < restarted + Duration::from_secs(2),
            "job {id} ran twice, first at {:?} after the start: not in the outage",
            starts[0] - started
        );
    }
    assert!(repeated.len() <= CONCURRENCY + 64, "at most the jobs in flight ran twice: {}", repeated.len());
    assert_eq!(count(rt.as_ref(), &url, "select count(*) from graphile_worker.jobs").await, 0);
}

// ---------------------------------------------------------------------------------------
// 1b. Every backend of the worker is terminated mid-run, twice.

async fn terminated_backends_lose_no_job(rt: Arc<dyn Runtime>) {
    const JOBS: usize = 10_000;
    let db = TestDb::migrated_on(rt.clone()).await;
    let ids = add_jobs(&db.utils(), "count", JOBS).await;
    let options =
        db.worker_options().concurrency(8).local_queue_size(32).poll_interval(Duration::from_millis(500));
    let (runs, events, running) = run_counting(&rt, options, 1).await;
    let admin = db.client().await;
    let kill = format!(
        "select count(pg_terminate_backend(pid)) from pg_stat_activity where datname = '{}' and pid <> pg_backend_pid()",
        db.name
    );
    let mut terminations = Vec::new();
    for fraction in [4, 2] {
        wait_until(rt.as_ref(), Duration::from_secs(60), "jobs ran", || {
            distinct_runs(&runs) >= JOBS / fraction
        })
        .await;
        let killed: i64 = admin.query_one(&kill, &[]).await.unwrap().get(0);
        assert!(killed >= 2, "the listener and pool connections were terminated ({killed})");
        terminations.push(Instant::now());
    }
    wait_until(rt.as_ref(), Duration::from_secs(60), "every job ran", || distinct_runs(&runs) >= JOBS).await;
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(60)).await;
    running.stop(Duration::from_secs(20)).await;

    let (lost, repeated) = lost_and_repeated(&runs, &ids);
    assert!(lost.is_empty(), "{} jobs never ran", lost.len());
    for (id, starts) in &repeated {
        assert!(
            terminations
                .iter()
                .any(|t| starts[0] > *t - Duration::from_secs(2) && starts[0] < *t + Duration::from_secs(2)),
            "job {id} ran twice, not around a termination"
        );
    }
    assert!(repeated.len() <= 2 * (8 + 32), "{} jobs ran twice", repeated.len());
    assert!(listener_ups(&events) >= 3, "the listener came back after each termination");
    println!(
        "{} ran twice, {} database errors",
        repeated.len(),
        count_events(&events, |e| matches!(e, Event::DatabaseError { .. }))
    );
}

// ---------------------------------------------------------------------------------------
// 1c. Connections that hang: a proxy that stops forwarding while keeping them open.

/// Worker options on `url` (which goes through a proxy).
fn options_on(rt: &Arc<dyn Runtime>, url: &str) -> formica::WorkerOptions {
    formica::WorkerOptions::<()>::with_runtime(rt.clone()).database_url(url).max_pool_size(4)
}

async fn hung_connections_are_given_up_and_the_worker_recovers(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let (proxy, url) = Proxy::in_front_of(&db.url);
    // A 2 s response timeout, from the connection string.
    let url = format!("{url} tcp_user_timeout=2");
    let options = options_on(&rt, &url).concurrency(4).poll_interval(Duration::from_millis(300));
    let (runs, events, running) = run_counting(&rt, options, 0).await;
    let utils = db.utils();
    let mut ids = add_jobs(&utils, "count", 20).await;
    wait_until(rt.as_ref(), Duration::from_secs(10), "the first jobs ran", || distinct_runs(&runs) == 20)
        .await;
    wait_for_listener(rt.as_ref(), &events).await;
    // Freeze only once the worker is idle and its pool has stopped growing: a connection
    // still being opened at the freeze would be forwarded, and the worker would not hang.
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    let settle_by = Instant::now() + Duration::from_secs(10);
    loop {
        let before = proxy.accepted();
        rt.sleep(Duration::from_secs(1)).await;
        if proxy.accepted() == before || Instant::now() > settle_by {
            break;
        }
    }

    // Every connection the worker has (pool and listener) now hangs.
    let frozen = proxy.freeze_all();
    assert!(frozen >= 2, "froze {frozen} connections");
    let froze_at = Instant::now();
    ids.extend(add_jobs(&utils, "count", 20).await);
    wait_until(rt.as_ref(), Duration::from_secs(20), "the jobs added after the hang ran", || {
        distinct_runs(&runs) == 40
    })
    .await;
    let recovered = froze_at.elapsed();
    println!("recovered from hung connections in {recovered:?}");
    assert!(recovered >= Duration::from_millis(1500), "the hung connection was waited on ({recovered:?})");
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    wait_until(rt.as_ref(), Duration::from_secs(15), "the hung listener is replaced", || {
        listener_ups(&events) >= 2
    })
    .await;
    let down = events
        .lock()
        .unwrap()
        .iter()
        .find_map(|(_, e)| match e {
            Event::ListenerDown { error, .. } => Some(error.clone()),
            _ => None,
        })
        .expect("the listener went down");
    assert!(
        down.contains("no response from PostgreSQL") || down.contains("did not answer a ping"),
        "the listener says why: {down}"
    );
    running.stop(Duration::from_secs(10)).await;
    let (lost, repeated) = lost_and_repeated(&runs, &ids);
    assert!(lost.is_empty() && repeated.is_empty(), "lost {lost:?}, repeated {repeated:?}");
    drop(proxy);
}

/// The negative control of the test above: with the response timeout off, a hung
/// connection stalls the worker (which is why it is on by default).
#[test]
fn without_a_response_timeout_a_hung_connection_stalls_the_worker() {
    tokio_rt().block_on(async {
        let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
        let db = TestDb::migrated_on(rt.clone()).await;
        let (proxy, url) = Proxy::in_front_of(&db.url);
        let pool = formica::Pool::from_url(rt.clone(), &url, 1).unwrap().response_timeout(None);
        let options = formica::WorkerOptions::with_runtime(rt.clone())
            .pool(pool)
            .poll_interval(Duration::from_millis(200));
        let (runs, _, running) = run_counting(&rt, options, 0).await;
        add_jobs(&db.utils(), "count", 1).await;
        wait_until(rt.as_ref(), Duration::from_secs(10), "the first job ran", || distinct_runs(&runs) == 1)
            .await;
        sleep(rt.as_ref(), Duration::from_millis(300)).await;
        proxy.freeze_all();
        add_jobs(&db.utils(), "count", 1).await;
        sleep(rt.as_ref(), Duration::from_secs(4)).await;
        assert_eq!(distinct_runs(&runs), 1, "stalled on the hung connection");
        // Cutting the connections (as the kernel would, much later) unblocks it.
        proxy.cut_all();
        wait_until(rt.as_ref(), Duration::from_secs(10), "the job ran", || distinct_runs(&runs) == 2).await;
        running.stop(Duration::from_secs(10)).await;
    });
}

/// A database that turns read-only under the worker (a failover to a server still in
/// recovery, say) refuses the completion with 25006. That passes, so the completion is
/// retried until the database takes it, rather than turned into a failure that would run
/// again a job that succeeded.
#[test]
fn a_completion_refused_while_the_database_is_read_only_is_retried_not_turned_into_a_failure() {
    tokio_rt().block_on(async {
        let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
        let db = TestDb::migrated_on(rt.clone()).await;
        let options = db.worker_options().poll_interval(Duration::from_millis(300));
        let (runs, events, running) = run_counting(&rt, options, 1500).await;
        let ids = add_jobs(&db.utils(), "count", 1).await;
        wait_until(rt.as_ref(), Duration::from_secs(10), "the job started", || distinct_runs(&runs) == 1).await;
        // New sessions are read-only, and the worker's sessions are cut, so it opens new ones.
        let admin = db.client().await;
        let cut = format!(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity where datname = '{}' and pid <> pg_backend_pid()",
            db.name
        );
        admin.batch_execute(&format!("alter database {} set default_transaction_read_only = on", db.name)).await.unwrap();
        admin.query_one(&cut, &[]).await.unwrap();
        let refused = |events: &Events| {
            count_events(events, |e| matches!(e, Event::DatabaseError { statement, error } if *statement == "complete jobs" && error.contains("read-only")))
        };
        wait_until(rt.as_ref(), Duration::from_secs(15), "the completion is refused", || refused(&events) > 0).await;
        let (locked, last_error): (bool, Option<String>) = {
            let row = admin
                .query_one("select locked_by is not null, last_error from graphile_worker.jobs where id = $1", &[&ids[0]])
                .await
                .unwrap();
            (row.get(0), row.get(1))
        };
        assert_eq!((locked, last_error), (true, None), "still the worker's, and not failed");
        admin.batch_execute(&format!("alter database {} reset default_transaction_read_only", db.name)).await.unwrap();
        admin.query_one(&cut, &[]).await.unwrap();
        db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(30)).await;
        running.stop(Duration::from_secs(10)).await;
        let runs = runs.lock().unwrap().get(&ids[0]).map_or(0, Vec::len);
        assert_eq!(runs, 1, "completed once the database took writes again, never run twice");
    });
}

// ---------------------------------------------------------------------------------------
// 3. Liveness.

async fn a_silently_dead_listen_connection_is_covered_by_polling_then_replaced(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let (proxy, url) = Proxy::in_front_of(&db.url);
    let url = format!("{url} tcp_user_timeout=3");
    let options = options_on(&rt, &url).poll_interval(Duration::from_millis(400));
    let (runs, events, running) = run_counting(&rt, options, 0).await;
    wait_for_listener(rt.as_ref(), &events).await;
    sleep(rt.as_ref(), Duration::from_millis(200)).await;
    assert_eq!(proxy.freeze_where_client_said(b"LISTEN"), 1, "the LISTEN connection");
    let froze_at = Instant::now();
    // The worker still believes it is listening; polling finds the jobs.
    let utils = db.utils();
    for n in 1..=2 {
        let added = Instant::now();
        add_jobs(&utils, "count", 1).await;
        wait_until(rt.as_ref(), Duration::from_secs(2), "a job ran by polling", || distinct_runs(&runs) == n)
            .await;
        println!("job {n} ran {:?} after it was added, by polling", added.elapsed());
    }
    assert_eq!(
        count_events(&events, |e| matches!(e, Event::ListenerDown { .. })),
        0,
        "the dead listener was not noticed yet: the jobs ran by polling"
    );
    wait_until(rt.as_ref(), Duration::from_secs(15), "the dead listener is replaced", || {
        listener_ups(&events) == 2
    })
    .await;
    println!("dead LISTEN connection replaced {:?} after it froze", froze_at.elapsed());
    // Ping interval (3 s) + response timeout (3 s) + reconnection, with room for a busy machine.
    assert!(froze_at.elapsed() < Duration::from_secs(10), "within ping interval + timeout");
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0);
}

async fn a_flood_of_notifications_does_not_starve_task_completion(rt: Arc<dyn Runtime>) {
    const JOBS: usize = 400;
    let db = TestDb::migrated_on(rt.clone()).await;
    let (runs, events, running) = run_counting(&rt, db.worker_options().concurrency(4), 5).await;
    wait_for_listener(rt.as_ref(), &events).await;
    let ids = add_jobs(&db.utils(), "count", JOBS).await;
    let start = Instant::now();
    // 10,000 distinct notifications (identical ones in a transaction would be merged).
    let client = db.client().await;
    for batch in 0..10 {
        client
            .batch_execute(&format!(
                "select pg_notify('jobs:insert', json_build_object('count', 1, 'n', {batch} * 1000 + i)::text) \
                 from generate_series(1, 1000) i"
            ))
            .await
            .unwrap();
    }
    let flooded = start.elapsed();
    wait_until(rt.as_ref(), Duration::from_secs(30), "every job ran during the flood", || {
        distinct_runs(&runs) == JOBS
    })
    .await;
    let took = start.elapsed();
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    let empty_fetches = count_events(&events, |e| matches!(e, Event::FetchEmpty));
    println!("10,000 notifications sent in {flooded:?}; {JOBS} jobs of 5 ms on 4 slots took {took:?}; {empty_fetches} empty fetches");
    // 400 jobs of 5 ms on 4 slots need 0.5 s of task time.
    assert!(took < Duration::from_secs(10), "completions were starved: {took:?}");
    assert!(empty_fetches < 200, "notifications are coalesced into few fetches: {empty_fetches}");
    running.stop(Duration::from_secs(10)).await;
    let (lost, repeated) = lost_and_repeated(&runs, &ids);
    assert!(lost.is_empty() && repeated.is_empty());
}

async fn a_task_that_never_returns_does_not_block_other_slots(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let stuck =
        utils.add_raw_job("forever", json!({}), JobSpec::builder().priority(-1).build()).await.unwrap();
    let starts = Arc::new(AtomicUsize::new(0));
    let started = starts.clone();
    let options = db
        .worker_options()
        .concurrency(3)
        .poll_interval(Duration::from_millis(100))
        .graceful_shutdown_timeout(Duration::from_millis(300))
        .define_raw_job("forever", move |_, _| {
            started.fetch_add(1, Ordering::SeqCst);
            async move {
                futures::future::pending::<()>().await;
                Ok(())
            }
        });
    let (runs, _, running) = run_counting(&rt, options, 2).await;
    let worker_id = running.worker_id().to_owned();
    wait_until(rt.as_ref(), Duration::from_secs(10), "the stuck task started", || {
        starts.load(Ordering::SeqCst) == 1
    })
    .await;
    let ids = add_jobs(&utils, "count", 200).await;
    wait_until(rt.as_ref(), Duration::from_secs(20), "the other jobs ran on the other slots", || {
        distinct_runs(&runs) == 200
    })
    .await;
    // Many polls later, the stuck job is still held and was never started again.
    sleep(rt.as_ref(), Duration::from_millis(500)).await;
    assert_eq!(starts.load(Ordering::SeqCst), 1, "a locked job is not run twice");
    let row = db
        .client()
        .await
        .query_one(
            "select locked_by, attempts from graphile_worker._private_jobs where id = $1",
            &[&stuck.id],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, Option<String>>(0), row.get::<_, i16>(1)), (Some(worker_id), 1));
    // (It stops despite the stuck task.)
    running.stop(Duration::from_secs(10)).await;
    let row = db
        .client()
        .await
        .query_one(
            "select locked_by is null, attempts from graphile_worker._private_jobs where id = $1",
            &[&stuck.id],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, bool>(0), row.get::<_, i16>(1)), (true, 0), "aborted and given back");
    let (lost, repeated) = lost_and_repeated(&runs, &ids);
    assert!(lost.is_empty() && repeated.is_empty());
}

/// A statement given up on (it owed a response for the response timeout: here it waits on
/// a row lock another session holds) is cancelled on the server too: no backend is left
/// waiting for the lock, holding a connection.
async fn a_statement_given_up_on_is_cancelled_on_the_server(rt: Arc<dyn Runtime>) {
    let db = TestDb::new_on(rt.clone()).await;
    let holder = db.client().await;
    holder.batch_execute("create table t (id int primary key); insert into t values (1)").await.unwrap();
    holder.batch_execute("begin; select * from t for update").await.unwrap();
    let url = format!("{} application_name=given_up", db.url);
    let pool =
        formica::Pool::from_url(rt.clone(), &url, 1).unwrap().response_timeout(Some(Duration::from_secs(2)));
    let client = pool.get().await.unwrap();
    let error = client.execute("update t set id = id where id = 1", &[]).await.expect_err("given up");
    assert!(client.is_closed(), "the connection is closed: {error:?}");
    drop(client);
    db.wait_for_count(
        "select count(*) from pg_stat_activity where application_name = 'given_up' and datname = current_database()",
        0,
        Duration::from_secs(10),
    )
    .await;
    holder.batch_execute("commit").await.unwrap();
}

// ---------------------------------------------------------------------------------------
// 1e. The server refuses new connections after the worker started (SQLSTATE 53300).

/// The worker's role may open no more connections (its `CONNECTION LIMIT` is taken by
/// connections held elsewhere, as `max_connections` is by other clients), and its own are
/// terminated: it stays up, retrying with backoff (its pool, listener and lease keeper), its
/// lease said lapsing, not silently; once connections are released it runs the jobs added
/// meanwhile, and stops cleanly. A worker that meets the limit as it starts stops with an
/// error that says what to change.
async fn a_worker_refused_new_connections_after_start_stays_up_and_runs_jobs_once_released(
    rt: Arc<dyn Runtime>,
) {
    let db = TestDb::new_on(rt.clone()).await;
    let role = format!("{}_limited", db.name);
    let admin = db.client().await;
    admin
        .batch_execute(&format!("create role {role} login; grant create on database {} to {role}", db.name))
        .await
        .unwrap();
    let url = format!("{} user={role}", db.url.split(" user=").next().unwrap());
    let pool = formica::Pool::from_url(rt.clone(), &url, 2).unwrap();
    formica::WorkerUtils::new(pool, "graphile_worker").migrate().await.expect("migrate as the role");
    let options = formica::WorkerOptions::<()>::with_runtime(rt.clone())
        .database_url(&url)
        .max_pool_size(4)
        .poll_interval(Duration::from_millis(200));
    let lease_events = Events::default();
    let seen = lease_events.clone();
    let options = options.on_event(move |e| {
        if matches!(e, Event::LeaseLapsing | Event::LeaseRenewed) {
            seen.lock().unwrap().push((Instant::now(), e.clone()));
        }
    });
    let (runs, events, running) = run_counting(&rt, options, 0).await;
    wait_for_listener(rt.as_ref(), &events).await;
    add_jobs(&db.utils(), "count", 5).await;
    wait_until(rt.as_ref(), Duration::from_secs(10), "jobs ran", || distinct_runs(&runs) == 5).await;

    // Connections of the role held elsewhere take its limit; the worker's are terminated.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(formica_tests::connect(rt.as_ref(), &url).await);
    }
    admin.batch_execute(&format!("alter role {role} connection limit 3")).await.unwrap();
    let terminate = format!(
        "select count(pg_terminate_backend(pid)) from pg_stat_activity where usename = '{role}' \
         and pid <> all($1::int[])"
    );
    let mut pids = Vec::new();
    for client in &held {
        pids.push(client.query_one("select pg_backend_pid()", &[]).await.unwrap().get::<_, i32>(0));
    }
    let killed: i64 = admin.query_one(&terminate, &[&pids]).await.unwrap().get(0);
    assert!(killed >= 2, "the worker's connections were terminated ({killed})");
    let ids = add_jobs(&db.utils(), "count", 20).await;
    // Longer than the lease: its heartbeats are refused too.
    sleep(rt.as_ref(), formica::LEASE.to_std().unwrap() + Duration::from_secs(3)).await;
    let refused = count_events(
        &events,
        |e| matches!(e, Event::DatabaseError { error, .. } if error.contains("too many connections")),
    );
    assert!(refused >= 1, "the refusals were reported: {:?}", events.lock().unwrap());
    assert_eq!(distinct_runs(&runs), 5, "nothing ran without a connection");
    let lapsing = count_events(&lease_events, |e| matches!(e, Event::LeaseLapsing));
    assert_eq!(lapsing, 1, "the lease was said lapsing: {:?}", lease_events.lock().unwrap());

    // Released: the held connections close and the limit no longer binds (under a limit the
    // worker's pool cannot reach, its writes would back off up to 25.6 s between tries).
    drop(held);
    admin.batch_execute(&format!("alter role {role} connection limit -1")).await.unwrap();
    wait_until(rt.as_ref(), Duration::from_secs(30), "the jobs added meanwhile ran", || {
        distinct_runs(&runs) == 25
    })
    .await;
    let renewed = count_events(&lease_events, |e| matches!(e, Event::LeaseRenewed));
    assert_eq!(renewed, 1, "the lease was renewed: {:?}", lease_events.lock().unwrap());
    running.stop(Duration::from_secs(20)).await;
    let (lost, repeated) = lost_and_repeated(&runs, &ids);
    assert!(lost.is_empty() && repeated.is_empty(), "lost {lost:?}, repeated {repeated:?}");
    // A start that meets the limit stops, saying why and what to change.
    admin.batch_execute(&format!("alter role {role} connection limit 0")).await.unwrap();
    let start = formica::WorkerOptions::<()>::with_runtime(rt.clone())
        .database_url(&url)
        .define_raw_job("count", |_, _| async { Ok(()) })
        .init()
        .await;
    let error = start.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        error.contains("SQLSTATE 53300")
            && error.contains("no connection left")
            && error.contains("max_pool_size"),
        "{error}"
    );
    let _ = admin
        .batch_execute(&format!("drop owned by {role}; drop schema if exists graphile_worker cascade"))
        .await;
    let server = formica_tests::connect(
        rt.as_ref(),
        &db.url.replace(&format!("dbname={}", db.name), "dbname=postgres"),
    )
    .await;
    let _ = server
        .batch_execute(&format!("revoke all on database {} from {role}; drop role {role}", db.name))
        .await;
}

on_both_runtimes!(
    terminated_backends_lose_no_job,
    hung_connections_are_given_up_and_the_worker_recovers,
    a_silently_dead_listen_connection_is_covered_by_polling_then_replaced,
    a_flood_of_notifications_does_not_starve_task_completion,
    a_task_that_never_returns_does_not_block_other_slots,
    a_statement_given_up_on_is_cancelled_on_the_server,
    a_worker_refused_new_connections_after_start_stays_up_and_runs_jobs_once_released,
);

// ---------------------------------------------------------------------------------------
// Memory over 200,000 jobs (long: `cargo test ... -- --ignored`).

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "long: 200,000 jobs"]
fn memory_stays_bounded_while_200k_jobs_pass_through() {
    tokio_rt().block_on(async {
        const JOBS: usize = 200_000;
        const BATCH: usize = 20_000;
        let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
        let db = TestDb::migrated_on(rt.clone()).await;
        let done_count = Arc::new(AtomicUsize::new(0));
        let counter = done_count.clone();
        let worker = db
            .worker_options()
            .concurrency(16)
            .local_queue_size(100)
            .define_raw_job("count", move |_, _| {
                counter.fetch_add(1, Ordering::Relaxed);
                async { Ok(()) }
            })
            .init()
            .await
            .unwrap();
        let running = Running::spawn(&rt, worker);
        let utils = db.utils();
        let start = Instant::now();
        let mut samples = Vec::new();
        for batch in 0..JOBS / BATCH {
            add_jobs(&utils, "count", BATCH).await;
            let want = (batch + 1) * BATCH;
            wait_until(rt.as_ref(), Duration::from_secs(300), "the batch ran", || {
                done_count.load(Ordering::Relaxed) >= want
            })
            .await;
            let rss = status_kib("VmRSS:");
            samples.push(rss);
            println!("{want:>7} jobs done after {:>6.1?}: RSS {} MiB", start.elapsed(), rss / 1024);
        }
        db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(60)).await;
        running.stop(Duration::from_secs(10)).await;
        let peak = status_kib("VmHWM:");
        println!(
            "{JOBS} jobs in {:?} ({:.0}/s); peak RSS (VmHWM) {} MiB",
            start.elapsed(),
            JOBS as f64 / start.elapsed().as_secs_f64(),
            peak / 1024
        );
        let early = samples[1];
        let late = *samples.last().unwrap();
        assert!(
            late < early + 32 * 1024,
            "RSS grew from {early} KiB after 40k jobs to {late} KiB after 200k"
        );
        assert!(peak < 512 * 1024, "peak RSS {peak} KiB");
    });
}
