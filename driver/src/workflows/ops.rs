//! `WorkerUtils`'s workflow operations (add, add from a running job, cancel with the
//! sub-workflows, retry, delete, signal, resolve), and how often a worker resolves.

use super::build::{AddedWorkflow, Workflow, WorkflowJob};
use crate::error::Error;
use crate::jobs::Cancelled;
use crate::utils::WorkerUtils;
use formica_core::worker::{QueryResult, Statement};
use formica_core::workflow::WorkflowError;
use std::time::Duration;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

/// The shortest time between resolver passes, whatever the option says.
pub(crate) const MIN_RESOLVE_EVERY: Duration = Duration::from_millis(100);

/// How often `cancel_workflow` is tried again when PostgreSQL broke a deadlock with it (a
/// job released the moment the workflow was cancelled, completing at once: see the guide).
const CANCEL_TRIES: usize = 3;

/// What `cancel_workflow` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CancelledWorkflow {
    /// The workflow's id.
    pub id: i64,
    /// Jobs cancelled before they were released.
    pub waiting: u64,
    /// The released jobs, cancelled as [`WorkerUtils::cancel_jobs`] cancels them: failed at
    /// once, or a request to the worker running them.
    pub released: Cancelled,
    /// The sub-workflows cancelled with it (those its released jobs waited for, and
    /// theirs); `waiting` and `released` count their jobs too.
    pub subworkflows: Vec<i64>,
}

impl CancelledWorkflow {
    /// Count a workflow's `waiting` jobs and `released` ones cancelled.
    fn add(&mut self, waiting: i64, released: Cancelled) {
        self.waiting += u64::try_from(waiting).unwrap_or(0);
        self.released.failed.extend(released.failed);
        self.released.recorded.extend(released.recorded);
    }
}

/// What `retry_workflow` did (names of the workflow's jobs, in the order added).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetriedWorkflow {
    /// The workflow's id.
    pub id: i64,
    /// Jobs that failed for good, run again.
    pub rerun: Vec<String>,
    /// Jobs cancelled because of a dependency, waiting again.
    pub waiting: Vec<String>,
}

/// What `delete_workflow` deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeletedWorkflow {
    /// The workflow's id.
    pub id: i64,
    /// Its jobs that were waiting (forced): never released now.
    pub waiting: u32,
    /// Its jobs that were released and not settled (forced): their `graphile_worker` jobs
    /// stay, and run as jobs nothing waits for.
    pub released: u32,
    /// The job whose sub-workflow it was, waiting for it (forced), as (its workflow, its
    /// name): failed now, "its sub-workflow N was deleted", and settled as any failure.
    pub failed_parent: Option<(i64, String)>,
}

/// What [`WorkerUtils::signal_workflow`] did (rule 8 of `core::workflow`; names of the
/// workflow's jobs, in the order added). Every case is an answer, not an error: a webhook
/// may come twice, or after its workflow was cancelled or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalSent {
    /// Jobs waiting for it got it; those whose dependencies had all settled were released
    /// in the signal's transaction, the others are when their dependencies settle.
    Received {
        /// The jobs that got it.
        jobs: Vec<String>,
        /// Those of them released now.
        released: Vec<String>,
    },
    /// Every job that waits or waited for it already got it: nothing changed (the first
    /// payload stays).
    Duplicate,
    /// No job of the workflow waits for it: none was added waiting for it, or those that
    /// were are cancelled or timed out.
    NotWaiting,
    /// There is no such workflow (never added, or deleted).
    NoWorkflow,
}

impl SignalSent {
    /// Why the signal `name` sent to workflow `id` reached no job, in words (none when it
    /// did), as the CLI and the dashboard say it.
    pub fn unreceived(&self, id: i64, name: &str) -> Option<String> {
        match self {
            SignalSent::Received { .. } => None,
            SignalSent::Duplicate => Some(format!(
                "the jobs of workflow {id} waiting for {name:?} already got it: nothing changed"
            )),
            SignalSent::NotWaiting => {
                Some(format!("no job of workflow {id} waits for {name:?}: nothing changed"))
            }
            SignalSent::NoWorkflow => Some(format!("no workflow {id}")),
        }
    }
}

