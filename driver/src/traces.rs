//! Traces (cargo feature `traces`): one OpenTelemetry span per job run, a consumer span
//! named `process <task>` with the messaging attributes (`messaging.system`,
//! `messaging.operation.name`/`.type`, `messaging.destination.name` = the task,
//! `messaging.message.id` = the job id, `messaging.consumer.group.name` = the worker id)
//! and `formica.job.attempt`, `formica.queue`. A failed or aborted run ends with an error
//! status and `error.type`.
//!
//! Spans go to the global tracer provider (`opentelemetry::global`): nothing is recorded
//! until the application installs one (an OTLP exporter, or the in-memory one in tests).
//! Without the feature, [`JobSpan`] is empty and does nothing.
//!
//! Propagation: a job added inside a span (OpenTelemetry's current context) records that
//! span's W3C trace context ([`Parent`]) in Formica's records schema, `job_traces`, in the
//! add's own statement; the fetch reads it back and the job's span is that span's child:
//! one trace from the request that added the job to each of its runs, across processes.
//! The job's span is current while its handler runs, so the jobs it adds follow in turn.
//! A child rather than a link: each run has exactly one producer, and a child puts the run
//! in the request's trace in every tracing UI, which a link does not. Nothing goes in the
//! payload or in graphile-worker's schema, so its workers see exactly what they saw. A job
//! added by graphile-worker, by a Formica without the feature or outside any span has no
//! context: its span starts a trace of its own, as before. Without the feature nothing is
//! read or written: the statements are the ones without traces.

use crate::params::Param;
use formica_core::job::Job;
use formica_core::worker::TaskOutcome;

/// The W3C trace context a job was added in: its `traceparent` and `tracestate` values.
#[cfg(feature = "traces")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parent {
    traceparent: String,
    tracestate: Option<String>,
}

/// Traces are compiled out: no job has a context.
#[cfg(not(feature = "traces"))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parent {}

/// The context of the current span, if any: what a job added now records.
#[cfg(not(feature = "traces"))]
pub(crate) fn current() -> Option<Parent> {
    None
}

#[cfg(not(feature = "traces"))]
impl Parent {
    pub(crate) fn params(self) -> [Param; 2] {
        match self {}
    }
}

/// The context of the current span, if any: what a job added now records.
#[cfg(feature = "traces")]
pub(crate) fn current() -> Option<Parent> {
    use opentelemetry::trace::TraceContextExt;
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    let context = span.span_context();
    if !context.is_valid() {
        return None;
    }
    let tracestate = context.trace_state().header();
    Some(Parent {
        traceparent: format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        ),
        tracestate: (!tracestate.is_empty()).then_some(tracestate),
    })
}

#[cfg(feature = "traces")]
impl Parent {
    /// The parameters of the traced add statement (`formica_sql::traces::add`).
    pub(crate) fn params(self) -> [Param; 2] {
        use crate::params::param;
        use tokio_postgres::types::Type;
        [param(self.traceparent, Type::TEXT), param(self.tracestate, Type::TEXT)]
    }

    /// The span context it names, if it is a valid one (a `traceparent` of version 00, or
    /// of a later version read as 00 as the W3C recommendation says).
    fn span_context(&self) -> Option<opentelemetry::trace::SpanContext> {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        let mut parts = self.traceparent.split('-');
        let (version, trace_id, span_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |part: &str, len: usize| part.len() == len && part.bytes().all(|b| b.is_ascii_hexdigit());
        let known_version = match version {
            "00" => parts.next().is_none(),
            "ff" => false,
            later => hex(later, 2),
        };
        if !known_version || !hex(trace_id, 32) || !hex(span_id, 16) || !hex(flags, 2) {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16).ok()?;
        let state = self.tracestate.as_deref().and_then(|s| s.parse::<TraceState>().ok()).unwrap_or_default();
        let context = SpanContext::new(
            TraceId::from_hex(trace_id).ok()?,
            SpanId::from_hex(span_id).ok()?,
            TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
            true,
            state,
        );
        context.is_valid().then_some(context)
    }
}

/// The contexts of the jobs a worker fetched, from the fetch to their start.
#[derive(Default)]
pub(crate) struct Parents(
    #[cfg(feature = "traces")] std::sync::Mutex<std::collections::HashMap<i64, Parent>>,
);

#[cfg(not(feature = "traces"))]
impl Parents {
    pub(crate) fn remember(&self, _: &[tokio_postgres::Row]) {}
    pub(crate) fn take(&self, _: i64) -> Option<Parent> {
        None
    }
}

/// More contexts than a worker holds jobs: some of fetched jobs that never started (given
/// back on shutdown, undecodable) are forgotten all at once.
#[cfg(feature = "traces")]
const MAX_PARENTS: usize = 1 << 16;

#[cfg(feature = "traces")]
impl Parents {
    /// The contexts in the rows of a fetch (its traced form, `crate::statements`).
    pub(crate) fn remember(&self, rows: &[tokio_postgres::Row]) {
        let mut parents = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if parents.len() > MAX_PARENTS {
            parents.clear();
        }
        for row in rows {
            let read = || -> Result<_, tokio_postgres::Error> {
                Ok((row.try_get("id")?, row.try_get("traceparent")?, row.try_get("tracestate")?))
            };
            if let Ok((id, Some(traceparent), tracestate)) = read() {
                parents.insert(id, Parent { traceparent, tracestate });
            }
        }
    }

    /// The context job `id` was added in, if it had one.
    pub(crate) fn take(&self, id: i64) -> Option<Parent> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id)
    }
}

