//! Why a job is not running, and when it will: every reason found in the database's state,
//! each with its evidence and, where it can be known, when it ends; where the job runs if it
//! does; and an estimate of its start from the jobs ahead of it and its task's recent pace
//! (docs/guide/why.md). Behind `formica why` and the dashboard's job page.
//!
//! Each read goes by a primary key or an index, or reads a small table whole (the leases,
//! pauses and controls), but one: the jobs holding a cap's slots, which graphile-worker's
//! schema cannot find by an index (`sql/queries/inspect/why/cap_holders.sql`); it is read
//! only for a due job whose task is capped. The jobs ahead are counted up to [`AHEAD_BOUND`].

mod answer;

use super::query::{get, read};
use crate::controls::{ControlLimit, ControlSet, Paused};
use crate::inspect::{WaitingFor, WorkflowJobSeen};
use crate::utils::WorkerUtils;
use crate::Error;
pub use answer::{Estimate, Holder, JobRef, Reason, Running, Slot, Why, AHEAD_BOUND, PACE_WINDOW};
use chrono::{DateTime, Duration, Utc};
use formica_core::job::Job;
use formica_core::worker::{RECOVERY_PERIOD, SUSPICION_GRACE};
use formica_sql as sql;
use std::collections::BTreeSet;
use tokio_postgres::types::Type;

/// At most this many of the window's ends are read; past it, the pace is that of the last
/// ones read.
const PACE_BOUND: i64 = 1_000;
/// After how long a lock held by a worker without a lease (graphile-worker's) is freed by
/// the sweep (formica_core's `STALE_LOCK_AGE`, as graphile-worker's rule).
const STALE_LOCK: Duration = Duration::hours(4);

/// What a reference to a workflow's job found: the answer itself (a job waiting for its
/// dependencies or its signal, or settled), or the job to read (released).
pub(super) enum Found {
    /// The answer, with no job of the queue to read.
    Answer(Box<Why>),
    /// The job id of the released job, and whether its timer holds it (then its not-due
    /// reason is told as the timer).
    Job(i64, bool),
}

/// The job of workflow `workflow` named `name`: waiting for what it depends on or its
/// signal, released as a sub-workflow, settled, or the job it was released as.
pub(super) async fn workflow_job(
    utils: &WorkerUtils,
    workflow: i64,
    name: &str,
    checked_at: DateTime<Utc>,
) -> Result<Found, Error> {
    let detail = utils.workflow(workflow).await?.ok_or(Error::WorkflowNotFound(workflow))?;
    let seen = detail
        .jobs
        .iter()
        .find(|j| j.name == name)
        .ok_or_else(|| Error::JobNotFound(format!("workflow {workflow} has no job named {name:?}")))?;
    let reasons = match (seen.state.as_str(), seen.job_id) {
        ("waiting", _) => match detail.summary.cancelled_at {
            // A cancelled workflow releases nothing: reported as the end it is.
            Some(at) => vec![Reason::Finished { outcome: "cancelled".into(), finished_at: Some(at) }],
            None => waiting_reasons(workflow, seen, &detail.jobs),
        },
        (_, Some(id)) => {
            let timer = seen.waits_for.iter().any(|w| matches!(w, WaitingFor::Timer { .. }));
            return Ok(Found::Job(id, timer));
        }
        (state, None) => match subworkflow_reason(utils, workflow, seen).await? {
            Some(reason) => vec![reason],
            None => vec![Reason::Finished { outcome: state.to_owned(), finished_at: seen.finished_at }],
        },
    };
    Ok(Found::Answer(Box::new(Why {
        job_id: None,
        task: seen.task.clone(),
        queue: None,
        state: seen.state.clone(),
        checked_at,
        running: None,
        reasons,
        estimate: None,
    })))
}

