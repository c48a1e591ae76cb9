//! Formica's own benchmark: startup and shutdown, throughput, add_job -> start latency,
//! bulk enqueue and database transactions per job, printed as a table.
//!
//! ```sh
//! scripts/with-postgres cargo run --release -p formica-tokio --example perf
//! ```
//! Settings (environment): `JOBS` (20000), `CONCURRENCY` (10), `LOCAL_QUEUE_SIZE` (unset:
//! off), `COMPLETE_BATCH_MS` (default of the worker), `SAMPLES` (200 latency samples).
//! Each run uses a database of its own (`formica_perf`), dropped and created again.

// An example program: it stops with a message when its setup fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use formica_tokio::{
    db, serde_json::json, tokio_postgres, JobSpec, Pool, RawJob, TokioRuntime, WorkerOptions, WorkerUtils,
};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn setting(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn options(pool: &Pool) -> WorkerOptions {
    let mut options = WorkerOptions::default()
        .pool(pool.clone())
        .concurrency(setting("CONCURRENCY").unwrap_or(10) as usize);
    if let Some(n) = setting("LOCAL_QUEUE_SIZE") {
        options = options.local_queue_size(n as usize);
    }
    if let Some(ms) = setting("COMPLETE_BATCH_MS") {
        options = options.complete_job_batch_delay(Duration::from_millis(ms));
    }
    options
}

async fn scalar(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.expect(sql).get(0)
}

async fn wait_empty(client: &tokio_postgres::Client) {
    while scalar(client, "select count(*) from graphile_worker._private_jobs").await > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::var("DATABASE_URL")
        .map_err(|_| "set DATABASE_URL (or run through scripts/with-postgres)")?;
    let jobs = setting("JOBS").unwrap_or(20_000) as usize;
    let samples = setting("SAMPLES").unwrap_or(200) as usize;
    let mut settings = formica_tokio::ConnectionSettings::parse(&server)?;
    let admin = db::connect(&TokioRuntime, &settings).await?;
    admin.batch_execute("drop database if exists formica_perf with (force)").await?;
    admin.batch_execute("create database formica_perf").await?;
    settings.config_mut().dbname("formica_perf");
    let client = db::connect(&TokioRuntime, &settings).await?;
    let pool = Pool::new(Arc::new(TokioRuntime), settings, setting("CONCURRENCY").unwrap_or(10) as usize + 2);
    let utils = WorkerUtils::new(pool.clone(), "graphile_worker");
    utils.migrate().await?;
    let mut rows: Vec<(String, String)> = Vec::new();

    // Startup and shutdown with nothing to do (migrated database).
    let started = Instant::now();
    let worker = options(&pool).define_raw_job("noop", |_, _| async { Ok(()) }).init().await?;
    let init = started.elapsed();
    worker.run_once().await?;
    rows.push(("startup (init + run_once, empty queue)".into(), format!("{:.1} ms", ms(started.elapsed()))));
    rows.push(("  of which init (connect, migrate check)".into(), format!("{:.1} ms", ms(init))));

    // Bulk enqueue through add_jobs, 1000 per call.
    let batch: Vec<RawJob> = (0..1000)
        .map(|i| RawJob { identifier: "noop".into(), payload: json!({ "i": i }), spec: JobSpec::default() })
        .collect();
    let started = Instant::now();
    for _ in 0..jobs.div_ceil(1000) {
        utils.add_raw_jobs(&batch).await?;
    }
    let added = jobs.div_ceil(1000) * 1000;
    rows.push((
        "bulk enqueue (add_jobs x 1000)".into(),
        format!("{:.0} jobs/s", added as f64 / secs(started)),
    ));
    client.batch_execute("analyze graphile_worker._private_jobs").await?;

    // Throughput: drain them with a running worker.
    let commits = "select xact_commit from pg_stat_database where datname = current_database()";
    let before = scalar(&client, commits).await;
    let worker = options(&pool).define_raw_job("noop", |_, _| async { Ok(()) }).init().await?;
    let handle = worker.handle();
    let started = Instant::now();
    let run = tokio::spawn(worker.run());
    wait_empty(&client).await;
    let drained = started.elapsed();
    tokio::time::sleep(Duration::from_millis(600)).await; // pg_stat counters are flushed lazily
    let transactions = scalar(&client, commits).await - before;
    rows.push((
        "throughput".into(),
        format!("{:.0} jobs/s ({added} jobs)", added as f64 / drained.as_secs_f64()),
    ));
    rows.push(("transactions per job".into(), format!("{:.3}", transactions as f64 / added as f64)));
    let stopping = Instant::now();
    handle.stop();
    run.await??;
    rows.push(("shutdown (idle worker)".into(), format!("{:.1} ms", ms(stopping.elapsed()))));

    // Latency: add_job -> task start, one job at a time, on an idle listening worker.
    let starts: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let seen = starts.clone();
    let worker = options(&pool)
        .define_raw_job("latency", move |_, payload| {
            let at = Instant::now();
            let i = payload["i"].as_i64().unwrap_or(-1);
            seen.lock().expect("no poisoning").push((i, at));
            async { Ok(()) }
        })
        .init()
        .await?;
    let handle = worker.handle();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut latencies = Vec::with_capacity(samples);
    for i in 0..samples as i64 {
        let sent = Instant::now();
        client
            .execute("select graphile_worker.add_job('latency', json_build_object('i', $1::bigint))", &[&i])
            .await?;
        let at = loop {
            if let Some(&(_, at)) = starts.lock().expect("no poisoning").iter().find(|(n, _)| *n == i) {
                break at;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        latencies.push(at - sent);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle.stop();
    run.await??;
    latencies.sort();
    rows.push((
        "latency add_job -> start, p50 / p99".into(),
        format!("{:.2} / {:.2} ms", ms(percentile(&latencies, 0.5)), ms(percentile(&latencies, 0.99))),
    ));

    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    println!(
        "formica perf: JOBS={jobs} CONCURRENCY={} LOCAL_QUEUE_SIZE={} COMPLETE_BATCH_MS={}",
        setting("CONCURRENCY").unwrap_or(10),
        setting("LOCAL_QUEUE_SIZE").map_or("off".into(), |n| n.to_string()),
        setting("COMPLETE_BATCH_MS").map_or("default".into(), |n| n.to_string()),
    );
    for (k, v) in rows {
        println!("| {k:width$} | {v} |");
    }
    admin.batch_execute("drop database formica_perf with (force)").await?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}
