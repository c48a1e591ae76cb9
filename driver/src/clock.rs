//! The worker's clock: the [`FeedClock`] its loop and its lease's keeper both read, from the
//! application runtime's wall clock and monotonic clock (so a runtime with a controlled clock
//! drives the worker's timers too).

use crate::runtime::Runtime;
use chrono::{DateTime, Utc};
use formica_core::time::FeedClock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// One clock for the loop and the keeper, so that a heartbeat's sending time and the
/// machine's `now` are on the same line.
pub(crate) struct Clock {
    runtime: Arc<dyn Runtime>,
    feed: Mutex<FeedClock>,
    origin: Instant,
    /// When the loop last turned, in microseconds of the fed clock (read by the keeper).
    turned: AtomicI64,
}

impl Clock {
    pub(crate) fn new(runtime: Arc<dyn Runtime>) -> Self {
        let (now, origin) = (runtime.now(), runtime.monotonic());
        let turned = AtomicI64::new(now.timestamp_micros());
        Clock { feed: Mutex::new(FeedClock::new(now, chrono::Duration::zero())), origin, runtime, turned }
    }

    /// The time now, never behind a time read before.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        let elapsed = self.runtime.monotonic().saturating_duration_since(self.origin);
        let mono = chrono::Duration::from_std(elapsed).unwrap_or(chrono::Duration::MAX);
        self.feed.lock().unwrap_or_else(PoisonError::into_inner).now(self.runtime.now(), mono)
    }

    /// The instant at which the clock reads `at`.
    pub(crate) fn instant_at(&self, at: DateTime<Utc>) -> Instant {
        let mono = self.feed.lock().unwrap_or_else(PoisonError::into_inner).mono_at(at);
        self.origin + mono.to_std().unwrap_or_default()
    }

    /// The loop turned at `at`.
    pub(crate) fn loop_turned(&self, at: DateTime<Utc>) {
        self.turned.store(at.timestamp_micros(), Ordering::Relaxed);
    }

    /// When the loop last turned.
    pub(crate) fn last_turn(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(self.turned.load(Ordering::Relaxed)).unwrap_or_default()
    }
}
