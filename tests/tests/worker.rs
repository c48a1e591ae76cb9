//! The worker's behaviour on a real PostgreSQL, on both runtimes: every test runs once on
//! tokio and once on async-std (`on_both_runtimes!`), asserting outcomes in the database
//! and in the calls the tasks received.

use formica::{Event, JobContext, JobSpec, Runtime, TaskResult};
use formica_tests::{numbered_job, on_both_runtimes, sleep, timeout, wait_until, Running, TestDb, Typed};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Log = Arc<Mutex<Vec<String>>>;

/// A raw task that appends `<label><payload.n>` to `log` and sleeps `payload.ms`.
fn recorder(
    log: &Log,
    label: &'static str,
) -> impl Fn(JobContext, serde_json::Value) -> futures::future::BoxFuture<'static, TaskResult>
       + Send
       + Sync
       + 'static {
    let log = log.clone();
    move |ctx: JobContext, payload: serde_json::Value| {
        let log = log.clone();
        Box::pin(async move {
            let n = payload["n"].as_i64().unwrap_or(-1);
            log.lock().unwrap().push(format!("{label}{n}"));
            if let Some(ms) = payload["ms"].as_u64() {
                let rt = ctx.utils().pool().runtime().clone();
                sleep(rt.as_ref(), Duration::from_millis(ms)).await;
            }
            log.lock().unwrap().push(format!("{label}{n}!"));
            Ok(())
        })
    }
}

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// How long after `add_job` a worker of `options`, idle with its listener up and an hour's
/// poll, took to complete a `hello` job; and what the task logged.
async fn one_notified_job(
    rt: &Arc<dyn Runtime>,
    db: &TestDb,
    options: formica::WorkerOptions,
) -> (Duration, Vec<String>) {
    let log: Log = Default::default();
    let empty = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = empty.clone();
    let options = options
        .poll_interval(Duration::from_secs(3600))
        .define_raw_job("hello", recorder(&log, "hello"))
        .on_event(move |event| {
            if matches!(event, formica::Event::FetchEmpty) {
                seen.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
    let running = Running::listening(rt, options).await;
    // Once the first (empty) fetch is answered the worker is idle, waiting on an hour's poll
    // (a job announced while that fetch is out is not what this measures).
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(10), "the first fetch was answered", || {
        empty.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    let start = Instant::now();
    db.client().await.batch_execute("select graphile_worker.add_job('hello', '{\"n\": 1}')").await.unwrap();
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    let latency = start.elapsed();
    running.stop(Duration::from_secs(10)).await;
    (latency, entries(&log))
}

async fn listen_notify_runs_a_job_within_milliseconds(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let (latency, log) = one_notified_job(&rt, &db, db.worker_options()).await;
    println!("add_job -> completed: {latency:?}");
    assert!(latency < Duration::from_secs(1), "took {latency:?}: not woken by NOTIFY");
    assert_eq!(log, vec!["hello1", "hello1!"]);
}

/// The local queue's refetch delay reaches the worker: after its first (empty) fetch, a
/// job announced by NOTIFY waits for the hold (1.5 to 4.5 s of a 3 s delay) instead of
/// starting within milliseconds; with an abort threshold of one job, the notification ends
/// the hold and the job starts at once. A delay longer than the poll interval fails `init`.
async fn the_refetch_delay_holds_fetches_after_a_short_one_unless_enough_jobs_are_announced(
    rt: Arc<dyn Runtime>,
) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let delay = |max_abort_threshold| formica::RefetchDelay {
        duration: chrono::Duration::seconds(3),
        threshold: 0,
        max_abort_threshold,
    };
    let too_long =
        db.worker_options().poll_interval(Duration::from_secs(1)).local_queue_refetch_delay(delay(0));
    match too_long.init().await {
        Err(formica::Error::Options(message)) => {
            assert!(message.starts_with("refetch_delay is 3s"), "{message}")
        }
        Err(other) => panic!("not refused as an option: {other}"),
        Ok(_) => panic!("a delay longer than the poll interval was accepted"),
    }
    let options =
        |max_abort_threshold| db.worker_options().local_queue_refetch_delay(delay(max_abort_threshold));
    let (latency, log) = one_notified_job(&rt, &db, options(0)).await;
    assert!(latency >= Duration::from_millis(1000), "not held: {latency:?}");
    assert_eq!(log, vec!["hello1", "hello1!"]);
    let (latency, log) = one_notified_job(&rt, &db, options(1)).await;
    assert!(latency < Duration::from_millis(1000), "the announced job did not end the hold: {latency:?}");
    assert_eq!(log, vec!["hello1", "hello1!"]);
}

async fn run_once_runs_due_jobs_in_priority_then_run_at_order(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let log: Log = Default::default();
    let base = chrono::Utc::now() - chrono::Duration::minutes(10);
    for (n, priority, minutes) in [(1, 5, 0), (2, 0, 3), (3, 0, 1), (4, -1, 9), (5, 0, 2)] {
        let spec =
            JobSpec::builder().priority(priority).run_at(base + chrono::Duration::minutes(minutes)).build();
        utils.add_raw_job("ordered", json!({ "n": n }), spec).await.unwrap();
    }
    let future = JobSpec::builder().run_at(chrono::Utc::now() + chrono::Duration::hours(1)).build();
    utils.add_raw_job("ordered", json!({ "n": 99 }), future).await.unwrap();
    utils.add_raw_job("unknown_task", json!({}), JobSpec::default()).await.unwrap();

    let worker = db
        .worker_options()
        .concurrency(1)
        .define_raw_job("ordered", recorder(&log, ""))
        .init()
        .await
        .unwrap();
    timeout(rt.as_ref(), Duration::from_secs(20), worker.run_once())
        .await
        .expect("run_once returns")
        .expect("ok");
    let starts: Vec<String> = entries(&log).into_iter().filter(|e| !e.ends_with('!')).collect();
    assert_eq!(starts, vec!["4", "3", "5", "2", "1"], "priority first, then run_at");
    let left: Vec<(String, i16)> = db
        .client()
        .await
        .query("select task_identifier, attempts from graphile_worker.jobs order by id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        left,
        vec![("ordered".into(), 0), ("unknown_task".into(), 0)],
        "future and unknown jobs untouched"
    );
}

async fn typed_tasks_get_their_payload_and_a_database_client(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    db.client().await.batch_execute("create table ran (n int, job_id bigint)").await.unwrap();
    let utils = db.utils();
    utils.add_job(&Typed { n: 7 }, JobSpec::default()).await.unwrap();
    let bad = utils.add_raw_job("typed", json!({"n": "not a number"}), JobSpec::default()).await.unwrap();
    utils.add_job(&Typed { n: 8 }, JobSpec::default()).await.unwrap();
    let worker = db.worker_options().concurrency(2).define_job::<Typed>().init().await.unwrap();
    timeout(rt.as_ref(), Duration::from_secs(20), worker.run_once()).await.expect("returns").expect("ok");
    assert_eq!(db.count("select count(*) from ran where n in (7, 8)").await, 2);
    let row = db
        .client()
        .await
        .query_one("select attempts, last_error from graphile_worker.jobs where id = $1", &[&bad.id])
        .await
        .unwrap();
    assert_eq!(row.get::<_, i16>(0), 1);
    let error: String = row.get(1);
    assert!(error.contains("payload does not match task \"typed\""), "{error}");
}

async fn a_failing_task_is_retried_with_backoff_and_fails_for_good_at_max_attempts(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let retry = utils
        .add_raw_job("fails", json!({"n": 1}), JobSpec::builder().max_attempts(3).build())
        .await
        .unwrap();
    let last = utils
        .add_raw_job("fails", json!({"n": 2}), JobSpec::builder().max_attempts(1).build())
        .await
        .unwrap();
    let panics = utils.add_raw_job("panics", json!({}), JobSpec::default()).await.unwrap();
    let ok = utils.add_raw_job("ok", json!({}), JobSpec::default()).await.unwrap();
    let failed_events = Arc::new(Mutex::new(Vec::new()));
    let seen = failed_events.clone();
    let before = chrono::Utc::now();
    let worker = db
        .worker_options()
        .concurrency(4)
        .define_raw_job("fails", |_, payload| async move { Err(format!("boom {}", payload["n"]).into()) })
        .define_raw_job("panics", |_, _| async move {
            if true {
                panic!("kaboom");
            }
            Ok(())
        })
        .define_raw_job("ok", |_, _| async move { Ok(()) })
        .on_event(move |e| {
            if let Event::JobPermanentlyFailed { job_id, .. } = e {
                seen.lock().unwrap().push(*job_id);
            }
        })
        .init()
        .await
        .unwrap();
    timeout(rt.as_ref(), Duration::from_secs(20), worker.run_once()).await.expect("returns").expect("ok");
    let after = chrono::Utc::now();
    let client = db.client().await;
    let get = |id: i64| {
        let client = &client;
        async move {
            client
                .query_one("select attempts, last_error, run_at, locked_at is null from graphile_worker._private_jobs where id = $1", &[&id])
                .await
                .unwrap()
        }
    };
    let r = get(retry.id).await;
    assert_eq!(
        (r.get::<_, i16>(0), r.get::<_, Option<String>>(1).as_deref(), r.get::<_, bool>(3)),
        (1, Some("boom 1"), true)
    );
    let run_at: chrono::DateTime<chrono::Utc> = r.get(2);
    let e1 = chrono::Duration::milliseconds(2718);
    assert!(
        run_at >= before + e1 - chrono::Duration::milliseconds(50) && run_at <= after + e1,
        "run_at {run_at} is ~e^1 s later"
    );
    let r = get(last.id).await;
    assert_eq!((r.get::<_, i16>(0), r.get::<_, Option<String>>(1).as_deref()), (1, Some("boom 2")));
    assert_eq!(
        *failed_events.lock().unwrap(),
        vec![last.id],
        "permanent failure reported once, for the job out of attempts"
    );
    let r = get(panics.id).await;
    let message: String = r.get(1);
    assert!(message.contains("kaboom"), "{message}");
    assert_eq!(
        db.count(&format!("select count(*) from graphile_worker.jobs where id = {}", ok.id)).await,
        0,
        "the worker went on"
    );
}

async fn named_queues_run_one_at_a_time_in_order_others_in_parallel(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    for n in 0..8 {
        utils
            .add_raw_job("serial", json!({ "n": n, "ms": 20 }), JobSpec::builder().queue_name("q").build())
            .await
            .unwrap();
    }
    for n in 0..8 {
        utils.add_raw_job("parallel", json!({ "n": n, "ms": 200 }), JobSpec::default()).await.unwrap();
    }
    let log: Log = Default::default();
    let worker = db
        .worker_options()
        .concurrency(10)
        .local_queue_size(50)
        .define_raw_job("serial", recorder(&log, "s"))
        .define_raw_job("parallel", recorder(&log, "p"))
        .init()
        .await
        .unwrap();
    let start = Instant::now();
    timeout(rt.as_ref(), Duration::from_secs(30), worker.run_once()).await.expect("returns").expect("ok");
    let elapsed = start.elapsed();
    let log = entries(&log);
    let serial: Vec<&String> = log.iter().filter(|e| e.starts_with('s')).collect();
    let expected: Vec<String> = (0..8).flat_map(|n| [format!("s{n}"), format!("s{n}!")]).collect();
    assert_eq!(serial, expected.iter().collect::<Vec<_>>(), "queue jobs never overlap and keep their order");
    assert!(elapsed < Duration::from_millis(1200), "8 parallel jobs of 200 ms took {elapsed:?}");
    let mut open = 0;
    let mut most = 0;
    for e in log.iter().filter(|e| e.starts_with('p')) {
        open += if e.ends_with('!') { -1 } else { 1 };
        most = most.max(open);
    }
    assert!(most > 1, "jobs without a queue overlapped (at most {most} at once)");
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0);
}

async fn forbidden_flags_skip_jobs_and_a_flags_function_is_asked_before_each_fetch(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    utils.add_raw_job("t", json!({"n": 1}), JobSpec::builder().flags(["slow"]).build()).await.unwrap();
    utils.add_raw_job("t", json!({"n": 2}), JobSpec::builder().flags(["fast"]).build()).await.unwrap();
    utils.add_raw_job("t", json!({"n": 3}), JobSpec::default()).await.unwrap();
    let log: Log = Default::default();
    let worker = db
        .worker_options()
        .forbidden_flags(["slow"])
        .define_raw_job("t", recorder(&log, ""))
        .init()
        .await
        .unwrap();
    timeout(rt.as_ref(), Duration::from_secs(20), worker.run_once()).await.expect("returns").expect("ok");
    let mut ran: Vec<String> = entries(&log).into_iter().filter(|e| !e.ends_with('!')).collect();
    ran.sort();
    assert_eq!(ran, vec!["2", "3"], "the job flagged slow was skipped");

    // A function: refuses "slow" at first, then nothing; each fetch asks it again.
    let asked = Arc::new(Mutex::new(0));
    let counter = asked.clone();
    let log2: Log = Default::default();
    let worker = db
        .worker_options()
        .concurrency(1)
        .poll_interval(Duration::from_millis(50))
        .forbidden_flags_fn(move || {
            let counter = counter.clone();
            async move {
                let mut n = counter.lock().unwrap();
                *n += 1;
                if *n <= 2 {
                    vec!["slow".to_owned()]
                } else {
                    vec![]
                }
            }
        })
        .define_raw_job("t", recorder(&log2, ""))
        .init()
        .await
        .unwrap();
    let running = Running::spawn(&rt, worker);
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    running.stop(Duration::from_secs(10)).await;
    assert!(*asked.lock().unwrap() >= 3, "asked before each fetch");
    assert_eq!(entries(&log2), vec!["1", "1!"]);
}

async fn the_worker_reconnects_its_listener_and_polls_meanwhile(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let ups = Arc::new(Mutex::new(0));
    let counter = ups.clone();
    let log: Log = Default::default();
    let worker = db
        .worker_options()
        .poll_interval(Duration::from_millis(200))
        .define_raw_job("t", recorder(&log, ""))
        .on_event(move |e| {
            if matches!(e, Event::ListenerUp) {
                *counter.lock().unwrap() += 1;
            }
        })
        .init()
        .await
        .unwrap();
    let running = Running::spawn(&rt, worker);
    wait_until(rt.as_ref(), Duration::from_secs(10), "the listener came up", || *ups.lock().unwrap() > 0)
        .await;
    let killed = db
        .count(&format!(
            "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity
               where datname = '{}' and query ilike 'LISTEN%') t",
            db.name
        ))
        .await;
    assert_eq!(killed, 1, "one LISTEN backend");
    db.utils().add_raw_job("t", json!({"n": 1}), JobSpec::default()).await.unwrap();
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    wait_until(rt.as_ref(), Duration::from_secs(10), "the listener reconnected", || {
        *ups.lock().unwrap() >= 2
    })
    .await;
    // Listening again: a new job runs at once although the poll is slow... and it is.
    db.utils().add_raw_job("t", json!({"n": 2}), JobSpec::default()).await.unwrap();
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(entries(&log), vec!["1", "1!", "2", "2!"]);
}

async fn graceful_shutdown_waits_for_running_tasks_and_returns_prefetched_jobs(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let slow = utils
        .add_raw_job("slow", json!({"n": 0, "ms": 500}), JobSpec::builder().priority(-1).build())
        .await
        .unwrap();
    for n in 1..=5 {
        utils.add_raw_job("slow", json!({ "n": n, "ms": 500 }), JobSpec::default()).await.unwrap();
    }
    let log: Log = Default::default();
    let worker = db
        .worker_options()
        .concurrency(1)
        .local_queue_size(10)
        .define_raw_job("slow", recorder(&log, ""))
        .init()
        .await
        .unwrap();
    let running = Running::spawn(&rt, worker);
    wait_until(rt.as_ref(), Duration::from_secs(10), "the first job started", || !entries(&log).is_empty())
        .await;
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(entries(&log), vec!["0", "0!"], "the running job finished; no new one started");
    assert_eq!(
        db.count(&format!("select count(*) from graphile_worker.jobs where id = {}", slow.id)).await,
        0
    );
    assert_eq!(
        db.count("select count(*) from graphile_worker.jobs where attempts = 0 and locked_at is null").await,
        5,
        "prefetched jobs are back, unlocked, attempt refunded"
    );
}

async fn forced_shutdown_aborts_tasks_after_the_timeout_and_returns_their_jobs(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let job = db
        .utils()
        .add_raw_job("forever", json!({}), JobSpec::builder().queue_name("q").build())
        .await
        .unwrap();
    let (started_tx, started_rx) = futures::channel::oneshot::channel::<()>();
    let started_tx = Arc::new(Mutex::new(Some(started_tx)));
    let signal: Arc<Mutex<Option<formica::AbortSignal>>> = Default::default();
    let seen = signal.clone();
    let worker = db
        .worker_options()
        .graceful_shutdown_timeout(Duration::from_millis(300))
        .define_raw_job("forever", move |ctx, _| {
            let started = started_tx.lock().unwrap().take();
            let seen = seen.clone();
            async move {
                *seen.lock().unwrap() = Some(ctx.abort_signal().clone());
                if let Some(tx) = started {
                    let _ = tx.send(());
                }
                futures::future::pending::<()>().await;
                Ok(())
            }
        })
        .init()
        .await
        .unwrap();
    let running = Running::spawn(&rt, worker);
    timeout(rt.as_ref(), Duration::from_secs(10), started_rx).await.expect("started").unwrap();
    let asked = Instant::now();
    running.stop(Duration::from_secs(10)).await;
    let took = asked.elapsed();
    assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(5), "stopped after {took:?}");
    let signal = signal.lock().unwrap().clone().expect("the task ran");
    assert!(signal.is_aborted(), "the task's abort signal fired");
    let row = db
        .client()
        .await
        .query_one(
            "select j.attempts, j.locked_by is null, q.locked_by is null from graphile_worker._private_jobs j
             join graphile_worker._private_job_queues q on q.id = j.job_queue_id where j.id = $1",
            &[&job.id],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, i16>(0), row.get::<_, bool>(1), row.get::<_, bool>(2)),
        (0, true, true),
        "returned, attempt refunded, queue free"
    );
}

