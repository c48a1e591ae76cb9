//! The one operation vocabulary of Formica's checks: [`Op`] is the core's scenario
//! operation ([`sim::Op`]: an event, a [`Fault`] or a wait) whose events are [`Action`]s.
//!
//! An action says what is done with values chosen in advance (a job's payload, a key, a
//! delay), so a failing sequence prints as what happened. What depends on the state when it
//! runs (the current time, which jobs exist) is resolved then: delays are from the current
//! time, and a [`Pick`] chooses among the jobs present.

use chrono::Duration;
use formica_core::job::RawJob;
use formica_core::job::{JobKeyMode, JobSpec};
use formica_core::sim::{self, Fault};
use formica_core::worker::{TaskOutcome, Timestamp};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt;

/// One operation of a check: an [`Action`], a [`Fault`], or a wait of some milliseconds.
pub type Op = sim::Op<Action>;

/// A job to add, as `add_job` (or one spec of `add_jobs`) is given it. It prints short
/// (`c {"n":3} queue q0 key k1 (replace) in -5s priority -1 max 2 flags ["x"]`), leaving
/// out what is not set.
#[derive(Clone, PartialEq)]
pub struct NewJob {
    /// The task identifier.
    pub task: String,
    /// The payload; each check makes it unique, so that it names the job.
    pub payload: Value,
    /// The named queue, if any.
    pub queue: Option<String>,
    /// `run_at` this many seconds from the time the action runs; `None` leaves it to the
    /// database (now).
    pub delay_s: Option<i64>,
    /// `max_attempts`.
    pub max_attempts: i16,
    /// The job key, if any.
    pub key: Option<String>,
    /// The job key mode (`add_jobs` ignores it).
    pub mode: Option<JobKeyMode>,
    /// The priority.
    pub priority: i16,
    /// The flags, if any.
    pub flags: Option<Vec<String>>,
}

impl NewJob {
    /// The job as added at `now`.
    pub fn add_job(&self, now: Timestamp) -> RawJob {
        self.add_job_at(self.delay_s.map(|s| now + Duration::seconds(s)))
    }

    /// The job as added with `run_at` (for a caller that chooses its own times from
    /// [`NewJob::delay_s`]).
    pub fn add_job_at(&self, run_at: Option<Timestamp>) -> RawJob {
        RawJob {
            identifier: self.task.clone(),
            payload: self.payload.clone(),
            spec: JobSpec {
                queue_name: self.queue.clone(),
                run_at,
                max_attempts: Some(self.max_attempts),
                job_key: self.key.clone(),
                job_key_mode: self.mode,
                priority: Some(self.priority),
                flags: self.flags.clone(),
                unique: None,
            },
        }
    }
}

impl fmt::Debug for NewJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.task, self.payload)?;
        if let Some(queue) = &self.queue {
            write!(f, " queue {queue}")?;
        }
        if let Some(key) = &self.key {
            write!(f, " key {key}")?;
        }
        if let Some(mode) = self.mode {
            write!(f, " ({})", mode.as_str())?;
        }
        if let Some(delay) = self.delay_s {
            write!(f, " in {delay}s")?;
        }
        write!(f, " priority {} max {}", self.priority, self.max_attempts)?;
        match &self.flags {
            Some(flags) => write!(f, " flags {flags:?}"),
            None => Ok(()),
        }
    }
}

/// Which jobs an admin function is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pick {
    /// The jobs at these positions (each modulo the number of jobs) in the order the runner
    /// keeps its jobs (by id in a world; by payload where two databases number them
    /// differently), each once; none when there are no jobs.
    Nth(Vec<u64>),
    /// These ids, as they are.
    Ids(Vec<i64>),
}

