//! [`Writes`]: the outcomes of jobs (completions, failures, returns) on their way to the
//! database.
//!
//! It knows no effect: the worker hands it outcomes, sends the statement of each [`Write`]
//! that [`Writes::due`] gives, and reports each write as [`written`](Writes::written) or
//! [`failed`](Writes::failed). It owns one deadline, the flush.
//!
//! Promises:
//! - an outcome waits at most its batch delay (a return: none) before it is sent, batched
//!   with every outcome of its kind waiting then;
//! - nothing is dropped: a refused write goes back in front of newer outcomes and is sent
//!   again after [`WRITE_RETRY`]'s delay, which grows while writes keep failing and starts
//!   over once one succeeds;
//! - the flush deadline is armed exactly while an outcome waits.

use crate::backoff::WRITE_RETRY;
use crate::protocol::{Failure, QueryId, Statement};
use crate::time::Timestamp;
use chrono::Duration;
use std::collections::BTreeMap;

/// One write: a batch of outcomes of one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// Delete these jobs (they succeeded) and release their queues.
    Complete(Vec<i64>),
    /// Record these failed attempts.
    Fail(Vec<Failure>),
    /// Unlock these jobs, refunding the attempt.
    Return(Vec<i64>),
}

impl Write {
    /// What the write does, for error reports.
    pub fn name(&self) -> &'static str {
        match self {
            Write::Complete(_) => "complete jobs",
            Write::Fail(_) => "fail jobs",
            Write::Return(_) => "return jobs",
        }
    }

    /// The statement that makes this write for `worker_id`.
    pub fn statement(&self, worker_id: &str) -> Statement {
        let worker_id = worker_id.to_owned();
        match self {
            Write::Complete(ids) => Statement::CompleteJobs { worker_id, ids: ids.clone() },
            Write::Fail(failures) => Statement::FailJobs { worker_id, failures: failures.clone() },
            Write::Return(ids) => Statement::ReturnJobs { worker_id, ids: ids.clone() },
        }
    }

    fn ids(&self) -> Box<dyn Iterator<Item = i64> + '_> {
        match self {
            Write::Complete(ids) | Write::Return(ids) => Box::new(ids.iter().copied()),
            Write::Fail(failures) => Box::new(failures.iter().map(|f| f.job_id)),
        }
    }
}

/// The write batcher of a worker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Writes {
    completions: Vec<i64>,
    failures: Vec<Failure>,
    returns: Vec<i64>,
    in_flight: BTreeMap<QueryId, Write>,
    /// Writes refused in a row, for their retry delay.
    refused: u32,
    flush_at: Option<Timestamp>,
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

    /// These jobs will not run here: give them back now.
    pub fn give_back(&mut self, ids: Vec<i64>, now: Timestamp) {
        if !ids.is_empty() {
            self.returns.extend(ids);
            self.flush_within(now, Duration::zero());
        }
    }

    fn flush_within(&mut self, now: Timestamp, delay: Duration) {
        let at = now + delay.max(Duration::zero());
        self.flush_at = Some(self.flush_at.map_or(at, |due| due.min(at)));
    }

    /// The writes to send now, if the flush is due: completions, failures, returns.
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

    /// Write `id` reached the database.
    pub fn written(&mut self, id: QueryId) {
        self.in_flight.remove(&id);
        self.refused = 0;
    }

    /// Write `id` was refused at `now`: it goes back in front and is sent again later.
    pub fn failed(&mut self, id: QueryId, now: Timestamp) {
        let Some(write) = self.in_flight.remove(&id) else { return };
        match write {
            Write::Complete(ids) => self.completions.splice(0..0, ids).for_each(drop),
            Write::Fail(failures) => self.failures.splice(0..0, failures).for_each(drop),
            Write::Return(ids) => self.returns.splice(0..0, ids).for_each(drop),
        }
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
        self.completions.is_empty() && self.failures.is_empty() && self.returns.is_empty()
    }

    /// The jobs whose outcome waits or is being written.
    pub fn ids(&self) -> impl Iterator<Item = i64> + '_ {
        (self.completions.iter().chain(&self.returns).copied())
            .chain(self.failures.iter().map(|f| f.job_id))
            .chain(self.in_flight.values().flat_map(Write::ids))
    }

    /// When the waiting outcomes are sent.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.flush_at
    }
}
