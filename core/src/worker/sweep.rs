//! [`Sweeper`]: when to free the jobs and queues locked by workers that died.
//!
//! graphile-worker's rule: a lock older than [`STALE_LOCK_AGE`] belongs to a dead worker.
//! Promises: a sweep at start (as graphile-worker's), then every `lock_sweep_interval` plus
//! up to a quarter (by default 8 to 10 minutes; jittered, so that workers started together
//! spread theirs), never two at once, none after
//! [`stop`](Sweeper::stop). Workers that heartbeat are recovered from much sooner by
//! [`super::lease`]; this rule remains for the locks of those that do not (graphile-worker).

use crate::rng::SplitMix;
use crate::time::Timestamp;
use chrono::Duration;

/// Locks older than this belong to dead workers (graphile-worker's "4 hour rule").
pub const STALE_LOCK_AGE: Duration = Duration::hours(4);

/// The default time between two sweeps (`Config::lock_sweep_interval`), before the jitter.
pub const LOCK_SWEEP_INTERVAL: Duration = Duration::minutes(8);

/// The lock sweeper of a worker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sweeper {
    at: Option<Timestamp>,
    in_flight: bool,
    interval: Duration,
}

impl Sweeper {
    /// A sweeper whose first sweep is due at `now`, then every `interval` (plus jitter).
    pub fn start(now: Timestamp, interval: Duration) -> Self {
        Sweeper { at: Some(now), in_flight: false, interval }
    }

    fn delay(&self, rng: &mut SplitMix) -> Duration {
        self.interval + Duration::milliseconds(rng.between(0, self.interval.num_milliseconds() / 4))
    }

    /// Whether to send a sweep at `now` (the next one is then armed).
    pub fn handle_timeout(&mut self, now: Timestamp, rng: &mut SplitMix) -> bool {
        if self.at.is_none_or(|at| at > now) {
            return false;
        }
        self.at = Some(now + self.delay(rng));
        !std::mem::replace(&mut self.in_flight, true)
    }

    /// The sweep sent ended (done or failed: a failed one waits for the next).
    pub fn ended(&mut self) {
        self.in_flight = false;
    }

    /// No more sweeps.
    pub fn stop(&mut self) {
        self.at = None;
    }

    /// When the next sweep is due.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.at
    }
}