async fn two_workers_drain_ten_thousand_jobs_each_exactly_once(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    db.client()
        .await
        .batch_execute("create table ran (job_id bigint primary key, worker text)")
        .await
        .unwrap();
    let jobs: Vec<formica::RawJob> = (0..10_000).map(|n| numbered_job("count", n)).collect();
    for chunk in jobs.chunks(2_000) {
        db.utils().add_raw_jobs(chunk).await.unwrap();
    }
    let make = |local: usize| {
        db.worker_options().concurrency(8).local_queue_size(local).define_raw_job(
            "count",
            |ctx, _| async move {
                let client = ctx.client().await?;
                // The primary key makes a second run of a job an error, hence a failed job.
                client.execute("insert into ran values ($1, $2)", &[&ctx.job().id, &ctx.worker_id()]).await?;
                Ok(())
            },
        )
    };
    let a = make(0).init().await.unwrap();
    let b = make(200).init().await.unwrap();
    assert_ne!(a.worker_id(), b.worker_id());
    let (a, b) = futures::join!(
        timeout(rt.as_ref(), Duration::from_secs(120), a.run_once()),
        timeout(rt.as_ref(), Duration::from_secs(120), b.run_once())
    );
    a.expect("a returns").expect("a ok");
    b.expect("b returns").expect("b ok");
    assert_eq!(db.count("select count(*) from ran").await, 10_000);
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0, "none left, none failed");
    assert_eq!(db.count("select count(distinct worker) from ran").await, 2, "both workers took part");
}

