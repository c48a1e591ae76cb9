//! Focused tests of the worker machine: each drives it by hand (or through the sim where a
//! database makes the point clearer) and checks one mechanism.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::{DateTime, Duration, Utc};
use formica_core::job::{Job, JobSpec, RawJob};
use formica_core::sim::{Db, TaskPlan, World, WorldConfig};
use formica_core::worker::{
    Config, DbError, Effect, Event, Failure, Input, QueryId, QueryResult, Statement, TaskOutcome, TimerKind,
    Worker,
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
        payload: json!({}),
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
}

impl Hand {
    /// Started, its tasks registered as id 1: returns it and the effects of registration
    /// (the first fetch).
    fn started(config: Config) -> (Hand, Vec<Effect>) {
        let mut hand = Hand { machine: Worker::new(config, t0()), now: t0() };
        let effects = hand.drain();
        let (register, _) = queries(&effects)[0].clone();
        // At start: the sweeps due then, and the keeper's first heartbeat lands (no fetch
        // before it).
        if hand.machine.poll_timeout().is_some_and(|(at, _)| at <= t0()) {
            let (_, started) = hand.fire_raw();
            for (id, _) in queries(&started) {
                hand.done(id);
            }
        }
        hand.renew(t0());
        let effects =
            hand.feed(Input::QueryDone { id: register, result: QueryResult::Tasks(vec![(1, "t".into())]) });
        (hand, effects)
    }

    fn drain(&mut self) -> Vec<Effect> {
        std::iter::from_fn(|| self.machine.poll_effect()).collect()
    }

