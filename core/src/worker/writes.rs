//! [`Writes`]: the outcomes of jobs (completions, failures, returns, snoozes) on their way to the
//! database.
//!
//! It knows no effect: the worker hands it outcomes, sends the statement of each [`Write`]
//! that [`Writes::due`] gives, and reports each write as [`written`](Writes::written) or
//! [`failed`](Writes::failed). It owns one deadline, the flush.
//!
//! Promises:
//! - an outcome waits at most its batch delay (a return: none) before it is sent, batched
//!   with every outcome of its kind waiting then;
//! - nothing is dropped: a write refused for a reason that may pass (a lost connection, a
//!   deadlock) goes back in front of newer outcomes and is sent again after
//!   [`WRITE_RETRY`]'s delay, which grows while writes keep failing and starts over once
//!   one succeeds;
//! - one bad job cannot hold back the others: a write refused for a reason retrying cannot
//!   fix (text the database will not store, a trigger raising) is halved, each half sent on
//!   its own, until the job it is about stands alone; that job is then failed with a
//!   `last_error` that says why its outcome could not be written (a refused failure keeps
//!   only that explanation), so its lock and its queue are released;
//! - the flush deadline is armed exactly while an outcome waits;
//! - a shutdown waits for a refusing database a bounded time: [`Writes::give_up_at`] arms a
//!   deadline after which, once a write is refused, the worker stops without the outcomes
//!   still unwritten (their jobs stay locked until a sweep frees them; at-least-once still
//!   holds).

use crate::backoff::WRITE_RETRY;
use crate::protocol::{Failure, QueryId, Snooze, Statement};
use crate::time::Timestamp;
use chrono::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// One write: a batch of outcomes of one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// Delete these jobs (they succeeded) and release their queues.
    Complete(Vec<i64>),
    /// Record these failed attempts.
    Fail(Vec<Failure>),
    /// Unlock these jobs, refunding the attempt.
    Return(Vec<i64>),
    /// Snooze these jobs: unlock them to run later, refunding the attempt.
    Snooze(Vec<Snooze>),
}

/// How long a shutdown waits for the database to take the outcomes, once its tasks are
/// done or aborted, before it stops without them.
pub const WRITES_GRACE: Duration = Duration::seconds(10);

/// What `last_error` says of an outcome the database refused to record.
const UNRECORDED: &str = "Formica could not record this job's outcome";

impl Write {
    /// What the write does, for error reports.
    pub fn name(&self) -> &'static str {
        match self {
            Write::Complete(_) => "complete jobs",
            Write::Fail(_) => "fail jobs",
            Write::Return(_) => "return jobs",
            Write::Snooze(_) => "snooze jobs",
        }
    }

    /// The write in two halves, if it holds more than one job.
    fn halve(self) -> Result<(Write, Write), Write> {
        fn halves<T>(mut items: Vec<T>) -> Result<(Vec<T>, Vec<T>), Vec<T>> {
            if items.len() < 2 {
                return Err(items);
            }
            let second = items.split_off(items.len() / 2);
            Ok((items, second))
        }
        match self {
            Write::Complete(ids) => {
                halves(ids).map(|(a, b)| (Write::Complete(a), Write::Complete(b))).map_err(Write::Complete)
            }
            Write::Fail(failures) => {
                halves(failures).map(|(a, b)| (Write::Fail(a), Write::Fail(b))).map_err(Write::Fail)
            }
            Write::Return(ids) => {
                halves(ids).map(|(a, b)| (Write::Return(a), Write::Return(b))).map_err(Write::Return)
            }
            Write::Snooze(snoozes) => {
                halves(snoozes).map(|(a, b)| (Write::Snooze(a), Write::Snooze(b))).map_err(Write::Snooze)
            }
        }
    }

    /// A one-job write the database refused with `error`, as the failure that releases the
    /// job instead; `None` if it already is that failure (then only retrying is left).
    fn as_unrecorded(&self, error: &str) -> Option<Write> {
        let (job_id, what) = match self {
            Write::Complete(ids) => (*ids.first()?, "its success"),
            Write::Return(ids) => (*ids.first()?, "its return"),
            Write::Snooze(snoozes) => (snoozes.first()?.job_id, "its snooze"),
            Write::Fail(failures) if failures.first()?.message.starts_with(UNRECORDED) => return None,
            Write::Fail(failures) => (failures.first()?.job_id, "its error"),
        };
        let message = format!("{UNRECORDED} ({what}): the database refused it: {error}");
        let (run_at, permanent, delay) = match self {
            Write::Fail(failures) => {
                (failures.first()?.run_at, failures.first()?.permanent, failures.first()?.delay)
            }
            Write::Complete(_) | Write::Return(_) | Write::Snooze(_) => (None, false, None),
        };
        // The payload a batch job would keep is dropped with the rest: it may be what was refused.
        Some(Write::Fail(vec![Failure { job_id, message, run_at, permanent, payload: None, delay }]))
    }

    fn ids(&self) -> Box<dyn Iterator<Item = i64> + '_> {
        match self {
            Write::Complete(ids) | Write::Return(ids) => Box::new(ids.iter().copied()),
            Write::Fail(failures) => Box::new(failures.iter().map(|f| f.job_id)),
            Write::Snooze(snoozes) => Box::new(snoozes.iter().map(|s| s.job_id)),
        }
    }
}