impl WorkerUtils {
    /// Add `workflow` in one transaction: its jobs with nothing to wait for are added to
    /// `graphile_worker` at once (as `add_job` adds them, without a job key), the others
    /// wait in Formica's schema. Refused with [`Error::Workflow`] (nothing added) when it has
    /// no jobs, two jobs with one name, a dependency outside the set, a cycle, a job with a
    /// job key or `unique`, or a callback without dependencies or with a payload that is not
    /// a JSON object free of the key `"batch"`. Every job passes the add layers
    /// ([`Self::before_add`]).
    pub async fn add_workflow(&self, workflow: &Workflow) -> Result<AddedWorkflow, Error> {
        let client = self.pool().get().await?;
        self.add_workflow_in(&*client, workflow).await
    }

    /// [`Self::add_workflow`] through the caller's client or transaction.
    pub async fn add_workflow_in<C: GenericClient + Sync>(
        &self,
        client: &C,
        workflow: &Workflow,
    ) -> Result<AddedWorkflow, Error> {
        workflow.graph()?;
        let spec = workflow.spec(&|job| self.add_layers().apply(job))?;
        let sql = formica_sql::render(formica_sql::workflows::ADD, self.schema());
        let name = workflow.name().to_owned();
        let rows = client.query_typed(&sql, &[(&name, Type::TEXT), (&spec, Type::JSON)]).await?;
        let id = rows.first().ok_or_else(|| Error::Row("add_workflow returned no row".into()))?.try_get(0)?;
        let mut released = Vec::with_capacity(rows.len());
        for row in &rows {
            // A single row of nulls when no job was added (each waits for a signal, or is a
            // sub-workflow).
            if let (Some(name), Some(job_id)) = (row.try_get(1)?, row.try_get(2)?) {
                released.push((name, job_id));
            }
        }
        Ok(AddedWorkflow { id, released })
    }

    /// Add `jobs` to the workflow of the running workflow job `adder` (its `graphile_worker`
    /// job, named `adder_name` in errors), as [`JobContext::add_workflow_jobs`](crate::JobContext::add_workflow_jobs)
    /// says. The jobs are validated as a workflow of their own first (names unique, their
    /// dependencies among them, no cycle) and pass the add layers.
    pub(crate) async fn add_workflow_jobs(
        &self,
        adder: i64,
        adder_name: &str,
        jobs: Vec<WorkflowJob>,
    ) -> Result<AddedWorkflow, Error> {
        let mut workflow = Workflow::new(adder_name);
        for job in jobs {
            workflow = workflow.job(job);
        }
        workflow.graph()?;
        let spec = workflow.spec(&|job| self.add_layers().apply(job))?;
        let client = self.pool().get().await?;
        let sql = formica_sql::render(formica_sql::workflows::ADD_JOBS, self.schema());
        let rows = client.query_typed(&sql, &[(&adder, Type::INT8), (&spec, Type::JSON)]).await?;
        let first = rows.first().ok_or_else(|| Error::Row("add_workflow_jobs returned no row".into()))?;
        if !first.try_get::<_, bool>(0)? {
            return Err(WorkflowError::NotRunning(adder_name.to_owned()).into());
        }
        let mut released = Vec::new();
        for row in &rows {
            if let (true, Some(job_id)) = (row.try_get::<_, bool>(4)?, row.try_get::<_, Option<i64>>(3)?) {
                released.push((row.try_get(2)?, job_id));
            }
        }
        Ok(AddedWorkflow { id: first.try_get(1)?, released })
    }