/// Why a waiting job of `workflow` waits: the jobs it depends on not settled, its signal.
fn waiting_reasons(workflow: i64, seen: &WorkflowJobSeen, jobs: &[WorkflowJobSeen]) -> Vec<Reason> {
    let mut reasons = Vec::new();
    for wait in &seen.waits_for {
        match wait {
            WaitingFor::Jobs { names } => reasons.push(Reason::Dependencies {
                workflow,
                waiting_for: jobs.iter().filter(|d| names.contains(&d.name)).cloned().collect(),
            }),
            WaitingFor::Signal { name, deadline, on_timeout } => reasons.push(Reason::Signal {
                workflow,
                name: name.clone(),
                deadline: *deadline,
                on_timeout: on_timeout.clone(),
            }),
            WaitingFor::Timer { .. } | WaitingFor::Workflow { .. } => {}
        }
    }
    reasons
}

/// Why a released job of `workflow` with no job of the queue waits: it is a whole workflow,
/// and that workflow has jobs to settle (none for a settled job, or a sub-workflow gone).
async fn subworkflow_reason(
    utils: &WorkerUtils,
    workflow: i64,
    seen: &WorkflowJobSeen,
) -> Result<Option<Reason>, Error> {
    let Some(id) =
        seen.waits_for
            .iter()
            .find_map(|w| if let WaitingFor::Workflow { id } = w { Some(*id) } else { None })
    else {
        return Ok(None);
    };
    let Some(sub) = utils.workflow_summary(id).await? else { return Ok(None) };
    Ok(Some(Reason::Subworkflow {
        workflow,
        subworkflow: id,
        name: sub.name,
        unsettled: sub.waiting + sub.released,
        total: sub.total,
    }))
}

/// A released job of `workflow` that its timer holds: its not-due reason told as the timer.
pub(super) fn as_timer(mut why: Why, workflow: i64) -> Why {
    for reason in &mut why.reasons {
        if let Reason::NotDue { run_at, retrying: false } = *reason {
            *reason = Reason::Timer { workflow, run_at };
        }
    }
    why
}

/// Why `job` (in `state`, its named queue held by `queue_lock`'s worker since then, if
/// any) is not running at `now`, by the database's clock.
pub(super) async fn explain(
    utils: &WorkerUtils,
    job: &Job,
    state: &str,
    queue_lock: (Option<&str>, Option<DateTime<Utc>>),
    now: DateTime<Utc>,
) -> Result<Why, Error> {
    Reading { utils, job, state, queue_lock, now }.why().await
}

/// A job gone from the queue: how it ended, from the history, or not found.
pub(super) async fn finished(utils: &WorkerUtils, id: i64, checked_at: DateTime<Utc>) -> Result<Why, Error> {
    let Some(run) = utils.job_outcome(id).await? else {
        return Err(Error::JobNotFound(format!(
            "no job {id}: it is not in the queue, and the history has no run of it \
             (it never existed, or finished with history off or pruned)"
        )));
    };
    let outcome = run.outcome.as_str().to_owned();
    Ok(Why {
        job_id: Some(id),
        task: run.task_identifier,
        queue: run.queue_name,
        state: outcome.clone(),
        checked_at,
        running: None,
        reasons: vec![Reason::Finished { outcome, finished_at: Some(run.finished_at) }],
        estimate: None,
    })
}

/// A Formica worker's lease and what it runs (`sql/queries/inspect/why/workers.sql`).
struct Lease {
    worker_id: String,
    host: Option<String>,
    pid: Option<i32>,
    expires_at: DateTime<Utc>,
    stopped_at: Option<DateTime<Utc>>,
    suspected_at: Option<DateTime<Utc>>,
    alive: bool,
    /// `None`: it predates records step 15.
    tasks: Option<Vec<String>>,
    accepted_flags: Option<Vec<String>>,
    /// `None`: decided before each fetch, or predating records step 15.
    forbidden_flags: Option<Vec<String>>,
}

impl Lease {
    /// Whether it may take a job of `task` with `flags` (unknown counts as yes).
    fn runs(&self, task: &str) -> bool {
        self.tasks.as_ref().is_none_or(|tasks| tasks.iter().any(|t| t == task))
    }

    fn accepts(&self, flags: &BTreeSet<String>) -> bool {
        let forbidden =
            self.forbidden_flags.as_ref().is_some_and(|f| flags.iter().any(|flag| f.contains(flag)));
        let accepted = self
            .accepted_flags
            .as_ref()
            .is_none_or(|a| a.is_empty() || flags.iter().any(|flag| a.contains(flag)));
        !forbidden && accepted
    }
}