/// With the shortest poll interval allowed (10 ms; zero is refused) the poll timer is due
/// about every time the loop looks: the loop still takes task results, query answers and the
/// stop request in turn.
async fn the_shortest_poll_interval_starves_neither_answers_nor_the_stop(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    for n in 0..20 {
        utils.add_raw_job("rec", json!({ "n": n, "ms": 1 }), JobSpec::default()).await.unwrap();
    }
    let log: Log = Default::default();
    let worker = db
        .worker_options()
        .poll_interval(formica_core::worker::MIN_POLL_INTERVAL.to_std().unwrap())
        .define_raw_job("rec", recorder(&log, ""))
        .init()
        .await
        .unwrap();
    let running = Running::spawn(&rt, worker);
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(30)).await;
    running.stop(Duration::from_secs(10)).await;
    let mut ran: Vec<String> = entries(&log).into_iter().filter(|e| !e.ends_with('!')).collect();
    ran.sort_by_key(|e| e.parse::<i32>().unwrap_or(-1));
    assert_eq!(ran, (0..20).map(|n| n.to_string()).collect::<Vec<_>>(), "each job ran once");
}

/// Errors and panics of tasks may carry NUL, which PostgreSQL refuses in text: they are
/// stored with `\0` in its place, and the failures batched with them are written too.
async fn task_errors_holding_nul_are_stored_escaped_beside_the_rest_of_their_batch(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let mut nul = Vec::new();
    for n in 0..3 {
        nul.push(utils.add_raw_job("nul", json!({"n": n}), JobSpec::default()).await.unwrap().id);
    }
    let panics = utils.add_raw_job("panics", json!({}), JobSpec::default()).await.unwrap().id;
    let plain = utils.add_raw_job("plain", json!({}), JobSpec::default()).await.unwrap().id;
    let worker = db
        .worker_options()
        .concurrency(8)
        .fail_job_batch_delay(Duration::from_millis(200))
        .define_raw_job(
            "nul",
            |_, payload| async move { Err(format!("bad\0byte {}\0", payload["n"]).into()) },
        )
        .define_raw_job("panics", |_, _| async move {
            if true {
                panic!("kaboom\0here");
            }
            Ok(())
        })
        .define_raw_job("plain", |_, _| async move { Err("just failed".into()) })
        .init()
        .await
        .unwrap();
    timeout(rt.as_ref(), Duration::from_secs(20), worker.run_once())
        .await
        .expect("the failures are written and run_once returns")
        .expect("ok");
    let client = db.client().await;
    let rows = client
        .query(
            "select id, attempts, last_error, locked_at is null from graphile_worker._private_jobs order by id",
            &[],
        )
        .await
        .unwrap();
    let stored: Vec<(i64, i16, String, bool)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    let mut expected: Vec<(i64, i16, String, bool)> =
        nul.iter().enumerate().map(|(n, &id)| (id, 1, format!("bad\\0byte {n}\\0"), true)).collect();
    expected.push((panics, 1, "task panicked: kaboom\\0here".into(), true));
    expected.push((plain, 1, "just failed".into(), true));
    assert_eq!(stored, expected);
}

