//! [`Fetcher`]: when to look for jobs, how many to ask for, and the local queue of jobs
//! fetched but not started yet.
//!
//! It knows no statement and no effect: the worker asks it [`Fetcher::want`] a fetch, tells
//! it what was [`sent`](Fetcher::sent) and what came back, and takes jobs from it with
//! [`Fetcher::take`]. It owns two deadlines: the poll (look for jobs although nothing said
//! there are any) and the local queue's give-back.
//!
//! Promises (checked by `core/tests/machine/fetch.rs` and the lockstep model of `check/`):
//! - one fetch at a time without a local queue; with one, at most
//!   [`Config::fetches_in_flight`] (one by default), each a
//!   batch, and the queue never holds or asks for more than its size;
//! - a job never leaves the queue while a fetch sent before its own is out (PostgreSQL may
//!   have locked the earlier fetch's jobs after the later's, and those may come first);
//!   jobs leave in (priority, run_at, id) order;
//! - once a fetch came back short, one fetch at a time, only for slots about to idle; a
//!   wake-up (notification, freed slot, written outcome) during a fetch causes one more
//!   fetch after it, not one each;
//! - while the worker runs (and not in run-once mode) the poll deadline is always armed, so
//!   a lost notification delays a job by at most the poll interval;
//! - after a fetch whose answer was lost (it may have locked jobs this worker never got),
//!   no fetch is sent until the worker has given back what it holds unknowingly
//!   ([`Fetcher::reclaim_due`]), which it does only while no fetch is out;
//! - jobs the queue handed none of for the TTL (every slot busy) are given back, and it does
//!   not prefetch again until a slot frees, or the same jobs would go round in circles.
//!
//! The batch adapts: it starts at `concurrency` and doubles (up to [`batch_cap`])
//! only when the slots ran dry and a full batch arrives to find them idle; it falls back to
//! one (`concurrency` at least) after a give-back, and to what a short fetch of named-queue jobs got.

use super::config::Config;
use super::refetch::Refetch;
use crate::job::Job;
use crate::protocol::QueryId;
use crate::time::Timestamp;
use chrono::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A batch smaller than this pays a fetch's fixed cost on too few jobs: mostly stepping over
/// the index entries of the jobs locked and completed since the table's last vacuum, which
/// every fetch reads before the due jobs. `LOCAL_QUEUE_SIZE=100 POLL_SECONDS=0.2
/// bench/drain-cpu`: batches of 50 rather than 34 cost PostgreSQL 34-39 rather than 42-58
/// us/job; the whole queue (100) rather than 50, 23-27 rather than 28-32 us/job, draining
/// 32-36k rather than 30-35k jobs/s (session 24); with 1000, batches of 500 rather than 334
/// drained 59-63k rather than 71k jobs/s.
const AMPLE_BATCH: usize = 100;

/// A fetch that came back short after this long read past many jobs scheduled for later
/// (the index orders by priority then run_at, so a scan of all priorities reads each one's
/// later jobs before it knows it found all those due): the next fetches walk the priorities
/// present instead, one range of due jobs each, until a fetch comes back full or
/// 16 walks in a row were quick (the jobs due later may be gone, and the walk
/// costs planning: the next fetch scans once again, and walks again if that is slow). A short fetch
/// over a small table takes well under a millisecond; over 1,000,000 jobs due tomorrow, 18 ms.
pub const SLOW_SHORT_FETCH: Duration = Duration::milliseconds(5);

/// See [`SLOW_SHORT_FETCH`].
const QUICK_WALKS: u32 = 16;

/// The largest batch for a local queue of `size`: a third of it, so that the next fetch
/// can be out while a batch waits; but at least min(all of it, [`AMPLE_BATCH`]).
fn batch_cap(size: usize) -> usize {
    size.div_ceil(3).max(size.min(AMPLE_BATCH))
}