/// One job's reading: its row, its queue's lock and the clock, and the reads each reason
/// needs.
struct Reading<'a> {
    utils: &'a WorkerUtils,
    job: &'a Job,
    state: &'a str,
    queue_lock: (Option<&'a str>, Option<DateTime<Utc>>),
    now: DateTime<Utc>,
}

impl Reading<'_> {
    async fn why(&self) -> Result<Why, Error> {
        let job = self.job;
        let state = self.state.to_owned();
        let (leases, pauses, controls) =
            futures::try_join!(self.leases(), self.utils.paused(), self.utils.controls())?;
        let sweeping = leases.iter().any(|l| l.alive);
        let holder = |worker: &str, locked_at: Option<DateTime<Utc>>| {
            holder_of(leases.iter().find(|l| l.worker_id == worker), locked_at, sweeping)
        };
        let mut why = Why {
            job_id: Some(job.id),
            task: job.task_identifier.clone(),
            queue: job.queue_name.clone(),
            state,
            checked_at: self.now,
            running: None,
            reasons: Vec::new(),
            estimate: None,
        };
        if let Some(worker) = &job.locked_by {
            match holder(worker, job.locked_at) {
                holder @ Holder::Lapsed { .. } => {
                    why.reasons.push(Reason::DeadWorker {
                        worker: worker.clone(),
                        since: job.locked_at,
                        holder,
                    });
                }
                holder => {
                    let lease = leases.iter().find(|l| l.worker_id == *worker);
                    why.running = Some(Running {
                        worker: worker.clone(),
                        since: job.locked_at,
                        host: lease.and_then(|l| l.host.clone()),
                        pid: lease.and_then(|l| l.pid),
                        alive_until: match holder {
                            Holder::Alive { until } => Some(until),
                            _ => None,
                        },
                    });
                }
            }
            return Ok(why);
        }
        if job.attempts >= job.max_attempts {
            why.reasons.push(Reason::OutOfAttempts {
                attempts: job.attempts,
                max_attempts: job.max_attempts,
                last_error: job.last_error.clone(),
            });
            return Ok(why);
        }
        if job.run_at > self.now {
            why.reasons.push(Reason::NotDue { run_at: job.run_at, retrying: job.last_error.is_some() });
        }
        why.reasons.extend(paused(&pauses, job));
        why.reasons.extend(self.workers(&leases, job));
        if job.run_at <= self.now {
            if let (Some(queue), (Some(worker), since)) = (&job.queue_name, self.queue_lock) {
                let holder = holder(worker, since);
                why.reasons.push(Reason::QueueHeld {
                    queue: queue.clone(),
                    worker: worker.to_owned(),
                    since,
                    holder,
                });
            }
            for set in controls.iter().filter(|c| c.control.task == job.task_identifier) {
                why.reasons.extend(self.control(set, job).await?);
            }
        }
        if !why.reasons.iter().any(Reason::blocks) {
            why.estimate = Some(self.estimate(job, &why.reasons).await?);
        }
        Ok(why)
    }

    async fn leases(&self) -> Result<Vec<Lease>, Error> {
        let rows = read(self.utils, sql::inspect::why::WORKERS, &[]).await?;
        rows.iter()
            .map(|r| {
                Ok(Lease {
                    worker_id: get(r, "worker_id")?,
                    host: get(r, "host")?,
                    pid: get(r, "pid")?,
                    expires_at: get(r, "expires_at")?,
                    stopped_at: get(r, "stopped_at")?,
                    suspected_at: get(r, "suspected_at")?,
                    alive: get(r, "alive")?,
                    tasks: get(r, "tasks")?,
                    accepted_flags: get(r, "accepted_flags")?,
                    forbidden_flags: get(r, "forbidden_flags")?,
                })
            })
            .collect()
    }

    /// No live worker runs its task, or none of those that do takes its flags.
    fn workers(&self, leases: &[Lease], job: &Job) -> Option<Reason> {
        let live: Vec<&Lease> = leases.iter().filter(|l| l.alive).collect();
        let running: Vec<&Lease> = live.iter().copied().filter(|l| l.runs(&job.task_identifier)).collect();
        if running.is_empty() {
            return Some(Reason::NoWorker { live_workers: live.len() });
        }
        if running.iter().any(|l| l.accepts(&job.flags)) {
            return None;
        }
        Some(Reason::FlagsRefused {
            flags: job.flags.iter().cloned().collect(),
            workers: running.iter().map(|l| l.worker_id.clone()).collect(),
        })
    }

    /// The cap or rate limit `set`, if it holds the job now (fairness and a bound never do).
    async fn control(&self, set: &ControlSet, job: &Job) -> Result<Option<Reason>, Error> {
        let control = &set.control;
        let part = control.partition_of(job);
        let partition = control.partition.as_ref().map(|_| part.clone());
        let (kind, argument) = match &control.partition {
            Some(p) => (Some(p.kind()), Some(p.argument())),
            None => (None, None),
        };
        match control.limit {
            ControlLimit::Running { max } => {
                let limit = i64::from(max);
                let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 5] = [
                    (&job.task_identifier, Type::TEXT),
                    (&kind, Type::TEXT),
                    (&argument, Type::TEXT),
                    (&part, Type::TEXT),
                    (&limit, Type::INT8),
                ];
                let rows = read(self.utils, sql::inspect::why::CAP_HOLDERS, &params).await?;
                if (rows.len() as i64) < limit {
                    return Ok(None);
                }
                let holders = rows
                    .iter()
                    .map(|r| {
                        Ok(Slot {
                            job_id: get(r, "id")?,
                            worker: get(r, "locked_by")?,
                            since: get(r, "locked_at")?,
                        })
                    })
                    .collect::<Result<_, Error>>()?;
                Ok(Some(Reason::CapFull { control: control.label(), max, partition, holders }))
            }
            ControlLimit::Starts { max, period_ms } => {
                let period = i64::from(period_ms);
                let per = control.partition_key();
                let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 4] = [
                    (&job.task_identifier, Type::TEXT),
                    (&part, Type::TEXT),
                    (&period, Type::INT8),
                    (&per, Type::TEXT),
                ];
                let rows = read(self.utils, sql::inspect::why::RATE_STARTS, &params).await?;
                let starts = rows
                    .iter()
                    .map(|r| Ok((get::<DateTime<Utc>>(r, "started_at")?, i64::from(get::<i32>(r, "n")?))))
                    .collect::<Result<Vec<_>, Error>>()?;
                let Some(room_at) = room_at(&starts, i64::from(max), Duration::milliseconds(period)) else {
                    return Ok(None);
                };
                let started = starts.iter().map(|(_, n)| n).sum();
                Ok(Some(Reason::RateLimited {
                    control: control.label(),
                    max,
                    period_ms,
                    partition,
                    started,
                    room_at,
                }))
            }
            // A bound holds back adds, never a waiting job's start; fairness orders the task's
            // jobs and holds none back.
            ControlLimit::Waiting { .. } | ControlLimit::Fair { .. } => Ok(None),
        }
    }

    /// The estimate of its start: the jobs ahead of it, its task's pace, and the known ends
    /// of the `reasons` holding it now.
    async fn estimate(&self, job: &Job, reasons: &[Reason]) -> Result<Estimate, Error> {
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 4] = [
            (&job.priority, Type::INT2),
            (&job.run_at, Type::TIMESTAMPTZ),
            (&job.task_identifier, Type::TEXT),
            (&AHEAD_BOUND, Type::INT8),
        ];
        let rows = read(self.utils, sql::inspect::why::AHEAD, &params).await?;
        let row =
            rows.first().ok_or_else(|| Error::Row("the count of the jobs ahead answered no row".into()))?;
        let (ahead, ahead_of_task): (i64, i64) = (get(row, "ahead")?, get(row, "of_task")?);
        let window = PACE_WINDOW.num_milliseconds();
        let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 3] =
            [(&job.task_identifier, Type::TEXT), (&window, Type::INT8), (&PACE_BOUND, Type::INT8)];
        let rows = read(self.utils, sql::inspect::why::FINISHED, &params).await?;
        let row = rows.first().ok_or_else(|| Error::Row("the task's pace answered no row".into()))?;
        let finished: i64 = get(row, "finished")?;
        let (first, last): (Option<DateTime<Utc>>, Option<DateTime<Utc>>) =
            (get(row, "first")?, get(row, "last")?);
        // Over the window, or, when the bound cut it, over the span of the ends read.
        let span = match (finished >= PACE_BOUND, first, last) {
            (true, Some(first), Some(last)) => last - first,
            _ => PACE_WINDOW,
        };
        let per_minute = (finished > 0 && span > Duration::zero())
            .then(|| finished as f64 * 60_000.0 / span.num_milliseconds() as f64);
        let free_at =
            reasons.iter().filter_map(Reason::until).chain([job.run_at, self.now]).max().unwrap_or(self.now);
        let starts_at = match (ahead_of_task, per_minute) {
            (0, _) => Some(free_at),
            (n, Some(pace)) => Some(free_at + Duration::milliseconds((n as f64 / pace * 60_000.0) as i64)),
            (_, None) => None,
        };
        Ok(Estimate { ahead, ahead_of_task, more_ahead: ahead >= AHEAD_BOUND, per_minute, starts_at })
    }
}