/// An error with a message and a cause, as `anyhow::Context` or `thiserror`'s `#[source]`
/// make them: its `Display` says only its own part.
#[derive(Debug)]
struct Caused(&'static str, Option<Box<dyn std::error::Error + Send + Sync>>);
impl std::fmt::Display for Caused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}
impl std::error::Error for Caused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.1.as_deref().map(|e| e as _)
    }
}

/// A task failing with a chain of errors leaves every message of the chain in
/// `last_error`, outermost first, not only the outermost.
async fn a_chained_error_leaves_every_cause_in_last_error(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let id = utils.add_raw_job("chained", json!({}), JobSpec::default()).await.unwrap().id;
    let worker = db
        .worker_options()
        .define_raw_job("chained", |_, _| async move {
            let root = std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full");
            let middle = Caused("writing the spool file", Some(Box::new(root)));
            Err(Caused("sending the welcome mail", Some(Box::new(middle))).into())
        })
        .init()
        .await
        .unwrap();
    timeout(rt.as_ref(), Duration::from_secs(20), worker.run_once())
        .await
        .expect("the failure is written and run_once returns")
        .expect("ok");
    let client = db.client().await;
    let row = client
        .query_one("select last_error from graphile_worker._private_jobs where id = $1", &[&id])
        .await
        .unwrap();
    let last_error: String = row.get(0);
    assert_eq!(last_error, "sending the welcome mail: writing the spool file: disk full");
}

