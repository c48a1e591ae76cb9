//! The workflow tables of the simulated database (records migration 11's
//! `workflows`, `workflow_jobs` and `workflow_dependencies`, by workflow): what
//! `workflow.rs`'s statements read and write.

use crate::job::RawJob;
use crate::time::Timestamp;
use crate::workflow::{Callback, Graph, JobState, Node, OnDependencyFailure, Progress, WorkflowState};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// One job of a workflow to add: its place in the graph and the job it becomes when released.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowJob {
    /// Its name, dependencies, policy and callback kind.
    pub node: Node,
    /// The job added to the jobs table when it is released (no job key).
    pub job: RawJob,
}

impl WorkflowJob {
    /// Job `name`, added as `job` once everything in `depends_on` completed.
    pub fn new(
        name: impl Into<String>,
        depends_on: impl IntoIterator<Item = impl Into<String>>,
        job: RawJob,
    ) -> Self {
        WorkflowJob { node: Node::new(name, depends_on), job }
    }

    /// The same job with another dependency-failure policy.
    pub fn on_dependency_failure(mut self, policy: OnDependencyFailure) -> Self {
        self.node = self.node.on_dependency_failure(policy);
        self
    }

    /// The same job as a batch callback of kind `callback`.
    pub fn callback(mut self, callback: Callback) -> Self {
        self.node = self.node.callback(callback);
        self
    }
}

/// A workflow's rows: the workflow, and each job's state and graphile_worker job.
#[derive(Debug, Clone)]
pub struct SimWorkflow {
    pub(super) id: i64,
    pub(super) name: String,
    pub(super) graph: Graph,
    pub(super) progress: Progress,
    pub(super) jobs: Vec<RawJob>,
    pub(super) job_ids: Vec<Option<i64>>,
    pub(super) cancel_reason: Option<String>,
    /// When its last job settled (the latest `finished_at` of its jobs), while none waits
    /// or is released: what the history's pruner measures its retention from.
    pub(super) finished_at: Option<Timestamp>,
    /// Records step 23's `workflow_waits`: each job's signal payload once received, whether
    /// its timeout passed, and its deadline once it waits for its signal only.
    pub(super) signal_payloads: Vec<Option<Value>>,
    pub(super) timed_out: Vec<bool>,
    pub(super) deadlines: Vec<Option<Timestamp>>,
}

impl SimWorkflow {
    /// Its id.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its jobs' graph (their indexes are those of the jobs as added).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The state of each of its jobs.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The state of job `i`.
    pub fn state(&self, i: usize) -> JobState {
        self.progress.state(i)
    }

    /// The workflow's state (the view `workflow_states`).
    pub fn workflow_state(&self) -> WorkflowState {
        self.progress.workflow_state()
    }

    /// Whether none of its jobs waits or is released (`workflow_unfinished` is false).
    pub fn is_finished(&self) -> bool {
        (0..self.jobs.len()).all(|i| !matches!(self.state(i), JobState::Waiting | JobState::Released))
    }

    /// When its last job settled, if it is finished.
    pub fn finished_at(&self) -> Option<Timestamp> {
        self.finished_at
    }

    /// The jobs table's job of job `i` since it was (last) released.
    pub fn job_id(&self, i: usize) -> Option<i64> {
        self.job_ids[i]
    }

    /// The reason `cancel_workflow` was given, once it ran.
    pub fn cancel_reason(&self) -> Option<&str> {
        self.cancel_reason.as_deref()
    }

    /// When job `i` stops waiting for its signal, once its timeout runs.
    pub fn signal_deadline(&self, i: usize) -> Option<Timestamp> {
        self.deadlines[i]
    }

    /// The job job `i` becomes when released at `now` (a callback's with its batch's counts,
    /// one that waited for a signal with it, one with a timer due its delay later).
    pub(super) fn release_job(&self, i: usize, now: Timestamp) -> RawJob {
        let mut job = self.jobs[i].clone();
        let node = &self.graph.nodes()[i];
        if let Some(delay) = node.delay.and_then(|d| chrono::Duration::from_std(d).ok()) {
            job.spec.run_at = Some(job.spec.run_at.map_or(now + delay, |at| at.max(now + delay)));
        }
        if let (Some(signal), Value::Object(payload)) = (&node.signal, &mut job.payload) {
            let report = json!({
                "name": signal.name,
                "payload": self.signal_payloads[i].clone().unwrap_or(Value::Null),
                "timed_out": self.timed_out[i],
            });
            payload.insert("signal".into(), report);
        }
        job.spec.flags.get_or_insert_with(Vec::new).push(crate::workflow::FLAG.into());
        if self.graph.nodes()[i].callback.is_some() {
            let counts = self.progress.batch_counts(&self.graph, i);
            if let Value::Object(payload) = &mut job.payload {
                let batch = json!({
                    "completed": counts.completed,
                    "failed": counts.failed,
                    "cancelled": counts.cancelled,
                    "unfinished": counts.unfinished,
                    "outputs": {},
                });
                payload.insert("batch".into(), batch);
            }
        }
        job
    }
}

/// A job added to the jobs table for a workflow job (at add, on release, or by a retry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The workflow.
    pub workflow: i64,
    /// The job's index in it.
    pub job: usize,
    /// The jobs table's job.
    pub job_id: i64,
    /// The database clock then.
    pub at: Timestamp,
}

/// The workflow tables.
#[derive(Debug, Clone, Default)]
pub(super) struct Workflows {
    pub(super) by_id: BTreeMap<i64, SimWorkflow>,
    /// The last id given (the `workflows` table's identity: an id is never given twice, not
    /// even once its workflow was pruned).
    pub(super) last_id: i64,
    /// The released jobs by their job's id (the table `released_workflow_jobs`).
    pub(super) released: BTreeMap<i64, (i64, usize)>,
    pub(super) releases: Vec<Release>,
}