/// The pauses holding back `job`.
fn paused(pauses: &[Paused], job: &Job) -> Vec<Reason> {
    pauses
        .iter()
        .filter(|p| {
            p.pause().is_some_and(|pause| pause.covers(&job.task_identifier, job.queue_name.as_deref()))
        })
        .map(|p| Reason::Paused {
            scope: p.scope.clone(),
            name: p.name.clone(),
            why: p.reason.clone(),
            by: p.paused_by.clone(),
            since: p.paused_at,
        })
        .collect()
}

/// What the lease of a lock's holder says, and when a sweep frees what it holds: a lapsed
/// lease's locks at its suspicion (by the first sweep after it lapsed) plus the grace, each
/// within a sweep's period; a lock of a worker with no lease, four hours after it was taken.
fn holder_of(lease: Option<&Lease>, locked_at: Option<DateTime<Utc>>, sweeping: bool) -> Holder {
    let Some(lease) = lease else { return Holder::NoLease { freed_at: locked_at.map(|at| at + STALE_LOCK) } };
    if lease.alive {
        return Holder::Alive { until: lease.expires_at };
    }
    let suspected = lease.suspected_at.unwrap_or(lease.expires_at + RECOVERY_PERIOD);
    Holder::Lapsed {
        at: lease.expires_at,
        stopped: lease.stopped_at.is_some(),
        freed_at: sweeping.then(|| suspected + SUSPICION_GRACE + RECOVERY_PERIOD),
    }
}