/// `lock_sweep_interval` reaches the worker's machine: at 1 s the four-hour sweep comes
/// within 1 s of start, then every 1 to 1.25 s (by default within a minute, then every 8 to
/// 10 minutes). An interval out of
/// its bounds fails `init` naming the option, before anything connects.
async fn the_lock_sweep_interval_reaches_the_worker_and_bad_intervals_fail_init(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    for (options, name) in [
        (db.worker_options().lock_sweep_interval(Duration::ZERO), "lock_sweep_interval is 0s"),
        (db.worker_options().recovery_interval(Duration::from_secs(3600)), "recovery_interval is 1h"),
        (db.worker_options().local_queue_ttl(Duration::ZERO), "local_queue_ttl is 0s"),
        (db.worker_options().graceful_shutdown_timeout(Duration::MAX), "graceful_shutdown_timeout is"),
    ] {
        match options.database_url("host=/nonexistent").init().await {
            Err(formica::Error::Options(message)) => assert!(message.starts_with(name), "{message}"),
            Err(other) => panic!("{name}: not refused as an option: {other}"),
            Ok(_) => panic!("{name}: accepted"),
        }
    }
    let sweeps = Arc::new(Mutex::new(0));
    let counted = sweeps.clone();
    let worker = db
        .worker_options()
        .lock_sweep_interval(Duration::from_secs(1))
        .define_raw_job("unused", |_, _| async move { Ok(()) })
        .on_event(move |e| {
            if matches!(e, Event::LockSweep { .. }) {
                *counted.lock().unwrap() += 1;
            }
        })
        .init()
        .await
        .expect("init");
    let running = Running::spawn(&rt, worker);
    // Within 1 s, then at least twice more within 1.25 s each: about 3.5 s (a default worker
    // would sweep once at most).
    wait_until(rt.as_ref(), Duration::from_secs(20), "three lock sweeps", || *sweeps.lock().unwrap() >= 3)
        .await;
    running.stop(Duration::from_secs(10)).await;
}

