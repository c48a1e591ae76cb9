//! What the checker knows of one worker process (an incarnation: a restart begins a new
//! one), read off the trace: the jobs granted to it and where each stands.

use chrono::{DateTime, Utc};
use formica_core::job::Job;
use formica_core::time::FeedClock;
use formica_core::worker::{Config, Failure, QueryId, Statement, TaskOutcome};
use std::collections::{BTreeMap, BTreeSet};

/// Where a job a fetch granted to this worker stands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Grant {
    /// Locked for this worker by fetch `fetch`, not started; `key` is the job's
    /// (priority, run_at, id) as fetched.
    Waiting { fetch: QueryId, key: (i16, DateTime<Utc>, i64) },
    /// Its task runs.
    Running { job: Job },
    /// Its task ended this way; the outcome is not written yet.
    Ended { outcome: TaskOutcome, job: Job, clock: DateTime<Utc> },
    /// Given back (or to be, once the return or failure being written about it is done, if
    /// a fetch locked it again meanwhile): never started here again.
    Returning,
}

/// One worker process, from its `Started` line to its crash or `Stopped`.
#[derive(Debug)]
pub(crate) struct Incarnation {
    pub(crate) worker: usize,
    pub(crate) worker_id: String,
    pub(crate) config: Config,
    pub(crate) alive: bool,
    pub(crate) stopped: bool,
    /// The worker's clock, as the driver reads it (`driver/src/clock.rs`): read by the
    /// machine's inputs and by its lease keeper, at each trace entry's wall and elapsed time.
    pub(crate) clock: FeedClock,
    /// The time the machine was last fed: its clock.
    pub(crate) fed: DateTime<Utc>,
    pub(crate) pending: BTreeMap<QueryId, Statement>,
    pub(crate) grants: BTreeMap<i64, Grant>,
    pub(crate) in_write: BTreeSet<i64>,
    /// Jobs a fetch locked again while their return or failure was out.
    pub(crate) relocked: BTreeSet<i64>,
    /// The reason of the first cancel request read for each job (a failure may say it).
    pub(crate) cancelled: BTreeMap<i64, String>,
    /// The last fetch came back with fewer jobs than it asked for.
    pub(crate) last_fetch_short: bool,
    /// Something that may make a job runnable happened since the last fetch was sent.
    pub(crate) woken_since_fetch: bool,
    /// A shutdown was asked for or begun by the machine.
    pub(crate) shutting_down: bool,
    /// The machine stopped waiting for the database (its shutdown's bound passed): it may
    /// stop with statements out and jobs unsettled, which stay locked for a sweep.
    pub(crate) gave_up: bool,
}

impl Incarnation {
    /// Whether `failure` is that of a job cancelled here: for good, with the first reason
    /// read since this worker last fetched it (unless its task succeeded, a cancelled job
    /// fails so).
    pub(crate) fn cancelled_failure(&self, failure: &Failure) -> bool {
        let reason = self.cancelled.get(&failure.job_id);
        failure.permanent && reason.is_some_and(|r| failure.message == format!("cancelled: {r}"))
    }

    pub(crate) fn running(&self) -> usize {
        self.grants.values().filter(|g| matches!(g, Grant::Running { .. })).count()
    }

    /// Fetches in flight that were sent before `fetch`.
    pub(crate) fn fetches_before(&self, fetch: QueryId) -> usize {
        self.pending.range(..fetch).filter(|(_, s)| matches!(s, Statement::GetJobs { .. })).count()
    }

    /// Jobs fetched, not started and not being given back: the local queue.
    pub(crate) fn queued(&self) -> impl Iterator<Item = (QueryId, (i16, DateTime<Utc>, i64))> + '_ {
        self.grants.iter().filter(|(id, _)| !self.in_write.contains(id)).filter_map(|(_, g)| match g {
            Grant::Waiting { fetch, key } => Some((*fetch, *key)),
            _ => None,
        })
    }
}

/// The jobs whose outcome `statement` writes.
pub(crate) fn written_ids(statement: &Statement) -> Vec<i64> {
    match statement {
        Statement::CompleteJobs { ids, .. } | Statement::ReturnJobs { ids, .. } => ids.clone(),
        Statement::FailJobs { failures, .. } => failures.iter().map(|f| f.job_id).collect(),
        Statement::SnoozeJobs { snoozes, .. } => snoozes.iter().map(|s| s.job_id).collect(),
        Statement::GetJobs { .. }
        | Statement::ResetLocked { .. }
        | Statement::Heartbeat { .. }
        | Statement::RecoverLapsed { .. }
        | Statement::ReadCancels { .. }
        | Statement::ReadFlow
        | Statement::RegisterCrontabs { .. }
        | Statement::ScheduleCron(_)
        | Statement::ReadSchedules
        | Statement::PruneHistory { .. }
        | Statement::ResolveWorkflows
        | Statement::ReindexBloated
        | Statement::VacuumJobs
        | Statement::AgePriorities { .. }
        | Statement::ReturnUnknown { .. } => vec![],
    }
}
