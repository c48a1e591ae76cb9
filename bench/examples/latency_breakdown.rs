//! Where the time from `add_job` to the task's start goes, hop by hop, on an idle worker
//! with default settings: `DATABASE_URL=... cargo run --release -p formica-bench --example
//! latency_breakdown` (`SAMPLES`, default 200; `GAP_MS` between jobs, default 50).
//!
//! Each sample adds one job through `WorkerUtils::add_raw_job` and records, on one clock,
//! when the add returned (committed), when the worker's LISTEN connection received the
//! notification, when it sent the fetch, when the rows came back and when the task began.
//! The driver marks those hops with `trace` events of target `formica::latency`, which this
//! program collects with a `tracing` layer.
use formica_bench::setting;
use formica_tokio::{JobSpec, WorkerOptions};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// The hops, in the order they happen.
const HOPS: [&str; 5] =
    ["committed", "notification received", "fetch sent", "fetch answered", "task started"];

/// The first time each hop was seen since the sample began.
#[derive(Default)]
struct Marks(Mutex<Vec<Option<Instant>>>);

impl Marks {
    fn reset(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = vec![None; HOPS.len()];
    }
    fn mark(&self, hop: &str) {
        let now = Instant::now();
        let mut marks = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = HOPS.iter().position(|h| *h == hop) {
            if marks.get(i).is_some_and(Option::is_none) {
                marks[i] = Some(now);
            }
        }
    }
    fn take(&self) -> Vec<Option<Instant>> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Marks the driver's `formica::latency` events.
struct HopLayer(Arc<Marks>);

impl<S: tracing::Subscriber> Layer<S> for HopLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        struct Message(Option<String>);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        // Only `formica::latency` events reach this layer (its filter in `main`).
        let mut message = Message(None);
        event.record(&mut message);
        if let Some(hop) = message.0 {
            self.0.mark(&hop);
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let marks = Arc::new(Marks::default());
    let filter =
        tracing_subscriber::filter::Targets::new().with_target("formica::latency", tracing::Level::TRACE);
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(HopLayer(marks.clone()).with_filter(filter)),
    )?;
    let (started, mut starts) = futures::channel::mpsc::unbounded::<()>();
    let task_marks = marks.clone();
    let worker = WorkerOptions::default()
        .database_url(std::env::var("DATABASE_URL").map_err(|_| "set DATABASE_URL")?)
        .define_raw_job("latency", move |_, _| {
            task_marks.mark("task started");
            let _ = started.unbounded_send(());
            async { Ok(()) }
        })
        .init()
        .await?;
    let utils = worker.create_utils();
    let handle = worker.handle();
    let running = tokio::spawn(worker.run());
    let (samples, gap) =
        (setting::<u64>("SAMPLES").unwrap_or(200), Duration::from_millis(setting("GAP_MS").unwrap_or(50)));
    let mut hops: Vec<Vec<f64>> = vec![Vec::new(); HOPS.len()];
    tokio::time::sleep(Duration::from_millis(500)).await; // the LISTEN connection is up
    for _ in 0..samples + 5 {
        marks.reset();
        let sent = Instant::now();
        utils.add_raw_job("latency", serde_json::json!({}), JobSpec::default()).await?;
        marks.mark("committed");
        futures::StreamExt::next(&mut starts).await;
        let seen = marks.take();
        for (hop, at) in hops.iter_mut().zip(seen) {
            hop.push(at.map_or(f64::NAN, |at| at.duration_since(sent).as_secs_f64() * 1000.0));
        }
        tokio::time::sleep(gap).await;
    }
    handle.stop();
    running.await??;
    println!("ms since add_job was sent ({samples} samples, the first 5 dropped)");
    println!("{:<24} {:>8} {:>8} {:>8}", "hop", "median", "p90", "p99");
    for (name, mut times) in HOPS.iter().zip(hops) {
        let mut times: Vec<f64> = times.drain(5..).filter(|t| t.is_finite()).collect();
        times.sort_by(f64::total_cmp);
        let at = |q: f64| {
            times.get(((times.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::NAN)
        };
        println!("{name:<24} {:>8.3} {:>8.3} {:>8.3}", at(0.5), at(0.9), at(0.99));
    }
    Ok(())
}