/// Jobs prefetched by a worker whose slots are all busy with slow tasks are given back
/// after the local queue's TTL (5 s by default), and an idle worker runs them meanwhile.
async fn prefetched_jobs_behind_slow_tasks_go_to_an_idle_worker(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    for n in 0..2 {
        utils
            .add_raw_job("rec", json!({ "n": n, "ms": 9000 }), JobSpec::builder().priority(-1).build())
            .await
            .unwrap();
    }
    for n in 2..6 {
        utils.add_raw_job("rec", json!({ "n": n, "ms": 10 }), JobSpec::default()).await.unwrap();
    }
    let busy: Log = Default::default();
    let a =
        db.worker_options().concurrency(2).define_raw_job("rec", recorder(&busy, "a")).init().await.unwrap();
    let a = Running::spawn(&rt, a);
    // A runs the two slow jobs and prefetches quick ones it cannot start.
    wait_until(rt.as_ref(), Duration::from_secs(10), "A started its slow jobs", || entries(&busy).len() >= 2)
        .await;
    sleep(rt.as_ref(), Duration::from_millis(200)).await;
    let idle: Log = Default::default();
    let b = db
        .worker_options()
        .poll_interval(Duration::from_millis(200))
        .define_raw_job("rec", recorder(&idle, "b"))
        .init()
        .await
        .unwrap();
    let started = Instant::now();
    let b = Running::spawn(&rt, b);
    db.wait_for_count("select count(*) from graphile_worker.jobs", 2, Duration::from_secs(8)).await;
    assert!(started.elapsed() < Duration::from_secs(8), "the quick jobs ran before A's slots freed");
    let ran_by_b: Vec<String> = entries(&idle).into_iter().filter(|e| !e.ends_with('!')).collect();
    assert_eq!(ran_by_b.len(), 4, "B ran every quick job: {ran_by_b:?}");
    a.stop(Duration::from_secs(20)).await;
    b.stop(Duration::from_secs(10)).await;
}

