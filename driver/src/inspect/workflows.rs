//! Workflows (docs/guide/workflows.md) as the read model shows them: each workflow with its
//! state and its jobs counted per state (the records' view `workflow_states`), and one
//! workflow whole: each of its jobs with its state, what it depends on, and its
//! graphile_worker job while that exists. The `formica workflows` command and the
//! dashboard's Workflows pages show these.

use super::query::{get, read};
use crate::utils::WorkerUtils;
use crate::Error;
use chrono::{DateTime, Utc};
use formica_sql as sql;
use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

/// The states of a workflow, as the view gives them: `running` while a job waits or is
/// released, `completed` when every job completed, `failed` when none is left to run and
/// one did not complete, `cancelled` once `cancel_workflow` ran.
pub const WORKFLOW_STATES: [&str; 4] = ["running", "completed", "failed", "cancelled"];

/// The states of a workflow's job: `waiting` for what it depends on, `released` (an
/// ordinary graphile_worker job), then `completed`, `failed` (for good) or `cancelled`.
pub const WORKFLOW_JOB_STATES: [&str; 5] = ["waiting", "released", "completed", "failed", "cancelled"];

/// The columns a table of a workflow's jobs starts with, the CLI's and the dashboard's (each
/// read from a [`WorkflowJobSeen`]).
pub const WORKFLOW_JOB_COLUMNS: [&str; 8] =
    ["job", "task", "state", "job id", "attempts", "depends on", "when one fails", "waits for"];

/// Which workflows [`WorkerUtils::workflows`] lists, newest first. `None` filters match
/// any workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowFilter {
    /// Only workflows in this state (one of [`WORKFLOW_STATES`]).
    pub state: Option<String>,
    /// Only workflows of this name.
    pub name: Option<String>,
    /// At most this many.
    pub limit: i64,
}

impl Default for WorkflowFilter {
    fn default() -> Self {
        WorkflowFilter { state: None, name: None, limit: 100 }
    }
}

/// A workflow, its state and its jobs counted per state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkflowSummary {
    /// Its id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// When it was added.
    pub created_at: DateTime<Utc>,
    /// When it was cancelled, if it was.
    pub cancelled_at: Option<DateTime<Utc>>,
    /// Why it was cancelled.
    pub cancel_reason: Option<String>,
    /// One of [`WORKFLOW_STATES`].
    pub state: String,
    /// Its jobs.
    pub total: i32,
    /// Its jobs waiting for what they depend on.
    pub waiting: i32,
    /// Its jobs released and not settled (ready, scheduled, running, or to be retried).
    pub released: i32,
    /// Its jobs completed.
    pub completed: i32,
    /// Its jobs failed for good.
    pub failed: i32,
    /// Its jobs cancelled.
    pub cancelled: i32,
}

impl WorkflowSummary {
    fn from_row(r: &Row) -> Result<WorkflowSummary, Error> {
        Ok(WorkflowSummary {
            id: get(r, "id")?,
            name: get(r, "name")?,
            created_at: get(r, "created_at")?,
            cancelled_at: get(r, "cancelled_at")?,
            cancel_reason: get(r, "cancel_reason")?,
            state: get(r, "state")?,
            total: get(r, "total")?,
            waiting: get(r, "waiting")?,
            released: get(r, "released")?,
            completed: get(r, "completed")?,
            failed: get(r, "failed")?,
            cancelled: get(r, "cancelled")?,
        })
    }
}

