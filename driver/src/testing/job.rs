//! [`TestJob`]: a job built in a test, run by its handler with no database and no worker.

use super::expected::{assert_found, assert_found_in, refute_found, Expected};
use super::recorded::{AddedWorkflowJob, Recorder};
use crate::extensions::Extensions;
use crate::task::{typed_batch_handler, typed_handler, AbortSignal, BatchTaskHandler, Database, Handler};
use crate::task::{JobContext, TaskHandler};
use chrono::{DateTime, Utc};
use formica_core::job::{Job, Task, DEFAULT_MAX_ATTEMPTS};
use formica_core::worker::TaskOutcome;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use tracing::Instrument;

/// A job for a handler's unit test: a payload and the job's fields, with defaults a first
/// attempt has (id 1, attempt 1 of 25, no key, no queue, priority 0, due now, no flags),
/// and the application state the handler reaches with [`JobContext::extension`].
///
/// [`TestJob::run`] (or [`TestJob::run_batch`]) runs the handler as a worker would: the
/// payload decoded as the task's type, the result turned into a [`TestOutcome`]. Its context
/// has no database: the jobs the handler adds with [`JobContext::add_job`] are recorded
/// and returned in [`Ran::added`] (a job key replaces nothing there), and those it adds to
/// its workflow with [`JobContext::add_workflow_jobs`] in [`Ran::workflow_jobs`] (validated
/// as the database path does, as if the job were a running workflow job); [`JobContext::client`]
/// is an error and [`JobContext::utils`] panics. The abort signal never fires. A panic of
/// the handler is the test's.
pub struct TestJob {
    job: Job,
    now: DateTime<Utc>,
    worker_id: String,
    extensions: Extensions,
}

impl TestJob {
    /// A job of task `T` with `payload`.
    ///
    /// # Panics
    ///
    /// If `payload` cannot be turned into JSON.
    pub fn new<T: Task + Serialize>(payload: &T) -> Self {
        TestJob::raw(T::IDENTIFIER, as_json(payload))
    }

    /// A batch job of task `T`: its payload is the array of `items`.
    ///
    /// # Panics
    ///
    /// If the items cannot be turned into JSON.
    pub fn batch<T: Task + Serialize>(items: &[T]) -> Self {
        TestJob::raw(T::IDENTIFIER, as_json(items))
    }

    /// A job of the task named `task` with the JSON `payload` (to test how a handler takes
    /// a payload it does not expect, say).
    pub fn raw(task: impl Into<String>, payload: Value) -> Self {
        // A unit test has no runtime to ask: the wall clock, unless `now` sets the time.
        #[allow(clippy::disallowed_methods)]
        let now = Utc::now();
        let job = Job {
            id: 1,
            job_queue_id: None,
            queue_name: None,
            task_identifier: task.into(),
            payload: payload.into(),
            priority: 0,
            run_at: now,
            attempts: 1,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            last_error: None,
            created_at: now,
            updated_at: now,
            key: None,
            locked_at: Some(now),
            locked_by: Some("formica-test".into()),
            revision: 0,
            flags: BTreeSet::new(),
        };
        TestJob { job, now, worker_id: "formica-test".into(), extensions: Extensions::default() }
    }

    /// The job's id.
    pub fn id(mut self, id: i64) -> Self {
        self.job.id = id;
        self
    }
    /// The attempt this run is (1 for the first).
    pub fn attempts(mut self, attempts: i16) -> Self {
        self.job.attempts = attempts;
        self
    }
    /// The attempts allowed.
    pub fn max_attempts(mut self, max_attempts: i16) -> Self {
        self.job.max_attempts = max_attempts;
        self
    }
    /// The error of the previous attempt.
    pub fn last_error(mut self, error: impl Into<String>) -> Self {
        self.job.last_error = Some(error.into());
        self
    }
    /// The job's key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.job.key = Some(key.into());
        self
    }
    /// The job's named queue.
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        self.job.queue_name = Some(name.into());
        self
    }
    /// The job's priority.
    pub fn priority(mut self, priority: i16) -> Self {
        self.job.priority = priority;
        self
    }
    /// When the job was due.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.job.run_at = at;
        self
    }
    /// The job's flags.
    pub fn flags<I: IntoIterator<Item = S>, S: Into<String>>(mut self, flags: I) -> Self {
        self.job.flags = flags.into_iter().map(Into::into).collect();
        self
    }
    /// The time of the run (default: the wall clock when the job was built): the job's
    /// `run_at`, `created_at` and `locked_at`, and the `run_at` of a job the handler adds
    /// without one.
    pub fn now(mut self, now: DateTime<Utc>) -> Self {
        let job = &mut self.job;
        (job.run_at, job.created_at, job.updated_at, job.locked_at) = (now, now, now, Some(now));
        self.now = now;
        self
    }
    /// The id of the worker running it (default `formica-test`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = id.into();
        self.job.locked_by = Some(self.worker_id.clone());
        self
    }
    /// Give the handler `value`, reached by its type with [`JobContext::extension`] (as
    /// [`WorkerOptions::add_extension`](crate::WorkerOptions::add_extension) does).
    pub fn extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The job as the handler sees it.
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// Run the job with `T::run`, as a worker would.
    ///
    /// # Panics
    ///
    /// If the job is not of task `T` (the worker would not give it to `T`).
    pub async fn run<T: TaskHandler>(self) -> Ran {
        self.run_with(T::IDENTIFIER, typed_handler::<T>()).await
    }

    /// Run the batch job with `T::run_batch`, as a worker would.
    ///
    /// # Panics
    ///
    /// If the job is not of task `T`.
    pub async fn run_batch<T: BatchTaskHandler>(self) -> Ran {
        self.run_with(T::IDENTIFIER, typed_batch_handler::<T>()).await
    }

    async fn run_with(self, task: &str, handler: Handler) -> Ran {
        let TestJob { job, now, worker_id, extensions } = self;
        assert_eq!(
            job.task_identifier, task,
            "a job of task {:?} run by the handler of {task:?}",
            job.task_identifier
        );
        let recorder = Arc::new(Recorder::new(now));
        // The trigger is dropped: the signal never fires.
        let (_, abort) = AbortSignal::new();
        let span =
            tracing::info_span!("job", job_id = job.id, task = %job.task_identifier, worker_id = %worker_id);
        let payload = job.payload.clone();
        let ctx = JobContext {
            job: Arc::new(job),
            worker_id: worker_id.into(),
            database: Database::Recorded(recorder.clone()),
            abort,
            span: span.clone(),
            extensions: Arc::new(extensions),
            outputs: None,
            durable: None,
            progress: None,
        };
        let outcome = handler(ctx, payload).instrument(span).await;
        let (added, workflow_jobs) = recorder.take();
        Ran { outcome: TestOutcome::of(outcome), added, workflow_jobs }
    }
}

