//! Formica as a peer of `../shared/bench` (see its README): `bench_peer run|once|enqueue`,
//! settings from `DATABASE_URL`, `CONCURRENCY`, `LOCAL_QUEUE_SIZE` (unset or < 1: off),
//! `COMPLETE_BATCH_MS` (unset or -1: off), `POLL_INTERVAL_MS` and `MAX_PG_CONN`; tasks
//! `noop` (a typed task with no fields, as the other peers' `noop`: its payload is read and
//! its fields skipped; with `RAW_NOOP=1` a raw task given the payload as a `serde_json::Value`,
//! with `RAW_NOOP=2` a payload task given its text as stored, parsed by nothing)
//! and `latency` (prints `BENCH_START <i>` as it starts). `enqueue` migrates, then
//! adds `ENQUEUE_N` (100000) `noop` jobs through `WorkerUtils::add_raw_jobs`,
//! `ENQUEUE_BATCH` (1000) a call, and prints `BENCH_ENQUEUE_MS <ms>` for the adds alone;
//! with `ENQUEUE_KEYED=1` each job has a job key of its own (`k<i>`).
//! `METRICS=1` records the worker's metrics into an OpenTelemetry SDK meter provider with
//! the Prometheus exporter, as `formica --metrics-addr` does (to measure their cost); the
//! worker has metrics to record when built with `--features metrics` or by a `--workspace`
//! build (the benchmark's).
//! `DURABLE=1` makes `noop` a raw task that completes its job in its own (empty) transaction,
//! `DURABLE=2` one that runs one empty step (docs/guide/durable-jobs.md), to measure their cost.
//! The worker runs with Formica's defaults, as users get it: job history on. `HISTORY=0`
//! turns history off (graphile-worker keeps none), to compare like with like.
//! `VACUUM=0` turns off the worker's vacuums of the jobs table as it drains it (on by default).
//! `LOG_LINES=1`: each `noop` logs one `info` line, which the worker keeps with the job
//! (docs/guide/job-logs.md: `JobLogs` at `INFO`, `JobLogLayer` as the only subscriber).
//! `completion` prints the completion statement as this worker sends it (`HISTORY` as above;
//! `OUTPUTS=1`: the form that stores outputs; `SETTLING=1`: the form that settles workflow
//! jobs), for `bench/history-cost` and `bench/settle-cost`.
use formica_bench::setting;
use formica_tokio::{
    stop_on_signals, HistoryOptions, JobContext, JobLogLayer, JobLogs, JobSpec, RawJob, Task, TaskHandler,
    TaskResult, WorkerOptions, WorkerUtils, DEFAULT_SCHEMA,
};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

