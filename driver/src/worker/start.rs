//! Starting a task: its handler, its abort signal, its span, and its panics caught.

use super::shared::Shared;
use crate::task::{AbortSignal, AbortTrigger, Database, JobContext};
use crate::traces::JobSpan;
use formica_core::worker::{Input, TaskOutcome};
use futures::channel::mpsc;
use futures::future::{AbortHandle, Abortable, BoxFuture, FutureExt};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tracing::Instrument;

/// A started task, as the loop holds it: how to abort it, and whether its end was reported.
pub(super) struct Running {
    pub(super) abort: AbortHandle,
    pub(super) trigger: AbortTrigger,
    /// Its end was reported: by the task, or for it once it was given up on.
    pub(super) reported: Arc<AtomicBool>,
}

/// Spawnable future running `job`'s handler and reporting how it ended.
pub(super) fn start_task(
    shared: &Arc<Shared>,
    job: formica_core::job::Job,
    inputs: mpsc::UnboundedSender<Input>,
) -> (Running, BoxFuture<'static, ()>) {
    let (trigger, signal): (AbortTrigger, AbortSignal) = AbortSignal::new();
    let (abort, registration) = AbortHandle::new_pair();
    let reported = Arc::new(AtomicBool::new(false));
    let running_reported = reported.clone();
    let job_id = job.id;
    let job_span = JobSpan::start(&job, &shared.worker_id, shared.executor.parents.take(job.id));
    let log = shared.logs.as_ref().map(|logs| logs.open(job.id, job.attempts));
    let (task, worker_id) = (&job.task_identifier, &shared.worker_id);
    let span = match &log {
        // The token by which `JobLogLayer` finds this attempt's log.
        Some((_, token)) => {
            tracing::info_span!("job", job_id, task = %task, worker_id = %worker_id, formica_logs = *token)
        }
        None => tracing::info_span!("job", job_id, task = %task, worker_id = %worker_id),
    };
    let handler = shared.handlers.0.get(&job.task_identifier).cloned();
    let payload = job.payload.clone();
    let outputs = shared.executor.outputs.clone();
    let durable = crate::durable::Durable::new(shared.executor.catalog.clone());
    let (settling, job_arc, shared_arc) = (durable.clone(), Arc::new(job), shared.clone());
    let ctx = JobContext {
        job: job_arc.clone(),
        worker_id: shared.worker_id.clone(),
        database: Database::Utils(shared.utils.clone()),
        abort: signal,
        span: span.clone(),
        extensions: shared.extensions.clone(),
        outputs: shared.executor.outputs.clone(),
        durable: Some(durable),
        progress: Some(shared.progress.clone()),
    };
    let work = job_span.current_in(async move {
        match handler {
            Some(handler) => handler(ctx, payload).await,
            None => TaskOutcome::Err(format!(
                "Unsupported task {:?}: this worker has no handler for it",
                ctx.job.task_identifier
            )),
        }
    });
    let task = async move {
        let outcome = match AssertUnwindSafe(Abortable::new(work, registration)).catch_unwind().await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_aborted)) => TaskOutcome::Aborted,
            Err(panic) => TaskOutcome::Panicked(panic_message(&panic)),
        };
        let outcome =
            settling.settle(&job_arc, &shared_arc.worker_id, &shared_arc.executor.pool, outcome).await;
        job_span.end(&outcome);
        if let Some((log, token)) = log {
            log.close(token);
        }
        crate::history::settle(outputs.as_deref(), job_id, &outcome);
        if !reported.swap(true, Ordering::AcqRel) {
            let _ = inputs.unbounded_send(Input::TaskFinished { job_id, outcome });
        }
    }
    .instrument(span);
    (Running { abort, trigger, reported: running_reported }, Box::pin(task))
}

/// The attempt's error for a panic: its message as it is (the core makes it storable).
fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into());
    format!("task panicked: {text}")
}
