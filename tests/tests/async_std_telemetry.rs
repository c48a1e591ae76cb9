//! formica-async-std has formica-tokio's `metrics` and `traces` features (this crate turns
//! them on through formica-async-std alone): a worker on async-std, with no tokio runtime
//! anywhere, records its metrics on the global meter provider and a span per job run on the
//! global tracer provider, as OpenTelemetry's in-memory exporters see them.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_async_std::{AsyncStdRuntime, JobSpec, WorkerOptions};
use formica_tests::TestDb;
use opentelemetry::Value;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::sync::Arc;

/// The sum of the `u64` counter `name` over its points whose task is `task`.
fn counted(metrics: &[ResourceMetrics], name: &str, task: &str) -> u64 {
    let mut total = 0;
    let all = metrics.iter().flat_map(|r| r.scope_metrics()).flat_map(|s| s.metrics());
    for metric in all.filter(|metric| metric.name() == name) {
        let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() else { continue };
        for point in sum.data_points() {
            let of_task = point
                .attributes()
                .any(|kv| kv.key.as_str() == "messaging.destination.name" && kv.value.as_str() == task);
            total += if of_task { point.value() } else { 0 };
        }
    }
    total
}

/// The names of the metrics recorded.
fn names(metrics: &[ResourceMetrics]) -> Vec<String> {
    let all = metrics.iter().flat_map(|r| r.scope_metrics()).flat_map(|s| s.metrics());
    all.map(|metric| metric.name().to_owned()).collect()
}

#[test]
fn an_async_std_worker_with_the_features_records_metrics_and_a_span_per_job_run() {
    let spans = InMemorySpanExporter::default();
    let tracer = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
    opentelemetry::global::set_tracer_provider(tracer);
    let metrics = InMemoryMetricExporter::default();
    let meter =
        SdkMeterProvider::builder().with_reader(PeriodicReader::builder(metrics.clone()).build()).build();
    opentelemetry::global::set_meter_provider(meter.clone());

    let worker_id = async_std::task::block_on(async {
        let db = TestDb::migrated_on(Arc::new(AsyncStdRuntime)).await;
        let utils = db.utils();
        for _ in 0..2 {
            utils.add_raw_job("ok", serde_json::json!({}), JobSpec::default()).await.unwrap();
        }
        let once = JobSpec { max_attempts: Some(1), ..Default::default() };
        utils.add_raw_job("fail", serde_json::json!({}), once).await.unwrap();

        let worker = WorkerOptions::default()
            .database_url(&db.url)
            .define_raw_job("ok", |_, _| async { Ok(()) })
            .define_raw_job("fail", |_, _| async { Err("no luck".into()) })
            .init()
            .await
            .unwrap();
        let worker_id = worker.worker_id().to_owned();
        worker.run_once().await.unwrap();
        worker_id
    });

    meter.force_flush().unwrap();
    let recorded = metrics.get_finished_metrics().unwrap();
    assert_eq!(counted(&recorded, "formica.jobs.completed", "ok"), 2, "{:?}", names(&recorded));
    assert_eq!(counted(&recorded, "formica.jobs.completed", "fail"), 0);
    assert_eq!(counted(&recorded, "formica.jobs.permanently_failed", "fail"), 1);
    for name in ["messaging.process.duration", "messaging.client.consumed.messages", "formica.worker.up"] {
        assert!(names(&recorded).iter().any(|n| n == name), "no {name} in {:?}", names(&recorded));
    }

    let finished = spans.get_finished_spans().unwrap();
    let mut named: Vec<&str> = finished.iter().map(|span| span.name.as_ref()).collect();
    named.sort_unstable();
    assert_eq!(named, ["process fail", "process ok", "process ok"]);
    for span in &finished {
        let group = span.attributes.iter().find(|kv| kv.key.as_str() == "messaging.consumer.group.name");
        assert_eq!(group.map(|kv| &kv.value), Some(&Value::from(worker_id.clone())));
    }
}