/// The write batcher of a worker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Writes {
    completions: Vec<i64>,
    failures: Vec<Failure>,
    returns: Vec<i64>,
    snoozes: Vec<Snooze>,
    /// Parts of refused writes, each sent on its own.
    alone: VecDeque<Write>,
    in_flight: BTreeMap<QueryId, Write>,
    /// Jobs to give back once the write about each is done: a job is in one write at a time.
    after: Vec<i64>,
    /// Jobs a workflow released whose outcome waits or is being written: the statement
    /// writing it settles them too.
    workflow_jobs: BTreeSet<i64>,
    /// Writes refused in a row, for their retry delay.
    refused: u32,
    flush_at: Option<Timestamp>,
    give_up_at: Option<Timestamp>,
    /// The give-up deadline passed: the next refusal gives up.
    overdue: bool,
    gave_up: bool,
}

impl Writes {
    /// Job `job_id` succeeded: write it within `delay`.
    pub fn complete(&mut self, job_id: i64, now: Timestamp, delay: Duration) {
        self.completions.push(job_id);
        self.flush_within(now, delay);
    }

    /// An attempt failed: write it within `delay`.
    pub fn fail(&mut self, failure: Failure, now: Timestamp, delay: Duration) {
        self.failures.push(failure);
        self.flush_within(now, delay);
    }

    /// Job `job_id` is a workflow's: the write of its outcome settles it.
    pub fn settles_workflow(&mut self, job_id: i64) {
        self.workflow_jobs.insert(job_id);
    }

    /// The statement that makes `write` for `worker_id`.
    pub fn statement(&self, write: &Write, worker_id: &str) -> Statement {
        let worker_id = worker_id.to_owned();
        let settles_workflow_jobs = write.ids().any(|id| self.workflow_jobs.contains(&id));
        match write {
            Write::Complete(ids) => {
                Statement::CompleteJobs { worker_id, ids: ids.clone(), settles_workflow_jobs }
            }
            Write::Fail(failures) => {
                Statement::FailJobs { worker_id, failures: failures.clone(), settles_workflow_jobs }
            }
            Write::Return(ids) => Statement::ReturnJobs { worker_id, ids: ids.clone() },
            Write::Snooze(snoozes) => Statement::SnoozeJobs { worker_id, snoozes: snoozes.clone() },
        }
    }

    /// A task snoozed: write it within `delay`.
    pub fn snooze(&mut self, snooze: Snooze, now: Timestamp, delay: Duration) {
        self.snoozes.push(snooze);
        self.flush_within(now, delay);
    }

