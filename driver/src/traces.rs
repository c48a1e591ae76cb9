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

use formica_core::job::Job;
use formica_core::worker::TaskOutcome;

/// The span of one job run, ended with its outcome.
#[cfg(feature = "traces")]
pub(crate) struct JobSpan(opentelemetry::global::BoxedSpan);

/// The span of one job run: traces are compiled out.
#[cfg(not(feature = "traces"))]
pub(crate) struct JobSpan;

#[cfg(not(feature = "traces"))]
impl JobSpan {
    pub(crate) fn start(_: &Job, _: &str) -> Self {
        JobSpan
    }
    pub(crate) fn end(self, _: &TaskOutcome) {}
}

#[cfg(feature = "traces")]
impl JobSpan {
    /// `job`'s run by `worker_id` starts now. The span is named and described only if it
    /// records: with no tracer provider installed (or a sampler that drops it) a job pays
    /// for no name, no attributes. So a sampler decides on the name `process` alone, without
    /// the task's name or the job's attributes.
    pub(crate) fn start(job: &Job, worker_id: &str) -> Self {
        use opentelemetry::trace::{Span, SpanKind, Tracer};
        use opentelemetry::KeyValue;
        let tracer = opentelemetry::global::tracer("formica");
        let mut span = tracer.span_builder("process").with_kind(SpanKind::Consumer).start(&tracer);
        if !span.is_recording() {
            return JobSpan(span);
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
        JobSpan(span)
    }

    /// The run ended with `outcome`.
    pub(crate) fn end(mut self, outcome: &TaskOutcome) {
        use opentelemetry::trace::{Span, Status};
        use opentelemetry::KeyValue;
        let error = match outcome {
            TaskOutcome::Ok | TaskOutcome::Skipped(_) => None,
            TaskOutcome::Err(message) => Some(("task_error", message.clone())),
            TaskOutcome::ItemsFailed { error, .. } => Some(("batch_items_failed", error.clone())),
            TaskOutcome::Panicked(message) => Some(("panic", message.clone())),
            TaskOutcome::Aborted => Some(("aborted", "aborted on shutdown".to_owned())),
            TaskOutcome::Unstoppable => Some(("unstoppable", "did not stop when told to".to_owned())),
        };
        match error {
            Some((kind, message)) => {
                self.0.set_attribute(KeyValue::new("error.type", kind));
                self.0.set_status(Status::error(message));
            }
            None => self.0.set_status(Status::Ok),
        }
        self.0.end();
    }
}
