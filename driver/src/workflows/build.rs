//! What an application builds a workflow from, and what it gets back.

use crate::error::Error;
use formica_core::job::{JobSpec, RawJob, Task};
use formica_core::workflow::{
    Callback, Graph, Node, OnDependencyFailure, SignalWait, WorkflowError, SUBWORKFLOW_TASK,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// One job of a [`Workflow`]: a job to add (task, payload, [`JobSpec`]) with a name unique
/// in its workflow, what it waits for, and what a failure of those does to it.
#[derive(Debug, Clone)]
pub struct WorkflowJob {
    name: String,
    job: RawJob,
    policy_max_attempts: Option<i16>,
    depends_on: Vec<String>,
    on_dependency_failure: OnDependencyFailure,
    callback: Option<Callback>,
    signal: Option<SignalWait>,
    delay: Option<Duration>,
    /// A sub-workflow job: the workflow added when it is released, whose end settles it.
    workflow: Option<Box<Workflow>>,
}

impl WorkflowJob {
    /// A job of task `T` with `payload`, named `name` in its workflow.
    pub fn new<T: Task + Serialize>(name: impl Into<String>, payload: &T) -> Result<Self, Error> {
        let mut job = Self::raw(name, T::IDENTIFIER, serde_json::to_value(payload)?);
        job.policy_max_attempts = T::POLICY.max_attempts;
        job.job.spec = job.job.spec.with_policy(&T::POLICY);
        Ok(job)
    }

    /// A job of the task named `identifier`, named `name` in its workflow.
    pub fn raw(name: impl Into<String>, identifier: impl Into<String>, payload: Value) -> Self {
        WorkflowJob {
            name: name.into(),
            job: RawJob::new(identifier.into(), payload, JobSpec::default()),
            policy_max_attempts: None,
            depends_on: Vec::new(),
            on_dependency_failure: OnDependencyFailure::Cancel,
            callback: None,
            signal: None,
            delay: None,
            workflow: None,
        }
    }

    /// A job that is the whole `workflow` (a sub-workflow), named `name` in its workflow:
    /// when released it adds `workflow` (validated with this one's), and it settles when
    /// every job of that has settled: completed if all completed (its output then the
    /// outputs of the sub-workflow's jobs, by name: what a callback depending on it reads),
    /// failed if one failed, cancelled if the sub-workflow was cancelled. Cancelling the
    /// workflow that holds it cancels the sub-workflow too. Its [`Self::spec`] is not used.
    pub fn workflow(name: impl Into<String>, workflow: Workflow) -> Self {
        let mut job = Self::raw(name, SUBWORKFLOW_TASK, Value::Object(serde_json::Map::new()));
        job.workflow = Some(Box::new(workflow));
        job
    }

    /// Queue, run time, attempts, priority and flags of the job (a job key or `unique` is
    /// refused: another add could replace or remove the job behind the workflow's back).
    pub fn spec(mut self, spec: JobSpec) -> Self {
        self.job.spec = spec;
        self.job.spec.max_attempts = self.job.spec.max_attempts.or(self.policy_max_attempts);
        self
    }

    /// Wait for these jobs of the workflow (by name) to settle; may be called again to add
    /// more.
    pub fn depends_on(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.depends_on.extend(names.into_iter().map(Into::into));
        self
    }

    /// What a dependency failing for good or cancelled does to this job: cancel it (the
    /// default) or release it anyway once all it depends on has settled.
    pub fn on_dependency_failure(mut self, policy: OnDependencyFailure) -> Self {
        self.on_dependency_failure = policy;
        self
    }

    /// Make this job a batch callback: released when all it depends on has settled
    /// ([`Callback::AllFinished`]) or at the first of them not completed
    /// ([`Callback::FirstFailure`]), its payload (a JSON object) given the key `"batch"`: a
    /// [`BatchReport`].
    pub fn callback(mut self, when: Callback) -> Self {
        self.callback = Some(when);
        self
    }

    /// Wait for a signal too ([`SignalWait`]): sent to the workflow by
    /// [`WorkerUtils::signal_workflow`](crate::WorkerUtils::signal_workflow), the CLI, the
    /// dashboard or SQL (`signal_workflow`), it releases the job once its dependencies have
    /// settled; the payload (a JSON object) gets the key `"signal"`: a [`SignalReport`].
    pub fn wait_for_signal(mut self, signal: SignalWait) -> Self {
        self.signal = Some(signal);
        self
    }

    /// A timer: once released (its dependencies settled, its signal come), the job runs
    /// `delay` later, not before (nor before its own `run_at`).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Its name in the workflow.
    pub fn name(&self) -> &str {
        &self.name
    }

    #[cfg(feature = "testing")]
    /// Its job: task, payload and spec (a sub-workflow job's task is [`SUBWORKFLOW_TASK`]).
    pub(crate) fn raw_job(&self) -> &RawJob {
        &self.job
    }

    #[cfg(feature = "testing")]
    /// The names of the jobs it depends on.
    pub(crate) fn dependencies(&self) -> &[String] {
        &self.depends_on
    }

    #[cfg(feature = "testing")]
    /// Whether adding it releases it as a job at once (nothing to wait for, not a
    /// sub-workflow).
    pub(crate) fn released_at_once(&self) -> bool {
        self.depends_on.is_empty() && self.signal.is_none() && self.workflow.is_none()
    }
}

/// A set of jobs to add together, each naming those of the set it waits for (any DAG).
#[derive(Debug, Clone)]
pub struct Workflow {
    name: String,
    jobs: Vec<WorkflowJob>,
}

impl Workflow {
    /// An empty workflow named `name` (names need not be unique: ids tell workflows apart).
    pub fn new(name: impl Into<String>) -> Self {
        Workflow { name: name.into(), jobs: Vec::new() }
    }

    /// Add `job` to the workflow.
    pub fn job(mut self, job: WorkflowJob) -> Self {
        self.jobs.push(job);
        self
    }

    /// A batch: `jobs`, and `callback` made to depend on every one of them, released `when`
    /// they all finished or at the first failure.
    pub fn batch(
        name: impl Into<String>,
        jobs: Vec<WorkflowJob>,
        callback: WorkflowJob,
        when: Callback,
    ) -> Self {
        let names: Vec<String> = jobs.iter().map(|job| job.name.clone()).collect();
        let mut workflow = Workflow { name: name.into(), jobs };
        workflow.jobs.push(callback.depends_on(names).callback(when));
        workflow
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its jobs, in the order added.
    pub fn jobs(&self) -> &[WorkflowJob] {
        &self.jobs
    }

    /// Its graph, validated (rule 7 of `core::workflow`): every refusal comes from here,
    /// before anything is sent.
    pub fn graph(&self) -> Result<Graph, WorkflowError> {
        let nodes = self.jobs.iter().map(|job| {
            let mut node = Node::new(job.name.clone(), job.depends_on.iter().cloned())
                .on_dependency_failure(job.on_dependency_failure);
            node.callback = job.callback;
            node.signal = job.signal.clone();
            node.delay = job.delay;
            node
        });
        let graph = Graph::new(nodes.collect())?;
        for job in &self.jobs {
            if job.job.spec.job_key.is_some() || job.job.spec.unique.is_some() {
                return Err(WorkflowError::JobKey(job.name.clone()));
            }
            if let Some(workflow) = &job.workflow {
                workflow.graph()?;
            }
            let takes = |key| job.job.payload.as_object().is_some_and(|object| !object.contains_key(key));
            if job.callback.is_some() && !takes("batch") {
                return Err(WorkflowError::CallbackPayload(job.name.clone()));
            }
            if job.signal.is_some() && !takes("signal") {
                return Err(WorkflowError::SignalPayload(job.name.clone()));
            }
        }
        Ok(graph)
    }

    /// The jobs as `add_workflow` in records migration 11 reads them, each through the add
    /// layers `apply` and checked as any job added (a sub-workflow job's workflow in the
    /// same way, under `"workflow"`).
    pub(crate) fn spec(&self, apply: &dyn Fn(RawJob) -> Result<RawJob, Error>) -> Result<Value, Error> {
        let mut jobs = Vec::with_capacity(self.jobs.len());
        for job in &self.jobs {
            let (raw, workflow) = match &job.workflow {
                Some(workflow) => {
                    let inner = workflow.spec(apply)?;
                    (job.job.clone(), serde_json::json!({ "name": workflow.name, "jobs": inner }))
                }
                None => (apply(job.job.clone())?, Value::Null),
            };
            if raw.spec.job_key.is_some() || raw.spec.unique.is_some() {
                return Err(WorkflowError::JobKey(job.name.clone()).into());
            }
            raw.spec.validate(&raw.identifier)?;
            jobs.push(serde_json::json!({
                "name": job.name,
                "task_identifier": raw.identifier,
                "payload": raw.payload,
                "queue_name": raw.spec.queue_name,
                "run_at": raw.spec.run_at,
                "max_attempts": raw.spec.max_attempts,
                "priority": raw.spec.priority,
                "flags": raw.spec.flags,
                "on_dependency_failure": job.on_dependency_failure.as_str(),
                "callback": job.callback.map(Callback::as_str),
                "workflow": workflow,
                "depends_on": job.depends_on,
                "delay": job.delay.map(|d| d.as_secs_f64()),
                "signal": job.signal.as_ref().map(|signal| serde_json::json!({
                    "name": signal.name,
                    "timeout": signal.timeout.map(|t| t.as_secs_f64()),
                    "on_timeout": signal.on_timeout.as_str(),
                })),
            }));
        }
        Ok(Value::Array(jobs))
    }
}

/// A workflow added: its id, and the jobs released at once (name, `graphile_worker` job id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedWorkflow {
    /// The workflow's id (`workflows.id` in Formica's schema).
    pub id: i64,
    /// The jobs with nothing to wait for, added to `graphile_worker` with the workflow.
    pub released: Vec<(String, i64)>,
}

/// What a batch callback's payload holds under `"batch"`: how the jobs it depends on
/// settled, and the outputs kept of those that have one (a Formica worker writing history
/// keeps what a handler returned). Read it with a field `batch: BatchReport` in the
/// callback's payload type.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchReport {
    /// Completed.
    pub completed: i64,
    /// Failed for good.
    pub failed: i64,
    /// Cancelled (by a dependency, Formica's cancel or `cancel_workflow`).
    pub cancelled: i64,
    /// Not settled yet (only a `first_failure` callback sees some).
    pub unfinished: i64,
    /// Each job's output, by its name in the workflow, for those that have one.
    #[serde(default)]
    pub outputs: BTreeMap<String, Value>,
}

/// What the payload of a job that waited for a signal holds under `"signal"`: the signal and
/// its payload, or that it timed out (a job released at its timeout). Read it with a field
/// `signal: SignalReport` in the job's payload type.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SignalReport {
    /// The signal's name.
    pub name: String,
    /// The payload it was sent with (null if none, or if it timed out).
    #[serde(default)]
    pub payload: Value,
    /// Released at its timeout, without the signal.
    #[serde(default)]
    pub timed_out: bool,
}
