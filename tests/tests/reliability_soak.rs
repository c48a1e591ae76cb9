//! The soak run behind `scripts/soak` (ignored: long, not in CI).
//!
//! `soak` is the coordinator: it starts worker processes (this same test binary, running
//! `soak_worker_process` with `FORMICA_SOAK_ROLE=worker`), adds jobs at a steady rate for
//! the configured time, and every 10 s reports throughput, p99 latency (from the job's
//! `run_at` to its task starting), queue depth and dead tuples. At the end it waits for
//! the queue to drain and checks that every job ran (duplicates are counted). Settings, by
//! environment: `FORMICA_SOAK_SECS` (600), `FORMICA_SOAK_RATE` (jobs per second, 200),
//! `FORMICA_SOAK_WORKERS` (4), `FORMICA_SOAK_CONCURRENCY` (10 per worker).

use formica::{RawJob, Runtime};
use formica_tests::{numbered_job, sleep, TestDb};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

const RECORD: &str = "insert into soak_runs (job_id, latency_ms) \
     values ($1, extract(epoch from clock_timestamp() - $2::timestamptz)::float8 * 1000) \
     on conflict (job_id) do update set runs = soak_runs.runs + 1";

/// One worker process of the soak; does nothing unless started by `soak`.
#[test]
#[ignore = "started by the soak coordinator"]
fn soak_worker_process() {
    if std::env::var("FORMICA_SOAK_ROLE").as_deref() != Ok("worker") {
        return;
    }
    let url = std::env::var("FORMICA_SOAK_URL").expect("FORMICA_SOAK_URL");
    let concurrency = setting("FORMICA_SOAK_CONCURRENCY", 10) as usize;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let worker = formica_tokio::WorkerOptions::default()
            .database_url(url)
            .concurrency(concurrency)
            .max_pool_size(concurrency + 2)
            .define_raw_job("soak", |ctx, _| async move {
                let client = ctx.client().await?;
                client.execute(RECORD, &[&ctx.job().id, &ctx.job().run_at]).await?;
                Ok(())
            })
            .init()
            .await
            .expect("worker init");
        let handle = worker.handle();
        // The coordinator closes our stdin to stop us.
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            handle.stop();
        });
        worker.run().await.expect("worker run");
    });
}

#[test]
#[ignore = "long: run by scripts/soak"]
fn soak() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(coordinate());
}