/// A job of a workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkflowJobSeen {
    /// Its name in the workflow.
    pub name: String,
    /// Its task.
    pub task: String,
    /// One of [`WORKFLOW_JOB_STATES`].
    pub state: String,
    /// Its graphile_worker job once released (the last one, after it settled).
    pub job_id: Option<i64>,
    /// That job's state (one of `formica_sql::JOB_STATES`) while its row exists.
    pub job_state: Option<String>,
    /// That job's attempts while its row exists.
    pub attempts: Option<i16>,
    /// That job's attempt limit while its row exists.
    pub max_attempts: Option<i16>,
    /// That job's last error while its row exists, else the one the workflow recorded when
    /// the job settled.
    pub last_error: Option<String>,
    /// When it was released.
    pub released_at: Option<DateTime<Utc>>,
    /// When it settled.
    pub finished_at: Option<DateTime<Utc>>,
    /// The names of the jobs it depends on, in the order they were added.
    pub depends_on: Vec<String>,
    /// `all_finished` or `first_failure` for a batch callback, else `None`.
    pub callback: Option<String>,
    /// What a dependency failing does to it: `cancel` or `release`.
    pub on_dependency_failure: String,
    /// The signal it waits or waited for, if any.
    pub signal: Option<String>,
    /// What it waits for now (a waiting job: jobs, signal; a released one: its timer).
    pub waits_for: Vec<WaitingFor>,
}

/// One thing a workflow job waits for (records step 23 adds the signal and the timer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitingFor {
    /// Jobs of its workflow that have not settled (names, in the order added).
    Jobs {
        /// Their names.
        names: Vec<String>,
    },
    /// A signal that has not come; its deadline runs once its dependencies have settled.
    Signal {
        /// The signal's name.
        name: String,
        /// When it stops waiting, if its timeout runs.
        deadline: Option<DateTime<Utc>>,
        /// What it does then: `cancel` or `release`.
        on_timeout: String,
    },
    /// Its timer: released, its job runs at `run_at`, not before.
    Timer {
        /// When its job runs.
        run_at: DateTime<Utc>,
    },
    /// Its sub-workflow (records step 24): released, it settles when every job of that
    /// workflow has.
    Workflow {
        /// The sub-workflow's id.
        id: i64,
    },
}

impl std::fmt::Display for WaitingFor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seconds = |at: &DateTime<Utc>| at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        match self {
            WaitingFor::Jobs { names } => write!(f, "jobs {}", names.join(", ")),
            WaitingFor::Signal { name, deadline: None, .. } => write!(f, "signal {name:?}"),
            WaitingFor::Signal { name, deadline: Some(at), on_timeout } => {
                let then = if on_timeout == "release" { "released" } else { "cancelled" };
                write!(f, "signal {name:?} until {}, then {then}", seconds(at))
            }
            WaitingFor::Timer { run_at } => write!(f, "timer until {}", seconds(run_at)),
            WaitingFor::Workflow { id } => write!(f, "workflow {id}"),
        }
    }
}

impl WorkflowJobSeen {
    /// Its job's attempts as `n/max` while the job's row exists, else empty.
    pub fn attempts_text(&self) -> String {
        match (self.attempts, self.max_attempts) {
            (Some(n), Some(max)) => format!("{n}/{max}"),
            _ => String::new(),
        }
    }

    /// `callback: <kind>` for a batch callback, else what a dependency failing does to it.
    pub fn policy(&self) -> String {
        match &self.callback {
            Some(callback) => format!("callback: {callback}"),
            None => self.on_dependency_failure.clone(),
        }
    }

    /// What it waits for, as one line (empty if nothing).
    pub fn waits_for_text(&self) -> String {
        let parts: Vec<String> = self.waits_for.iter().map(ToString::to_string).collect();
        parts.join("; ")
    }

