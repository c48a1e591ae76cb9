//! The database of a [`TestJob`](super::TestJob)'s context: none. What the handler adds
//! through its context (jobs, and jobs of its workflow) is recorded here, as the database
//! would have stored it.

use crate::error::Error;
use crate::workflows::{AddedWorkflow, Workflow, WorkflowJob};
use chrono::{DateTime, Utc};
use formica_core::job::{Job, JobSpec, DEFAULT_MAX_ATTEMPTS};
use serde_json::Value;
use std::sync::{Mutex, PoisonError};

/// The workflow id a [`TestJob`](super::TestJob)'s `add_workflow_jobs` answers with.
pub(crate) const TEST_WORKFLOW_ID: i64 = 1;

/// A job the handler added to its workflow with
/// [`JobContext::add_workflow_jobs`](crate::JobContext::add_workflow_jobs) in a test: its
/// name as given (the workflow names it `"<the adder's name>/<name>"`), what it depends on,
/// and the job it is once released.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AddedWorkflowJob {
    /// Its name, as given.
    pub name: String,
    /// The names of the jobs it depends on (among those added with it).
    pub depends_on: Vec<String>,
    /// Whether the add released it at once (nothing to wait for, not a sub-workflow): then
    /// `job.id` is its job's id, from the sequence of the jobs added (else 0).
    pub released: bool,
    /// Its job as the database would store it once released (`run_at` the run's time if
    /// not given; a sub-workflow job's task is `formica:subworkflow`).
    pub job: Job,
}

/// Why a [`TestJob`](super::TestJob)'s context cannot reach a database.
pub(crate) const NO_DATABASE: &str = "this JobContext comes from formica::testing::TestJob and has no \
    database: the jobs it adds are recorded (Ran::added); test what needs the database with a worker on a \
    TestSchema";

/// What one test context's handler added, in order.
#[derive(Default)]
struct Added {
    jobs: Vec<Job>,
    workflow_jobs: Vec<AddedWorkflowJob>,
    /// The last job id given (jobs, and workflow jobs released, share the sequence).
    last_id: i64,
}

/// The jobs added through one test context, in order.
pub(crate) struct Recorder {
    /// The time of the run: what a job added without `run_at` is due at.
    now: DateTime<Utc>,
    added: Mutex<Added>,
}

impl Recorder {
    pub(crate) fn new(now: DateTime<Utc>) -> Self {
        Recorder { now, added: Mutex::new(Added::default()) }
    }

    /// Record a job as `add_job` would store it, with ids from 1 in the order added. The
    /// spec is checked as the database path checks it; a job key replaces nothing here.
    pub(crate) fn add(&self, task: &str, payload: Value, spec: JobSpec) -> Result<Job, Error> {
        let (spec, _) = spec.with_unique_key(task, &payload, Some(self.now))?;
        spec.validate(task)?;
        let mut added = self.added.lock().unwrap_or_else(PoisonError::into_inner);
        added.last_id += 1;
        let job = self.stored(added.last_id, task, payload, spec);
        added.jobs.push(job.clone());
        Ok(job)
    }

    /// Record `jobs` added to the running job's workflow, validated as the database path
    /// validates them (names unique, dependencies among them, no cycle, each job's spec);
    /// those released at once get ids from the jobs' sequence. The answer is the database's:
    /// the workflow ([`TEST_WORKFLOW_ID`]) and the jobs released (names as given).
    pub(crate) fn add_workflow_jobs(&self, jobs: Vec<WorkflowJob>) -> Result<AddedWorkflow, Error> {
        let workflow = jobs.into_iter().fold(Workflow::new("test"), Workflow::job);
        workflow.graph()?;
        workflow.spec(&|job| Ok(job))?;
        let mut added = self.added.lock().unwrap_or_else(PoisonError::into_inner);
        let mut released = Vec::new();
        for job in workflow.jobs() {
            let raw = job.raw_job();
            let id = match job.released_at_once() {
                true => {
                    added.last_id += 1;
                    released.push((job.name().to_owned(), added.last_id));
                    added.last_id
                }
                false => 0,
            };
            let stored = self.stored(id, &raw.identifier, raw.payload.clone(), raw.spec.clone());
            added.workflow_jobs.push(AddedWorkflowJob {
                name: job.name().to_owned(),
                depends_on: job.dependencies().to_vec(),
                released: job.released_at_once(),
                job: stored,
            });
        }
        Ok(AddedWorkflow { id: TEST_WORKFLOW_ID, released })
    }

    /// A job as the database stores `payload` added with `spec` (checked) at the run's time.
    fn stored(&self, id: i64, task: &str, payload: Value, spec: JobSpec) -> Job {
        Job {
            id,
            job_queue_id: None,
            queue_name: spec.queue_name,
            task_identifier: task.to_owned(),
            payload: payload.into(),
            priority: spec.priority.unwrap_or(0),
            run_at: spec.run_at.unwrap_or(self.now),
            attempts: 0,
            max_attempts: spec.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS),
            last_error: None,
            created_at: self.now,
            updated_at: self.now,
            key: spec.job_key,
            locked_at: None,
            locked_by: None,
            revision: 0,
            flags: spec.flags.unwrap_or_default().into_iter().collect(),
        }
    }

    /// The jobs recorded so far, and the workflow jobs.
    pub(crate) fn take(&self) -> (Vec<Job>, Vec<AddedWorkflowJob>) {
        let added = std::mem::take(&mut *self.added.lock().unwrap_or_else(PoisonError::into_inner));
        (added.jobs, added.workflow_jobs)
    }
}
