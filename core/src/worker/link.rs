//! [`Link`]: the state of the worker's LISTEN connection and when to reconnect it.
//!
//! Promises: after the connection is lost or cannot be made, one reconnection is due after
//! the [`listener`](crate::backoff::listener) backoff, jittered, growing with each failure in
//! a row until one succeeds; once [`off`](Link::off), nothing is due and reports of the
//! connection change nothing. The worker polls while the link is down, so a lost link
//! delays jobs by at most the poll interval.

use crate::backoff::{self, Backoff};
use crate::rng::SplitMix;
use crate::time::Timestamp;
use chrono::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Off,
    /// Connecting after `failures` failed attempts in a row.
    Connecting {
        failures: u32,
    },
    Up,
    Down {
        failures: u32,
    },
}

/// The listener link of a worker.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    state: State,
    backoff: Backoff,
    reconnect_at: Option<Timestamp>,
}

impl Link {
    /// A link that is off, reconnecting after at most `max_backoff` once on.
    pub fn new(max_backoff: Duration) -> Self {
        Link { state: State::Off, backoff: backoff::listener(max_backoff), reconnect_at: None }
    }

    /// Start connecting (the caller opens the connection).
    pub fn connect(&mut self) {
        self.state = State::Connecting { failures: 0 };
    }

    /// The connection is up; false if the link is off (the report is stale).
    pub fn up(&mut self) -> bool {
        if self.state == State::Off {
            return false;
        }
        self.state = State::Up;
        true
    }

    /// The connection was lost or could not be made at `now`: when to try again (`None`
    /// if the link is off).
    pub fn down(&mut self, now: Timestamp, rng: &mut SplitMix) -> Option<Timestamp> {
        let failures = match self.state {
            State::Off => return None,
            // A failed reconnection attempt counts on: the backoff grows until one succeeds.
            State::Down { failures } | State::Connecting { failures } => failures + 1,
            State::Up => 1,
        };
        let retry_at = now + self.backoff.jittered(failures, rng);
        self.state = State::Down { failures };
        self.reconnect_at = Some(retry_at);
        Some(retry_at)
    }

    /// Whether the reconnection is due at `now`; if so the link is connecting again and the
    /// caller opens the connection.
    pub fn handle_timeout(&mut self, now: Timestamp) -> bool {
        if self.reconnect_at.is_none_or(|at| at > now) {
            return false;
        }
        self.reconnect_at = None;
        let failures = match self.state {
            State::Down { failures } | State::Connecting { failures } => failures,
            State::Off | State::Up => 0,
        };
        self.state = State::Connecting { failures };
        true
    }

    /// Off for good (shutdown).
    pub fn off(&mut self) {
        self.state = State::Off;
        self.reconnect_at = None;
    }

    /// When to reconnect.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.reconnect_at
    }
}
