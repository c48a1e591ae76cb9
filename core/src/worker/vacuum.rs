//! [`Vacuum`]: when a worker vacuums the jobs table, so that its fetches stop stepping over
//! what its own fetches and completions left behind.
//!
//! Every fetch reads graphile-worker's main index from its start and steps over the entry of
//! each job locked or completed since the table's last vacuum (docs/performance.md, "A small
//! local queue"): a cost per fetch that grows with every job locked since. Autovacuum bounds
//! it only once a fifth of the table is dead, and looks at most once a minute: a drain ends
//! first. So the worker weighs it: each fetch it sends steps over (it estimates) every job it
//! locked since the last pass; once those steps, at [`STEP_COST`] each, add up to the length
//! of the last pass, it sends a pass. A worker fetching small batches (many fetches a job)
//! vacuums often, one fetching large ones seldom, and a large table (a long pass) less
//! often. The estimate counts this worker's jobs only: where several share the table, each
//! vacuums less often than the steps of all of them would warrant.
//!
//! Promises (checked below): no pass before the steps pay for one; one pass at a time; a
//! failed pass makes the next wait for twice the steps; an empty fetch (the drain is over)
//! starts the count again, so an idle worker does not vacuum; none after
//! [`stop`](Vacuum::stop) or when not enabled.

use crate::time::Timestamp;
use chrono::Duration;

/// What stepping over one dead index entry costs a fetch, rounded up: in
/// `LOCAL_QUEUE_SIZE=100 STATEMENTS=1 bench/drain-cpu 200000` (session 31) the fetch took
/// 19.1 us a job locked without vacuums and 13.3 with them, so about 0.6 ms of a fetch of 100
/// went to the 100,000 entries it stepped over on average: 6 ns each.
pub const STEP_COST: Duration = Duration::nanoseconds(10);

/// The least a pass is taken to cost, whatever it took: a pass over a small table is quick,
/// and still a statement and a scan of every index.
pub const LEAST_PASS_COST: Duration = Duration::milliseconds(10);

/// The most a pass is taken to cost (failures double it up to this).
pub const MOST_PASS_COST: Duration = Duration::seconds(60);

/// The vacuuming part of a worker.
#[derive(Debug, Clone)]
pub(crate) struct Vacuum {
    enabled: bool,
    /// Jobs this worker locked since the last pass was sent.
    locked: u64,
    /// Index entries its fetches stepped over since (each fetch: `locked` as it was sent).
    stepped: u64,
    /// When the pass in flight was sent.
    sent: Option<Timestamp>,
    /// What the next pass is taken to cost: the last one's length.
    cost: Duration,
}

impl Vacuum {
    pub fn new(enabled: bool) -> Self {
        Vacuum { enabled, locked: 0, stepped: 0, sent: None, cost: LEAST_PASS_COST }
    }

    /// The fetch just answered locked `jobs` jobs. None: the drain is over, and what it left
    /// is autovacuum's to clean (an idle worker's polls step over it, seldom).
    pub fn locked(&mut self, jobs: usize) {
        if jobs == 0 {
            (self.locked, self.stepped) = (0, 0);
        }
        self.locked = self.locked.saturating_add(u64::try_from(jobs).unwrap_or(u64::MAX));
    }

    /// A fetch is sent at `now`: whether to send a pass with it.
    pub fn fetch_sent(&mut self, now: Timestamp) -> bool {
        if !self.enabled || self.sent.is_some() {
            return false;
        }
        self.stepped = self.stepped.saturating_add(self.locked);
        let nanos = |d: Duration| u64::try_from(d.num_nanoseconds().unwrap_or(i64::MAX)).unwrap_or(0);
        if self.stepped.saturating_mul(nanos(STEP_COST)) < nanos(self.cost) {
            return false;
        }
        (self.locked, self.stepped, self.sent) = (0, 0, Some(now));
        true
    }

