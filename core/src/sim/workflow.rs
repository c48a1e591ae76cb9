//! Workflows on the simulated database, as records migration 11 keeps them: a workflow's
//! jobs wait here, outside the jobs table, and [`crate::workflow`]'s rules decide when one
//! becomes a job. A worker's completion, and a failure that leaves no attempt (and
//! `cancel_jobs` failing a job), settle the workflow job in the same statement and add the
//! dependents it releases there too, atomically as every statement of the sim is. A job
//! that leaves the jobs table any other way (graphile-worker's `complete_jobs`,
//! `remove_job`: a worker that is not Formica's) or is failed for good by the recovery is
//! settled by [`Db::resolve_workflows`], the resolver's pass, which a test runs when it
//! likes. Outputs are not modelled: a callback's `batch.outputs` is empty. Signals and
//! timers are records step 23's: [`Db::signal_workflow`] releases in its statement, the
//! resolver's pass times out the signals whose deadline passed by the simulated clock, and a
//! timer's job is due its delay after its release. The history's pruner removes finished
//! workflows past their retention (records migration 22).

use super::db::Db;
use super::workflow_rows::{Release, SimWorkflow, WorkflowJob};
use super::World;
use crate::job::{Job, RawJob};
use crate::protocol::{DbError, Retention};
use crate::time::Timestamp;
use crate::workflow::{Change, Graph, Node, Outcome, Progress, Signalled, WorkflowError, WorkflowState};
use serde_json::Value;

fn refused(error: WorkflowError) -> DbError {
    DbError { message: error.to_string(), retryable: false }
}

/// Failed for good, as the resolver and the failure statement read a row: no attempt left
/// and not running; cancelled if its last error says so.
fn final_outcome(job: &Job) -> Option<Outcome> {
    if job.attempts < job.max_attempts || job.locked_at.is_some() {
        return None;
    }
    let cancelled = job.last_error.as_deref().is_some_and(|e| e.starts_with("cancelled: "));
    Some(if cancelled { Outcome::Cancelled } else { Outcome::Failed })
}

impl Db {
    /// `add_workflow`: validate (rule 7), then in one statement record the workflow and add
    /// every job with no dependency. Returns its id and the jobs released, by name. Refused
    /// as a whole (nothing added) if the graph, a job key, a callback's payload or a job
    /// the schema would refuse is wrong.
    pub fn add_workflow(
        &mut self,
        name: &str,
        jobs: Vec<WorkflowJob>,
    ) -> Result<(i64, Vec<(String, i64)>), DbError> {
        for WorkflowJob { node, job } in &jobs {
            if job.spec.job_key.is_some() || job.spec.unique.is_some() {
                return Err(refused(WorkflowError::JobKey(node.name.clone())));
            }
            let takes = |key| job.payload.as_object().is_some_and(|o| !o.contains_key(key));
            if node.callback.is_some() && !takes("batch") {
                return Err(refused(WorkflowError::CallbackPayload(node.name.clone())));
            }
            if node.signal.is_some() && !takes("signal") {
                return Err(refused(WorkflowError::SignalPayload(node.name.clone())));
            }
            Self::check(job)?;
        }
        let (nodes, jobs): (Vec<Node>, Vec<RawJob>) = jobs.into_iter().map(|j| (j.node, j.job)).unzip();
        let graph = Graph::new(nodes).map_err(refused)?;
        let (progress, released) = Progress::start(&graph);
        self.workflows.last_id += 1;
        let id = self.workflows.last_id;
        let n = jobs.len();
        let workflow = SimWorkflow {
            id,
            name: name.into(),
            graph,
            progress,
            jobs,
            job_ids: vec![None; n],
            cancel_reason: None,
            finished_at: None,
            signal_payloads: vec![None; n],
            timed_out: vec![false; n],
            deadlines: vec![None; n],
        };
        self.workflows.by_id.insert(id, workflow);
        let mut added = Vec::new();
        for i in released {
            let job_id = self.release(id, i);
            added.push((self.workflows.by_id[&id].graph.nodes()[i].name.clone(), job_id));
        }
        self.arm_deadlines(id);
        Ok((id, added))
    }

    /// Every workflow, by id.
    pub fn workflows(&self) -> impl Iterator<Item = &SimWorkflow> {
        self.workflows.by_id.values()
    }

    /// Workflow `id`.
    pub fn workflow(&self, id: i64) -> Option<&SimWorkflow> {
        self.workflows.by_id.get(&id)
    }

    /// Every job added for a workflow job, in order.
    pub fn releases(&self) -> &[Release] {
        &self.workflows.releases
    }

    /// The workflow job whose job is `job_id`, while it is released: (workflow, index).
    pub fn workflow_job_of(&self, job_id: i64) -> Option<(i64, usize)> {
        self.workflows.released.get(&job_id).copied()
    }

