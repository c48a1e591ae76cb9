//! With the `traces` feature, each job run is one OpenTelemetry span with the messaging
//! attributes, as OpenTelemetry's in-memory exporter sees them; a job added inside a span
//! runs in that span's trace, as its child.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{JobSpec, RawJob, Runtime};
use formica_tests::TestDb;
use opentelemetry::context::FutureExt;
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

/// The exporter of the global tracer provider, installed once for every test of this file
/// (they run at once: each picks its own worker's spans by the worker id).
fn exporter() -> InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER
        .get_or_init(|| {
            let exporter = InMemorySpanExporter::default();
            let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
            opentelemetry::global::set_tracer_provider(provider);
            exporter
        })
        .clone()
}

/// The spans of the job runs of worker `worker_id`, by job id.
fn job_spans(worker_id: &str) -> BTreeMap<i64, SpanData> {
    let mut spans = BTreeMap::new();
    for span in exporter().get_finished_spans().unwrap() {
        let attr = |key: &str| {
            span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().into_owned())
        };
        if attr("messaging.consumer.group.name").as_deref() == Some(worker_id) {
            let id = attr("messaging.message.id").unwrap().parse().unwrap();
            assert!(spans.insert(id, span).is_none(), "two spans for job {id}");
        }
    }
    spans
}

/// A span as an HTTP server's request span would be, current in the context returned.
fn request_span(name: &'static str) -> Context {
    let tracer = opentelemetry::global::tracer("app");
    Context::current_with_span(tracer.span_builder(name).with_kind(SpanKind::Server).start(&tracer))
}

const TRACES: &str = "select count(*) from formica_graphile_worker.job_traces";

#[tokio::test]
async fn every_job_run_is_one_consumer_span_with_the_messaging_attributes() {
    let exporter = exporter();

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

    let spans: Vec<_> = exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|span| span.attributes.iter().any(|kv| kv.value.as_str() == worker_id.as_str()))
        .collect();
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

/// Each way of adding jobs, inside a request's span, records its context beside the jobs
/// (not in the payload, which graphile-worker's workers read as it was given); each run's
/// span is then the child of the request's span, in its trace. A job added outside a span
/// starts a trace of its own. A completed job's context goes with it. On both runtimes.
async fn a_job_added_inside_a_span_runs_as_that_span_s_child_in_its_trace(runtime: Arc<dyn Runtime>) {
    exporter();
    let db = TestDb::migrated_on(runtime).await;
    let utils = db.utils();
    let request = request_span("POST /orders");
    let request_context = request.span().span_context().clone();
    let payload = serde_json::json!({"order": 7});
    let mut traced = Vec::new();
    async {
        traced.push(utils.add_raw_job("ok", payload.clone(), JobSpec::default()).await.unwrap().id);
        let plain = [
            RawJob::new("ok", payload.clone(), JobSpec::default()),
            RawJob::new("ok", payload.clone(), JobSpec::default()),
        ];
        traced.extend(utils.add_raw_jobs(&plain).await.unwrap().iter().map(|job| job.id));
        let keyed = JobSpec { job_key: Some("k".into()), queue_name: Some("q".into()), ..Default::default() };
        traced.extend(
            utils
                .add_raw_jobs(&[RawJob::new("ok", payload.clone(), keyed)])
                .await
                .unwrap()
                .iter()
                .map(|job| job.id),
        );
    }
    .with_context(request.clone())
    .await;
    let untraced = utils.add_raw_job("ok", payload.clone(), JobSpec::default()).await.unwrap().id;
    assert_eq!(traced.len(), 4);
    assert_eq!(db.count(TRACES).await, 4, "one context per job added in the span");
    let stored =
        "select count(*) from graphile_worker._private_jobs where payload::jsonb = '{\"order\": 7}'::jsonb";
    assert_eq!(db.count(stored).await, 5, "every payload as given");

    let worker = db.worker_options().define_raw_job("ok", |_, _| async { Ok(()) }).init().await.unwrap();
    let worker_id = worker.worker_id().to_owned();
    worker.run_once().await.unwrap();

    let spans = job_spans(&worker_id);
    assert_eq!(spans.len(), 5, "{spans:#?}");
    for id in &traced {
        let span = &spans[id];
        assert_eq!(
            span.span_context.trace_id(),
            request_context.trace_id(),
            "job {id} is in the request's trace"
        );
        assert_eq!(span.parent_span_id, request_context.span_id(), "job {id}'s span is the request's child");
        assert!(span.parent_span_is_remote, "the parent came from elsewhere");
    }
    let root = &spans[&untraced];
    assert_eq!(root.parent_span_id, SpanId::INVALID, "a job added outside a span has a root span");
    assert_ne!(root.span_context.trace_id(), request_context.trace_id());
    assert_eq!(db.count(TRACES).await, 0, "completed jobs' contexts are deleted with them");
}