    /// Cancel workflow `id` with `reason`: nothing of it is released from now on (callbacks
    /// included), its waiting jobs are cancelled, and its released jobs are cancelled as
    /// [`Self::cancel_jobs`] does (one not running fails for good with `cancelled: <reason>`,
    /// a running one is aborted by its Formica worker). A second cancel keeps the first
    /// reason. [`Error::WorkflowNotFound`] if there is no such workflow.
    pub async fn cancel_workflow(&self, id: i64, reason: &str) -> Result<CancelledWorkflow, Error> {
        let mut client = self.pool().get().await?;
        let mut tries = 0;
        loop {
            tries += 1;
            match self.cancel_workflow_once(&mut client, id, reason).await {
                Err(e) if tries < CANCEL_TRIES && e.sqlstate() == Some("40P01") => continue,
                done => return done,
            }
        }
    }

    /// One try of `cancel_workflow`, in one transaction: the workflow and the sub-workflows
    /// its released jobs wait for, theirs too, children before parents (the order a
    /// sub-workflow's end settles its job in); then those started meanwhile; then the
    /// sub-workflow jobs of those that have ended are settled.
    async fn cancel_workflow_once(
        &self,
        client: &mut tokio_postgres::Client,
        id: i64,
        reason: &str,
    ) -> Result<CancelledWorkflow, Error> {
        let tx = client.transaction().await?;
        let mut tree = vec![id];
        let mut from = 0;
        while from < tree.len() {
            let below = self.subworkflows(&tx, &tree[from..]).await?;
            from = tree.len();
            tree.extend(below.into_iter().filter(|w| !tree.contains(w)).collect::<Vec<_>>());
        }
        let mut done = CancelledWorkflow { id, ..CancelledWorkflow::default() };
        for &workflow in tree.iter().rev() {
            let Some((waiting, released)) = self.cancel_one(&tx, workflow, reason).await? else {
                return Err(Error::WorkflowNotFound(id));
            };
            done.add(waiting, released);
        }
        loop {
            let late: Vec<i64> =
                self.subworkflows(&tx, &tree).await?.into_iter().filter(|w| !tree.contains(w)).collect();
            if late.is_empty() {
                break;
            }
            for &workflow in &late {
                if let Some((waiting, released)) = self.cancel_one(&tx, workflow, reason).await? {
                    done.add(waiting, released);
                }
            }
            tree.extend(late);
        }
        let finish = formica_sql::render(formica_sql::workflows::FINISH, self.schema());
        tx.query_typed(&finish, &[(&tree, Type::INT8_ARRAY)]).await?;
        tx.commit().await?;
        done.subworkflows = tree.split_off(1);
        Ok(done)
    }

    /// The sub-workflows the released jobs of `workflows` wait for.
    async fn subworkflows<C: GenericClient + Sync>(
        &self,
        client: &C,
        workflows: &[i64],
    ) -> Result<Vec<i64>, Error> {
        let sql = formica_sql::render(formica_sql::workflows::SUBWORKFLOWS, self.schema());
        let workflows = workflows.to_vec();
        let rows = client.query_typed(&sql, &[(&workflows, Type::INT8_ARRAY)]).await?;
        Ok(rows.first().ok_or_else(|| Error::Row("subworkflows returned no row".into()))?.try_get(0)?)
    }

