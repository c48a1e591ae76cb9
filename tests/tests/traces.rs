//! With the `traces` feature, each job run is one OpenTelemetry span with the messaging
//! attributes, as OpenTelemetry's in-memory exporter sees them.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::JobSpec;
use formica_tests::TestDb;
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use std::collections::BTreeMap;

#[tokio::test]
async fn every_job_run_is_one_consumer_span_with_the_messaging_attributes() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    opentelemetry::global::set_tracer_provider(provider);

    let db = TestDb::migrated().await;
    let utils = db.utils();
    let mut expected = BTreeMap::new();
    for queue in [None, None, Some("q")] {
        let spec = JobSpec { queue_name: queue.map(Into::into), ..Default::default() };
        let job = utils.add_raw_job("ok", serde_json::json!({}), spec).await.unwrap();
        expected.insert(job.id.to_string(), ("ok", queue));
    }
    let spec = JobSpec { max_attempts: Some(1), ..Default::default() };
    let failing = utils.add_raw_job("fail", serde_json::json!({}), spec).await.unwrap();
    expected.insert(failing.id.to_string(), ("fail", None));

    let worker = db
        .worker_options()
        .define_raw_job("ok", |_, _| async { Ok(()) })
        .define_raw_job("fail", |_, _| async { Err("no luck".into()) })
        .init()
        .await
        .unwrap();
    let worker_id = worker.worker_id().to_owned();
    worker.run_once().await.unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    assert_eq!(spans.len(), expected.len(), "one span per job run: {spans:#?}");
    let mut seen = BTreeMap::new();
    for span in &spans {
        let attrs: BTreeMap<String, Value> =
            span.attributes.iter().map(|kv| (kv.key.to_string(), kv.value.clone())).collect();
        let text = |key: &str| attrs.get(key).map(|v| v.as_str().into_owned());
        let id = text("messaging.message.id").expect("the job id");
        let (task, queue) = expected[&id];
        assert_eq!(span.name, format!("process {task}"));
        assert_eq!(span.span_kind, SpanKind::Consumer);
        assert_eq!(text("messaging.system").as_deref(), Some("formica"));
        assert_eq!(text("messaging.operation.name").as_deref(), Some("process"));
        assert_eq!(text("messaging.destination.name").as_deref(), Some(task));
        assert_eq!(text("messaging.consumer.group.name"), Some(worker_id.clone()));
        assert_eq!(text("formica.queue").as_deref(), queue);
        assert_eq!(attrs.get("formica.job.attempt"), Some(&Value::I64(1)));
        if task == "fail" {
            assert_eq!(span.status, Status::error("no luck"));
            assert_eq!(text("error.type").as_deref(), Some("task_error"));
        } else {
            assert_eq!(span.status, Status::Ok);
            assert_eq!(text("error.type"), None);
        }
        assert!(span.end_time >= span.start_time);
        assert!(seen.insert(id, ()).is_none(), "two spans for one job");
    }
}