    /// These jobs will not run here: give them back now.
    pub fn give_back(&mut self, ids: Vec<i64>, now: Timestamp) {
        let (later, ids): (Vec<i64>, Vec<i64>) = ids.into_iter().partition(|&id| self.about(id));
        self.after.extend(later);
        if !ids.is_empty() {
            self.returns.extend(ids);
            self.flush_within(now, Duration::zero());
        }
    }

    /// Whether an outcome of job `job_id` waits or is being written.
    fn about(&self, job_id: i64) -> bool {
        self.writes().any(|id| id == job_id)
    }

    /// Give back the jobs whose write is done.
    fn give_back_after(&mut self, now: Timestamp) {
        let (ready, later): (Vec<i64>, Vec<i64>) =
            std::mem::take(&mut self.after).into_iter().partition(|&id| !self.about(id));
        self.after = later;
        self.give_back(ready, now);
    }

    fn flush_within(&mut self, now: Timestamp, delay: Duration) {
        let at = now + delay.max(Duration::zero());
        self.flush_at = Some(self.flush_at.map_or(at, |due| due.min(at)));
    }

    /// The writes to send now, if the flush is due: completions, failures, returns, snoozes, then
    /// the parts of refused writes, each alone.
    pub fn due(&mut self, now: Timestamp) -> Vec<Write> {
        if self.flush_at.is_none_or(|at| at > now) {
            return Vec::new();
        }
        self.flush_at = None;
        let mut writes = Vec::new();
        if !self.completions.is_empty() {
            writes.push(Write::Complete(std::mem::take(&mut self.completions)));
        }
        if !self.failures.is_empty() {
            writes.push(Write::Fail(std::mem::take(&mut self.failures)));
        }
        if !self.returns.is_empty() {
            writes.push(Write::Return(std::mem::take(&mut self.returns)));
        }
        if !self.snoozes.is_empty() {
            writes.push(Write::Snooze(std::mem::take(&mut self.snoozes)));
        }
        writes.extend(self.alone.drain(..));
        writes
    }

    /// `write` was sent as query `id`.
    pub fn sent(&mut self, id: QueryId, write: Write) {
        self.in_flight.insert(id, write);
    }

