//! [`Keeper`]: a worker's lease, renewed beside its loop rather than by it.
//!
//! A worker records in the database that it is alive until [`LEASE`] from now (by the
//! database clock), renewing it every [`HEARTBEAT_INTERVAL`] from start to stop. Other
//! workers free the jobs of a worker whose record lapsed (see the worker's recovery sweep).
//!
//! The lease must say whether the worker is alive, not whether its threads are free: a task
//! that computes for an hour, or blocks every thread of its runtime, must not lose its own
//! job to another worker. So the keeper is a machine of its own, which the driver runs on
//! a thread of its own with a connection of its own: nothing a task does reaches it. It
//! reports every heartbeat's result to the worker machine
//! ([`Input::Heartbeat`](crate::protocol::Input::Heartbeat)), which locks and starts jobs
//! only while the lease surely holds.
//!
//! What it cannot see from beside the loop is a loop that no longer turns (a deadlock, a
//! hook that never returns). The driver tells it each time the loop turns
//! ([`KeeperInput::LoopTurned`]; its loop turns at least once a second); when the loop has
//! not turned for the `watchdog` limit, the keeper stops renewing
//! ([`Event::LoopWedged`]), so that the worker's jobs are recovered elsewhere and its late
//! writes are fenced off by `locked_by`. A loop that turns again renews again
//! ([`Event::LoopResumed`]).
//!
//! Promises (tested below and in `core::sim`): the first heartbeat is due at start, then
//! one every interval; a second only while the first hangs, never a third; none while the
//! loop is wedged, one at once when it resumes; after [`KeeperInput::Stop`], nothing.

use crate::protocol::{DbError, Event, MisuseError, QueryId, Statement, TimerKind};
use crate::time::Timestamp;
use chrono::Duration;
use std::collections::{BTreeMap, VecDeque};

/// How often a worker renews its lease.
pub const HEARTBEAT_INTERVAL: Duration = Duration::seconds(3);
/// How long a lease holds without renewal.
pub const LEASE: Duration = Duration::seconds(10);
/// How long a lapsed lease is suspected before its worker's jobs are freed: longer than a
/// heartbeat interval, so that a live worker renews within it after a step of the
/// database clock.
pub const SUSPICION_GRACE: Duration = Duration::seconds(5);
/// How long a worker's loop may go without turning before its lease is given up, by
/// default (`Config::watchdog`).
pub const DEFAULT_WATCHDOG: Duration = Duration::seconds(30);

/// Heartbeats in flight at most: a second goes only while the first hangs (on a connection
/// that stopped answering, say), so that one such connection does not cost the lease.
const HEARTBEATS_IN_FLIGHT: usize = 2;

/// What the driver feeds the keeper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeeperInput {
    /// The deadline of [`Keeper::poll_timeout`] passed (early ones are harmless).
    Timeout,
    /// The worker's loop turned at `at` (the latest turn the driver saw).
    LoopTurned {
        /// When it turned, on the keeper's clock.
        at: Timestamp,
    },
    /// Heartbeat `id` ended.
    HeartbeatDone {
        /// The heartbeat.
        id: QueryId,
        /// Whether the database took it.
        result: Result<(), DbError>,
    },
    /// The worker stopped: renew no more.
    Stop,
}

/// What the keeper asks of the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeeperEffect {
    /// Run `statement` (a [`Statement::Heartbeat`]) on the keeper's own connection and feed
    /// [`KeeperInput::HeartbeatDone`].
    Heartbeat {
        /// Matches the answer to it.
        id: QueryId,
        /// The statement.
        statement: Statement,
    },
    /// Feed the worker machine `Input::Heartbeat { sent, result }`.
    Report {
        /// When the heartbeat was sent.
        sent: Timestamp,
        /// Whether the database took it.
        result: Result<(), DbError>,
    },
    /// Log and count this ([`Event::LoopWedged`], [`Event::LoopResumed`]).
    Emit(Event),
}

/// The lease keeper. See the module docs.
#[derive(Debug, Clone)]
pub struct Keeper {
    worker_id: String,
    watchdog: Duration,
    now: Timestamp,
    /// When the next heartbeat is due (`None`: stopped).
    heartbeat_at: Option<Timestamp>,
    /// The heartbeats in flight, with when each was sent.
    in_flight: BTreeMap<QueryId, Timestamp>,
    next_id: QueryId,
    /// The loop's latest turn, moved on by the time the keeper's timer did not watch.
    turned: Timestamp,
    wedged: bool,
    effects: VecDeque<KeeperEffect>,
}