impl Pick {
    /// The ids chosen among `ids` (in the runner's order).
    pub fn among(&self, ids: &[i64]) -> Vec<i64> {
        match self {
            Pick::Ids(chosen) => chosen.clone(),
            Pick::Nth(_) if ids.is_empty() => vec![],
            Pick::Nth(positions) => {
                let chosen: BTreeSet<usize> =
                    positions.iter().map(|p| (*p % ids.len() as u64) as usize).collect();
                chosen.into_iter().map(|i| ids[i]).collect()
            }
        }
    }
}

/// Something done to the database, to a worker or to its tasks. A world runner does all
/// but the worker statements (which a real worker sends); the differential test against
/// PostgreSQL does the database actions and the worker statements.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `add_job`.
    RawJob(NewJob),
    /// `add_jobs`.
    AddJobs {
        /// The specs.
        jobs: Vec<NewJob>,
        /// `job_key_mode = preserve_run_at` for all of them.
        preserve_run_at: bool,
    },
    /// `remove_job`.
    RemoveJob {
        /// The key.
        key: String,
    },
    /// `complete_jobs`, by an admin.
    CompleteJobs {
        /// The jobs.
        pick: Pick,
    },
    /// `permanently_fail_jobs`.
    PermanentlyFailJobs {
        /// The jobs.
        pick: Pick,
        /// The reason (`None`: the default text).
        message: Option<String>,
    },
    /// `reschedule_jobs`.
    RescheduleJobs {
        /// The jobs.
        pick: Pick,
        /// The new `run_at`, this many seconds from now.
        delay_s: Option<i64>,
        /// The new priority.
        priority: Option<i16>,
        /// The new attempts.
        attempts: Option<i16>,
        /// The new max_attempts.
        max_attempts: Option<i16>,
    },
    /// `force_unlock_workers` with these worker ids.
    ForceUnlockWorkers(Vec<String>),
    /// `cancel_jobs`: an unlocked job fails for good, a locked one gets a request.
    CancelJobs {
        /// The jobs.
        pick: Pick,
        /// The reason.
        reason: String,
    },
    /// `force_unlock_workers` with the ids of every worker process that crashed so far, as an
    /// admin who saw them die would.
    ForceUnlockCrashed,
    /// A worker's fetch (`get_jobs`), sent straight to the database.
    Fetch {
        /// The worker id that locks the jobs.
        worker_id: String,
        /// The task identifiers it asks for.
        tasks: Vec<String>,
        /// Its forbidden flags.
        forbidden: Vec<String>,
        /// Its accepted flags (none: any).
        accepted: Vec<String>,
        /// At most this many jobs.
        limit: usize,
        /// The worker's own clock, this many seconds from the database's (`use_local_time`).
        now_s: Option<i64>,
        /// Named queues left out (paused).
        excluded: Vec<String>,
        /// Caps of the tasks asked for (the controlled fetch).
        caps: Vec<formica_core::flow::Control>,
        /// Rate limits of the tasks asked for (the controlled fetch).
        limits: Vec<formica_core::flow::Control>,
        /// Fairness of the tasks asked for (the controlled fetch).
        fair: Vec<formica_core::flow::Control>,
    },
    /// A worker completes the jobs it holds that `mask` selects (bit `i % 64` for the i-th);
    /// with bit 63, also the first job it does not hold (fenced off).
    WorkerComplete {
        /// The worker id.
        worker_id: String,
        /// Which of its jobs.
        mask: u64,
    },
    /// A worker fails the jobs it holds that `mask` selects (only the first when the
    /// database computes `run_at`); with bit 63, also the first job it does not hold.
    WorkerFail {
        /// The worker id.
        worker_id: String,
        /// Which of its jobs.
        mask: u64,
        /// Retry this many seconds from now (`None`: the database's backoff).
        retry_in_s: Option<i64>,
    },
    /// A worker gives back the jobs it holds that `mask` selects; with bit 63, every job it
    /// holds but those (as after a fetch whose answer was lost).
    WorkerReturn {
        /// The worker id.
        worker_id: String,
        /// Which of its jobs.
        mask: u64,
    },
    /// A worker reads the cancel requests of the jobs it holds.
    WorkerReadCancels {
        /// The worker id.
        worker_id: String,
    },
    /// A worker's recovery sweep (with no leases, only its settling of cancel requests).
    WorkerRecover,
    /// Let the world take up to this many steps (fewer if nothing is due).
    Steps(u8),
    /// The `nth` (modulo their number) running task of `worker` ends with `outcome`.
    FinishTask {
        /// The worker.
        worker: usize,
        /// Which of its running tasks.
        nth: u8,
        /// How it ends.
        outcome: TaskOutcome,
    },
    /// A notification on `jobs:insert` with this payload.
    Notify(String),
    /// The worker is asked to stop.
    Shutdown {
        /// The worker.
        worker: usize,
        /// Gracefully (let tasks finish) or not.
        graceful: bool,
    },
    /// A worker snoozes the jobs it holds that `mask` selects; with bit 63, also the first
    /// job it does not hold.
    WorkerSnooze {
        /// The worker id.
        worker_id: String,
        /// Which of its jobs.
        mask: u64,
        /// Run again this many seconds from now, by the worker's clock (`None`: from the
        /// database's, after a delay of a few seconds).
        run_in_s: Option<i64>,
    },
}