    /// What the row says the job waits for.
    fn waits_from_row(r: &Row, state: &str, job_state: Option<&str>) -> Result<Vec<WaitingFor>, Error> {
        let mut waits = Vec::new();
        if state == "waiting" {
            let names: Vec<String> = get(r, "unsettled")?;
            if !names.is_empty() {
                waits.push(WaitingFor::Jobs { names });
            }
            let signalled: Option<bool> = get(r, "signalled")?;
            let timed_out: Option<bool> = get(r, "signal_timed_out")?;
            if let (Some(name), Some(false), Some(false)) =
                (get::<Option<String>>(r, "signal")?, signalled, timed_out)
            {
                let on_timeout: Option<String> = get(r, "on_signal_timeout")?;
                let deadline = get(r, "signal_deadline")?;
                waits.push(WaitingFor::Signal { name, deadline, on_timeout: on_timeout.unwrap_or_default() });
            }
        }
        let has_timer: Option<bool> = get(r, "has_timer")?;
        if state == "released" && has_timer == Some(true) && job_state == Some("scheduled") {
            if let Some(run_at) = get(r, "run_at")? {
                waits.push(WaitingFor::Timer { run_at });
            }
        }
        if let (true, Some(id)) = (state == "released", get::<Option<i64>>(r, "subworkflow_id")?) {
            waits.push(WaitingFor::Workflow { id });
        }
        Ok(waits)
    }

    fn from_row(r: &Row) -> Result<WorkflowJobSeen, Error> {
        let state: String = get(r, "state")?;
        let job_state: Option<String> = get(r, "job_state")?;
        Ok(WorkflowJobSeen {
            waits_for: Self::waits_from_row(r, &state, job_state.as_deref())?,
            signal: get(r, "signal")?,
            name: get(r, "name")?,
            task: get(r, "task_identifier")?,
            state,
            job_id: get(r, "job_id")?,
            job_state,
            attempts: get(r, "attempts")?,
            max_attempts: get(r, "max_attempts")?,
            last_error: get(r, "last_error")?,
            released_at: get(r, "released_at")?,
            finished_at: get(r, "finished_at")?,
            depends_on: get(r, "depends_on")?,
            callback: get(r, "callback")?,
            on_dependency_failure: get(r, "on_dependency_failure")?,
        })
    }
}

/// A workflow whole: its summary and its jobs, in the order they were added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkflowDetail {
    /// The workflow.
    #[serde(flatten)]
    pub summary: WorkflowSummary,
    /// Its jobs.
    pub jobs: Vec<WorkflowJobSeen>,
}

impl WorkerUtils {
    /// The workflows `filter` picks, newest first; a state not among [`WORKFLOW_STATES`]
    /// is refused ([`Error::Filter`]) rather than matching nothing.
    pub async fn workflows(&self, filter: &WorkflowFilter) -> Result<Vec<WorkflowSummary>, Error> {
        if let Some(state) = filter.state.as_deref().filter(|s| !WORKFLOW_STATES.contains(s)) {
            return Err(Error::Filter(format!(
                "unknown workflow state {state:?}: expected one of {}",
                WORKFLOW_STATES.join(", ")
            )));
        }
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 3] =
            [(&filter.state, Type::TEXT), (&filter.name, Type::TEXT), (&filter.limit, Type::INT8)];
        let rows = read(self, sql::inspect::workflows::LIST, &params).await?;
        rows.iter().map(WorkflowSummary::from_row).collect()
    }

    /// The workflow `id` whole, if it exists.
    pub async fn workflow(&self, id: i64) -> Result<Option<WorkflowDetail>, Error> {
        let Some(summary) = self.workflow_summary(id).await? else { return Ok(None) };
        let jobs = read(self, sql::inspect::workflows::JOBS, &[(&id, Type::INT8)]).await?;
        let jobs = jobs.iter().map(WorkflowJobSeen::from_row).collect::<Result<_, Error>>()?;
        Ok(Some(WorkflowDetail { summary, jobs }))
    }

    /// The workflow `id`'s summary (its state and counts, not its jobs), if it exists.
    pub async fn workflow_summary(&self, id: i64) -> Result<Option<WorkflowSummary>, Error> {
        let rows = read(self, sql::inspect::workflows::ONE, &[(&id, Type::INT8)]).await?;
        rows.first().map(WorkflowSummary::from_row).transpose()
    }
}