impl Keeper {
    /// The keeper of `worker_id`'s lease, started at `now` (its first heartbeat is due
    /// then), giving the lease up when the loop has not turned for `watchdog`.
    pub fn new(worker_id: impl Into<String>, watchdog: Duration, now: Timestamp) -> Self {
        Keeper {
            worker_id: worker_id.into(),
            watchdog,
            now,
            heartbeat_at: Some(now),
            in_flight: BTreeMap::new(),
            next_id: 0,
            turned: now,
            wedged: false,
            effects: VecDeque::new(),
        }
    }

    /// The only mutator. `Err` for an answer to no heartbeat in flight (a driver bug).
    pub fn handle(&mut self, input: KeeperInput, now: Timestamp) -> Result<(), MisuseError> {
        self.now = self.now.max(now);
        match input {
            KeeperInput::Timeout => self.timeout(),
            KeeperInput::LoopTurned { at } => {
                self.turned = self.turned.max(at);
                if self.wedged && !self.stalled() && self.heartbeat_at.is_some() {
                    self.wedged = false;
                    self.effects.push_back(KeeperEffect::Emit(Event::LoopResumed));
                    // Win the lease back at once: the worker fetches nothing until then.
                    self.heartbeat_at = Some(self.now);
                }
            }
            KeeperInput::HeartbeatDone { id, result } => {
                let sent = self.in_flight.remove(&id).ok_or(MisuseError::UnknownQuery(id))?;
                if self.heartbeat_at.is_some() {
                    self.effects.push_back(KeeperEffect::Report { sent, result });
                }
            }
            KeeperInput::Stop => {
                self.heartbeat_at = None;
                self.in_flight.clear();
            }
        }
        Ok(())
    }

    fn timeout(&mut self) {
        let Some(due) = self.heartbeat_at.filter(|at| *at <= self.now) else { return };
        // Time the keeper's own timer did not watch (its thread descheduled, the process
        // suspended, the wall clock stepped forward) is not held against the loop: the
        // watchdog counts only time the keeper saw pass.
        self.turned = (self.turned + (self.now - due)).min(self.now);
        self.heartbeat_at = Some(self.now + HEARTBEAT_INTERVAL);
        if self.stalled() {
            if !std::mem::replace(&mut self.wedged, true) {
                let event = Event::LoopWedged { since: self.turned, limit: self.watchdog };
                self.effects.push_back(KeeperEffect::Emit(event));
            }
            return;
        }
        if self.in_flight.len() < HEARTBEATS_IN_FLIGHT {
            let id = self.next_id;
            self.next_id += 1;
            self.in_flight.insert(id, self.now);
            let statement = Statement::Heartbeat { worker_id: self.worker_id.clone(), lease: LEASE };
            self.effects.push_back(KeeperEffect::Heartbeat { id, statement });
        }
    }

    /// Whether the loop has gone without turning for the watchdog's limit.
    fn stalled(&self) -> bool {
        self.now - self.turned >= self.watchdog
    }

    /// The next command, if any. Drain until `None` after every `handle`.
    pub fn poll_effect(&mut self) -> Option<KeeperEffect> {
        self.effects.pop_front()
    }

    /// When to feed [`KeeperInput::Timeout`] (`None` once stopped).
    pub fn poll_timeout(&self) -> Option<(Timestamp, TimerKind)> {
        self.heartbeat_at.map(|at| (at, TimerKind::Heartbeat))
    }

