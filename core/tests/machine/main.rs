//! Focused tests of the worker machine: each drives it by hand (or through the sim where a
//! database makes the point clearer) and checks one mechanism. One file per part of the
//! machine (`core/src/worker/`); this one holds the harness, [`Hand`], and the helpers that
//! read effects.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

mod cancel;
mod clock;
mod fetch;
mod flow;
mod lease;
mod link;
mod observe;
mod shutdown;
mod sweep;
mod writes;

use chrono::{DateTime, Duration, Utc};
use formica_core::job::RawJob;
use formica_core::job::{Job, JobSpec};
use formica_core::sim::{Db, TaskPlan, World, WorldConfig};
use formica_core::worker::FetchRequest;
use formica_core::worker::{
    Config, DbError, Effect, Event, Failure, Input, QueryId, QueryResult, Statement, TaskOutcome, TimerKind,
    Worker, FIRST_SWEEP_WITHIN,
};
use serde_json::json;
use std::collections::BTreeSet;

fn t0() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(1_704_067_200, 0).unwrap_or_default()
}

fn job(id: i64, queue: Option<&str>, attempts: i16, max_attempts: i16) -> Job {
    Job {
        id,
        job_queue_id: queue.map(|_| 1),
        queue_name: queue.map(str::to_owned),
        task_identifier: "t".into(),
        payload: json!({}).into(),
        priority: 0,
        run_at: t0(),
        attempts,
        max_attempts,
        last_error: None,
        created_at: t0(),
        updated_at: t0(),
        key: None,
        locked_at: Some(t0()),
        locked_by: Some("w".into()),
        revision: 0,
        flags: BTreeSet::new(),
    }
}

fn config() -> Config {
    Config {
        worker_id: "w".into(),
        task_identifiers: vec!["t".into()],
        concurrency: 3,
        complete_batch_delay: Duration::zero(),
        fail_batch_delay: Duration::zero(),
        ..Config::default()
    }
}

/// A machine driven by hand, with a clock.
struct Hand {
    machine: Worker,
    now: DateTime<Utc>,
    /// Reads of cancel requests in flight.
    reads: BTreeSet<QueryId>,
}

impl Hand {
    /// A machine just made at `t0()`, nothing fed.
    fn new(config: Config) -> Hand {
        Hand { machine: Worker::new(config, t0()), now: t0(), reads: BTreeSet::new() }
    }

    /// Started, its lease held: returns it and the effects of the keeper's first heartbeat
    /// landing (the first fetch).
    fn started(config: Config) -> (Hand, Vec<Effect>) {
        let mut hand = Hand::new(config);
        hand.drain();
        // At start: the sweeps due then, then the keeper's first heartbeat lands (no fetch
        // before it).
        if hand.machine.poll_timeout().is_some_and(|(at, _)| at <= t0()) {
            let (_, started) = hand.fire_raw();
            for (id, _) in queries(&started) {
                hand.done(id);
            }
        }
        let effects = hand.renew(t0());
        (hand, effects)
    }

    fn drain(&mut self) -> Vec<Effect> {
        std::iter::from_fn(|| self.machine.poll_effect()).collect()
    }

    fn feed(&mut self, input: Input) -> Vec<Effect> {
        self.machine.handle(input, self.now).expect("a valid input");
        let effects = self.drain();
        let reads = queries(&effects).into_iter().filter(|(_, s)| matches!(s, Statement::ReadCancels { .. }));
        self.reads.extend(reads.map(|(id, _)| id));
        effects
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
    }

    /// Move to the next deadline and fire it; then a heartbeat sent at once lands (a healthy
    /// keeper: the lease holds while timers fire).
    fn fire(&mut self) -> (TimerKind, Vec<Effect>) {
        let (kind, mut effects) = self.fire_raw();
        effects.extend(self.renew(self.now));
        (kind, effects)
    }

    /// The keeper reports that a heartbeat sent at `sent` landed.
    fn renew(&mut self, sent: DateTime<Utc>) -> Vec<Effect> {
        self.feed(Input::Heartbeat { sent, result: Ok(()) })
    }

    /// Move to the next deadline and fire it, with no heartbeat.
    fn fire_raw(&mut self) -> (TimerKind, Vec<Effect>) {
        let (at, kind) = self.machine.poll_timeout().expect("a deadline");
        self.now = self.now.max(at);
        (kind, self.feed(Input::Timeout))
    }

    /// Answer query `id` as a statement that ran: `Done`, or no cancel requests for a read
    /// of them (a landed heartbeat reads them while a job is held).
    fn done(&mut self, id: QueryId) -> Vec<Effect> {
        let result = match self.reads.remove(&id) {
            true => QueryResult::Cancels(vec![]),
            false => QueryResult::Done,
        };
        self.feed(Input::QueryDone { id, result })
    }

    fn jobs(&mut self, id: QueryId, jobs: Vec<Job>) -> Vec<Effect> {
        self.feed(Input::QueryDone { id, result: QueryResult::jobs(jobs) })
    }

    fn finish(&mut self, job_id: i64, outcome: TaskOutcome) -> Vec<Effect> {
        self.feed(Input::TaskFinished { job_id, outcome })
    }
}

fn queries(effects: &[Effect]) -> Vec<(QueryId, Statement)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Query { id, statement } => Some((*id, statement.clone())),
            _ => None,
        })
        .collect()
}

fn fetches(effects: &[Effect]) -> Vec<(QueryId, usize)> {
    queries(effects)
        .into_iter()
        .filter_map(|(id, s)| match s {
            Statement::GetJobs(FetchRequest { limit, .. }) => Some((id, limit)),
            _ => None,
        })
        .collect()
}

fn started(effects: &[Effect]) -> Vec<i64> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::StartTask { job } => Some(job.id),
            _ => None,
        })
        .collect()
}

fn aborted(effects: &[Effect]) -> Vec<i64> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::AbortTask { job_id } => Some(*job_id),
            _ => None,
        })
        .collect()
}

fn writes(effects: &[Effect]) -> Vec<(QueryId, Statement)> {
    queries(effects)
        .into_iter()
        .filter(|(_, s)| {
            matches!(
                s,
                Statement::CompleteJobs { .. } | Statement::FailJobs { .. } | Statement::ReturnJobs { .. }
            )
        })
        .collect()
}

fn events(effects: &[Effect]) -> Vec<Event> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Emit(event) => Some(event.clone()),
            _ => None,
        })
        .collect()
}

fn jobs_of(ids: std::ops::RangeInclusive<i64>) -> Vec<Job> {
    ids.map(|id| job(id, None, 1, 25)).collect()
}

/// Concurrency 2, a queue of 30, two fetches allowed out: jobs 1 and 2 run, 3 runs after 1
/// finished and 4 waits, with two fetches out (ids returned in the order sent).
fn two_fetches_out(config: Config) -> (Hand, QueryId, QueryId) {
    let config = Config { concurrency: 2, local_queue_size: Some(30), fetches_in_flight: 2, ..config };
    let (mut hand, effects) = Hand::started(config);
    let (fetch, _) = fetches(&effects)[0];
    let effects = hand.jobs(fetch, jobs_of(1..=2));
    let (fetch, _) = fetches(&effects)[0];
    hand.jobs(fetch, jobs_of(3..=4));
    let effects = hand.finish(1, TaskOutcome::Ok);
    let [(first, 2), (second, 2)] = fetches(&effects)[..] else { panic!("two fetches: {effects:?}") };
    assert!(first < second);
    let (complete, _) = writes(&effects)[0];
    assert!(fetches(&hand.done(complete)).is_empty(), "never more than two in flight");
    (hand, first, second)
}