    /// Cancel the one workflow `id` (none: there is no such workflow). The order avoids
    /// waiting for a job's row while holding workflow rows a completion waits for: the
    /// released jobs known now are cancelled first; then the waiting ones, each locked in
    /// id order (as the settling trigger locks them); then those released meanwhile.
    /// Answers how many waiting jobs were cancelled, and the released ones.
    async fn cancel_one(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        id: i64,
        reason: &str,
    ) -> Result<Option<(i64, Cancelled)>, Error> {
        let render = |sql| formica_sql::render(sql, self.schema());
        let reason_text = reason.to_owned();
        let rows = tx
            .query_typed(
                &render(formica_sql::workflows::CANCEL),
                &[(&id, Type::INT8), (&reason_text, Type::TEXT)],
            )
            .await?;
        let Some(row) = rows.first() else { return Ok(None) };
        let known: Vec<i64> = row.try_get(0)?;
        let mut released = self.jobs().cancel(tx, &known, reason).await?;
        let waiting: i64 = tx
            .query_typed(
                &render(formica_sql::workflows::CANCEL_WAITING),
                &[(&id, Type::INT8), (&reason_text, Type::TEXT)],
            )
            .await?
            .first()
            .ok_or_else(|| Error::Row("cancel_waiting returned no row".into()))?
            .try_get(0)?;
        let now: Vec<i64> = tx
            .query_typed(&render(formica_sql::workflows::RELEASED), &[(&id, Type::INT8)])
            .await?
            .first()
            .ok_or_else(|| Error::Row("released returned no row".into()))?
            .try_get(0)?;
        let late: Vec<i64> = now.into_iter().filter(|job| !known.contains(job)).collect();
        if !late.is_empty() {
            let more = self.jobs().cancel(tx, &late, reason).await?;
            released.failed.extend(more.failed);
            released.recorded.extend(more.recorded);
        }
        Ok(Some((waiting, released)))
    }

    /// Run workflow `id`'s failed jobs again (rule 6 of `core::workflow`): one whose
    /// `graphile_worker` job is still there, out of attempts, is rescheduled with its attempts
    /// at 0, the others are added anew; the jobs cancelled because of a dependency wait
    /// again (unless a dependency they would cancel on stays cancelled). Refused for a
    /// cancelled workflow ([`Error::WorkflowCancelled`]) or none ([`Error::WorkflowNotFound`]).
    pub async fn retry_workflow(&self, id: i64) -> Result<RetriedWorkflow, Error> {
        let client = self.pool().get().await?;
        let sql = formica_sql::render(formica_sql::workflows::RETRY, self.schema());
        let rows = client.query_typed(&sql, &[(&id, Type::INT8)]).await?;
        let row = rows.first().ok_or_else(|| Error::Row("retry_workflow returned no row".into()))?;
        let state: String = row.try_get(0)?;
        match state.as_str() {
            "missing" => Err(Error::WorkflowNotFound(id)),
            "cancelled" => Err(Error::WorkflowCancelled(id)),
            _ => Ok(RetriedWorkflow { id, rerun: row.try_get(1)?, waiting: row.try_get(2)? }),
        }
    }

    /// Delete workflow `id` and its rows now (the history's pruner deletes finished ones
    /// past their retention by itself: docs/guide/workflows.md, "Retention"). Refused with
    /// [`Error::WorkflowUnfinished`] while a job of it is waiting or released, and with
    /// [`Error::SubworkflowHeld`] while it is the sub-workflow a released job of another
    /// workflow waits for, unless `force`: then its waiting jobs never run, its released
    /// jobs, already in `graphile_worker`'s queue, stay there and run as jobs nothing waits
    /// for (cancel the workflow first to stop them), and the job waiting for it fails in the
    /// same transaction, its workflow going on as after any failure.
    /// [`Error::WorkflowNotFound`] if there is no such workflow.
    pub async fn delete_workflow(&self, id: i64, force: bool) -> Result<DeletedWorkflow, Error> {
        let client = self.pool().get().await?;
        let sql = formica_sql::render(formica_sql::workflows::DELETE, self.schema());
        let rows = client.query_typed(&sql, &[(&id, Type::INT8), (&force, Type::BOOL)]).await?;
        let row = rows.first().ok_or_else(|| Error::Row("delete_workflow returned no row".into()))?;
        let state: String = row.try_get(0)?;
        let count = |i| -> Result<u32, Error> { Ok(u32::try_from(row.try_get::<_, i32>(i)?).unwrap_or(0)) };
        let (waiting, released) = (count(1)?, count(2)?);
        let parent = match (row.try_get::<_, Option<i64>>(3)?, row.try_get::<_, Option<String>>(4)?) {
            (Some(workflow), Some(job)) => Some((workflow, job)),
            _ => None,
        };
        match (state.as_str(), parent) {
            ("missing", _) => Err(Error::WorkflowNotFound(id)),
            ("unfinished", _) => Err(Error::WorkflowUnfinished { id, waiting, released }),
            ("held", Some((workflow, job))) => Err(Error::SubworkflowHeld { id, workflow, job }),
            (_, failed_parent) => Ok(DeletedWorkflow { id, waiting, released, failed_parent }),
        }
    }