    fn feed(&mut self, input: Input) -> Vec<Effect> {
        self.machine.handle(input, self.now).expect("a valid input");
        self.drain()
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

    fn done(&mut self, id: QueryId) -> Vec<Effect> {
        self.feed(Input::QueryDone { id, result: QueryResult::Done })
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
            Statement::GetJobs { limit, .. } => Some((id, limit)),
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

#[test]
fn direct_fetching_asks_for_the_free_slots_only() {
    let (mut hand, effects) = Hand::started(Config { local_queue_size: None, ..config() });
    let [(fetch, limit)] = fetches(&effects)[..] else { panic!("one fetch: {effects:?}") };
    assert_eq!(limit, 3, "all three slots are free");
    let effects = hand.jobs(fetch, vec![job(1, None, 1, 25), job(2, None, 1, 25), job(3, None, 1, 25)]);
    assert_eq!(started(&effects), vec![1, 2, 3]);
    assert!(fetches(&effects).is_empty(), "no slot is free");
    let effects = hand.finish(2, TaskOutcome::Ok);
    let [(_, 1)] = fetches(&effects)[..] else { panic!("a fetch for the one free slot: {effects:?}") };
}

fn jobs_of(ids: std::ops::RangeInclusive<i64>) -> Vec<Job> {
    ids.map(|id| job(id, None, 1, 25)).collect()
}

#[test]
fn local_queue_fetching_asks_for_a_batch_and_hands_jobs_out_as_slots_free() {
    let (mut hand, effects) =
        Hand::started(Config { concurrency: 2, local_queue_size: Some(30), ..config() });
    let [(fetch, 2)] = fetches(&effects)[..] else { panic!("a first batch of concurrency: {effects:?}") };
    let effects = hand.jobs(fetch, jobs_of(1..=2));
    assert_eq!(started(&effects), vec![1, 2]);
    let [(fetch, 2)] = fetches(&effects)[..] else {
        panic!("the next batch is fetched while this one runs: {effects:?}")
    };
    let effects = hand.jobs(fetch, jobs_of(3..=4));
    assert!(started(&effects).is_empty() && fetches(&effects).is_empty(), "a batch waits: {effects:?}");
    assert!(hand.machine.deadline(TimerKind::LocalQueueTtl).is_some(), "waiting jobs have a deadline");
    let effects = hand.finish(1, TaskOutcome::Ok);
    assert_eq!(started(&effects), vec![3], "the next local job, without a query");
    assert_eq!(fetches(&effects).len(), 2, "fewer than a batch wait: two fetches go out: {effects:?}");
    assert!(fetches(&hand.feed(note())).is_empty(), "never more than two in flight");
}

fn note() -> Input {
    Input::Notification { channel: "jobs:insert".into(), payload: r#"{"r":0.5,"count":1}"#.into() }
}

/// Concurrency 2, a queue of 30: jobs 1 and 2 run, 3 runs after 1 finished and 4 waits,
/// with two fetches out (ids returned in the order sent).
fn two_fetches_out(config: Config) -> (Hand, QueryId, QueryId) {
    let (mut hand, effects) = Hand::started(Config { concurrency: 2, local_queue_size: Some(30), ..config });
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

#[test]
fn a_fetch_that_comes_back_first_waits_for_the_earlier_one_and_jobs_start_in_order() {
    let (mut hand, first, second) = two_fetches_out(config());
    // PostgreSQL ran the second fetch first: it locked the jobs that come first, but its
    // answer may still arrive first.
    hand.jobs(second, jobs_of(5..=6));
    hand.finish(2, TaskOutcome::Ok);
    let effects = hand.finish(3, TaskOutcome::Ok);
    assert!(started(&effects).is_empty(), "a slot is free, but the earlier fetch is out: {effects:?}");
    let mut first_jobs = jobs_of(7..=8);
    first_jobs[1].priority = -1;
    let effects = hand.jobs(first, first_jobs);
    assert_eq!(started(&effects), vec![8], "the higher priority first, from either fetch");
    let mut order = Vec::new();
    for id in [4, 8, 5] {
        order.extend(started(&hand.finish(id, TaskOutcome::Ok)));
    }
    assert_eq!(order, vec![5, 6, 7], "then (priority, run_at, id) order across both batches");
}

#[test]
fn jobs_of_a_later_fetch_start_when_the_earlier_one_fails() {
    let (mut hand, first, second) = two_fetches_out(config());
    hand.jobs(second, jobs_of(5..=6));
    hand.finish(2, TaskOutcome::Ok);
    hand.finish(3, TaskOutcome::Ok);
    // The earlier fetch's connection died: nothing of it will come, so the later batch
    // must not wait for it.
    let failed =
        QueryResult::Err(formica_core::worker::DbError { message: "terminated".into(), retryable: true });
    let effects = hand.feed(Input::QueryDone { id: first, result: failed });
    assert_eq!(started(&effects), vec![5], "the free slot takes the later batch at once: {effects:?}");
    let mut order = Vec::new();
    for id in [4, 5] {
        order.extend(started(&hand.finish(id, TaskOutcome::Ok)));
    }
    assert_eq!(order, vec![6]);
}

#[test]
fn shutdown_with_two_fetches_out_returns_every_unstarted_job() {
    let (mut hand, first, second) = two_fetches_out(config());
    hand.jobs(second, jobs_of(7..=8));
    let effects = hand.feed(Input::ShutdownRequested { graceful: true });
    let [(ret, Statement::ReturnJobs { ids, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!(ids, &vec![4, 7, 8], "the queued job and the early batch go back");
    let ret = *ret;
    hand.done(ret);
    let effects = hand.jobs(first, jobs_of(5..=6));
    assert!(started(&effects).is_empty());
    let [(ret, Statement::ReturnJobs { ids, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!(ids, &vec![5, 6], "the late batch goes back too");
    let ret = *ret;
    hand.done(ret);
    for id in [2, 3] {
        let effects = hand.finish(id, TaskOutcome::Ok);
        for (write, _) in writes(&effects) {
            hand.done(write);
        }
    }
    assert!(hand.machine.is_stopped());
}

#[test]
fn run_once_stops_only_when_no_fetch_is_out_and_the_last_came_back_empty() {
    let (mut hand, first, second) = two_fetches_out(Config { run_once: true, ..config() });
    let mut writes_out: Vec<QueryId> = Vec::new();
    for id in [2, 3, 4] {
        let effects = hand.finish(id, TaskOutcome::Ok);
        writes_out.extend(writes(&effects).into_iter().map(|(w, _)| w));
    }
    for write in writes_out {
        hand.done(write);
    }
    assert_eq!(hand.machine.running(), 0);
    let mut effects = hand.jobs(first, vec![]);
    assert!(!hand.machine.is_stopped(), "idle and the first came back empty, but the second is out");
    let mut out = vec![second];
    while let Some(fetch) = out.pop() {
        assert!(!effects.contains(&Effect::Stopped));
        effects = hand.jobs(fetch, vec![]);
        out.extend(fetches(&effects).into_iter().map(|(id, _)| id));
    }
    assert!(effects.contains(&Effect::Stopped), "{effects:?}");
}

#[test]
fn the_batch_grows_only_when_the_slots_ran_dry_and_shrinks_when_jobs_go_back() {
    let (mut hand, effects) = Hand::started(Config {
        concurrency: 2,
        local_queue_size: Some(30),
        local_queue_ttl: Duration::seconds(30),
        ..config()
    });
    let (fetch, _) = fetches(&effects)[0];
    let effects = hand.jobs(fetch, jobs_of(1..=2));
    let [(fetch, 2)] = fetches(&effects)[..] else {
        panic!("idle at start is not running dry: the batch stays at 2: {effects:?}")
    };
    hand.finish(1, TaskOutcome::Ok);
    hand.finish(2, TaskOutcome::Ok);
    let effects = hand.jobs(fetch, jobs_of(3..=4));
    let [(fetch, 4)] = fetches(&effects)[..] else {
        panic!("the slots ran dry and a full batch found them idle: it doubles: {effects:?}")
    };
    let effects = hand.jobs(fetch, jobs_of(5..=8));
    assert!(fetches(&effects).is_empty(), "a batch waits");
    let effects = hand.finish(3, TaskOutcome::Ok);
    let [(one, 4), (two, 4)] = fetches(&effects)[..] else {
        panic!("a full batch that found the slots busy does not grow it: {effects:?}")
    };
    hand.jobs(one, jobs_of(9..=12));
    let effects = hand.jobs(two, jobs_of(13..=16));
    assert!(fetches(&effects).is_empty(), "{effects:?}");
    let returned = loop {
        let (_, effects) = hand.fire();
        if !writes(&effects).is_empty() {
            break writes(&effects);
        }
    };
    assert_eq!(hand.now, t0() + Duration::seconds(30), "the TTL after the last job was taken");
    let [(ret, Statement::ReturnJobs { ids, .. })] = &returned[..] else { panic!("{returned:?}") };
    assert_eq!(ids, &(6..=16).collect::<Vec<_>>(), "no job taken for the TTL: all go back");
    let ret = *ret;
    hand.done(ret);
    let effects = hand.finish(4, TaskOutcome::Ok);
    let [(_, 2)] = fetches(&effects)[..] else { panic!("back to concurrency: {effects:?}") };
}

#[test]
fn a_short_fetch_leaves_the_worker_idle_until_woken() {
    let (mut hand, effects) = Hand::started(config());
    let (fetch, _) = fetches(&effects)[0];
    let effects = hand.jobs(fetch, vec![job(1, None, 1, 25)]);
    assert_eq!(started(&effects), vec![1]);
    assert!(fetches(&effects).is_empty(), "fewer rows than asked: nothing else is runnable");
    let effects = hand.finish(1, TaskOutcome::Ok);
    let (complete, _) = writes(&effects)[0].clone();
    assert!(fetches(&effects).is_empty(), "a free slot alone does not fetch after a short fetch");
    let effects = hand.done(complete);
    assert_eq!(fetches(&effects).len(), 1, "a written completion may free a queue: look again");
    let (fetch, _) = fetches(&effects)[0];
    let effects = hand.jobs(fetch, vec![]);
    assert!(events(&effects).contains(&Event::FetchEmpty));
    let (kind, effects) = hand.fire();
    assert_eq!(kind, TimerKind::Poll);
    assert_eq!(fetches(&effects).len(), 1, "the poll looks again");
}

#[test]
fn notifications_during_a_fetch_cause_one_more_fetch_not_one_each() {
    let (mut hand, effects) = Hand::started(config());
    let (fetch, _) = fetches(&effects)[0];
    for _ in 0..5 {
        assert!(fetches(&hand.feed(note())).is_empty(), "one fetch at a time");
    }
    let effects = hand.jobs(fetch, vec![]);
    let [(again, 3)] = fetches(&effects)[..] else { panic!("exactly one more fetch: {effects:?}") };
    let effects = hand.jobs(again, vec![]);
    assert!(fetches(&effects).is_empty(), "and no more");
    // Idle: a notification fetches at once; a removal (negative count) does not.
    let removal = Input::Notification { channel: "jobs:insert".into(), payload: r#"{"count":-1}"#.into() };
    assert!(fetches(&hand.feed(removal)).is_empty());
    assert_eq!(fetches(&hand.feed(note())).len(), 1);
}

#[test]
fn the_poll_timer_is_always_armed_while_running() {
    let mut hand = Hand { machine: Worker::new(config(), t0()), now: t0() };
    let effects = hand.drain();
    assert!(hand.machine.deadline(TimerKind::Poll).is_some(), "armed before registration answers");
    let (register, _) = queries(&effects)[0].clone();
    let failed = QueryResult::Err(formica_core::worker::DbError { message: "down".into(), retryable: true });
    hand.feed(Input::QueryDone { id: register, result: failed.clone() });
    assert!(hand.machine.deadline(TimerKind::Poll).is_some());
    // Retry registration, then let a few fetches fail and succeed.
    for round in 0..20 {
        let (kind, effects) = hand.fire();
        assert!(hand.machine.deadline(TimerKind::Poll).is_some(), "round {round} after {kind:?}");
        for (id, statement) in queries(&effects) {
            let result = match statement {
                Statement::RegisterTasks { .. } => QueryResult::Tasks(vec![(1, "t".into())]),
                Statement::GetJobs { .. } if round % 3 == 0 => failed.clone(),
                Statement::GetJobs { .. } => QueryResult::jobs(vec![]),
                _ => QueryResult::Done,
            };
            hand.feed(Input::QueryDone { id, result });
            assert!(hand.machine.deadline(TimerKind::Poll).is_some(), "round {round}");
        }
        let poll = hand.machine.deadline(TimerKind::Poll).expect("armed");
        assert!(poll <= hand.now + Duration::seconds(2), "never later than one interval");
    }
}

#[test]
fn listener_reconnects_with_a_capped_growing_backoff() {
    let cap = Duration::seconds(3);
    let (mut hand, _) = Hand::started(Config { max_listener_backoff: cap, ..config() });
    let mut delays = Vec::new();
    for failure in 1..=8 {
        let effects = hand.feed(Input::ListenerDown { error: "refused".into() });
        let retry_at = events(&effects)
            .into_iter()
            .find_map(|e| match e {
                Event::ListenerDown { retry_at, .. } => Some(retry_at),
                _ => None,
            })
            .expect("a ListenerDown event");
        assert_eq!(hand.machine.deadline(TimerKind::Listener), Some(retry_at));
        let delay = retry_at - hand.now;
        let base = (50.0 * (failure as f64).exp()).min(cap.num_milliseconds() as f64);
        assert!(delay <= cap, "capped: {delay}");
        assert!(
            delay.num_milliseconds() as f64 >= (base * 0.5).floor(),
            "failure {failure}: {delay} vs {base}"
        );
        delays.push(delay);
        hand.now = retry_at;
        let effects = hand.feed(Input::Timeout);
        assert!(effects.contains(&Effect::ConnectListener));
    }
    assert!(delays[0] < Duration::milliseconds(200));
    assert!(delays[7] >= cap / 2);
    // A connection that comes up resets the backoff and looks for missed jobs.
    let effects = hand.feed(Input::ListenerUp);
    assert!(events(&effects).contains(&Event::ListenerUp));
    let effects = hand.feed(Input::ListenerDown { error: "lost".into() });
    let delay = events(&effects)
        .into_iter()
        .find_map(|e| match e {
            Event::ListenerDown { retry_at, .. } => Some(retry_at - hand.now),
            _ => None,
        })
        .expect("event");
    assert!(delay < Duration::milliseconds(200), "reset after success: {delay}");
}

#[test]
fn completions_are_batched_under_the_flush_timer() {
    let (mut hand, effects) =
        Hand::started(Config { complete_batch_delay: Duration::milliseconds(50), ..config() });
    let (fetch, _) = fetches(&effects)[0];
    hand.jobs(fetch, vec![job(1, None, 1, 25), job(2, None, 1, 25), job(3, None, 1, 25)]);
    assert!(writes(&hand.finish(1, TaskOutcome::Ok)).is_empty(), "waits for the batch");
    assert_eq!(hand.machine.deadline(TimerKind::Flush), Some(t0() + Duration::milliseconds(50)));
    hand.advance(Duration::milliseconds(10));
    assert!(writes(&hand.finish(2, TaskOutcome::Ok)).is_empty());
    assert_eq!(
        hand.machine.deadline(TimerKind::Flush),
        Some(t0() + Duration::milliseconds(50)),
        "a later completion joins the batch without delaying it"
    );
    let (kind, effects) = hand.fire();
    assert_eq!(kind, TimerKind::Flush);
    let [(_, Statement::CompleteJobs { ids, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!(ids, &vec![1, 2]);
}

#[test]
fn a_zero_batch_delay_writes_at_once() {
    let (mut hand, effects) = Hand::started(config());
    let (fetch, _) = fetches(&effects)[0];
    hand.jobs(fetch, vec![job(1, None, 1, 25), job(2, None, 1, 25)]);
    let effects = hand.finish(1, TaskOutcome::Ok);
    let [(_, Statement::CompleteJobs { ids, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!(ids, &vec![1]);
    let effects = hand.finish(2, TaskOutcome::Err("no".into()));
    let [(_, Statement::FailJobs { failures, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!(failures[0].job_id, 2);
}

#[test]
fn failures_back_off_and_the_last_attempt_fails_permanently() {
    let (mut hand, effects) = Hand::started(Config { use_local_time: true, ..config() });
    let (fetch, _) = fetches(&effects)[0];
    hand.jobs(fetch, vec![job(1, None, 2, 3), job(2, None, 3, 3), job(3, None, 12, 25)]);
    hand.advance(Duration::seconds(5));
    let effects = hand.finish(1, TaskOutcome::Err("e1".into()));
    let evs = events(&effects);
    let expected = hand.now + Duration::microseconds((2f64.exp() * 1e6).round() as i64);
    assert!(
        evs.iter().any(|e| matches!(e,
            Event::JobError { job_id: 1, error, attempt: 2, max_attempts: 3, duration, retry_at, .. }
                if error == "e1" && *duration == Duration::seconds(5) && *retry_at == Some(expected)
        )),
        "the failure says how long the task ran and when it runs again: {evs:?}"
    );
    assert!(!evs.iter().any(|e| matches!(e, Event::JobPermanentlyFailed { .. })), "one attempt is left");
    let [(_, Statement::FailJobs { failures, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!(
        failures,
        &vec![Failure {
            job_id: 1,
            message: "e1".into(),
            run_at: Some(expected),
            permanent: false,
            payload: None
        }]
    );

    let effects = hand.finish(2, TaskOutcome::Panicked("p".into()));
    let evs = events(&effects);
    assert!(evs.iter().any(|e| matches!(e,
        Event::JobPermanentlyFailed { job_id: 2, error, attempt: 3, duration, .. }
            if error == "p" && *duration == Duration::seconds(5)
    )));
    assert!(evs.iter().any(|e| matches!(e, Event::JobError { job_id: 2, retry_at: None, .. })));
    let effects = hand.finish(3, TaskOutcome::Err("e3".into()));
    let [(_, Statement::FailJobs { failures, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    let capped = hand.now + Duration::microseconds((10f64.exp() * 1e6).round() as i64);
    assert_eq!(failures[0].run_at, Some(capped), "the delay stops growing at e^10 s");
}

#[test]
fn a_batch_job_keeps_only_its_failed_items_and_completes_once_they_succeed() {
    let mut world = World::new(WorldConfig::default());
    let runs = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let seen = runs.clone();
    // Item 2 fails on its first try; every other try of every item succeeds.
    world.set_script(move |job, _| {
        let items = job.payload.as_array().cloned().unwrap_or_default();
        seen.borrow_mut().push(job.payload.clone());
        let first = seen.borrow().len() == 1;
        let results = items.iter().map(|i| if first && *i == json!(2) { Err("no".into()) } else { Ok(()) });
        TaskPlan::finish(
            Duration::milliseconds(10),
            formica_core::batch::outcome(items.clone(), results.collect()),
        )
    });
    let id = world.db_mut().add_job(&RawJob::new("t", json!([1, 2, 3]), JobSpec::default())).expect("add").id;
    world.add_worker(config());
    world.run_for(Duration::seconds(1));
    let job = world.db().job(id).cloned().expect("retried, not completed");
    assert_eq!(job.payload, json!([2]), "only the failed item is kept");
    assert_eq!(job.last_error.as_deref(), Some("Batch failures:\npayload[1]: no"));
    assert_eq!((job.attempts, job.locked_at), (1, None));
    world.run_for(Duration::minutes(1));
    assert!(world.db().job(id).is_none(), "the retry of the failed item completed the job");
    assert_eq!(*runs.borrow(), vec![json!([1, 2, 3]), json!([2])]);
}

#[test]
fn the_permanent_failure_is_visible_in_the_database() {
    let mut world = World::new(WorldConfig::default());
    world.set_script(|_, _| TaskPlan::finish(Duration::milliseconds(10), TaskOutcome::Err("always".into())));
    let spec = JobSpec::builder().max_attempts(2).build();
    world.db_mut().add_job(&RawJob::new("t", json!({}), spec)).expect("add");
    world.add_worker(config());
    world.run_for(Duration::minutes(1));
    let job = world.db().jobs().next().cloned().expect("the job stays");
    assert_eq!((job.attempts, job.max_attempts, job.locked_at), (2, 2, None));
    assert_eq!(job.last_error.as_deref(), Some("always"));
    let permanent = world
        .trace()
        .iter()
        .filter(|e| {
            matches!(
                &e.what,
                formica_core::sim::Traced::Effect(Effect::Emit(Event::JobPermanentlyFailed { .. }))
            )
        })
        .count();
    assert_eq!(permanent, 1);
}

#[test]
fn at_start_the_worker_sweeps_and_recovers_and_fetches_only_once_its_lease_is_held() {
    let mut hand = Hand { machine: Worker::new(config(), t0()), now: t0() };
    let effects = hand.drain();
    let (register, _) = queries(&effects)[0].clone();
    let effects =
        hand.feed(Input::QueryDone { id: register, result: QueryResult::Tasks(vec![(1, "t".into())]) });
    assert!(fetches(&effects).is_empty(), "no fetch before a heartbeat landed: {effects:?}");
    let (_, effects) = hand.fire_raw();
    assert_eq!(hand.now, t0(), "due at start");
    let sent = queries(&effects);
    assert!(sent.iter().any(|(_, s)| matches!(s, Statement::ResetLocked { .. })), "the four-hour sweep");
    assert!(sent.iter().any(|(_, s)| matches!(s, Statement::RecoverLapsed { .. })), "the recovery sweep");
    assert!(!sent.iter().any(|(_, s)| matches!(s, Statement::Heartbeat { .. })), "the keeper heartbeats");
    assert_eq!(hand.machine.deadline(TimerKind::Heartbeat), None, "the keeper's timer");
    assert!(fetches(&effects).is_empty());
    // A failed heartbeat holds nothing, and is reported.
    let error = DbError { message: "connection lost".into(), retryable: true };
    let effects = hand.feed(Input::Heartbeat { sent: t0(), result: Err(error) });
    assert!(fetches(&effects).is_empty());
    assert!(events(&effects)
        .iter()
        .any(|e| matches!(e, Event::DatabaseError { statement: "renew the lease", .. })));
    let effects = hand.renew(t0());
    assert_eq!(fetches(&effects).len(), 1, "the first fetch follows the heartbeat");
}

#[test]
fn locks_are_swept_every_eight_to_ten_minutes() {
    for seed in 0..20 {
        let (mut hand, _) = Hand::started(Config { seed, use_local_time: seed % 2 == 0, ..config() });
        let mut last = t0();
        let mut sweeps = 0;
        while sweeps < 3 {
            let (kind, effects) = hand.fire();
            for (id, statement) in queries(&effects) {
                let result = match statement {
                    Statement::GetJobs { .. } => QueryResult::jobs(vec![]),
                    Statement::ResetLocked { locked_before } => {
                        assert_eq!(kind, TimerKind::LockSweep);
                        let gap = hand.now - last;
                        assert!(
                            gap >= Duration::minutes(8) && gap <= Duration::minutes(10),
                            "seed {seed}: {gap}"
                        );
                        let expected = (seed % 2 == 0).then(|| hand.now - Duration::hours(4));
                        assert_eq!(locked_before, expected);
                        last = hand.now;
                        sweeps += 1;
                        QueryResult::Done
                    }
                    _ => QueryResult::Done,
                };
                hand.feed(Input::QueryDone { id, result });
            }
        }
    }
    let once = Worker::new(Config { run_once: true, ..config() }, t0());
    assert_eq!(once.deadline(TimerKind::LockSweep), None, "run-once does not sweep");
}

#[test]
fn the_sweep_intervals_are_the_configured_ones_plus_their_jitter() {
    let sweep = Duration::minutes(1);
    let recovery = Duration::milliseconds(500);
    for seed in 0..10 {
        let config = Config { seed, lock_sweep_interval: sweep, recovery_interval: recovery, ..config() };
        let (mut hand, _) = Hand::started(config);
        let (mut swept, mut recovered) = (vec![t0()], vec![t0()]);
        while swept.len() < 4 {
            let (_, effects) = hand.fire();
            for (id, statement) in queries(&effects) {
                match statement {
                    Statement::ResetLocked { .. } => swept.push(hand.now),
                    Statement::RecoverLapsed { .. } => recovered.push(hand.now),
                    _ => {}
                }
                let result = match statement {
                    Statement::GetJobs { .. } => QueryResult::jobs(vec![]),
                    _ => QueryResult::Done,
                };
                hand.feed(Input::QueryDone { id, result });
            }
        }
        // A quarter more at most for the lock sweep, a third for the recovery sweep.
        for gap in swept.windows(2).map(|w| w[1] - w[0]) {
            assert!(gap >= sweep && gap <= sweep * 5 / 4, "seed {seed}: lock sweeps {gap} apart");
        }
        assert!(recovered.len() > 3 * 60 * 3 / 2, "seed {seed}: {} recovery sweeps", recovered.len());
        for gap in recovered.windows(2).map(|w| w[1] - w[0]) {
            assert!(gap >= recovery && gap <= recovery * 4 / 3, "seed {seed}: recovery sweeps {gap} apart");
        }
    }
}

#[test]
fn graceful_shutdown_lets_tasks_finish_and_returns_unstarted_jobs() {
    let (mut hand, effects) = Hand::started(Config { concurrency: 1, local_queue_size: Some(3), ..config() });
    let [(fetch, 1)] = fetches(&effects)[..] else { panic!("a batch of concurrency: {effects:?}") };
    let effects = hand.jobs(fetch, jobs_of(1..=1));
    let [(fetch, 1)] = fetches(&effects)[..] else { panic!("the next batch while 1 runs: {effects:?}") };
    hand.jobs(fetch, jobs_of(2..=2));
    let effects = hand.feed(Input::ShutdownRequested { graceful: true });
    assert!(aborted(&effects).is_empty(), "running tasks may finish");
    let [(ret, Statement::ReturnJobs { ids, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!(ids, &vec![2], "the prefetched job goes back");
    let ret = *ret;
    hand.done(ret);
    assert!(hand.machine.deadline(TimerKind::Poll).is_none(), "no more fetching");
    let effects = hand.finish(1, TaskOutcome::Ok);
    let (complete, _) = writes(&effects)[0].clone();
    let effects = hand.done(complete);
    assert!(effects.contains(&Effect::Stopped));
    assert!(events(&effects).contains(&Event::WorkerStop { worker_id: "w".into() }));
    assert_eq!(hand.machine.poll_timeout(), None);
    for input in [Input::Timeout, Input::ListenerUp, Input::ShutdownRequested { graceful: false }] {
        assert!(hand.feed(input).is_empty(), "nothing after Stopped");
    }
}

#[test]
fn graceful_shutdown_aborts_tasks_that_outlive_the_grace_period() {
    let (mut hand, effects) = Hand::started(config());
    let (fetch, _) = fetches(&effects)[0];
    hand.jobs(fetch, vec![job(1, None, 1, 25), job(2, None, 1, 25)]);
    hand.feed(Input::ShutdownRequested { graceful: true });
    let grace = hand.machine.deadline(TimerKind::ShutdownGrace).expect("grace timer");
    assert_eq!(grace, t0() + Duration::seconds(5));
    hand.finish(1, TaskOutcome::Ok);
    let (kind, effects) = loop {
        let (kind, effects) = hand.fire();
        if kind == TimerKind::ShutdownGrace {
            break (kind, effects);
        }
    };
    assert_eq!(kind, TimerKind::ShutdownGrace);
    assert_eq!(aborted(&effects), vec![2]);
    let effects = hand.finish(2, TaskOutcome::Aborted);
    let [(_, Statement::ReturnJobs { ids, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!(ids, &vec![2], "an aborted job goes back");
}

#[test]
fn forced_shutdown_aborts_each_task_once_and_refunds_their_attempts() {
    let mut world = World::new(WorldConfig::default());
    world.set_script(|_, _| TaskPlan::Hang);
    for n in 0..3 {
        world.db_mut().add_job(&RawJob::new("t", json!(n), JobSpec::default())).expect("add");
    }
    let w = world.add_worker(config());
    world.run_for(Duration::seconds(1));
    assert_eq!(world.running(w).count(), 3);
    assert!(world.db().jobs().all(|j| j.attempts == 1));
    world.shutdown(w, false);
    world.shutdown(w, false);
    assert!(world.run_until_stopped(Duration::seconds(10)));
    let aborts = world
        .trace()
        .iter()
        .filter(|e| matches!(e.what, formica_core::sim::Traced::Effect(Effect::AbortTask { .. })))
        .count();
    assert_eq!(aborts, 3, "one abort per task, however often asked");
    assert!(world.db().jobs().all(|j| j.attempts == 0 && j.locked_at.is_none()), "{:?}", world.db());
}

#[test]
fn a_fetch_answered_during_shutdown_is_given_back_and_the_worker_stops() {
    let (mut hand, effects) = Hand::started(config());
    let (fetch, _) = fetches(&effects)[0];
    assert!(hand
        .feed(Input::ShutdownRequested { graceful: true })
        .iter()
        .all(|e| !matches!(e, Effect::Stopped)));
    let effects = hand.jobs(fetch, vec![job(7, None, 1, 25)]);
    assert!(started(&effects).is_empty());
    let [(ret, Statement::ReturnJobs { ids, .. })] = &writes(&effects)[..] else {
        panic!("returned at once: {effects:?}")
    };
    assert_eq!(ids, &vec![7]);
    let ret = *ret;
    let effects = hand.done(ret);
    assert!(effects.contains(&Effect::Stopped));
}

#[test]
fn run_once_works_through_a_named_queue_before_stopping() {
    let mut world = World::new(WorldConfig::default());
    world.set_script(|_, _| TaskPlan::finish(Duration::milliseconds(5), TaskOutcome::Ok));
    for n in 0..4 {
        let spec = JobSpec::builder().queue_name("q").build();
        world.db_mut().add_job(&RawJob::new("t", json!(n), spec)).expect("add");
    }
    world.add_worker(Config { run_once: true, concurrency: 2, ..config() });
    assert!(world.run_until_stopped(Duration::minutes(1)));
    assert_eq!(
        world.db().jobs().count(),
        0,
        "each job of the queue ran: {:?}",
        world.db().jobs().collect::<Vec<_>>()
    );
}

#[test]
fn a_job_still_running_here_is_not_started_again_when_fetched_again() {
    let (mut hand, effects) = Hand::started(config());
    let (fetch, _) = fetches(&effects)[0];
    hand.jobs(fetch, vec![job(1, None, 1, 25)]);
    let effects = hand.feed(Input::Notification { channel: "jobs:insert".into(), payload: String::new() });
    let (fetch, _) = fetches(&effects)[0];
    // The sweep freed job 1's lock (its clock jumped) and this worker's fetch took it again.
    let effects = hand.jobs(fetch, vec![job(1, None, 2, 25), job(2, None, 1, 25)]);
    assert_eq!(started(&effects), vec![2]);
    assert_eq!(hand.machine.running(), 2);
    let effects = hand.finish(1, TaskOutcome::Ok);
    assert_eq!(writes(&effects).len(), 1, "the one task's outcome settles the job");
}

/// One slot, a local queue of 2 with a 30 s TTL: job 1 runs, job 2 waits.
fn one_running_one_waiting() -> Hand {
    let (mut hand, effects) = Hand::started(Config {
        concurrency: 1,
        local_queue_size: Some(2),
        local_queue_ttl: Duration::seconds(30),
        ..config()
    });
    let (fetch, _) = fetches(&effects)[0];
    let effects = hand.jobs(fetch, jobs_of(1..=1));
    let [(fetch, 1)] = fetches(&effects)[..] else { panic!("the next batch while 1 runs: {effects:?}") };
    hand.jobs(fetch, jobs_of(2..=2));
    hand
}

#[test]
fn the_local_queue_gives_back_stale_jobs_and_does_not_take_them_again_while_busy() {
    let mut hand = one_running_one_waiting();
    let mut returned = false;
    while hand.now < t0() + Duration::seconds(40) {
        let (kind, effects) = hand.fire();
        for (id, statement) in queries(&effects) {
            match statement {
                Statement::ReturnJobs { ids, .. } => {
                    assert!(hand.now >= t0() + Duration::seconds(30), "returned at the TTL, not before");
                    assert_eq!(ids, vec![2]);
                    returned = true;
                    hand.done(id);
                }
                Statement::GetJobs { .. } => panic!("refetched while every slot is busy ({kind:?})"),
                _ => {
                    hand.done(id);
                }
            }
        }
    }
    assert!(returned);
    let effects = hand.finish(1, TaskOutcome::Ok);
    assert_eq!(fetches(&effects).len(), 1, "a free slot fetches again");
}

#[test]
fn once_no_heartbeat_landed_for_a_lease_the_queue_goes_back_and_nothing_starts_until_one_lands() {
    let (mut hand, effects) = Hand::started(Config {
        concurrency: 1,
        local_queue_size: Some(10),
        local_queue_ttl: Duration::minutes(5),
        ..config()
    });
    let landed = hand.now;
    let (fetch, _) = fetches(&effects)[0];
    let effects = hand.jobs(fetch, jobs_of(1..=3));
    assert_eq!(started(&effects), vec![1], "2 and 3 wait");
    // From now on no heartbeat lands.
    let mut lapsed = Vec::new();
    while lapsed.is_empty() {
        let (_, effects) = hand.fire_raw();
        for (id, statement) in queries(&effects) {
            match statement {
                Statement::GetJobs { .. } => panic!("fetched with the lease unsure at {}", hand.now),
                Statement::ReturnJobs { ids, .. } => lapsed = ids,
                _ => {
                    hand.done(id);
                }
            }
        }
        if events(&effects).contains(&Event::LeaseLapsing) {
            assert!(!lapsed.is_empty(), "the queue goes back as the lease lapses: {effects:?}");
        }
    }
    assert_eq!(lapsed, vec![2, 3]);
    let lapse = landed + formica_core::worker::LEASE;
    assert!(
        hand.now >= lapse && hand.now < lapse + Duration::seconds(2),
        "a lease after the last landed heartbeat was sent, seen at the next timer (the poll): {}",
        hand.now
    );
    // A slot frees: nothing starts, nothing is fetched.
    let effects = hand.finish(1, TaskOutcome::Ok);
    assert!(started(&effects).is_empty() && fetches(&effects).is_empty(), "{effects:?}");
    // A heartbeat sent a while ago lands (late): the lease holds again, counted from its
    // sending.
    let sent = hand.now - Duration::seconds(2);
    let effects = hand.renew(sent);
    assert!(events(&effects).contains(&Event::LeaseRenewed), "{effects:?}");
    assert_eq!(fetches(&effects).len(), 1, "fetching again at once: {effects:?}");
    hand.advance(sent + formica_core::worker::LEASE - hand.now);
    let effects = hand.feed(Input::Timeout);
    assert!(events(&effects).contains(&Event::LeaseLapsing), "its lease runs out in turn: {effects:?}");
}

#[test]
fn a_job_fetched_again_while_its_return_is_in_flight_is_given_back_again() {
    let mut hand = one_running_one_waiting();
    // Job 2 waits for the TTL and goes back; that return stays in flight.
    let ret = loop {
        let (_, effects) = hand.fire();
        let returns: Vec<QueryId> = writes(&effects).into_iter().map(|(id, _)| id).collect();
        if let [ret] = returns[..] {
            break ret;
        }
        for (id, _) in queries(&effects) {
            hand.done(id);
        }
    };
    // Job 1 ends and a fetch goes; the return committed first, so it locks job 2 again, and
    // answers before the return does.
    let effects = hand.finish(1, TaskOutcome::Ok);
    let [(fetch, _)] = fetches(&effects)[..] else { panic!("a free slot fetches: {effects:?}") };
    let effects = hand.jobs(fetch, jobs_of(2..=2));
    assert!(started(&effects).is_empty(), "not run: the return in flight may yet release it");
    assert!(writes(&effects).is_empty(), "a job is in one write at a time: {effects:?}");
    let effects = hand.done(ret);
    let again: Vec<Statement> = writes(&effects).into_iter().map(|(_, s)| s).collect();
    assert!(
        matches!(&again[..], [Statement::ReturnJobs { ids, .. }] if ids == &vec![2]),
        "once the first return is done, the new lock is given back, not kept forever: {effects:?}"
    );
}

#[test]
fn the_clock_never_goes_back() {
    let (mut hand, _) = Hand::started(config());
    hand.now = t0() + Duration::seconds(10);
    hand.feed(Input::Timeout);
    hand.now = t0() - Duration::hours(1);
    hand.feed(Input::Timeout);
    assert_eq!(hand.machine.now(), t0() + Duration::seconds(10));
}

#[test]
fn the_sim_database_takes_one_job_per_named_queue_per_fetch() {
    let mut db = Db::new(t0(), 1);
    for n in 0..3 {
        db.add_job(&RawJob::new("t", json!(n), JobSpec::builder().queue_name("q").build())).expect("add");
    }
    db.add_job(&RawJob::new("t", json!("free"), JobSpec::default())).expect("add");
    let fetch = |db: &mut Db| match db.execute(&Statement::GetJobs {
        worker_id: "w".into(),
        task_ids: vec![1],
        forbidden_flags: vec![],
        limit: 10,
        now: None,
    }) {
        QueryResult::Jobs { jobs, .. } => jobs.len(),
        other => panic!("{other:?}"),
    };
    assert_eq!(fetch(&mut db), 2, "one of the queue and the free job");
    assert_eq!(fetch(&mut db), 0, "the queue is held");
}

#[test]
fn a_breaking_migration_stops_the_worker_whatever_the_payloads_spacing() {
    // PostgreSQL's json_build_object writes `{"migrationNumber" : 19, "breaking" : true}`:
    // the text Formica's own migrator sends. A substring match on `"breaking":true` missed it.
    for payload in
        [r#"{"migrationNumber" : 19, "breaking" : true}"#, r#"{"migrationNumber":19,"breaking":true}"#]
    {
        let (mut hand, _) = Hand::started(config());
        let channel = "worker:migrate".to_owned();
        let effects = hand.feed(Input::Notification { channel, payload: payload.to_owned() });
        let breaking = Effect::Emit(Event::BreakingMigration { payload: payload.to_owned() });
        assert!(effects.contains(&breaking), "{payload}: {effects:?}");
        assert_eq!(hand.machine.deadline(TimerKind::Poll), None, "{payload}: no more fetching");
    }
    let (mut hand, _) = Hand::started(config());
    let payload = r#"{"migrationNumber" : 20, "breaking" : false}"#.to_owned();
    let effects = hand.feed(Input::Notification { channel: "worker:migrate".into(), payload });
    assert!(effects.is_empty(), "a migration that is not breaking changes nothing: {effects:?}");
}

#[test]
fn a_shutdown_stops_within_its_bound_while_the_database_refuses_every_write() {
    // The database is gone: every write fails (retryably) for as long as the worker tries.
    let mut world = World::new(WorldConfig::default());
    world.set_script(|_, _| TaskPlan::finish(Duration::seconds(2), TaskOutcome::Ok));
    for n in 0..3 {
        world.db_mut().add_job(&RawJob::new("t", json!(n), JobSpec::default())).expect("add");
    }
    let w = world.add_worker(Config { complete_batch_delay: Duration::seconds(1), ..config() });
    world.run_for(Duration::milliseconds(500));
    assert_eq!(world.running(w).count(), 3);
    world.fail_next_queries(w, u32::MAX);
    world.shutdown(w, true);
    let grace = config().graceful_shutdown_timeout;
    let bound = grace + formica_core::worker::WRITES_GRACE;
    let asked = world.now();
    assert!(world.run_until_stopped(bound + Duration::seconds(1)), "stopped within the bound");
    assert!(world.now() - asked <= bound + Duration::seconds(1));
    let abandoned: Vec<Vec<i64>> = world
        .trace()
        .iter()
        .filter_map(|e| match &e.what {
            formica_core::sim::Traced::Effect(Effect::Emit(Event::OutcomesAbandoned { job_ids })) => {
                Some(job_ids.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(abandoned.len(), 1, "one report of what was not written");
    let mut ids = abandoned[0].clone();
    ids.sort_unstable();
    let mut held: Vec<i64> = world.db().jobs().map(|j| j.id).collect();
    held.sort_unstable();
    assert_eq!(ids, held, "the jobs whose success was not recorded are the ones left");
    assert!(world.db().jobs().all(|j| j.locked_by.is_some()), "they stay locked for a sweep to free");
}

#[test]
fn events_announce_fetches_shutdown_give_backs_and_the_duration_of_aborted_tasks() {
    let (mut hand, effects) = Hand::started(Config { concurrency: 1, local_queue_size: Some(3), ..config() });
    // Each fetch is announced, with its limit, right before it is sent.
    let at =
        effects.iter().position(|e| matches!(e, Effect::Query { statement: Statement::GetJobs { .. }, .. }));
    assert_eq!(effects[at.expect("a fetch") - 1], Effect::Emit(Event::FetchStart { limit: 1 }));
    let [(fetch, 1)] = fetches(&effects)[..] else { panic!("{effects:?}") };
    let effects = hand.jobs(fetch, vec![job(1, Some("q"), 1, 25)]);
    assert!(events(&effects).contains(&Event::JobStart {
        job_id: 1,
        task: "t".into(),
        queue: Some("q".into()),
        attempt: 1
    }));
    let [(fetch, 1)] = fetches(&effects)[..] else { panic!("{effects:?}") };
    hand.jobs(fetch, jobs_of(2..=2));
    hand.advance(Duration::milliseconds(1500));
    let effects = hand.feed(Input::ShutdownRequested { graceful: false });
    let evs = events(&effects);
    assert!(evs.contains(&Event::Shutdown { graceful: false, running: 1 }), "{evs:?}");
    let effects = hand.finish(1, TaskOutcome::Aborted);
    assert!(events(&effects).contains(&Event::JobReturned {
        job_id: 1,
        task: "t".into(),
        queue: Some("q".into()),
        attempt: 1,
        duration: Duration::milliseconds(1500),
    }));
    let given_back: usize = [evs, events(&effects)]
        .concat()
        .iter()
        .map(|e| match e {
            Event::JobsGivenBack { count } => *count,
            _ => 0,
        })
        .sum();
    assert_eq!(given_back, 2, "the prefetched job and the aborted one");
}

#[test]
fn a_cancelled_running_job_is_aborted_once_and_fails_for_good_with_the_reason() {
    let mut world = World::new(WorldConfig::default());
    world.set_script(|_, _| TaskPlan::Hang);
    let w = world.add_worker(config());
    let job = world.db_mut().add_job(&RawJob::new("t", json!({}), JobSpec::default())).unwrap().id;
    assert!(world.run_until(Duration::seconds(5), |w| w.running(0).count() == 1 && w.listening(0)));
    // Twice, and with a job it does not hold: one abort, the first reason.
    for reason in ["stop", "again"] {
        world.notify("formica:cancel", &format!(r#"{{"ids":[{job},424242],"reason":"{reason}"}}"#));
    }
    assert!(world.run_until(Duration::seconds(5), |w| w.db().job(job).is_some_and(|j| j.locked_by.is_none())));
    let row = world.db().job(job).unwrap();
    assert_eq!((row.attempts, row.last_error.as_deref()), (row.max_attempts, Some("cancelled: stop")));
    let aborts = world
        .trace()
        .iter()
        .filter(|e| matches!(e.what, formica_core::sim::Traced::Effect(Effect::AbortTask { .. })))
        .count();
    assert_eq!(aborts, 1);
    world.shutdown(w, true);
    assert!(world.run_until_stopped(Duration::seconds(10)));
}

#[test]
fn a_task_past_its_timeout_is_aborted_and_that_attempt_fails() {
    let mut world = World::new(WorldConfig::default());
    world.set_script(|job, _| match job.attempts {
        1 => TaskPlan::Hang,
        _ => TaskPlan::finish(Duration::seconds(1), TaskOutcome::Ok),
    });
    let timeouts = [("t".to_owned(), Duration::seconds(5))].into_iter().collect();
    world.add_worker(Config { task_timeouts: timeouts, ..config() });
    let job = world.db_mut().add_job(&RawJob::new("t", json!({}), JobSpec::default())).unwrap().id;
    assert!(world.run_until(Duration::seconds(4), |w| w.running(0).count() == 1));
    let started = world.elapsed();
    assert!(
        world.run_until(Duration::seconds(10), |w| w.db().job(job).is_some_and(|j| j.last_error.is_some()))
    );
    let failed_after = world.elapsed() - started;
    assert!(failed_after >= Duration::seconds(5) && failed_after < Duration::seconds(6), "{failed_after}");
    let row = world.db().job(job).unwrap();
    assert_eq!(
        (row.attempts, row.last_error.as_deref()),
        (1, Some("timed out after 5s")),
        "the attempt counts"
    );
    // Retried after the backoff (e^1 s): the second attempt succeeds.
    assert!(world.run_until(Duration::seconds(10), |w| w.db().job(job).is_none()));
}