#[tokio::test]
async fn a_job_added_inside_a_span_runs_as_that_span_s_child_in_its_trace_on_tokio() {
    a_job_added_inside_a_span_runs_as_that_span_s_child_in_its_trace(Arc::new(formica_tokio::TokioRuntime))
        .await;
}

#[test]
fn a_job_added_inside_a_span_runs_as_that_span_s_child_in_its_trace_on_async_std() {
    async_std::task::block_on(a_job_added_inside_a_span_runs_as_that_span_s_child_in_its_trace(Arc::new(
        formica_async_std::AsyncStdRuntime,
    )));
}

/// A job's span is current while its handler runs: a job the handler adds runs as the
/// child of that span, so a chain of jobs stays in the trace of the request that began it.
#[tokio::test]
async fn a_job_added_by_a_handler_runs_as_the_child_of_that_job_s_span() {
    exporter();
    let db = TestDb::migrated().await;
    let request = request_span("POST /chain");
    let first = db
        .utils()
        .add_raw_job("first", serde_json::json!({}), JobSpec::default())
        .with_context(request.clone())
        .await
        .unwrap();
    let worker = db
        .worker_options()
        .define_raw_job("first", |ctx, _| async move {
            ctx.utils().add_raw_job("second", serde_json::json!({}), JobSpec::default()).await?;
            Ok(())
        })
        .define_raw_job("second", |_, _| async { Ok(()) })
        .init()
        .await
        .unwrap();
    let worker_id = worker.worker_id().to_owned();
    worker.run_once().await.unwrap();

    let spans = job_spans(&worker_id);
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let first_span = &spans[&first.id];
    let (_, second_span) = spans.iter().find(|(id, _)| **id != first.id).unwrap();
    let request_trace = request.span().span_context().trace_id();
    assert_eq!(first_span.span_context.trace_id(), request_trace);
    assert_eq!(second_span.span_context.trace_id(), request_trace, "the chain stays in the request's trace");
    assert_eq!(
        second_span.parent_span_id,
        first_span.span_context.span_id(),
        "the second is the first's child"
    );
}

/// A records schema that an older Formica migrated (no trace table yet) takes jobs added in
/// a span all the same, without their context: their runs start traces of their own. Once
/// a worker brought the records up to date, jobs added in a span carry it again.
#[tokio::test]
async fn jobs_added_in_a_span_before_the_records_hold_contexts_are_added_without_one() {
    exporter();
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "drop table formica_graphile_worker.job_traces;
             delete from formica_graphile_worker.migrations where id = 5",
        )
        .await
        .unwrap();
    let utils = db.utils();
    let request = request_span("POST /early");
    let early = utils
        .add_raw_job("ok", serde_json::json!({}), JobSpec::default())
        .with_context(request.clone())
        .await
        .unwrap();
    let jobs = [RawJob::new("ok", serde_json::json!({}), JobSpec::default())];
    let early_batch = utils.add_raw_jobs(&jobs).with_context(request.clone()).await.unwrap();

    // The worker migrates the records schema on start.
    let worker = db.worker_options().define_raw_job("ok", |_, _| async { Ok(()) }).init().await.unwrap();
    let later = db
        .utils()
        .add_raw_job("ok", serde_json::json!({}), JobSpec::default())
        .with_context(request.clone())
        .await
        .unwrap();
    assert_eq!(db.count(TRACES).await, 1, "a new utility finds the table");
    let worker_id = worker.worker_id().to_owned();
    worker.run_once().await.unwrap();

    let spans = job_spans(&worker_id);
    let request_trace = request.span().span_context().trace_id();
    for id in [early.id, early_batch[0].id] {
        assert_eq!(spans[&id].parent_span_id, SpanId::INVALID, "job {id} was added without its context");
    }
    assert_eq!(spans[&later.id].span_context.trace_id(), request_trace);
}