/// The fetch and local-queue part of a worker.
#[derive(Debug, Clone)]
pub(crate) struct Fetcher {
    concurrency: usize,
    /// The local queue's size (`None`: fetch only for free slots).
    size: Option<usize>,
    /// Most fetches out at once.
    most_in_flight: usize,
    ttl: Duration,
    poll_interval: Duration,
    run_once: bool,
    /// Fetched, waiting for a slot, in start order.
    queue: VecDeque<Job>,
    /// Jobs of a fetch that came back before an earlier one: they join `queue` once the
    /// earlier one is back (or failed).
    early: Vec<Job>,
    /// Fetches out, and how many jobs each asked for.
    in_flight: BTreeMap<QueryId, (usize, Timestamp)>,
    /// Fetches walk the priorities present ([`SLOW_SHORT_FETCH`]), and how many walks in a
    /// row were quick.
    walk: Option<u32>,
    /// Jobs per fetch with a local queue.
    batch: usize,
    /// A slot freed with no job waiting since the last batch came: a bigger batch may help.
    ran_dry: bool,
    /// The last fetch found fewer jobs than it asked for, and nothing since may have made a
    /// job runnable: do not fetch.
    drained: bool,
    /// The last fetch found fewer jobs than it asked for (wake-ups do not clear this): fetch
    /// only for slots about to idle.
    short: bool,
    /// A wake-up came while a fetch was out: fetch once more after it.
    fetch_again: bool,
    /// The queue gave its jobs back: do not prefetch again until a slot frees.
    gave_back: bool,
    poll_at: Option<Timestamp>,
    ttl_at: Option<Timestamp>,
    /// The refetch delay's hold (local queue only).
    refetch: Refetch,
    /// Giving back what fetches whose answer was lost locked.
    reclaim: Reclaim,
}

/// Where giving back the jobs of a lost fetch answer stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reclaim {
    /// No answer was lost since the last give-back.
    Idle,
    /// An answer was lost: give back once no fetch is out.
    Wanted,
    /// The give-back is out.
    Sent,
}

impl Fetcher {
    /// A fetcher for `config` whose poll deadline is armed from `now`.
    pub fn new(config: &Config, now: Timestamp) -> Self {
        let mut fetcher = Fetcher {
            concurrency: config.concurrency,
            size: config.local_queue_size,
            most_in_flight: if config.local_queue_size.is_some() {
                config.fetches_in_flight.max(1)
            } else {
                1
            },
            ttl: config.local_queue_ttl,
            poll_interval: config.poll_interval,
            run_once: config.run_once,
            queue: VecDeque::new(),
            early: Vec::new(),
            in_flight: BTreeMap::new(),
            walk: None,
            batch: 1,
            ran_dry: false,
            drained: false,
            short: false,
            fetch_again: false,
            gave_back: false,
            poll_at: None,
            ttl_at: None,
            refetch: Refetch::new(
                config.local_queue_size.and(config.refetch_delay).filter(|_| !config.run_once),
                config.seed ^ 0x7e_fe7c,
            ),
            reclaim: Reclaim::Idle,
        };
        // Armed from the start, so a worker whose first fetch never comes back still polls.
        fetcher.arm_poll(now, true);
        fetcher
    }