/// The span of one job run, ended with its outcome; current while its handler runs, so a
/// job the handler adds is its child in turn.
#[cfg(feature = "traces")]
pub(crate) struct JobSpan(opentelemetry::Context);

/// The span of one job run: traces are compiled out.
#[cfg(not(feature = "traces"))]
pub(crate) struct JobSpan;

#[cfg(not(feature = "traces"))]
impl JobSpan {
    pub(crate) fn start(_: &Job, _: &str, _: Option<Parent>) -> Self {
        JobSpan
    }
    pub(crate) fn end(self, _: &TaskOutcome) {}
    pub(crate) fn current_in<F>(&self, handler: F) -> F {
        handler
    }
}

#[cfg(feature = "traces")]
impl JobSpan {
    /// `job`'s run by `worker_id` starts now, as a child of the span it was added in
    /// (`parent`), if any. The span is named and described only if it records: with no
    /// tracer provider installed (or a sampler that drops it) a job pays for no name, no
    /// attributes. So a sampler decides on the name `process` alone, without the task's
    /// name or the job's attributes (and, with the default sampler, on whether the
    /// request that added the job was sampled).
    pub(crate) fn start(job: &Job, worker_id: &str, parent: Option<Parent>) -> Self {
        use opentelemetry::trace::{Span, SpanKind, TraceContextExt, Tracer};
        use opentelemetry::KeyValue;
        let tracer = opentelemetry::global::tracer("formica");
        let builder = tracer.span_builder("process").with_kind(SpanKind::Consumer);
        let mut span = match parent.as_ref().and_then(Parent::span_context) {
            Some(context) => builder.start_with_context(
                &tracer,
                &opentelemetry::Context::new().with_remote_span_context(context),
            ),
            None => builder.start(&tracer),
        };
        if !span.is_recording() {
            return JobSpan(opentelemetry::Context::new().with_span(span));
        }
        span.update_name(format!("process {}", job.task_identifier));
        span.set_attributes([
            KeyValue::new("messaging.system", "formica"),
            KeyValue::new("messaging.operation.name", "process"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.destination.name", job.task_identifier.clone()),
            KeyValue::new("messaging.message.id", job.id.to_string()),
            KeyValue::new("messaging.consumer.group.name", worker_id.to_owned()),
            KeyValue::new("formica.job.attempt", i64::from(job.attempts)),
        ]);
        if let Some(queue) = &job.queue_name {
            span.set_attribute(KeyValue::new("formica.queue", queue.clone()));
        }
        JobSpan(opentelemetry::Context::new().with_span(span))
    }

    /// `handler` with the job's span as OpenTelemetry's current context.
    pub(crate) fn current_in<F>(&self, handler: F) -> opentelemetry::context::WithContext<F> {
        opentelemetry::context::FutureExt::with_context(handler, self.0.clone())
    }

    /// The run ended with `outcome`.
    pub(crate) fn end(self, outcome: &TaskOutcome) {
        use opentelemetry::trace::{Status, TraceContextExt};
        use opentelemetry::KeyValue;
        let span = self.0.span();
        let error = match outcome {
            TaskOutcome::Ok | TaskOutcome::Committed | TaskOutcome::Skipped(_) | TaskOutcome::Snoozed(_) => {
                None
            }
            TaskOutcome::Err(message) => Some(("task_error", message.clone())),
            TaskOutcome::ItemsFailed { error, .. } => Some(("batch_items_failed", error.clone())),
            TaskOutcome::Panicked(message) => Some(("panic", message.clone())),
            TaskOutcome::Aborted => Some(("aborted", "aborted on shutdown".to_owned())),
            TaskOutcome::Unstoppable => Some(("unstoppable", "did not stop when told to".to_owned())),
        };
        match error {
            Some((kind, message)) => {
                span.set_attribute(KeyValue::new("error.type", kind));
                span.set_status(Status::error(message));
            }
            None => span.set_status(Status::Ok),
        }
        span.end();
    }
}

#[cfg(all(test, feature = "traces"))]
mod tests {
    use super::Parent;

    fn parent(traceparent: &str, tracestate: Option<&str>) -> Parent {
        Parent { traceparent: traceparent.to_owned(), tracestate: tracestate.map(str::to_owned) }
    }

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    #[test]
    fn a_traceparent_reads_as_the_remote_span_context_it_names() {
        let context = parent(&format!("00-{TRACE}-{SPAN}-01"), Some("vendor=value")).span_context().unwrap();
        assert_eq!(context.trace_id().to_string(), TRACE);
        assert_eq!(context.span_id().to_string(), SPAN);
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(context.trace_state().get("vendor"), Some("value"));
        let unsampled = parent(&format!("00-{TRACE}-{SPAN}-00"), None).span_context().unwrap();
        assert!(!unsampled.is_sampled());
        let later = parent(&format!("01-{TRACE}-{SPAN}-01-more"), None).span_context();
        assert!(later.is_some(), "a later version is read as version 00");
    }

    #[test]
    fn a_malformed_or_invalid_traceparent_names_no_span() {
        let zeros = "0".repeat(32);
        for bad in [
            format!("ff-{TRACE}-{SPAN}-01"),
            format!("00-{TRACE}-{SPAN}-01-more"),
            format!("00-{TRACE}-{SPAN}"),
            format!("00-{}-{SPAN}-01", &TRACE[1..]),
            format!("00-{TRACE}-{SPAN}-0g"),
            format!("00-{zeros}-{SPAN}-01"),
            format!("00-{TRACE}-0000000000000000-01"),
            String::new(),
        ] {
            assert!(parent(&bad, None).span_context().is_none(), "{bad:?}");
        }
    }
}