/// When the `starts` logged in the period (oldest first, each with its count) leave room for
/// one more under `max`: `None` if they do now.
fn room_at(starts: &[(DateTime<Utc>, i64)], max: i64, period: Duration) -> Option<DateTime<Utc>> {
    let mut counted: i64 = starts.iter().map(|(_, n)| n).sum();
    if counted < max {
        return None;
    }
    for (at, n) in starts {
        counted -= n;
        if counted < max {
            return Some(*at + period);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_named_by_id_or_by_workflow_and_name() {
        assert_eq!("42".parse(), Ok(JobRef::Id(42)));
        assert_eq!("7/resize/big".parse(), Ok(JobRef::Workflow { workflow: 7, name: "resize/big".into() }));
        for bad in ["", "x", "7/", "/a", "4 2"] {
            let refused = bad.parse::<JobRef>().unwrap_err();
            assert!(refused.contains(&format!("{bad:?}")), "{refused}");
        }
    }

    #[test]
    fn a_full_period_has_room_once_enough_starts_age_out() {
        let t0 = DateTime::from_timestamp(1_000_000, 0).unwrap_or_default();
        let s = |secs: i64, n: i64| (t0 + Duration::seconds(secs), n);
        let minute = Duration::minutes(1);
        assert_eq!(room_at(&[s(0, 2), s(10, 1)], 4, minute), None, "room now");
        assert_eq!(room_at(&[s(0, 2), s(10, 2)], 4, minute), Some(t0 + minute), "the first two age out");
        assert_eq!(room_at(&[s(0, 1), s(10, 4)], 4, minute), Some(t0 + Duration::seconds(70)));
    }
}