    /// The pass sent ended at `now` (`ok`: it ran).
    pub fn ended(&mut self, now: Timestamp, ok: bool) {
        let Some(sent) = self.sent.take() else { return };
        self.cost = if ok { now - sent } else { self.cost * 2 }.clamp(LEAST_PASS_COST, MOST_PASS_COST);
    }

    /// No more passes (one in flight still ends).
    pub fn stop(&mut self) {
        self.enabled = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::t0;

    /// Fetches of `batch` jobs, each answered in full, until one sends a pass: how many.
    fn fetches_until_a_pass(vacuum: &mut Vacuum, batch: usize) -> usize {
        (1..=100_000)
            .find(|_| {
                let pass = vacuum.fetch_sent(t0());
                vacuum.locked(batch);
                pass
            })
            .unwrap_or(usize::MAX)
    }

    #[test]
    fn a_pass_comes_once_the_fetches_steps_cost_as_much_as_the_last_pass_and_small_batches_vacuum_more_often()
    {
        // 10 ms is 1,000,000 steps: fetches of 100 step over 100, 200, ... entries, so the
        // 142nd fetch (100 * 141 * 142 / 2 = 1,001,100) sends it.
        let mut small = Vacuum::new(true);
        assert_eq!(fetches_until_a_pass(&mut small, 100), 142);
        let mut large = Vacuum::new(true);
        let fetches = fetches_until_a_pass(&mut large, 1_667);
        assert_eq!(fetches, 36, "1,667 * 35 * 36 / 2 = 1,050,210 steps");
        assert!(fetches * 1_667 > 142 * 100 * 4, "large batches vacuum after several times the jobs");
    }

    #[test]
    fn a_longer_pass_spaces_the_next_and_a_failure_doubles_the_wait() {
        let mut vacuum = Vacuum::new(true);
        assert_eq!(fetches_until_a_pass(&mut vacuum, 100), 142);
        assert!(!vacuum.fetch_sent(t0()), "one pass at a time");
        vacuum.locked(1_000_000);
        assert!(!vacuum.fetch_sent(t0()), "still one pass at a time, whatever the steps");
        vacuum.ended(t0() + Duration::milliseconds(40), true);
        // 40 ms: 4,000,000 steps. The jobs locked during the pass count: each fetch now steps
        // over 1,000,100 entries, so the fourth sends the next pass.
        assert!((1..=3).all(|_| !vacuum.fetch_sent(t0())), "3,000,300 steps pay for no 40 ms pass");
        assert!(vacuum.fetch_sent(t0()));
        vacuum.ended(t0(), false);
        assert_eq!(vacuum.cost, Duration::milliseconds(80), "a failure doubles what the next must pay for");
        vacuum.ended(t0(), true);
        assert_eq!(vacuum.cost, Duration::milliseconds(80), "no pass in flight: nothing changes");
    }

    #[test]
    fn an_empty_fetch_starts_the_count_again_so_an_idle_worker_does_not_vacuum() {
        let mut vacuum = Vacuum::new(true);
        vacuum.locked(900_000);
        assert!(!vacuum.fetch_sent(t0()), "900,000 steps");
        vacuum.locked(0);
        assert!(
            (0..10_000).all(|_| !vacuum.fetch_sent(t0())),
            "polls of an idle worker step over nothing counted"
        );
        vacuum.locked(900_000);
        assert!(!vacuum.fetch_sent(t0()) && vacuum.fetch_sent(t0()), "1,800,000 steps: a drain again");
    }

    #[test]
    fn a_worker_that_does_not_vacuum_or_stopped_sends_no_pass() {
        let mut off = Vacuum::new(false);
        off.locked(10_000_000);
        assert!(!off.fetch_sent(t0()) && !off.fetch_sent(t0()));
        let mut stopped = Vacuum::new(true);
        stopped.stop();
        stopped.locked(10_000_000);
        assert!(!stopped.fetch_sent(t0()) && !stopped.fetch_sent(t0()));
    }
}