/// `op` with every worker it names taken modulo `workers`, so that operations can be
/// generated apart from the number of workers and still name one that exists.
pub fn for_workers(op: Op, workers: usize) -> Op {
    let w = |index: usize| index % workers.max(1);
    match op {
        Op::Fault(fault) => Op::Fault(match fault {
            Fault::Crash(i) => Fault::Crash(w(i)),
            Fault::Restart(i) => Fault::Restart(w(i)),
            Fault::DropListener(i) => Fault::DropListener(w(i)),
            Fault::ListenerAvailable(i, up) => Fault::ListenerAvailable(w(i), up),
            Fault::FailQueries(i, n) => Fault::FailQueries(w(i), n),
            Fault::LoseAnswers(i, n) => Fault::LoseAnswers(w(i), n),
            Fault::StallLoop(i, ms) => Fault::StallLoop(w(i), ms),
            jump @ Fault::JumpClock(_) => jump,
        }),
        Op::Event(Action::FinishTask { worker, nth, outcome }) => {
            Op::Event(Action::FinishTask { worker: w(worker), nth, outcome })
        }
        Op::Event(Action::Shutdown { worker, graceful }) => {
            Op::Event(Action::Shutdown { worker: w(worker), graceful })
        }
        other @ (Op::Event(_) | Op::Wait(_)) => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_new_job_prints_what_is_set_only() {
        let job = NewJob {
            task: "c".into(),
            payload: json!({ "n": 3 }),
            queue: Some("q0".into()),
            delay_s: Some(-5),
            max_attempts: 2,
            key: Some("k1".into()),
            mode: Some(JobKeyMode::Replace),
            priority: -1,
            flags: Some(vec!["x".into()]),
        };
        assert_eq!(
            format!("{job:?}"),
            r#"c {"n":3} queue q0 key k1 (replace) in -5s priority -1 max 2 flags ["x"]"#
        );
        let bare = NewJob { queue: None, delay_s: None, key: None, mode: None, flags: None, ..job };
        assert_eq!(format!("{bare:?}"), r#"c {"n":3} priority -1 max 2"#);
    }

    #[test]
    fn a_pick_by_position_wraps_and_takes_each_job_once() {
        let ids = [10, 20, 30];
        assert_eq!(Pick::Nth(vec![4, 1, 7]).among(&ids), vec![20]);
        assert_eq!(Pick::Nth(vec![2, 0]).among(&ids), vec![10, 30]);
        assert_eq!(Pick::Nth(vec![5]).among(&[]), Vec::<i64>::new());
        assert_eq!(Pick::Ids(vec![7, 1]).among(&ids), vec![7, 1]);
    }
}