/// Tasks run on the application's runtime, never on the worker's own threads (its loop's
/// `formica-io`, which spawns them, and its lease's `formica-lease`), and see it as theirs.
async fn tasks_run_on_the_applications_runtime_not_the_workers_threads(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let jobs: Vec<formica::RawJob> = (0..40).map(|n| numbered_job("where", n)).collect();
    db.utils().add_raw_jobs(&jobs).await.unwrap();
    // Each task's thread's name ("" if unnamed), and whether it saw a tokio runtime.
    let threads: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let seen = threads.clone();
    let worker = db
        .worker_options()
        .concurrency(4)
        .define_raw_job("where", move |_, _| {
            let seen = seen.clone();
            async move {
                let on_tokio = tokio::runtime::Handle::try_current().is_ok();
                let name = std::thread::current().name().unwrap_or_default().to_owned();
                seen.lock().unwrap().push((name, on_tokio));
                Ok(())
            }
        })
        .init()
        .await
        .unwrap();
    timeout(rt.as_ref(), Duration::from_secs(30), worker.run_once()).await.expect("in time").unwrap();
    let threads = threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 40, "every job ran once: {threads:?}");
    // Where the test runs: in tokio's runtime, or in async-std's with no tokio anywhere.
    let on_tokio = tokio::runtime::Handle::try_current().is_ok();
    for (name, tokio) in &threads {
        assert!(!matches!(name.as_str(), "formica-io" | "formica-lease"), "a task ran on {name:?}");
        assert_eq!(*tokio, on_tokio, "a task on {name:?} saw tokio: {tokio}");
    }
}

