//! `Flow`: the flow controls as this worker last read them, and when to read them again
//! (see [`crate::flow`]). Off unless [`Config::flow_control`](super::Config::flow_control):
//! the machine then never reads and fetches as it always did.
//!
//! It also knows when a rate limit has room again: the limited fetch logs each of its
//! starts in the database, where they count for the limit's period. After a short fetch
//! (perhaps held back by a limit), the worker fetches again as soon as the oldest start its
//! own fetches made leaves its period, not at the next poll: a limit of N a period drains at
//! N a period. Other workers' starts it does not see: their room is found by the poll (or
//! the next start of its own leaving).

use crate::flow::{Control, ControlKind, Controls, FlowState, NOTHING_PAUSED};
use crate::time::Timestamp;
use chrono::Duration;

/// What a fetch asks for, given the flow controls.
pub(super) struct FetchPlan {
    /// The tasks not paused.
    pub task_identifiers: Vec<String>,
    /// The paused named queues.
    pub excluded_queues: Vec<String>,
    /// The caps of the tasks fetched.
    pub caps: Vec<Control>,
    /// The rate limits of the tasks fetched.
    pub limits: Vec<Control>,
    /// The fairness of the tasks fetched.
    pub fair: Vec<Control>,
}

#[derive(Debug, Clone)]
pub(super) struct Flow {
    enabled: bool,
    /// What was last read (`None`: not read yet, so nothing may be fetched).
    state: Option<FlowState>,
    /// A read is owed: at start, after a notification, the listener back, or the poll.
    wanted: bool,
    reading: bool,
    /// The next read by the poll: the fallback when notifications are lost.
    read_at: Option<Timestamp>,
    interval: Duration,
    /// When each start of a limited task that this worker's fetches took leaves its
    /// period (by the time their answers came: the database logged them before).
    starts_leave: Vec<Timestamp>,
    /// After a short fetch with limits in force: when the oldest of those leaves.
    room_at: Option<Timestamp>,
}

impl Flow {
    pub fn new(enabled: bool, interval: Duration) -> Self {
        Flow {
            enabled,
            state: None,
            wanted: enabled,
            reading: false,
            read_at: None,
            interval,
            starts_leave: Vec::new(),
            room_at: None,
        }
    }

    /// Whether the worker may fetch: flow control is off, or its state has been read.
    pub fn known(&self) -> bool {
        !self.enabled || self.state.is_some()
    }

    /// What to fetch of `tasks` now, once the controls are [`known`](Self::known) (`None`:
    /// nothing, everything is paused). With no control in force, exactly `tasks`.
    pub fn plan(&self, tasks: &[String]) -> Option<FetchPlan> {
        let flow = self.state();
        if flow.is_empty() {
            return Some(FetchPlan {
                task_identifiers: tasks.to_vec(),
                excluded_queues: vec![],
                caps: vec![],
                limits: vec![],
                fair: vec![],
            });
        }
        let task_identifiers = flow.fetchable(tasks);
        let caps = flow.controls_of(ControlKind::Cap, &task_identifiers);
        let limits = flow.controls_of(ControlKind::RateLimit, &task_identifiers);
        let fair = flow.controls_of(ControlKind::Fair, &task_identifiers);
        (!task_identifiers.is_empty()).then(|| FetchPlan {
            task_identifiers,
            excluded_queues: flow.paused_queues(),
            caps,
            limits,
            fair,
        })
    }

    /// What is in force (nothing before the first read: the worker does not fetch then).
    pub fn state(&self) -> &FlowState {
        self.state.as_ref().unwrap_or(&NOTHING_PAUSED)
    }

    /// Something may have changed: read again (after the read out, if one is).
    pub fn want(&mut self) {
        self.wanted = self.enabled;
    }

    /// Whether to send a read now; the caller sends it.
    pub fn read_due(&mut self) -> bool {
        let due = self.wanted && !self.reading;
        if due {
            self.wanted = false;
            self.reading = true;
        }
        due
    }

    /// The read answered `controls` at `now`: the new state if it changed.
    pub fn read(&mut self, controls: &Controls, now: Timestamp) -> Option<&FlowState> {
        self.ended(now);
        let state = FlowState::new(controls);
        let changed = self.state.as_ref() != Some(&state);
        self.state = Some(state);
        changed.then(|| self.state())
    }

    /// The read ended (answered or failed): the poll reads again after an interval.
    pub fn ended(&mut self, now: Timestamp) {
        self.reading = false;
        self.read_at = Some(now + self.interval);
    }

    /// A fetch answered at `now` with jobs of `tasks` (each once or more), `short` (it got
    /// fewer than it asked for): its starts of limited tasks are logged, and a short one
    /// sets when room returns.
    pub fn fetched<'a>(&mut self, tasks: impl Iterator<Item = &'a str>, short: bool, now: Timestamp) {
        let Some(state) = self.state.as_ref().filter(|state| state.has_limits()) else {
            self.room_at = None;
            return;
        };
        self.starts_leave.retain(|at| *at > now);
        let mut logged: Vec<&str> = Vec::new();
        for task in tasks {
            if let (Some(period), false) = (state.period_of(task), logged.contains(&task)) {
                logged.push(task);
                self.starts_leave.push(now + period);
            }
        }
        self.room_at = if short { self.starts_leave.iter().min().copied() } else { None };
    }

    /// At `now`: reads the poll owes; whether a rate limit has room again (fetch then).
    pub fn handle_timeout(&mut self, now: Timestamp) -> bool {
        if self.read_at.is_some_and(|at| at <= now) {
            self.read_at = None;
            self.want();
        }
        let room = self.room_at.is_some_and(|at| at <= now);
        if room {
            self.room_at = None;
        }
        room
    }

    /// The worker no longer fetches: no more reads.
    pub fn stop(&mut self) {
        self.wanted = false;
        self.read_at = None;
        self.room_at = None;
    }

    pub fn deadline(&self) -> Option<Timestamp> {
        self.read_at.into_iter().chain(self.room_at).min()
    }
}