/// Whether each `noop` logs a line (`LOG_LINES=1`).
static LOG_LINE: AtomicBool = AtomicBool::new(false);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let once = match std::env::args().nth(1).as_deref() {
        Some("run") => false,
        Some("once") => true,
        Some("enqueue") => return enqueue().await,
        Some("completion") => return completion(),
        _ => return Err("usage: bench_peer run|once|enqueue|completion".into()),
    };
    if setting::<i64>("METRICS") == Some(1) {
        let exporter =
            opentelemetry_prometheus::exporter().with_registry(prometheus::Registry::new()).build()?;
        let provider = opentelemetry_sdk::metrics::SdkMeterProvider::builder().with_reader(exporter).build();
        opentelemetry::global::set_meter_provider(provider);
    }
    let mut options = WorkerOptions::default()
        .database_url(std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?)
        .define_raw_job("latency", |_, payload| async move {
            let i = payload.get("i").cloned().unwrap_or_default();
            writeln!(std::io::stdout().lock(), "BENCH_START {i}")?;
            Ok(())
        });
    options = match (setting::<i64>("RAW_NOOP"), setting::<i64>("DURABLE")) {
        (_, Some(1)) => options.define_raw_job("noop", |ctx, _| async move {
            let mut client = ctx.client().await?;
            ctx.complete_with_transaction(client.transaction().await?).await?;
            Ok(())
        }),
        (_, Some(2)) => options.define_raw_job("noop", |ctx, _| async move {
            ctx.step("noop", |_| Box::pin(async { Ok(()) })).await?;
            Ok(())
        }),
        (Some(1), _) => options.define_raw_job("noop", |_, _| async { Ok(()) }),
        (Some(2), _) => options.define_payload_job("noop", |_, _| async { Ok(()) }),
        _ => options.define_job::<Noop>(),
    };
    if setting::<i64>("LOG_LINES") == Some(1) {
        LOG_LINE.store(true, Ordering::Relaxed);
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(JobLogLayer))?;
        options = options.job_logs(JobLogs::at(tracing::Level::INFO));
    }
    if setting::<i64>("HISTORY") == Some(0) {
        options = options.history(HistoryOptions::off());
    }
    if setting::<i64>("VACUUM") == Some(0) {
        options = options.vacuum_jobs(false);
    }
    if let Some(n) = setting::<i64>("CONCURRENCY") {
        options = options.concurrency(n.max(1) as usize);
    }
    if let Some(n) = setting::<i64>("LOCAL_QUEUE_SIZE").filter(|&n| n >= 1) {
        options = options.local_queue_size(n as usize);
    }
    if let Some(ms) = setting::<i64>("COMPLETE_BATCH_MS") {
        options = options.complete_job_batch_delay(Duration::from_millis(ms.max(0) as u64));
    }
    if let Some(ms) = setting::<i64>("POLL_INTERVAL_MS") {
        // Below the minimum, `init` refuses it and says why.
        options = options.poll_interval(Duration::from_millis(ms.max(0) as u64));
    }
    if let Some(n) = setting::<i64>("MAX_PG_CONN") {
        options = options.max_pool_size(n.max(2) as usize);
    }
    let worker = options.init().await?;
    if once {
        worker.run_once().await?;
    } else {
        stop_on_signals(worker.handle())?;
        worker.run().await?;
    }
    Ok(())
}

/// The `noop` task: no fields, so a payload's fields are skipped as it is read.
#[derive(serde::Serialize, serde::Deserialize)]
struct Noop {}

impl Task for Noop {
    const IDENTIFIER: &'static str = "noop";
}

impl TaskHandler for Noop {
    async fn run(self, _: JobContext) -> TaskResult {
        if LOG_LINE.load(Ordering::Relaxed) {
            tracing::info!("noop ran");
        }
        Ok(())
    }
}

async fn enqueue() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?;
    let utils = WorkerUtils::new(formica_tokio::pool(&url, 2)?, DEFAULT_SCHEMA);
    utils.migrate().await?;
    let n = setting::<i64>("ENQUEUE_N").unwrap_or(100_000).max(0);
    let batch = setting::<i64>("ENQUEUE_BATCH").unwrap_or(1000).max(1);
    let keyed = setting::<i64>("ENQUEUE_KEYED") == Some(1);
    let started = std::time::Instant::now();
    for from in (0..n).step_by(batch as usize) {
        let jobs: Vec<RawJob> = (from..(from + batch).min(n))
            .map(|i| RawJob {
                identifier: "noop".into(),
                payload: serde_json::json!({ "i": i }),
                spec: if keyed {
                    JobSpec::builder().job_key(format!("k{i}")).build()
                } else {
                    JobSpec::default()
                },
            })
            .collect();
        utils.add_raw_jobs(&jobs).await?;
    }
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    writeln!(std::io::stdout().lock(), "BENCH_ENQUEUE_MS {ms:.1}")?;
    Ok(())
}

/// `bench_peer completion`: the completion statement, rendered for the default schema.
fn completion() -> Result<(), Box<dyn std::error::Error>> {
    use formica_tokio::sql;
    let ending = sql::worker::Ending {
        history: setting::<i64>("HISTORY") != Some(0),
        settling: setting::<i64>("SETTLING") == Some(1),
        outputs: setting::<i64>("OUTPUTS") == Some(1),
    };
    let statement = sql::render(&sql::worker::complete_jobs(ending)?, DEFAULT_SCHEMA);
    writeln!(std::io::stdout().lock(), "{statement}")?;
    Ok(())
}