    /// Whether the lease is given up because the loop stopped turning.
    pub fn is_wedged(&self) -> bool {
        self.wedged
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::time::t0;

    fn drain(keeper: &mut Keeper) -> Vec<KeeperEffect> {
        std::iter::from_fn(|| keeper.poll_effect()).collect()
    }

    fn heartbeats(effects: &[KeeperEffect]) -> Vec<QueryId> {
        effects
            .iter()
            .filter_map(|e| match e {
                KeeperEffect::Heartbeat { id, .. } => Some(*id),
                KeeperEffect::Report { .. } | KeeperEffect::Emit(_) => None,
            })
            .collect()
    }

    /// Fire the timer at its deadline, the loop having turned just before.
    fn tick(keeper: &mut Keeper, turned: bool) -> Vec<KeeperEffect> {
        let (at, _) = keeper.poll_timeout().unwrap();
        if turned {
            keeper.handle(KeeperInput::LoopTurned { at }, at).unwrap();
        }
        keeper.handle(KeeperInput::Timeout, at).unwrap();
        drain(keeper)
    }

    #[test]
    fn beats_at_start_then_every_interval_a_second_only_while_the_first_hangs() {
        let mut keeper = Keeper::new("w", DEFAULT_WATCHDOG, t0());
        assert_eq!(keeper.poll_timeout(), Some((t0(), TimerKind::Heartbeat)));
        let first = heartbeats(&tick(&mut keeper, true));
        assert_eq!(first, vec![0]);
        assert_eq!(keeper.poll_timeout().unwrap().0, t0() + HEARTBEAT_INTERVAL);
        let second = heartbeats(&tick(&mut keeper, true));
        assert_eq!(second, vec![1], "the first hangs: a second goes");
        assert!(heartbeats(&tick(&mut keeper, true)).is_empty(), "two out: no third");
        let landed = t0() + HEARTBEAT_INTERVAL * 2;
        keeper
            .handle(KeeperInput::HeartbeatDone { id: 1, result: Ok(()) }, landed + HEARTBEAT_INTERVAL)
            .unwrap();
        let report = drain(&mut keeper);
        assert_eq!(report, vec![KeeperEffect::Report { sent: t0() + HEARTBEAT_INTERVAL, result: Ok(()) }]);
        assert_eq!(heartbeats(&tick(&mut keeper, true)), vec![2], "one out: another goes");
    }

    #[test]
    fn a_loop_that_stops_turning_loses_the_lease_and_wins_it_back_when_it_turns() {
        let watchdog = Duration::seconds(10);
        let mut keeper = Keeper::new("w", watchdog, t0());
        let mut sent = 0;
        // The loop turns at start, then never: heartbeats go on until the limit.
        for _ in 0..4 {
            let effects = tick(&mut keeper, false);
            let (at, ids) = (keeper.now, heartbeats(&effects));
            assert!(at - t0() < watchdog, "a heartbeat at {at} past the limit");
            for id in ids {
                keeper.handle(KeeperInput::HeartbeatDone { id, result: Ok(()) }, at).unwrap();
                sent += 1;
            }
            drain(&mut keeper);
        }
        assert_eq!(sent, 4, "at 0, 3, 6 and 9 s");
        let effects = tick(&mut keeper, false);
        assert_eq!(effects, vec![KeeperEffect::Emit(Event::LoopWedged { since: t0(), limit: watchdog })]);
        assert!(keeper.is_wedged());
        assert!(tick(&mut keeper, false).is_empty(), "said once, and nothing sent");
        // The loop turns: a heartbeat goes at once.
        let now = keeper.now + Duration::seconds(1);
        keeper.handle(KeeperInput::LoopTurned { at: now }, now).unwrap();
        assert_eq!(drain(&mut keeper), vec![KeeperEffect::Emit(Event::LoopResumed)]);
        assert_eq!(keeper.poll_timeout().unwrap().0, now);
        assert_eq!(heartbeats(&tick(&mut keeper, true)).len(), 1);
        assert!(!keeper.is_wedged());
    }

    #[test]
    fn a_late_timer_does_not_send_a_burst_and_stopping_ends_everything() {
        let mut keeper = Keeper::new("w", DEFAULT_WATCHDOG, t0());
        tick(&mut keeper, true);
        keeper.handle(KeeperInput::HeartbeatDone { id: 0, result: Ok(()) }, t0()).unwrap();
        drain(&mut keeper);
        // The keeper's thread was descheduled for 20 s: one heartbeat, the next an interval on.
        let late = t0() + Duration::seconds(20);
        keeper.handle(KeeperInput::LoopTurned { at: late }, late).unwrap();
        keeper.handle(KeeperInput::Timeout, late).unwrap();
        assert_eq!(heartbeats(&drain(&mut keeper)).len(), 1);
        assert_eq!(keeper.poll_timeout().unwrap().0, late + HEARTBEAT_INTERVAL);
        keeper.handle(KeeperInput::Stop, late).unwrap();
        assert_eq!(keeper.poll_timeout(), None);
        assert!(keeper.handle(KeeperInput::HeartbeatDone { id: 1, result: Ok(()) }, late).is_err());
        keeper.handle(KeeperInput::Timeout, late + LEASE).unwrap();
        assert!(drain(&mut keeper).is_empty(), "stopped: nothing more");
    }

    #[test]
    fn a_clock_stepped_forward_is_not_a_wedged_loop() {
        let watchdog = Duration::seconds(10);
        let mut keeper = Keeper::new("w", watchdog, t0());
        tick(&mut keeper, true);
        // The wall clock steps ten minutes forward while the loop is busy for a second: the
        // keeper's timer fires late, and the lease is renewed, not given up.
        let stepped = keeper.poll_timeout().unwrap().0 + Duration::minutes(10);
        keeper.handle(KeeperInput::Timeout, stepped).unwrap();
        assert_eq!(heartbeats(&drain(&mut keeper)), vec![1]);
        assert!(!keeper.is_wedged());
        // A loop that then stops turning is still caught, within the limit it watched.
        let mut ticks = 0;
        while !keeper.is_wedged() {
            tick(&mut keeper, false);
            ticks += 1;
        }
        assert_eq!(ticks, 3, "wedged at the watchdog's limit after the step, not before");
    }
}