    /// The limit of a fetch to send now, with `running` tasks busy; `None`: no fetch now.
    /// The caller sends it and reports [`Fetcher::sent`].
    pub fn want(&mut self, running: usize) -> Option<usize> {
        let in_flight = self.in_flight.len();
        let asked: usize = self.in_flight.values().map(|(limit, _)| limit).sum();
        // A fetch now could lock jobs the give-back would take for unknown ones.
        if in_flight >= self.most_in_flight || self.reclaim != Reclaim::Idle {
            return None;
        }
        let free = self.concurrency.saturating_sub(running);
        let limit = match self.size {
            Some(_) if self.gave_back && free == 0 => 0,
            // A batch (adaptive: at least `concurrency`, at most `batch_cap`) at a time; the
            // queue never holds or asks for more than `size` jobs.
            Some(size) => {
                // `Config::validate` refuses a concurrency of 0, but the machine also runs
                // configs that were never validated (the sim's, tests'): a batch is still at
                // least one job, or the fetcher would ask for nothing forever.
                let least = self.concurrency.clamp(1, size);
                let batch = self.batch.clamp(least, batch_cap(size).max(least));
                let queued = self.queue.len() + self.early.len();
                let wanted = if self.short {
                    // Nothing more was runnable: fetch only for slots about to idle, one
                    // fetch at a time, so a flood of wake-ups is not a flood of fetches.
                    in_flight == 0 && queued < free
                } else {
                    // More is runnable: fetch the next batch before this one runs out, so
                    // PostgreSQL locks it while this one runs. A second fetch only while
                    // jobs wait here (with idle slots it would only race the first).
                    queued < batch && (in_flight == 0 || !self.queue.is_empty())
                };
                if wanted && queued + asked + batch <= size {
                    batch
                } else {
                    0
                }
            }
            None => free,
        };
        if limit == 0 || (self.drained && !self.fetch_again) || self.refetch.holds() {
            return None;
        }
        self.fetch_again = false;
        Some(limit)
    }

    /// Fetch `id` asking for `limit` jobs was sent at `now`.
    pub fn sent(&mut self, id: QueryId, limit: usize, now: Timestamp) {
        self.in_flight.insert(id, (limit, now));
    }

    /// Whether the next fetch walks the priorities present ([`SLOW_SHORT_FETCH`]).
    pub fn walks(&self) -> bool {
        self.walk.is_some()
    }

    /// Fetch `id` came back with `rows` locked, of which `jobs` could be read; those in
    /// `held` (this worker already runs them or writes their outcome: a sweep freed their
    /// lock) are dropped. With `running` tasks busy. When the worker no longer `accepting`
    /// jobs, returns the ids to give back.
    #[allow(clippy::too_many_arguments)] // Each is a fact of this one answer.
    pub fn fetched(
        &mut self,
        id: QueryId,
        rows: usize,
        mut jobs: Vec<Job>,
        held: &BTreeSet<i64>,
        running: usize,
        accepting: bool,
        now: Timestamp,
    ) -> Vec<i64> {
        let (limit, sent_at) = self.in_flight.remove(&id).unwrap_or((0, now));
        let got = rows;
        self.drained = got < limit;
        self.short = got < limit;
        let slow = now - sent_at >= SLOW_SHORT_FETCH;
        self.walk = match self.walk {
            _ if !self.short => None,
            _ if slow => Some(0),
            Some(quick) if quick + 1 < QUICK_WALKS => Some(quick + 1),
            Some(_) | None => None,
        };
        if accepting {
            self.refetch.fetched(got, limit, now);
        }
        // A fetch takes one job a named queue, so a short one of theirs got about as many as were free;
        // a bigger batch only locks their later jobs to leave them (`QUEUES=1000 bench/drain-cpu`).
        if self.short && jobs.iter().any(|job| job.queue_name.is_some()) {
            self.batch = got;
        }
        // A job this worker already runs, holds or is writing the outcome of can come back
        // only if its lock looked dead (older than four hours) and a sweep freed it: it is
        // not started again; the lock is ours again, and the outcome this worker has or will
        // have settles the job.
        jobs.retain(|job| !held.contains(&job.id));
        let mut give_back = Vec::new();
        if !accepting {
            // Fetched while a shutdown began or the lease lapsed: give them back untouched.
            give_back.extend(jobs.iter().map(|j| j.id));
        } else if self.earlier_out(id) {
            self.early.extend(jobs);
        } else {
            // The slots ran dry, and a full batch finds them still idle: fetch more at a time.
            let idle = self.queue.is_empty() && running < self.concurrency;
            if let Some(size) = self.size {
                if std::mem::take(&mut self.ran_dry) && idle && got >= limit {
                    self.batch = limit.saturating_mul(2).min(batch_cap(size));
                }
            }
            self.enqueue(jobs);
        }
        if self.drained && self.fetch_again {
            self.drained = false;
        }
        self.arm_poll(now, accepting);
        give_back
    }