fn as_json<T: Serialize + ?Sized>(payload: &T) -> Value {
    serde_json::to_value(payload).unwrap_or_else(|e| panic!("a test job's payload as JSON: {e}"))
}

/// How a handler's run ended, as the worker would record it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TestOutcome {
    /// It succeeded: the job would be completed.
    Completed,
    /// The attempt failed with `error`, the job's `last_error` (the error and its causes,
    /// or why the payload does not decode).
    Failed {
        /// The error.
        error: String,
    },
    /// A run layer skipped it with `reason`: the job would be completed unrun.
    Skipped {
        /// Why.
        reason: String,
    },
    /// Items of a batch failed: the attempt fails with `error` and the job keeps only
    /// `items` for its retry.
    ItemsFailed {
        /// What failed, item by item.
        error: String,
        /// The items kept.
        items: Value,
    },
    /// The handler snoozed: the job would run again after `delay`, its attempt refunded
    /// (within its task's snooze window).
    Snoozed {
        /// How long.
        delay: std::time::Duration,
    },
}

impl TestOutcome {
    fn of(outcome: TaskOutcome) -> Self {
        match outcome {
            // A test context has no database to commit in: never committed, but completed.
            TaskOutcome::Ok | TaskOutcome::Committed => TestOutcome::Completed,
            TaskOutcome::Skipped(reason) => TestOutcome::Skipped { reason },
            TaskOutcome::ItemsFailed { error, items } => TestOutcome::ItemsFailed { error, items },
            TaskOutcome::Err(error) | TaskOutcome::Panicked(error) => TestOutcome::Failed { error },
            // A test run is never aborted.
            TaskOutcome::Aborted | TaskOutcome::Unstoppable => {
                TestOutcome::Failed { error: "aborted".into() }
            }
            TaskOutcome::Snoozed(delay) => TestOutcome::Snoozed { delay: delay.to_std().unwrap_or_default() },
        }
    }
}

/// What a [`TestJob`]'s run did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Ran {
    /// How it ended.
    pub outcome: TestOutcome,
    /// The jobs the handler added through its context, in order, as the database would
    /// have stored them (ids from 1; `run_at` the run's time if not given).
    pub added: Vec<Job>,
    /// The jobs the handler added to its workflow
    /// ([`JobContext::add_workflow_jobs`]), in order.
    pub workflow_jobs: Vec<AddedWorkflowJob>,
}

impl Ran {
    /// The added jobs `expected` matches.
    ///
    /// # Panics
    ///
    /// If there are none, listing the jobs added instead.
    pub fn assert_added(&self, expected: &Expected) -> Vec<&Job> {
        assert_found(expected, &self.added, "added by the handler")
    }

    /// # Panics
    ///
    /// If an added job matches `expected`, listing those that do.
    pub fn refute_added(&self, expected: &Expected) {
        refute_found(expected, &self.added, "added by the handler")
    }

    /// The jobs added to the workflow whose job `expected` matches.
    ///
    /// # Panics
    ///
    /// If there are none, listing the jobs added to the workflow instead.
    pub fn assert_added_to_workflow(&self, expected: &Expected) -> Vec<&AddedWorkflowJob> {
        assert_found_in(
            expected,
            &self.workflow_jobs,
            |added| &added.job,
            "added to the workflow by the handler",
        )
    }
}
