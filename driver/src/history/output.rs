//! Handlers that return a value: [`OutputTaskHandler`], kept with the job's history.

use super::{HistoryOptions, Outputs};
use crate::task::{error_chain, Handler, JobContext};
use crate::worker::WorkerOptions;
use formica_core::job::Task;
use formica_core::worker::TaskOutcome;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
use std::sync::Arc;

/// A task whose handler returns a value, stored as JSON with the job's history row when it
/// completes (read back with [`WorkerUtils::job_outcome`](crate::WorkerUtils::job_outcome) or
/// [`WorkerUtils::wait_for_job`](crate::WorkerUtils::wait_for_job)). Register it with
/// [`WorkerOptions::define_job_with_output`]; with history off the value is dropped.
///
/// ```
/// use formica::{JobContext, OutputTaskHandler, Task};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Invoice { customer: u64 }
/// impl Task for Invoice { const IDENTIFIER: &'static str = "invoice"; }
/// impl OutputTaskHandler for Invoice {
///     type Output = String;
///     async fn run(self, _: JobContext) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
///         Ok(format!("invoice for customer {} sent", self.customer))
///     }
/// }
/// ```
pub trait OutputTaskHandler: Task + Serialize + DeserializeOwned + Send + 'static {
    /// What a run returns.
    type Output: Serialize + Send;
    /// Run one job, as [`TaskHandler::run`](crate::TaskHandler::run) does, returning its output.
    fn run(
        self,
        ctx: JobContext,
    ) -> impl Future<Output = Result<Self::Output, Box<dyn std::error::Error + Send + Sync>>> + Send;
}

/// `T::run` on the payload parsed as `T`, its output kept for the completion.
fn output_handler<T: OutputTaskHandler>() -> Handler {
    Arc::new(|ctx, payload| {
        Box::pin(async move {
            let task = match payload.parse::<T>() {
                Ok(task) => task,
                Err(e) => {
                    return TaskOutcome::Err(format!("payload does not match task {:?}: {e}", T::IDENTIFIER))
                }
            };
            let (outputs, job_id) = (ctx.outputs.clone(), ctx.job.id);
            match task.run(ctx).await {
                Ok(output) => match (outputs, serde_json::to_string(&output)) {
                    (Some(outputs), Ok(text)) => {
                        outputs.keep(job_id, text);
                        TaskOutcome::Ok
                    }
                    (None, _) => TaskOutcome::Ok,
                    (Some(_), Err(e)) => TaskOutcome::Err(format!("the output is not JSON: {e}")),
                },
                Err(error) => TaskOutcome::Err(error_chain(&*error)),
            }
        })
    })
}

impl<R> WorkerOptions<R> {
    /// Define task `T`, whose handler returns an output (see [`OutputTaskHandler`]).
    pub fn define_job_with_output<T: OutputTaskHandler>(mut self) -> Self {
        self.handlers.0.insert(T::IDENTIFIER.to_owned(), output_handler::<T>());
        self
    }
    /// Whether and for how long this worker keeps the history of the jobs it ends (default
    /// on, [`Retention::default`](super::Retention::default)); [`HistoryOptions::off`] for
    /// none: the worker then sends exactly the statements it would without the feature.
    pub fn history(mut self, history: HistoryOptions) -> Self {
        self.history = history;
        self
    }
}

/// What a task's end leaves: the output of a run that did not complete is not kept.
pub(crate) fn settle(outputs: Option<&Outputs>, job_id: i64, outcome: &TaskOutcome) {
    if let (Some(outputs), false) = (outputs, matches!(outcome, TaskOutcome::Ok)) {
        outputs.forget([job_id]);
    }
}