    /// What write `id` does, if it is one of these.
    pub fn name(&self, id: QueryId) -> Option<&'static str> {
        self.in_flight.get(&id).map(Write::name)
    }

    /// Write `id` reached the database at `now`.
    pub fn written(&mut self, id: QueryId, now: Timestamp) {
        if let Some(write) = self.in_flight.remove(&id) {
            for job_id in write.ids() {
                self.workflow_jobs.remove(&job_id);
            }
        }
        self.refused = 0;
        self.give_back_after(now);
    }

    /// Write `id` was refused at `now` with `error`: sent again later if `retryable`,
    /// otherwise halved until the job it is about is failed on its own.
    pub fn failed(&mut self, id: QueryId, now: Timestamp, retryable: bool, error: &str) {
        let Some(write) = self.in_flight.remove(&id) else { return };
        self.gave_up |= self.overdue;
        if !retryable {
            match write.halve() {
                Ok((first, second)) => self.alone.extend([first, second]),
                Err(one) => match one.as_unrecorded(error) {
                    Some(failure) => self.alone.push_back(failure),
                    // Even the explanation was refused: only retrying, alone, is left.
                    None => {
                        self.alone.push_back(one);
                        return self.retry_later(now);
                    }
                },
            }
            return self.flush_within(now, Duration::zero());
        }
        match write {
            Write::Complete(ids) => self.completions.splice(0..0, ids).for_each(drop),
            Write::Fail(failures) => self.failures.splice(0..0, failures).for_each(drop),
            Write::Return(ids) => self.returns.splice(0..0, ids).for_each(drop),
            Write::Snooze(snoozes) => self.snoozes.splice(0..0, snoozes).for_each(drop),
        }
        self.retry_later(now);
    }

    /// A statement that gives jobs back beside the writes (after a lost fetch answer) was
    /// refused: past the give-up deadline, the shutdown stops waiting, as for a write.
    pub fn refused_beside(&mut self) {
        self.gave_up |= self.overdue;
    }

    fn retry_later(&mut self, now: Timestamp) {
        self.refused += 1;
        // Not before an earlier retry was due: the delay only grows while writes fail.
        let at = now + WRITE_RETRY.delay(self.refused);
        self.flush_at = Some(self.flush_at.map_or(at, |due| due.max(at)));
    }

    /// Whether a write is out.
    pub fn writing(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Whether no outcome waits to be sent.
    pub fn nothing_waiting(&self) -> bool {
        self.completions.is_empty()
            && self.failures.is_empty()
            && self.returns.is_empty()
            && self.snoozes.is_empty()
            && self.alone.is_empty()
            && self.after.is_empty()
    }

    /// Whether a write that releases job `job_id` (a return or a failure) is in flight.
    pub fn releasing(&self, job_id: i64) -> bool {
        self.in_flight.values().any(|write| {
            matches!(write, Write::Return(_) | Write::Fail(_) | Write::Snooze(_))
                && write.ids().any(|id| id == job_id)
        })
    }

    /// The jobs whose outcome waits or is being written, and those to give back after.
    pub fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.writes().chain(self.after.iter().copied())
    }

    /// The jobs whose outcome waits or is being written.
    fn writes(&self) -> impl Iterator<Item = i64> + '_ {
        (self.completions.iter().chain(&self.returns).copied())
            .chain(self.failures.iter().map(|f| f.job_id))
            .chain(self.snoozes.iter().map(|s| s.job_id))
            .chain(self.alone.iter().chain(self.in_flight.values()).flat_map(Write::ids))
    }

    /// When the waiting outcomes are sent.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.flush_at
    }

    /// Stop waiting for the database at `at` (or earlier, if already set so).
    pub fn give_up_at(&mut self, at: Timestamp) {
        self.give_up_at = Some(self.give_up_at.map_or(at, |due| due.min(at)));
    }

    /// Whether to give up at `now`: the deadline passed while writes are being refused
    /// (a deadline that passes while the database answers, say after the wall clock
    /// leapt, gives up only at the next refusal).
    pub fn handle_timeout(&mut self, now: Timestamp) -> bool {
        if self.give_up_at.is_some_and(|at| at <= now) {
            self.give_up_at = None;
            self.overdue = true;
            self.gave_up |= self.refused > 0;
        }
        self.gave_up
    }

    /// Whether the worker stopped waiting for the database.
    pub fn gave_up(&self) -> bool {
        self.gave_up
    }

    /// The jobs whose outcome was never recorded, forgotten (the worker stops).
    pub fn abandon(&mut self) -> Vec<i64> {
        let ids = self.ids().collect();
        *self = Writes::default();
        ids
    }

    /// When the worker stops waiting for the database.
    pub fn give_up_deadline(&self) -> Option<Timestamp> {
        self.give_up_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_timestamp(1_700_000_000, 0).unwrap_or_default() + Duration::milliseconds(ms)
    }

    /// Sends what is due at `now` as queries numbered from `next`; returns them.
    fn send(writes: &mut Writes, now: Timestamp, next: &mut QueryId) -> Vec<(QueryId, Write)> {
        let sent: Vec<(QueryId, Write)> = writes
            .due(now)
            .into_iter()
            .map(|w| {
                *next += 1;
                (*next, w)
            })
            .collect();
        for (id, w) in &sent {
            writes.sent(*id, w.clone());
        }
        sent
    }

    #[test]
    fn a_job_given_back_while_a_write_about_it_is_out_goes_back_once_that_write_is_done() {
        let mut writes = Writes::default();
        let mut next = 0;
        writes.give_back(vec![1], t(0));
        let [(first, Write::Return(ids))] = &send(&mut writes, t(0), &mut next)[..] else { panic!() };
        assert_eq!(ids, &vec![1]);
        // Job 1 comes back again (locked anew) while that return is out: not in two writes.
        writes.give_back(vec![1, 2], t(1));
        let sent = send(&mut writes, t(1), &mut next);
        assert!(matches!(&sent[..], [(_, Write::Return(ids))] if ids == &vec![2]), "{sent:?}");
        assert!(!writes.nothing_waiting(), "job 1 waits for its write");
        // A refused first return keeps job 1 waiting; once it is written, job 1 goes back.
        writes.failed(*first, t(2), true, "connection lost");
        let retry = send(&mut writes, t(10_000), &mut next);
        assert!(matches!(&retry[..], [(_, Write::Return(ids))] if ids == &vec![1]), "{retry:?}");
        writes.written(retry[0].0, t(10_001));
        let again = send(&mut writes, t(10_001), &mut next);
        assert!(matches!(&again[..], [(_, Write::Return(ids))] if ids == &vec![1]), "{again:?}");
    }

    #[test]
    fn a_write_refused_for_good_is_halved_until_the_bad_job_is_failed_alone() {
        let mut writes = Writes::default();
        for id in 1..=5 {
            writes.complete(id, t(0), Duration::zero());
        }
        let mut next = 0;
        let mut completed = Vec::new();
        let mut explained = Vec::new();
        // The database refuses any write that touches job 4.
        for round in 0..20 {
            let sent = send(&mut writes, t(round), &mut next);
            if sent.is_empty() {
                break;
            }
            for (id, write) in sent {
                let ids: Vec<i64> = write.ids().collect();
                match &write {
                    Write::Fail(f) if f[0].message.starts_with(UNRECORDED) => {
                        explained.push((f[0].job_id, f[0].message.clone()));
                        writes.written(id, t(round));
                    }
                    Write::Complete(_) if !ids.contains(&4) => {
                        completed.extend(ids);
                        writes.written(id, t(round));
                    }
                    Write::Complete(_) | Write::Fail(_) | Write::Return(_) | Write::Snooze(_) => {
                        writes.failed(id, t(round), false, "boom (P0001)");
                    }
                }
            }
        }
        completed.sort_unstable();
        assert_eq!(completed, [1, 2, 3, 5], "the others are written");
        assert_eq!(explained.len(), 1);
        assert_eq!(explained[0].0, 4);
        assert!(
            explained[0].1.contains("its success") && explained[0].1.contains("boom (P0001)"),
            "{explained:?}"
        );
        assert!(writes.nothing_waiting() && !writes.writing() && writes.deadline().is_none());
    }

    #[test]
    fn a_retryable_refusal_keeps_the_batch_whole_and_backs_off() {
        let mut writes = Writes::default();
        writes.complete(1, t(0), Duration::zero());
        writes.complete(2, t(0), Duration::zero());
        let mut next = 0;
        let sent = send(&mut writes, t(0), &mut next);
        assert_eq!(sent.len(), 1);
        writes.failed(sent[0].0, t(0), true, "connection lost");
        assert_eq!(writes.deadline(), Some(t(200)), "after the first retry delay");
        assert_eq!(send(&mut writes, t(200), &mut next)[0].1, Write::Complete(vec![1, 2]));
    }

    #[test]
    fn a_refused_explanation_is_retried_alone_with_backoff() {
        let mut writes = Writes::default();
        let message = format!("{UNRECORDED} (its error): x");
        writes.fail(
            Failure { job_id: 9, message, run_at: None, permanent: false, payload: None, delay: None },
            t(0),
            Duration::zero(),
        );
        writes.complete(1, t(0), Duration::zero());
        let mut next = 0;
        let sent = send(&mut writes, t(0), &mut next);
        let (fail, _) = sent.iter().find(|(_, w)| matches!(w, Write::Fail(_))).expect("a failure write");
        writes.failed(*fail, t(0), false, "still refused");
        assert_eq!(writes.deadline(), Some(t(200)), "backs off instead of spinning");
        let again = send(&mut writes, t(200), &mut next);
        assert_eq!(again.len(), 1, "alone: {again:?}");
    }
}