async fn coordinate() {
    let secs = setting("FORMICA_SOAK_SECS", 600);
    let rate = setting("FORMICA_SOAK_RATE", 200);
    let workers = setting("FORMICA_SOAK_WORKERS", 4);
    let runtime: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "create table soak_runs (job_id bigint primary key, runs int not null default 1, \
             latency_ms double precision not null, done_at timestamptz not null default clock_timestamp())",
        )
        .await
        .unwrap();
    println!("soak: {workers} worker processes, {rate} jobs/s for {secs} s, database {}", db.name);
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..workers)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    "reliability_soak::soak_worker_process",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("FORMICA_SOAK_ROLE", "worker")
                .env("FORMICA_SOAK_URL", &db.url)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .expect("start a worker process")
        })
        .collect();

    let utils = db.utils();
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let mut produced: u64 = 0;
    let mut next_report = start + Duration::from_secs(10);
    let mut last_report = (Instant::now(), 0i64);
    let tick = Duration::from_millis(100);
    let mut next_tick = start;
    println!(
        "{:>6} {:>9} {:>9} {:>8} {:>9} {:>7} {:>9}",
        "t(s)", "produced", "ran", "jobs/s", "p99(ms)", "queue", "dead_tup"
    );
    while Instant::now() < end {
        // Add what the rate owes so far, in one round trip.
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if due > produced {
            let jobs: Vec<RawJob> = (produced..due).map(|n| numbered_job("soak", n as i64)).collect();
            utils.add_raw_jobs(&jobs).await.expect("add jobs");
            produced = due;
        }
        if Instant::now() >= next_report {
            last_report = report(&client, start, last_report, produced).await;
            next_report += Duration::from_secs(10);
        }
        next_tick += tick;
        sleep(runtime.as_ref(), next_tick.saturating_duration_since(Instant::now())).await;
    }
    println!("producer stopped after {produced} jobs; draining");
    let drain_deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ran: i64 = client.query_one("select count(*) from soak_runs", &[]).await.unwrap().get(0);
        if ran as u64 >= produced || Instant::now() > drain_deadline {
            break;
        }
        sleep(runtime.as_ref(), Duration::from_millis(200)).await;
    }
    report(&client, start, last_report, produced).await;
    for child in &mut children {
        drop(child.stdin.take());
    }
    for child in &mut children {
        let status = child.wait().unwrap();
        assert!(status.success(), "a worker process failed: {status}");
    }
    let row = client
        .query_one(
            "select count(*), coalesce(sum(runs), 0)::bigint, \
               percentile_cont(0.5) within group (order by latency_ms), \
               percentile_cont(0.99) within group (order by latency_ms), max(latency_ms), \
               extract(epoch from max(done_at) - min(done_at))::float8 from soak_runs",
            &[],
        )
        .await
        .unwrap();
    let (ran, runs): (i64, i64) = (row.get(0), row.get(1));
    let (p50, p99, max): (Option<f64>, Option<f64>, Option<f64>) = (row.get(2), row.get(3), row.get(4));
    let span: Option<f64> = row.get(5);
    let left: i64 = client.query_one("select count(*) from graphile_worker.jobs", &[]).await.unwrap().get(0);
    let (dead, vacuums) = dead_tuples(&client).await;
    println!(
        "soak done: {produced} produced, {ran} ran ({} missing, {} ran more than once), {left} left in the queue",
        produced as i64 - ran,
        runs - ran
    );
    println!(
        "latency from run_at to start: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; throughput {:.0} jobs/s; \
         dead tuples in _private_jobs {dead} (autovacuum ran {vacuums} times)",
        p50.unwrap_or(0.0),
        p99.unwrap_or(0.0),
        max.unwrap_or(0.0),
        ran as f64 / span.unwrap_or(1.0).max(1e-9)
    );
    assert_eq!(ran as u64, produced, "every job ran");
    assert_eq!(left, 0, "the queue drained");
}

async fn dead_tuples(client: &tokio_postgres::Client) -> (i64, i64) {
    let row = client
        .query_one(
            "select coalesce(n_dead_tup, 0), coalesce(autovacuum_count, 0) from pg_stat_user_tables \
             where schemaname = 'graphile_worker' and relname = '_private_jobs'",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Print one line of the report and return the new (instant, ran) mark.
async fn report(
    client: &tokio_postgres::Client,
    start: Instant,
    (last_at, last_ran): (Instant, i64),
    produced: u64,
) -> (Instant, i64) {
    let now = Instant::now();
    let since = (now - last_at).as_secs_f64();
    let row = client
        .query_one(
            "select count(*), (select percentile_cont(0.99) within group (order by latency_ms) from soak_runs \
               where done_at > clock_timestamp() - make_interval(secs => $1)) from soak_runs",
            &[&since],
        )
        .await
        .unwrap();
    let (ran, p99): (i64, Option<f64>) = (row.get(0), row.get(1));
    let queue: i64 = client.query_one("select count(*) from graphile_worker.jobs", &[]).await.unwrap().get(0);
    let (dead, _) = dead_tuples(client).await;
    println!(
        "{:>6.0} {:>9} {:>9} {:>8.0} {:>9.1} {:>7} {:>9}",
        start.elapsed().as_secs_f64(),
        produced,
        ran,
        (ran - last_ran) as f64 / since,
        p99.unwrap_or(0.0),
        queue,
        dead
    );
    (now, ran)
}