    /// Fetch `id` failed: nothing of it will come, so the jobs of later fetches need not wait
    /// for it. It may have locked jobs all the same (its answer was lost): those are to be
    /// given back.
    pub fn failed(&mut self, id: QueryId) {
        self.in_flight.remove(&id);
        if self.reclaim == Reclaim::Idle {
            self.reclaim = Reclaim::Wanted;
        }
        if !self.earlier_out(id) {
            self.enqueue(Vec::new());
        }
    }

    /// Whether to give back, now, the jobs locked for this worker that it does not know of:
    /// an answer was lost, and no fetch is out (none can be locking jobs for it meanwhile).
    pub fn reclaim_due(&self) -> bool {
        self.reclaim == Reclaim::Wanted && self.in_flight.is_empty()
    }

    /// The give-back was sent: no fetch until it is answered.
    pub fn reclaim_sent(&mut self) {
        self.reclaim = Reclaim::Sent;
    }

    /// The give-back ended: it is due `again` (it failed), or fetching goes on (the jobs it
    /// freed may be runnable).
    pub fn reclaim_ended(&mut self, again: bool) {
        self.reclaim = if again { Reclaim::Wanted } else { Reclaim::Idle };
        self.wake();
    }

    /// Whether a give-back of what a lost fetch answer locked is due or out: a worker stops
    /// only once it is done.
    pub fn reclaiming(&self) -> bool {
        self.reclaim != Reclaim::Idle
    }

    /// Whether a fetch sent before fetch `id` is still out.
    fn earlier_out(&self, id: QueryId) -> bool {
        self.in_flight.range(..id).next().is_some()
    }

    /// `jobs` join the queue, and so do the jobs of later fetches that came back first.
    /// Each batch comes sorted, but two in flight may have been locked in either order: they
    /// start in (priority, run_at, id) order all the same.
    fn enqueue(&mut self, jobs: Vec<Job>) {
        self.queue.extend(jobs);
        self.queue.extend(self.early.drain(..));
        let key = |j: &Job| (j.priority, j.run_at, j.id);
        if !self.queue.iter().is_sorted_by_key(key) {
            self.queue.make_contiguous().sort_by_key(key);
        }
    }

    /// Up to `slots` jobs to start now, in order. The give-back deadline counts from the
    /// last job the queue handed out: it gives jobs back only while every slot stays busy,
    /// not every TTL under steady load.
    pub fn take(&mut self, slots: usize, now: Timestamp) -> Vec<Job> {
        let jobs: Vec<Job> = self.queue.drain(..slots.min(self.queue.len())).collect();
        self.handed_out(!jobs.is_empty(), now);
        jobs
    }

    /// [`take`](Self::take), skipping the jobs `may_start` refuses (asked in order until
    /// `slots` are taken): they keep their place in the queue. Only for per-task limits:
    /// it walks the queue, where `take` splits it.
    pub fn take_where(
        &mut self,
        slots: usize,
        now: Timestamp,
        mut may_start: impl FnMut(&Job) -> bool,
    ) -> Vec<Job> {
        let mut jobs = Vec::new();
        let mut kept = VecDeque::new();
        while jobs.len() < slots {
            let Some(job) = self.queue.pop_front() else { break };
            if may_start(&job) {
                jobs.push(job);
            } else {
                kept.push_back(job);
            }
        }
        kept.append(&mut self.queue);
        self.queue = kept;
        self.handed_out(!jobs.is_empty(), now);
        jobs
    }

    /// The give-back deadline after a take that handed out jobs (or not).
    fn handed_out(&mut self, any: bool, now: Timestamp) {
        if self.queue.is_empty() {
            self.ttl_at = None;
        } else if any || self.ttl_at.is_none() {
            self.ttl_at = Some(now + self.ttl);
        }
    }

