//! One simulated worker process (its machine, lease keeper, tasks, listener and clock), and
//! what the world has on its agenda for it.

use super::{Notification, WorkerIndex};
use crate::job::Job;
use crate::lease::Keeper;
use crate::protocol::{DbError, QueryId, Statement, TaskOutcome, TimerKind};
use crate::time::{FeedClock, Timestamp};
use crate::worker::{Config, Worker};
use chrono::Duration;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Life {
    Running,
    Stopped,
    Crashed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListenerState {
    Off,
    Connecting(u64),
    Up(u64),
}

#[derive(Debug, Clone)]
pub(super) struct RunningTask {
    pub(super) job: Job,
    pub(super) token: u64,
    pub(super) aborting: bool,
}

#[derive(Debug, Clone)]
pub(super) struct SimWorker {
    pub(super) base: Config,
    pub(super) incarnation: u32,
    pub(super) machine: Worker,
    pub(super) life: Life,
    pub(super) tasks: BTreeMap<i64, RunningTask>,
    pub(super) listener: ListenerState,
    pub(super) listener_available: bool,
    pub(super) fail_next: u32,
    /// Queries to come whose answers are lost after they ran.
    pub(super) lose_next: u32,
    pub(super) in_flight: BTreeSet<QueryId>,
    /// The machine gave up on the database at shutdown: it may stop with queries out.
    pub(super) gave_up: bool,
    /// Like the driver, the world feeds a clock that never goes back and moves on with
    /// elapsed time, so a wall clock set back does not stall the machine's timers.
    pub(super) clock: FeedClock,
    /// How far this worker's clock is off the wall clock ([`World::skew_clock`]).
    pub(super) skew: Duration,
    /// Elapsed time until which the process is paused ([`World::pause`]).
    pub(super) paused_until: Duration,
    /// The lease's keeper, beside the loop.
    pub(super) keeper: Keeper,
    /// Elapsed time until which the loop alone stalls ([`World::stall_loop`]).
    pub(super) stalled_until: Duration,
    /// The worker's clock when the current stall began: the loop's last turn.
    pub(super) stalled_since: Timestamp,
}

impl SimWorker {
    pub(super) fn new(
        config: Config,
        incarnation: u32,
        base: Config,
        now: Timestamp,
        mono: Duration,
        skew: Duration,
    ) -> Self {
        SimWorker {
            keeper: Keeper::new(config.worker_id.clone(), config.watchdog, now),
            machine: Worker::new(config, now),
            clock: FeedClock::new(now, mono),
            base,
            incarnation,
            life: Life::Running,
            tasks: BTreeMap::new(),
            listener: ListenerState::Off,
            listener_available: true,
            fail_next: 0,
            lose_next: 0,
            in_flight: BTreeSet::new(),
            gave_up: false,
            skew,
            paused_until: Duration::zero(),
            stalled_until: Duration::zero(),
            stalled_since: now,
        }
    }

    /// Until when nothing reaches the machine: its process is paused or its loop stalls.
    pub(super) fn loop_blocked_until(&self) -> Duration {
        self.paused_until.max(self.stalled_until)
    }
}

#[derive(Debug, Clone)]
pub(super) enum Due {
    Answer {
        worker: WorkerIndex,
        incarnation: u32,
        id: QueryId,
        statement: Statement,
    },
    TaskEnd {
        worker: WorkerIndex,
        token: u64,
        job_id: i64,
        outcome: TaskOutcome,
    },
    Listener {
        worker: WorkerIndex,
        token: u64,
        up: bool,
    },
    Notify {
        worker: WorkerIndex,
        token: u64,
        notification: Notification,
    },
    /// The answer to a heartbeat of the worker's lease keeper.
    Beat {
        worker: WorkerIndex,
        incarnation: u32,
        id: QueryId,
        statement: Statement,
    },
    /// A heartbeat's result on its way from the keeper to the machine.
    Heartbeat {
        worker: WorkerIndex,
        incarnation: u32,
        sent: Timestamp,
        result: Result<(), DbError>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Next {
    Agenda((i64, u64)),
    Timer(WorkerIndex, TimerKind),
    Keeper(WorkerIndex),
}
