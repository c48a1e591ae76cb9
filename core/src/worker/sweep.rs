//! [`Sweeper`]: when to free the jobs and queues locked by workers that died.
//!
//! graphile-worker's rule: a lock older than [`STALE_LOCK_AGE`] belongs to a dead worker.
//! Promises: a first sweep within [`FIRST_SWEEP_WITHIN`] of start (or the interval, if
//! shorter), as graphile-worker's; then every `lock_sweep_interval` plus up to a quarter (by
//! default 8 to 10 minutes); both jittered, so that workers started together spread their
//! scans of the jobs table (no index finds locked jobs); never two at once, none after
//! [`stop`](Sweeper::stop). Workers that heartbeat are recovered from much sooner by
//! [`super::lease`]; this rule remains for the locks of those that do not (graphile-worker).

use crate::rng::SplitMix;
use crate::time::Timestamp;
use chrono::Duration;

/// Locks older than this belong to dead workers (graphile-worker's "4 hour rule").
pub const STALE_LOCK_AGE: Duration = Duration::hours(4);

/// The `last_error` the sweep leaves on a job freed from `worker_id` (`unknown` if none is
/// named), whose attempt `attempt` was lost (the wording of `sql/queries/worker/reset_locked.sql`).
pub fn stale_error(worker_id: Option<&str>, attempt: i16) -> String {
    format!("attempt {attempt} lost: worker {} held it over four hours", worker_id.unwrap_or("unknown"))
}

/// The first sweep comes at a random time within this long of a worker's start (graphile-worker's
/// `rand * min(60000, maxResetLockedInterval)` ms).
pub const FIRST_SWEEP_WITHIN: Duration = Duration::seconds(60);

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
    /// A sweeper whose first sweep is due within [`FIRST_SWEEP_WITHIN`] (or `interval`) of
    /// `now`, then every `interval` (plus jitter).
    pub fn start(now: Timestamp, interval: Duration, rng: &mut SplitMix) -> Self {
        let within = interval.min(FIRST_SWEEP_WITHIN).num_milliseconds();
        Sweeper { at: Some(now + Duration::milliseconds(rng.between(0, within))), in_flight: false, interval }
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
