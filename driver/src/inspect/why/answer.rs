//! The answer to "why is this job not running, and when will it?" (docs/guide/why.md): the
//! job asked about, each reason with its evidence and when it ends, where a running job
//! runs, the estimate of its start, and each said in words for people (the command line and
//! the dashboard write its times their own way).

use super::super::workflows::WorkflowJobSeen;
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// The jobs ahead are counted up to this many: past it, the count says "more than".
pub const AHEAD_BOUND: i64 = 10_000;
/// The window of history a task's recent pace is read over.
pub const PACE_WINDOW: Duration = Duration::minutes(15);

/// The job asked about: a job id, or a workflow's job (`7/resize`: workflow 7's job named
/// `resize`), which has no job id while it waits for what it depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobRef {
    /// A job of the queue (or one that was).
    Id(i64),
    /// A job of a workflow, by the workflow's id and the job's name in it.
    Workflow {
        /// The workflow's id.
        workflow: i64,
        /// The job's name in the workflow.
        name: String,
    },
}

impl FromStr for JobRef {
    type Err = String;

    /// `42` (a job id) or `7/resize` (workflow 7's job `resize`); anything else is refused,
    /// naming it.
    fn from_str(text: &str) -> Result<JobRef, String> {
        let refused = || format!("{text:?} names no job: give a job id (42) or a workflow's job (7/resize)");
        match text.split_once('/') {
            None => text.trim().parse().map(JobRef::Id).map_err(|_| refused()),
            Some((workflow, name)) if !name.is_empty() => {
                let workflow = workflow.trim().parse().map_err(|_| refused())?;
                Ok(JobRef::Workflow { workflow, name: name.to_owned() })
            }
            Some(_) => Err(refused()),
        }
    }
}

impl fmt::Display for JobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobRef::Id(id) => write!(f, "job {id}"),
            JobRef::Workflow { workflow, name } => write!(f, "job {name:?} of workflow {workflow}"),
        }
    }
}

/// Why a job is not running now, and when it will, as the database shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Why {
    /// The job's id (`None`: a workflow's job not released yet).
    pub job_id: Option<i64>,
    /// Its task.
    pub task: String,
    /// Its named queue, if any.
    pub queue: Option<String>,
    /// Its state: one of `formica_sql::JOB_STATES`, `waiting` (a workflow's job waiting
    /// for what it depends on), or how it ended (`completed`, `failed`, `cancelled`).
    pub state: String,
    /// When the database was asked (its clock): what the times below count from.
    pub checked_at: DateTime<Utc>,
    /// Where it runs, if it does.
    pub running: Option<Running>,
    /// Every reason it is not running now (none: nothing holds it, the next fetch takes it).
    pub reasons: Vec<Reason>,
    /// When it may start, from the jobs ahead of it and its task's recent pace (`None`:
    /// running, ended, or held by a reason whose end cannot be known).
    pub estimate: Option<Estimate>,
}

/// A running job: who runs it and since when.
#[derive(Debug, Clone, Serialize)]
pub struct Running {
    /// The worker holding it (`locked_by`).
    pub worker: String,
    /// Since when (`locked_at`).
    pub since: Option<DateTime<Utc>>,
    /// The worker's host, from its lease.
    pub host: Option<String>,
    /// Its process id there.
    pub pid: Option<i32>,
    /// Until when its lease says it is alive (`None`: it has no Formica lease, as
    /// graphile-worker's workers; if it died, the sweep frees the job at `locked_at` + 4 h).
    pub alive_until: Option<DateTime<Utc>>,
}

/// The lease of a worker holding something, as a reason shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "lease", rename_all = "snake_case")]
pub enum Holder {
    /// Its lease holds until then: it runs.
    Alive {
        /// Until when.
        until: DateTime<Utc>,
    },
    /// Its lease ended (it stopped, or died) at `at`: a live Formica worker's sweep frees
    /// what it holds at about `freed_at` (`None`: no Formica worker is alive to sweep).
    Lapsed {
        /// When the lease ended.
        at: DateTime<Utc>,
        /// It stopped cleanly (else it died, or was cut off).
        stopped: bool,
        /// About when a sweep frees what it holds.
        freed_at: Option<DateTime<Utc>>,
    },
    /// It has no Formica lease (graphile-worker's, or a worker so old it keeps none): if it
    /// died, the four-hour sweep frees what it holds at `freed_at`.
    NoLease {
        /// `locked_at` + 4 h.
        freed_at: Option<DateTime<Utc>>,
    },
}