    /// Send the signal `name` to workflow `id`, with `payload` (`None`: JSON null), in one
    /// transaction: each job waiting for it that has not got it gets it, and is released
    /// now if every job it depends on has settled (in this transaction), otherwise when they
    /// have. Its payload then holds the signal under `"signal"` (a
    /// [`SignalReport`](crate::SignalReport)). SQL sends the same with
    /// `formica_<schema>.signal_workflow(id, name, payload)`, from a trigger too.
    pub async fn signal_workflow(
        &self,
        id: i64,
        name: &str,
        payload: Option<&serde_json::Value>,
    ) -> Result<SignalSent, Error> {
        let client = self.pool().get().await?;
        self.signal_workflow_in(&*client, id, name, payload).await
    }

    /// [`Self::signal_workflow`] through the caller's client or transaction (the release
    /// commits with it).
    pub async fn signal_workflow_in<C: GenericClient + Sync>(
        &self,
        client: &C,
        id: i64,
        name: &str,
        payload: Option<&serde_json::Value>,
    ) -> Result<SignalSent, Error> {
        let sql = formica_sql::render(formica_sql::workflows::SIGNAL, self.schema());
        let name = name.to_owned();
        let rows = client
            .query_typed(&sql, &[(&id, Type::INT8), (&name, Type::TEXT), (&payload, Type::JSONB)])
            .await?;
        let row = rows.first().ok_or_else(|| Error::Row("signal_workflow returned no row".into()))?;
        let outcome: String = row.try_get(0)?;
        match outcome.as_str() {
            "received" => Ok(SignalSent::Received { jobs: row.try_get(1)?, released: row.try_get(2)? }),
            "duplicate" => Ok(SignalSent::Duplicate),
            "not_waiting" => Ok(SignalSent::NotWaiting),
            "missing" => Ok(SignalSent::NoWorkflow),
            other => Err(Error::Row(format!("signal_workflow answered {other:?}"))),
        }
    }

    /// One pass of the resolver: settle the released workflow jobs whose `graphile_worker`
    /// job settled without a Formica worker's statement saying so (graphile-worker's
    /// workers, `complete_jobs`, `remove_job`, a delete): a job gone completed, unless
    /// Formica's history has it failed or cancelled; a job out of attempts failed (or was
    /// cancelled: its error begins `cancelled: `). Their dependents are released or
    /// cancelled in the same transaction. Returns the jobs settled (0 when another worker's
    /// pass was running: it settles them). Each worker sends one ([`Statement::ResolveWorkflows`])
    /// every [`WorkerOptions::workflow_resolve_every`](crate::WorkerOptions::workflow_resolve_every)
    /// or a little less, as the core's chores schedule them. The same pass times out the
    /// signals whose deadline passed (each job released without it or cancelled, as it says;
    /// counted in the number returned).
    pub async fn resolve_workflows(&self) -> Result<u64, Error> {
        match crate::statements::run_by_hand(self.pool(), self.schema(), Statement::ResolveWorkflows).await? {
            QueryResult::Resolved { settled } => Ok(settled),
            other => Err(Error::Row(format!("resolve_workflows answered {other:?}"))),
        }
    }
}