    /// Something may have made a job runnable (a notification, a written outcome, the
    /// listener back): look now, or right after the fetch out.
    pub fn wake(&mut self) {
        self.drained = false;
        if self.fetching() {
            self.fetch_again = true;
        }
    }

    /// A notification announced `count` new jobs.
    pub fn notified(&mut self, count: u64) {
        self.refetch.announced(count);
        self.wake();
    }

    /// A task ended: its slot is free.
    pub fn slot_freed(&mut self) {
        self.gave_back = false;
        self.ran_dry |= self.queue.is_empty();
        // In direct mode, or with nothing queued, the free slot wants a job.
        if self.size.is_none() || self.queue.is_empty() {
            self.drained &= !self.run_once;
            self.fetch_again |= self.fetching();
        }
    }

    /// A fetch failed: nothing is known about what is runnable, so the retry fetches.
    pub fn unknown(&mut self) {
        self.drained = false;
    }

    /// The worker has no task to fetch for.
    pub fn nothing_to_fetch(&mut self) {
        self.drained = true;
    }

    /// The deadlines that passed at `now`: the poll wakes the fetcher (and is armed again
    /// while `accepting`); a passed give-back deadline returns the queued ids to give back.
    pub fn handle_timeout(&mut self, now: Timestamp, accepting: bool) -> Vec<i64> {
        self.refetch.handle_timeout(now);
        if self.poll_at.is_some_and(|at| at <= now) {
            self.poll_at = None;
            self.drained = false;
            self.fetch_again |= self.fetching();
            self.arm_poll(now, accepting);
        }
        if self.ttl_at.is_none_or(|at| at > now) {
            return Vec::new();
        }
        // Held too long: give them back, and fetch less at a time from now on.
        let expired = self.give_back();
        self.batch = 1;
        self.gave_back |= !expired.is_empty();
        expired
    }

    /// The ids of the waiting jobs that `holds_back` says must not start now, to give back
    /// (they leave the queue; the others keep their order).
    pub fn withdraw(&mut self, holds_back: impl Fn(&Job) -> bool) -> Vec<i64> {
        let mut ids = Vec::new();
        let mut keep = |job: &Job| {
            let back = holds_back(job);
            back.then(|| ids.push(job.id));
            !back
        };
        self.queue.retain(&mut keep);
        self.early.retain(&mut keep);
        if self.queue.is_empty() {
            self.ttl_at = None;
        }
        ids
    }

    /// The ids of the jobs waiting here, to give back (they leave the queue).
    pub fn give_back(&mut self) -> Vec<i64> {
        self.ttl_at = None;
        let early = std::mem::take(&mut self.early);
        self.queue.drain(..).chain(early).map(|j| j.id).collect()
    }

    /// Shutdown: disarm both deadlines and return the ids of the jobs never started.
    pub fn stop(&mut self) -> Vec<i64> {
        self.refetch.stop();
        self.poll_at = None;
        self.give_back()
    }

    fn arm_poll(&mut self, now: Timestamp, accepting: bool) {
        if accepting && !self.run_once {
            self.poll_at = Some(now + self.poll_interval);
        }
    }

    /// Whether a fetch is out.
    pub fn fetching(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Whether no job waits here.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.early.is_empty()
    }

    /// Whether the last fetch came back short and nothing since may have made a job runnable.
    pub fn is_drained(&self) -> bool {
        self.drained
    }

    /// How many jobs of `task` wait here.
    pub fn queued_of(&self, task: &str) -> usize {
        self.queue.iter().chain(&self.early).filter(|j| j.task_identifier == task).count()
    }

    /// The ids of the jobs waiting here.
    pub fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.queue.iter().chain(&self.early).map(|j| j.id)
    }

    /// When to look for jobs although no notification came, or when the refetch delay's
    /// hold ends, whichever comes first.
    pub fn poll_deadline(&self) -> Option<Timestamp> {
        self.poll_at.into_iter().chain(self.refetch.deadline()).min()
    }

    /// When the queued jobs are given back unless a slot takes one.
    pub fn give_back_deadline(&self) -> Option<Timestamp> {
        self.ttl_at
    }
}