    /// Add job `i` of workflow `id` to the jobs table (it was just released); its job's id.
    fn release(&mut self, id: i64, i: usize) -> i64 {
        let job = self.workflows.by_id[&id].release_job(i, self.now);
        let job_id = match self.add_jobs(std::slice::from_ref(&job), false) {
            Ok(rows) => rows.first().map_or(0, |row| row.id),
            // Checked at add: a row the schema refuses never gets this far.
            Err(e) => unreachable!("a workflow job checked at add was refused: {e:?}"),
        };
        self.record_release(id, i, job_id);
        job_id
    }

    fn record_release(&mut self, id: i64, i: usize, job_id: i64) {
        if let Some(workflow) = self.workflows.by_id.get_mut(&id) {
            workflow.job_ids[i] = Some(job_id);
        }
        self.workflows.released.insert(job_id, (id, i));
        let at = self.now;
        self.workflows.releases.push(Release { workflow: id, job: i, job_id, at });
    }

    /// Settle the workflow job whose job is `job_id` (if one is released) with `outcome`, and
    /// add what that releases: the rules of [`Progress::settle`], in the caller's statement.
    pub(super) fn settle_workflow_job(&mut self, job_id: i64, outcome: Outcome) -> bool {
        let Some((id, i)) = self.workflows.released.remove(&job_id) else { return false };
        let Some(workflow) = self.workflows.by_id.get_mut(&id) else { return false };
        let changes = workflow.progress.settle(&workflow.graph, i, outcome);
        self.apply(id, changes);
        true
    }

    /// Add the jobs `changes` released, and start the timeouts of the jobs now waiting for
    /// their signal only (records step 23's `workflow_jobs_ready`).
    fn apply(&mut self, id: i64, changes: Vec<Change>) {
        for change in changes {
            match change {
                Change::Released(d) => _ = self.release(id, d),
                Change::Cancelled(_) => {}
            }
        }
        self.arm_deadlines(id);
        self.note_finished(id);
    }

    fn arm_deadlines(&mut self, id: i64) {
        let now = self.now;
        let Some(workflow) = self.workflows.by_id.get_mut(&id) else { return };
        for i in 0..workflow.graph.len() {
            let timeout = workflow.graph.nodes()[i].signal.as_ref().and_then(|s| s.timeout);
            let timeout = timeout.and_then(|t| chrono::Duration::from_std(t).ok());
            if let Some(timeout) = timeout.filter(|_| workflow.progress.waits_for_signal_only(i)) {
                workflow.deadlines[i].get_or_insert(now + timeout);
            }
        }
    }

    /// `signal_workflow(id, name, payload)` (rule 8): what [`Progress::signal`] says, the
    /// jobs it releases added, in one statement. `None`: no such workflow.
    pub fn signal_workflow(&mut self, id: i64, name: &str, payload: Value) -> Option<Signalled> {
        let workflow = self.workflows.by_id.get_mut(&id)?;
        let signalled = workflow.progress.signal(&workflow.graph, name);
        if let Signalled::Received { jobs, released } = &signalled {
            for &i in jobs {
                workflow.signal_payloads[i] = Some(payload.clone());
            }
            let changes = released.iter().map(|&i| Change::Released(i)).collect();
            self.apply(id, changes);
        }
        Some(signalled)
    }

    /// The resolver's part for signals: each job whose deadline passed times out
    /// ([`Progress::time_out`]). Returns how many.
    fn time_out_signals(&mut self) -> u64 {
        let now = self.now;
        let mut timed_out = 0;
        let ids: Vec<i64> = self.workflows.by_id.keys().copied().collect();
        for id in ids {
            let Some(workflow) = self.workflows.by_id.get_mut(&id) else { continue };
            let due: Vec<usize> = (0..workflow.graph.len())
                .filter(|&i| workflow.deadlines[i].is_some_and(|at| at <= now))
                .filter(|&i| workflow.progress.waits_for_signal_only(i))
                .collect();
            let mut changes = Vec::new();
            for i in due {
                let more = workflow.progress.time_out(&workflow.graph, i);
                if !more.is_empty() {
                    workflow.timed_out[i] = true;
                    timed_out += 1;
                }
                changes.extend(more);
            }
            self.apply(id, changes);
        }
        timed_out
    }

    /// Note when workflow `id` finished (its last job settled now), or that it runs again.
    fn note_finished(&mut self, id: i64) {
        let now = self.now;
        if let Some(workflow) = self.workflows.by_id.get_mut(&id) {
            workflow.finished_at = match workflow.is_finished() {
                true => workflow.finished_at.or(Some(now)),
                false => None,
            };
        }
    }

