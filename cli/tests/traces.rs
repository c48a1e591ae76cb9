//! A job added inside a request's span, run by another process (the `formica` command with
//! its OTLP exporter): the collector gets the job's span in the request's trace, as the
//! child of the request's span. A job added outside a span gets a root span, as before.
//! Each span carries the messaging attributes naming its job.
#![cfg(feature = "otlp")]
// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::otlp::Collector;
use formica_tests::TestDb;
use opentelemetry::context::FutureExt;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::Context;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

#[tokio::test]
async fn a_job_added_in_a_request_s_span_runs_in_another_process_as_that_span_s_child() {
    let db = TestDb::migrated().await;
    let dir = std::env::temp_dir().join(format!("formica-cli-trace-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for task in ["in_request", "on_its_own"] {
        let program = dir.join(format!("{task}.sh"));
        std::fs::write(&program, "#!/bin/sh\ncat >/dev/null\n").unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    // The application: an HTTP server's span around the request, the job added inside it.
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let tracer = provider.tracer("app");
    let request = Context::current_with_span(
        tracer.span_builder("POST /orders").with_kind(SpanKind::Server).start(&tracer),
    );
    let request_span = request.span().span_context().clone();
    let utils = db.utils();
    let in_request = utils
        .add_raw_job("in_request", serde_json::json!({}), Default::default())
        .with_context(request)
        .await
        .unwrap();
    let on_its_own =
        utils.add_raw_job("on_its_own", serde_json::json!({}), Default::default()).await.unwrap();

    let collector = Collector::start();
    let endpoint = collector.endpoint();
    let received = collector.spawn(Duration::from_secs(30), |spans| spans.len() >= 2);
    let out = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--once", "--tasks", dir.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .output()
        .expect("run formica");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let spans = received.join().unwrap();
    let span =
        |name: &str| spans.iter().find(|span| span.name == name).unwrap_or_else(|| panic!("{spans:?}"));

    let child = span("process in_request");
    assert_eq!(child.trace_id, request_span.trace_id().to_bytes(), "in the request's trace");
    assert_eq!(child.parent_span_id, request_span.span_id().to_bytes(), "the request's span's child");
    let root = span("process on_its_own");
    assert!(root.parent_span_id.is_empty(), "a job added outside a span has a root span: {root:?}");
    assert_ne!(root.trace_id, request_span.trace_id().to_bytes());
    assert_eq!(spans.len(), 2, "{spans:?}");
    for (span, job) in [(child, &in_request), (root, &on_its_own)] {
        let attribute = |key: &str| span.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        assert_eq!(attribute("messaging.system"), Some("formica"), "{span:?}");
        assert_eq!(attribute("messaging.destination.name"), Some(job.task_identifier.as_str()), "{span:?}");
        assert_eq!(attribute("messaging.message.id"), Some(job.id.to_string().as_str()), "{span:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