#[cfg(test)]
mod tests {
    //! The fetcher alone, in the cases its history shows are easy to get wrong.
    use super::*;
    use crate::worker::RefetchDelay;
    use serde_json::json;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_timestamp(1_700_000_000, 0).unwrap_or_default() + Duration::milliseconds(ms)
    }

    fn jobs(ids: &[i64]) -> Vec<Job> {
        let job = |id| Job {
            id,
            job_queue_id: None,
            queue_name: None,
            task_identifier: "t".into(),
            payload: json!({}).into(),
            priority: 0,
            run_at: t(0),
            attempts: 1,
            max_attempts: 25,
            last_error: None,
            created_at: t(0),
            updated_at: t(0),
            key: None,
            locked_at: Some(t(0)),
            locked_by: Some("w".into()),
            revision: 0,
            flags: Default::default(),
        };
        ids.iter().copied().map(job).collect()
    }

    fn fetcher(concurrency: usize, size: usize) -> Fetcher {
        let config = Config { concurrency, local_queue_size: Some(size), ..Config::default() };
        Fetcher::new(&config, t(0))
    }

    fn ids(jobs: &[Job]) -> Vec<i64> {
        jobs.iter().map(|j| j.id).collect()
    }

    #[test]
    fn after_a_short_fetch_the_refetch_delay_holds_notified_fetches_until_its_deadline() {
        let delay =
            RefetchDelay { duration: Duration::milliseconds(100), threshold: 0, max_abort_threshold: 0 };
        let config = Config { concurrency: 2, refetch_delay: Some(delay), ..Config::default() };
        let mut f = Fetcher::new(&config, t(0));
        let none = BTreeSet::new();
        assert_eq!(f.want(0), Some(2));
        f.sent(1, 2, t(0));
        f.fetched(1, 0, Vec::new(), &none, 0, true, t(10));
        f.notified(5);
        assert_eq!(f.want(0), None, "held, although jobs were announced");
        let end = f.poll_deadline().expect("the hold's deadline");
        assert!(end >= t(60) && end < t(160), "{end}");
        assert!(f.handle_timeout(end, true).is_empty());
        assert_eq!(f.want(0), Some(2), "the announced jobs are fetched once the hold ends");
        // Without a delay the same notification is fetched at once.
        let mut f = fetcher(2, 100);
        f.sent(1, 2, t(0));
        f.fetched(1, 0, Vec::new(), &none, 0, true, t(10));
        f.notified(5);
        assert_eq!(f.want(0), Some(2));
    }

    #[test]
    fn jobs_of_a_later_fetch_wait_for_the_earlier_one_then_start_in_order() {
        let mut f = fetcher(2, 100);
        let none = BTreeSet::new();
        assert_eq!(f.want(0), Some(2));
        f.sent(1, 2, t(0));
        f.fetched(1, 2, jobs(&[1, 2]), &none, 0, true, t(1));
        assert_eq!(ids(&f.take(2, t(1))), [1, 2]);
        // Both slots busy, queue empty: the next batch goes out, then a second behind it.
        f.sent(2, 2, t(0));
        f.sent(3, 2, t(0));
        f.fetched(3, 2, jobs(&[3, 4]), &none, 2, true, t(2));
        assert!(f.take(2, t(2)).is_empty(), "fetch 2 is still out: its jobs may come first");
        f.fetched(2, 2, jobs(&[5, 6]), &none, 2, true, t(3));
        assert_eq!(ids(&f.take(4, t(3))), [3, 4, 5, 6], "(priority, run_at, id) order");
    }

    #[test]
    fn a_failed_earlier_fetch_releases_the_jobs_of_a_later_one() {
        let mut f = fetcher(2, 100);
        f.sent(1, 2, t(0));
        f.sent(2, 2, t(0));
        f.fetched(2, 2, jobs(&[7, 8]), &BTreeSet::new(), 0, true, t(1));
        assert!(f.take(2, t(1)).is_empty());
        f.failed(1);
        assert_eq!(ids(&f.take(2, t(2))), [7, 8]);
        assert!(!f.fetching());
    }

    #[test]
    fn after_a_give_back_no_prefetch_until_a_slot_frees() {
        let mut f = fetcher(1, 100);
        f.sent(1, 1, t(0));
        f.fetched(1, 1, jobs(&[1]), &BTreeSet::new(), 0, true, t(0));
        assert_eq!(ids(&f.take(1, t(0))), [1]);
        f.sent(2, 1, t(0));
        f.fetched(2, 1, jobs(&[2]), &BTreeSet::new(), 1, true, t(1));
        assert!(f.take(0, t(1)).is_empty(), "the slot is busy");
        let due = f.give_back_deadline().expect("queued jobs have a give-back deadline");
        assert_eq!(f.handle_timeout(due, true), [2], "given back");
        assert_eq!(f.want(1), None, "the slot is still busy: the same job would come round again");
        f.slot_freed();
        assert_eq!(f.want(0), Some(1), "a free slot fetches again, one batch at a time");
    }

    #[test]
    fn batches_reach_a_third_of_the_queue_or_all_of_a_small_one() {
        let caps: Vec<usize> = [30, 100, 200, 250, 300, 1000, 5000].into_iter().map(batch_cap).collect();
        assert_eq!(caps, [30, 100, 100, 100, 100, 334, 1667]);
    }

    #[test]
    fn the_batch_grows_only_when_the_slots_ran_dry_and_a_full_batch_finds_them_idle() {
        let mut f = fetcher(2, 30);
        let none = BTreeSet::new();
        assert_eq!(f.want(0), Some(2));
        f.sent(1, 2, t(0));
        f.fetched(1, 2, jobs(&[1, 2]), &none, 0, true, t(0));
        f.take(2, t(0));
        assert_eq!(f.want(2), Some(2), "no growth on the first fetch");
        f.sent(2, 2, t(0));
        f.slot_freed();
        f.slot_freed(); // ran dry: both slots free, nothing queued
        f.fetched(2, 2, jobs(&[3, 4]), &none, 0, true, t(1));
        f.take(2, t(1));
        assert_eq!(f.want(2), Some(4), "a full batch found idle slots: twice the batch");
        f.sent(3, 4, t(0));
        f.fetched(3, 1, jobs(&[5]), &none, 2, true, t(2));
        assert_eq!(f.want(2), None, "short: one fetch at a time, only for slots about to idle");
    }

    #[test]
    fn fetches_walk_the_priorities_after_a_slow_short_fetch_until_one_comes_back_full_or_many_are_quick() {
        let none = BTreeSet::new();
        let mut f = fetcher(2, 100);
        // Fetch `id` for 2 jobs, sent at `id` s, came back with `rows` after `took` ms.
        let mut fetch = |id: i64, rows: usize, took: i64| {
            f.sent(id as QueryId, 2, t(1000 * id));
            let ids: Vec<i64> = (0..rows as i64).map(|i| 10 * id + i).collect();
            f.fetched(id as QueryId, rows, jobs(&ids), &none, 0, true, t(1000 * id + took));
            f.walks()
        };
        assert!(!fetch(1, 1, 1), "short and quick: one scan stays");
        assert!(fetch(2, 1, 5), "short and slow: it read past jobs due later");
        assert!(fetch(3, 0, 1), "short and quick, walking: it keeps walking");
        assert!(!fetch(4, 2, 9), "full: many are due, one scan again");
        assert!(fetch(5, 0, 7), "slow and short again: walks");
        let quick: Vec<bool> = (6..6 + i64::from(QUICK_WALKS)).map(|id| fetch(id, 0, 1)).collect();
        assert!(quick[..quick.len() - 1].iter().all(|&walks| walks), "{quick:?}");
        assert!(!quick[quick.len() - 1], "after {QUICK_WALKS} quick walks in a row, one scan is tried again");
    }
}