on_both_runtimes!(
    tasks_run_on_the_applications_runtime_not_the_workers_threads,
    the_refetch_delay_holds_fetches_after_a_short_one_unless_enough_jobs_are_announced,
    prefetched_jobs_behind_slow_tasks_go_to_an_idle_worker,
    the_shortest_poll_interval_starves_neither_answers_nor_the_stop,
    listen_notify_runs_a_job_within_milliseconds,
    run_once_runs_due_jobs_in_priority_then_run_at_order,
    typed_tasks_get_their_payload_and_a_database_client,
    a_failing_task_is_retried_with_backoff_and_fails_for_good_at_max_attempts,
    named_queues_run_one_at_a_time_in_order_others_in_parallel,
    forbidden_flags_skip_jobs_and_a_flags_function_is_asked_before_each_fetch,
    the_worker_reconnects_its_listener_and_polls_meanwhile,
    graceful_shutdown_waits_for_running_tasks_and_returns_prefetched_jobs,
    forced_shutdown_aborts_tasks_after_the_timeout_and_returns_their_jobs,
    two_workers_drain_ten_thousand_jobs_each_exactly_once,
    task_errors_holding_nul_are_stored_escaped_beside_the_rest_of_their_batch,
    a_chained_error_leaves_every_cause_in_last_error,
    the_lock_sweep_interval_reaches_the_worker_and_bad_intervals_fail_init,
);