impl Holder {
    /// When what it holds is freed, if that can be known.
    fn until(&self) -> Option<DateTime<Utc>> {
        match self {
            Holder::Alive { .. } => None,
            Holder::Lapsed { freed_at, .. } | Holder::NoLease { freed_at } => *freed_at,
        }
    }

    fn describe(&self, at: &dyn Fn(&DateTime<Utc>) -> String) -> String {
        let freed = |when: &Option<DateTime<Utc>>| {
            when.as_ref().map_or("when a Formica worker runs again to sweep".to_owned(), |t| {
                format!("at about {}", at(t))
            })
        };
        match self {
            Holder::Alive { until } => format!("its lease is alive until {}", at(until)),
            Holder::Lapsed { at: ended, stopped, freed_at } => format!(
                "its lease {} at {}: a sweep frees it {}",
                if *stopped { "ended (it stopped)" } else { "lapsed (it died or was cut off)" },
                at(ended),
                freed(freed_at)
            ),
            Holder::NoLease { freed_at } => format!(
                "it has no Formica lease (graphile-worker's?): if it died, the four-hour sweep frees it {}",
                freed(freed_at)
            ),
        }
    }
}

/// A job holding one of a cap's slots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Slot {
    /// The job.
    pub job_id: i64,
    /// The worker holding it.
    pub worker: Option<String>,
    /// Since when.
    pub since: Option<DateTime<Utc>>,
}

/// One reason a job is not running now, with its evidence and, where it can be known, when
/// it ends ([`Reason::until`]).
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// It is not due: it runs at `run_at` (a retry's, after a failure, or its first).
    NotDue {
        /// When it is due.
        run_at: DateTime<Utc>,
        /// It failed before and waits to retry.
        retrying: bool,
    },
    /// Its named queue is held by another job's worker: its jobs run one at a time.
    QueueHeld {
        /// The queue.
        queue: String,
        /// The worker holding it.
        worker: String,
        /// Since when.
        since: Option<DateTime<Utc>>,
        /// That worker's lease.
        holder: Holder,
    },
    /// A pause holds it back (Formica's workers start none of its jobs until resumed).
    Paused {
        /// What is paused: `task`, `queue` or `all`.
        scope: String,
        /// The task or queue paused (empty for `all`).
        name: String,
        /// Why, as given.
        why: Option<String>,
        /// Who paused it.
        by: String,
        /// Since when.
        since: DateTime<Utc>,
    },
    /// Its task's cap is full: the jobs in `holders` hold every slot.
    CapFull {
        /// The cap's label (`import<=2 per field customer`).
        control: String,
        /// At most this many at once.
        max: u32,
        /// The job's partition, if the cap has one.
        partition: Option<String>,
        /// The jobs holding the slots.
        holders: Vec<Slot>,
    },
    /// Its task's rate limit has no room in the current period: room at `room_at`.
    RateLimited {
        /// The limit's label (`send_email 100/min`).
        control: String,
        /// Starts allowed per period.
        max: u32,
        /// The period.
        period_ms: u32,
        /// The job's partition, if the limit has one.
        partition: Option<String>,
        /// Starts logged in the period up to now.
        started: i64,
        /// When enough of them age out of the period to leave room.
        room_at: DateTime<Utc>,
    },
    /// Live workers run its task, but none takes a job with its flags.
    FlagsRefused {
        /// The job's flags.
        flags: Vec<String>,
        /// The live workers that run its task (each refuses a flag or accepts none of them).
        workers: Vec<String>,
    },
    /// No live Formica worker runs its task (graphile-worker's workers are not seen).
    NoWorker {
        /// Live Formica workers, none running the task.
        live_workers: usize,
    },
    /// A workflow's job waiting for the jobs it depends on to settle.
    Dependencies {
        /// The workflow.
        workflow: i64,
        /// Those not settled yet (waiting, or released and not finished).
        waiting_for: Vec<WorkflowJobSeen>,
    },
    /// A workflow's job waiting for a signal (records step 23): sent to its workflow, it is
    /// released (once its dependencies have settled).
    Signal {
        /// The workflow.
        workflow: i64,
        /// The signal's name.
        name: String,
        /// When it stops waiting, once its dependencies have settled and if it has a timeout.
        deadline: Option<DateTime<Utc>>,
        /// What it does then: `cancel` or `release`.
        on_timeout: String,
    },
    /// A workflow's job released with a timer: it runs at `run_at`, its delay after its
    /// release.
    Timer {
        /// The workflow.
        workflow: i64,
        /// When it is due.
        run_at: DateTime<Utc>,
    },
    /// A workflow's job that is a whole workflow (records step 24), released: it settles
    /// when every job of its sub-workflow has.
    Subworkflow {
        /// The workflow the job is in.
        workflow: i64,
        /// Its sub-workflow's id.
        subworkflow: i64,
        /// Its sub-workflow's name.
        name: String,
        /// The sub-workflow's jobs not settled yet (waiting or released).
        unsettled: i32,
        /// The sub-workflow's jobs.
        total: i32,
    },
    /// It used its attempts up: it runs again only if retried or rescheduled.
    OutOfAttempts {
        /// Attempts made.
        attempts: i16,
        /// Its limit.
        max_attempts: i16,
        /// How its last attempt failed.
        last_error: Option<String>,
    },
    /// It is locked by a worker whose lease ended: it runs again once a sweep frees it.
    DeadWorker {
        /// The worker.
        worker: String,
        /// Locked since.
        since: Option<DateTime<Utc>>,
        /// Its lease.
        holder: Holder,
    },
    /// It ended for good: it is not in the queue any more.
    Finished {
        /// `completed`, `failed` or `cancelled`.
        outcome: String,
        /// When.
        finished_at: Option<DateTime<Utc>>,
    },
}