    /// The history pruner's part for workflows (`prune_workflows`, records migration 22):
    /// remove the finished workflows whose last job settled longer ago, as of `at`, than
    /// `retention` keeps a job that ended as the workflow did (none: kept). Returns how many.
    pub(super) fn prune_workflows(&mut self, retention: &Retention, at: Timestamp) -> i64 {
        let kept = |state: WorkflowState| match state {
            WorkflowState::Completed => retention.completed,
            WorkflowState::Failed => retention.failed,
            WorkflowState::Cancelled => retention.cancelled,
            WorkflowState::Running => None,
        };
        let before = self.workflows.by_id.len();
        self.workflows.by_id.retain(|_, workflow| {
            let past = |finished: Timestamp| {
                kept(workflow.workflow_state()).is_some_and(|keep| finished < at - keep)
            };
            !workflow.finished_at.is_some_and(past)
        });
        i64::try_from(before - self.workflows.by_id.len()).unwrap_or(i64::MAX)
    }

    /// Settle the workflow job of `job_id` if its row failed for good (the failure statement
    /// and `cancel_jobs`, after they changed it).
    pub(super) fn settle_if_failed_for_good(&mut self, job_id: i64) {
        if !self.workflows.released.contains_key(&job_id) {
            return;
        }
        if let Some(outcome) = self.jobs.get(&job_id).and_then(final_outcome) {
            self.settle_workflow_job(job_id, outcome);
        }
    }

    /// The resolver's pass: every released workflow job whose job left the jobs table is
    /// completed (a worker that is not Formica's completed it, or someone removed it); one
    /// whose job failed for good is failed, or cancelled if its last error starts
    /// `cancelled: `. Then the signals whose deadline passed time out. Returns how many it
    /// settled or timed out.
    pub fn resolve_workflows(&mut self) -> u64 {
        let released: Vec<i64> = self.workflows.released.keys().copied().collect();
        let mut settled = 0;
        for job_id in released {
            let outcome = match self.jobs.get(&job_id) {
                None => Some(Outcome::Completed),
                Some(job) => final_outcome(job),
            };
            if let Some(outcome) = outcome {
                settled += u64::from(self.settle_workflow_job(job_id, outcome));
            }
        }
        settled + self.time_out_signals()
    }

    /// `cancel_workflow(id, reason)` (rule 4): its waiting jobs are cancelled, and its
    /// released jobs get Formica's cancel (`cancel_jobs`: failed for good as `cancelled:
    /// <reason>`, or a request to the worker running it). False if there is no such
    /// workflow or it was cancelled already.
    pub fn cancel_workflow(&mut self, id: i64, reason: &str) -> bool {
        let Some(workflow) = self.workflows.by_id.get_mut(&id) else { return false };
        if workflow.progress.is_cancelled() {
            return false;
        }
        workflow.progress.cancel();
        workflow.cancel_reason = Some(reason.to_owned());
        let running: Vec<i64> =
            self.workflows.released.iter().filter(|(_, (w, _))| *w == id).map(|(j, _)| *j).collect();
        self.cancel_jobs(&running, reason);
        self.note_finished(id);
        true
    }

    /// `retry_workflow(id)` (rule 6): each failed job runs again (its failed row rescheduled
    /// now with no attempt spent, or a new job if the row is gone), each job cancelled by a
    /// dependency waits again. Returns [`Progress::retry`]'s lists. Refused for a cancelled
    /// workflow.
    pub fn retry_workflow(&mut self, id: i64) -> Result<(Vec<usize>, Vec<usize>), DbError> {
        let Some(workflow) = self.workflows.by_id.get_mut(&id) else {
            return Err(DbError { message: format!("no workflow {id}"), retryable: false });
        };
        if workflow.progress.is_cancelled() {
            return Err(DbError {
                message: format!("workflow {id} was cancelled: it cannot be retried"),
                retryable: false,
            });
        }
        let (rerun, back) = workflow.progress.retry(&workflow.graph);
        for &i in &back {
            workflow.job_ids[i] = None;
        }
        let now = self.now;
        for &i in &rerun {
            let old = self.workflows.by_id[&id].job_ids[i];
            match old.and_then(|job_id| self.jobs.get_mut(&job_id)).filter(|job| final_outcome(job).is_some())
            {
                Some(job) => {
                    job.attempts = 0;
                    job.run_at = now;
                    job.updated_at = now;
                    let job_id = job.id;
                    self.record_release(id, i, job_id);
                    self.notify_insert(1);
                }
                None => _ = self.release(id, i),
            }
        }
        self.arm_deadlines(id);
        self.note_finished(id);
        Ok((rerun, back))
    }
}

impl World {
    /// Add workflow `name` now ([`Db::add_workflow`]): its id and the jobs released.
    pub fn add_workflow(
        &mut self,
        name: &str,
        jobs: Vec<WorkflowJob>,
    ) -> Result<(i64, Vec<(String, i64)>), DbError> {
        self.db_mut().add_workflow(name, jobs)
    }

    /// Run the resolver's pass now ([`Db::resolve_workflows`]).
    pub fn resolve_workflows(&mut self) -> u64 {
        self.db_mut().resolve_workflows()
    }

    /// Send a signal to workflow `id` now ([`Db::signal_workflow`]).
    pub fn signal_workflow(&mut self, id: i64, name: &str, payload: Value) -> Option<Signalled> {
        self.db_mut().signal_workflow(id, name, payload)
    }
}