/// The context of a job deleted other than by a Formica worker's completion (here by
/// `complete_jobs`, as graphile-worker's workers delete theirs) is forgotten by the
/// recovery sweep once no older job remains.
#[tokio::test]
async fn the_recovery_sweep_forgets_the_contexts_of_jobs_deleted_elsewhere() {
    exporter();
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let request = request_span("POST /many");
    let older = utils
        .add_raw_job("ok", serde_json::json!({}), JobSpec::default())
        .with_context(request.clone())
        .await
        .unwrap();
    let newer = utils
        .add_raw_job("ok", serde_json::json!({}), JobSpec::default())
        .with_context(request.clone())
        .await
        .unwrap();
    let client = db.client().await;
    let sweep = formica_sql::render(formica_sql::worker::RECOVER_LAPSED, "graphile_worker");
    let sweep = || async { client.execute(&sweep, &[&60_000i64]).await.unwrap() };

    utils.complete_jobs(&[newer.id]).await.unwrap();
    sweep().await;
    assert_eq!(db.count(TRACES).await, 2, "an older job remains: nothing is swept");
    utils.complete_jobs(&[older.id]).await.unwrap();
    sweep().await;
    assert_eq!(db.count(TRACES).await, 0, "no job remains: every context is gone");
}

/// In the caller's transaction, a job added in a span records its context in the same
/// transaction: both are there once it commits, neither if it rolls back.
#[tokio::test]
async fn in_the_caller_s_transaction_the_context_commits_and_rolls_back_with_the_job() {
    exporter();
    let db = TestDb::migrated().await;
    let mut client = db.client().await;
    let utils = db.utils();
    let request = request_span("POST /in");
    for commit in [false, true] {
        let tx = client.transaction().await.unwrap();
        let batch = [RawJob::new("ok", serde_json::json!({}), JobSpec::default())];
        async {
            utils.add_raw_job_in(&tx, "ok", serde_json::json!({}), JobSpec::default()).await.unwrap();
            utils.add_raw_jobs_in(&tx, &batch).await.unwrap();
        }
        .with_context(request.clone())
        .await;
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        let expected = if commit { 2 } else { 0 };
        assert_eq!(db.count(TRACES).await, expected, "committed: {commit}");
        assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, expected);
    }
}

/// Where the context cannot be recorded, jobs added in a span are added all the same,
/// without it: a role with no rights on Formica's records (only graphile-worker's), and a
/// database graphile-worker migrated, which has no records schema at all.
#[tokio::test]
async fn jobs_added_in_a_span_where_no_context_can_be_recorded_are_added_without_one() {
    exporter();
    let db = TestDb::migrated().await;
    let client = db.client().await;
    let role = format!("{}_adder", db.name);
    client
        .batch_execute(&format!(
            "create role {role} login bypassrls;
             grant usage on schema graphile_worker to {role};
             grant select, insert, update, delete on all tables in schema graphile_worker to {role};
             grant usage on all sequences in schema graphile_worker to {role};
             grant execute on all functions in schema graphile_worker to {role};"
        ))
        .await
        .unwrap();
    let pool = formica::Pool::from_url(db.runtime.clone(), &format!("{} user={role}", db.url), 2).unwrap();
    let adder = formica::WorkerUtils::new(pool, "graphile_worker");
    let request = request_span("POST /limited");
    let jobs = [RawJob::new("ok", serde_json::json!({}), JobSpec::default())];
    async {
        adder.add_raw_job("ok", serde_json::json!({}), JobSpec::default()).await.unwrap();
        adder.add_raw_jobs(&jobs).await.unwrap();
    }
    .with_context(request.clone())
    .await;
    assert_eq!(db.count(TRACES).await, 0, "nothing recorded without the rights");

    client.batch_execute("drop schema formica_graphile_worker cascade").await.unwrap();
    db.utils()
        .add_raw_job("ok", serde_json::json!({}), JobSpec::default())
        .with_context(request)
        .await
        .unwrap();
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 3);
    client.batch_execute(&format!("drop owned by {role}; drop role {role}")).await.unwrap();
}