impl Reason {
    /// When this reason ends, where that can be known.
    pub fn until(&self) -> Option<DateTime<Utc>> {
        match self {
            Reason::NotDue { run_at, .. } | Reason::Timer { run_at, .. } => Some(*run_at),
            Reason::Signal { deadline, .. } => *deadline,
            Reason::RateLimited { room_at, .. } => Some(*room_at),
            Reason::QueueHeld { holder, .. } | Reason::DeadWorker { holder, .. } => holder.until(),
            _ => None,
        }
    }

    /// Whether the job cannot start before someone or something acts (a pause lifted, a
    /// worker started, a retry), so no start can be estimated.
    pub(super) fn blocks(&self) -> bool {
        matches!(
            self,
            Reason::Paused { .. }
                | Reason::FlagsRefused { .. }
                | Reason::NoWorker { .. }
                | Reason::Dependencies { .. }
                | Reason::Signal { .. }
                | Reason::Subworkflow { .. }
                | Reason::OutOfAttempts { .. }
                | Reason::Finished { .. }
        )
    }

    /// Its short name, as JSON tags it (`not_due`, `queue_held`...).
    pub fn name(&self) -> &'static str {
        match self {
            Reason::NotDue { .. } => "not_due",
            Reason::QueueHeld { .. } => "queue_held",
            Reason::Paused { .. } => "paused",
            Reason::CapFull { .. } => "cap_full",
            Reason::RateLimited { .. } => "rate_limited",
            Reason::FlagsRefused { .. } => "flags_refused",
            Reason::NoWorker { .. } => "no_worker",
            Reason::Dependencies { .. } => "dependencies",
            Reason::Signal { .. } => "signal",
            Reason::Timer { .. } => "timer",
            Reason::Subworkflow { .. } => "subworkflow",
            Reason::OutOfAttempts { .. } => "out_of_attempts",
            Reason::DeadWorker { .. } => "dead_worker",
            Reason::Finished { .. } => "finished",
        }
    }

    /// The reason for people, one sentence, its times written by `at` (the command line
    /// and the dashboard each write theirs).
    pub fn describe(&self, task: &str, at: &dyn Fn(&DateTime<Utc>) -> String) -> String {
        let since =
            |t: &Option<DateTime<Utc>>| t.as_ref().map(|t| format!(" since {}", at(t))).unwrap_or_default();
        match self {
            Reason::NotDue { run_at, retrying: true } => format!("it failed and retries at {}", at(run_at)),
            Reason::NotDue { run_at, retrying: false } => format!("it is not due until {}", at(run_at)),
            Reason::QueueHeld { queue, worker, since: t, holder } => format!(
                "its queue {queue:?} runs one job at a time and is held by worker {worker}{}; {}",
                since(t),
                holder.describe(at)
            ),
            Reason::Paused { scope, name, why, by, since: t } => format!(
                "{} paused by {by} at {}{}: it starts when resumed",
                if scope == "all" { "everything is".to_owned() } else { format!("{scope} {name:?} is") },
                at(t),
                why.as_ref().map(|r| format!(" ({r:?})")).unwrap_or_default()
            ),
            Reason::CapFull { control, holders, .. } => format!(
                "its task's cap {control} is full: jobs {} hold the slots; it starts when one ends",
                holders
                    .iter()
                    .map(|s| format!(
                        "{} ({}{})",
                        s.job_id,
                        s.worker.as_deref().unwrap_or("?"),
                        since(&s.since)
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Reason::RateLimited { control, started, room_at, .. } => format!(
                "its task's rate limit {control} is used up ({started} started in the period): room at {}",
                at(room_at)
            ),
            Reason::FlagsRefused { flags, workers } => format!(
                "its flags {} are accepted by none of the live workers that run task {task:?} ({})",
                flags.join(", "),
                workers.join(", ")
            ),
            Reason::NoWorker { live_workers } => format!(
                "no live Formica worker runs task {task:?} ({live_workers} live worker{} run other tasks; \
                 graphile-worker's workers are not seen)",
                if *live_workers == 1 { "" } else { "s" }
            ),
            Reason::Dependencies { workflow, waiting_for } => format!(
                "it waits for the jobs of workflow {workflow} it depends on: {}",
                waiting_for
                    .iter()
                    .map(|d| match d.job_id {
                        Some(id) =>
                            format!("{} (job {id}, {})", d.name, d.job_state.as_deref().unwrap_or(&d.state)),
                        None => format!("{} ({})", d.name, d.state),
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Reason::Signal { workflow, name, deadline, on_timeout } => {
                let then = match deadline {
                    Some(t) if on_timeout == "release" => format!("; at {} it is released without it", at(t)),
                    Some(t) => format!("; at {} it is cancelled", at(t)),
                    None => String::new(),
                };
                format!(
                    "it waits for the signal {name:?} sent to workflow {workflow} \
                     (formica workflow signal {workflow} {name}){then}"
                )
            }
            Reason::Timer { workflow, run_at } => {
                format!("its timer in workflow {workflow} holds it until {}", at(run_at))
            }
            Reason::Subworkflow { workflow, subworkflow, name, unsettled, total } => format!(
                "it is a whole workflow in workflow {workflow}: it waits for its sub-workflow \
                 {subworkflow} ({name:?}), {unsettled} of whose {total} jobs are not settled yet \
                 (formica workflow show {subworkflow})"
            ),
            Reason::OutOfAttempts { attempts, max_attempts, .. } => format!(
                "it used its attempts up ({attempts} of {max_attempts}): it runs again only if retried"
            ),
            Reason::DeadWorker { worker, since: t, holder } => {
                format!("it is locked by worker {worker}{}, which is gone: {}", since(t), holder.describe(at))
            }
            Reason::Finished { outcome, finished_at } => format!(
                "it ended for good ({outcome}{}): it is not in the queue",
                finished_at.as_ref().map(|t| format!(" at {}", at(t))).unwrap_or_default()
            ),
        }
    }
}

/// An estimate of a waiting job's start: from the jobs a fetch takes before it and its
/// task's recent pace in the history. An estimate: jobs added ahead of it later, workers
/// started or stopped, and a pace that changes all move it.
#[derive(Debug, Clone, Serialize)]
pub struct Estimate {
    /// Due jobs of any task that come before it in the fetch's order (priority, then
    /// run_at), counted up to [`AHEAD_BOUND`].
    pub ahead: i64,
    /// Those of its own task.
    pub ahead_of_task: i64,
    /// More jobs lie ahead than were counted.
    pub more_ahead: bool,
    /// Jobs of its task that ended per minute lately (`None`: none in the history's last
    /// [`PACE_WINDOW`]: history off, or the task idle).
    pub per_minute: Option<f64>,
    /// When it may start: once it is due and the reasons with a known end are over, after
    /// its task's jobs ahead at that pace (`None`: jobs of its task are ahead and no pace
    /// is known). With `more_ahead`, a lower bound.
    pub starts_at: Option<DateTime<Utc>>,
}

impl Estimate {
    /// The estimate for people, its time written by `at`.
    pub fn describe(&self, at: &dyn Fn(&DateTime<Utc>) -> String) -> String {
        let more = if self.more_ahead { "more than " } else { "" };
        let pace = self.per_minute.map_or("no recent pace in the history".to_owned(), |p| {
            format!("its task's pace {p:.1} a minute")
        });
        let start = match &self.starts_at {
            Some(t) if self.more_ahead => format!("starts no sooner than about {}", at(t)),
            Some(t) => format!("starts at about {}", at(t)),
            None => "no start can be estimated".to_owned(),
        };
        format!(
            "estimate: {start} ({more}{} jobs ahead, {} of its task; {pace})",
            self.ahead, self.ahead_of_task
        )
    }
}
