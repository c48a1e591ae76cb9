//! Fetching: how many jobs a fetch asks for, the order jobs start in when fetches come back
//! out of order, the local queue (its batches, TTL and give-backs) and waking an idle worker
//! (`core/src/worker/fetch.rs`, `refetch.rs`).

use super::*;
use formica_core::worker::FetchRequest;

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

#[test]
fn local_queue_fetching_asks_for_a_batch_and_hands_jobs_out_as_slots_free() {
    for in_flight in [1, 2] {
        let config =
            Config { concurrency: 2, local_queue_size: Some(30), fetches_in_flight: in_flight, ..config() };
        let (mut hand, effects) = Hand::started(config);
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
        assert_eq!(
            fetches(&effects).len(),
            in_flight,
            "fewer than a batch wait: fetches go out: {effects:?}"
        );
        assert!(fetches(&hand.feed(note())).is_empty(), "never more than {in_flight} in flight");
    }
}

fn note() -> Input {
    Input::Notification { channel: "jobs:insert".into(), payload: r#"{"r":0.5,"count":1}"#.into() }
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
        fetches_in_flight: 2,
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
fn a_short_fetch_of_named_queue_jobs_asks_next_for_what_it_got() {
    // One job a queue: a short fetch of queue jobs got about as many as there were free
    // queues. A short fetch of jobs in no queue (the table drained) keeps the batch.
    for (queue, next) in [(Some("q"), 3), (None, 4)] {
        let (mut hand, effects) =
            Hand::started(Config { concurrency: 2, local_queue_size: Some(30), ..config() });
        let (fetch, _) = fetches(&effects)[0];
        let effects = hand.jobs(fetch, jobs_of(1..=2));
        let [(fetch, 2)] = fetches(&effects)[..] else { panic!("{effects:?}") };
        hand.finish(1, TaskOutcome::Ok);
        hand.finish(2, TaskOutcome::Ok);
        let effects = hand.jobs(fetch, jobs_of(3..=4));
        let [(fetch, 4)] = fetches(&effects)[..] else { panic!("the batch doubled: {effects:?}") };
        let effects = hand.jobs(fetch, (5..=7).map(|id| job(id, queue, 1, 25)).collect());
        assert!(fetches(&effects).is_empty(), "short: no prefetch: {effects:?}");
        // The fetch goes out once a slot is about to idle (job 6 ends), and is the only one.
        let mut limits = Vec::new();
        for id in 3..=7 {
            let mut effects = hand.finish(id, TaskOutcome::Ok);
            for (write, _) in writes(&effects) {
                effects.extend(hand.done(write));
            }
            limits.extend(fetches(&effects).into_iter().map(|(_, limit)| limit));
        }
        assert_eq!(limits, vec![next], "queue {queue:?}");
    }
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
    let mut hand = Hand::new(config());
    hand.drain();
    assert!(hand.machine.deadline(TimerKind::Poll).is_some(), "armed before the lease holds");
    let failed = QueryResult::Err(formica_core::worker::DbError { message: "down".into(), retryable: true });
    // Let a few fetches fail and succeed.
    for round in 0..20 {
        let (kind, effects) = hand.fire();
        assert!(hand.machine.deadline(TimerKind::Poll).is_some(), "round {round} after {kind:?}");
        for (id, statement) in queries(&effects) {
            let result = match statement {
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
fn the_sim_database_takes_one_job_per_named_queue_per_fetch() {
    let mut db = Db::new(t0(), 1);
    for n in 0..3 {
        db.add_job(&RawJob::new("t", json!(n), JobSpec::builder().queue_name("q").build())).expect("add");
    }
    db.add_job(&RawJob::new("t", json!("free"), JobSpec::default())).expect("add");
    let fetch = |db: &mut Db| match db.execute(&Statement::GetJobs(FetchRequest {
        worker_id: "w".into(),
        task_identifiers: vec!["t".into()],
        forbidden_flags: vec![],
        accepted_flags: vec![],
        limit: 10,
        now: None,
        excluded_queues: vec![],
        caps: vec![],
        limits: vec![],
        fair: vec![],
        walk_priorities: false,
    })) {
        QueryResult::Jobs { jobs, .. } => jobs.len(),
        other => panic!("{other:?}"),
    };
    assert_eq!(fetch(&mut db), 2, "one of the queue and the free job");
    assert_eq!(fetch(&mut db), 0, "the queue is held");
}

fn give_backs(effects: &[Effect]) -> Vec<(QueryId, Vec<i64>)> {
    queries(effects)
        .into_iter()
        .filter_map(|(id, s)| match s {
            Statement::ReturnUnknown { known, .. } => Some((id, known)),
            _ => None,
        })
        .collect()
}

/// Fire deadlines until the worker gives back what it holds unknowingly; no fetch before.
fn until_give_back(hand: &mut Hand) -> (QueryId, Vec<i64>) {
    for _ in 0..20 {
        let (_, effects) = hand.fire();
        assert!(fetches(&effects).is_empty(), "no fetch before the give-back: {effects:?}");
        if let [(id, known)] = &give_backs(&effects)[..] {
            return (*id, known.clone());
        }
    }
    panic!("no give-back")
}

/// A fetch whose answer was lost may have locked jobs for this worker: once no fetch is out,
/// it gives back every job locked for it but those it knows it holds, and fetches again only
/// once that landed; a give-back that fails is sent again.
#[test]
fn after_a_lost_fetch_answer_what_the_worker_holds_unknowingly_goes_back_before_the_next_fetch() {
    let lost = || QueryResult::Err(DbError { message: "connection closed".into(), retryable: true });
    let (mut hand, effects) = Hand::started(config());
    let [(fetch, 3)] = fetches(&effects)[..] else { panic!("a fetch: {effects:?}") };
    assert_eq!(started(&hand.jobs(fetch, vec![job(1, None, 1, 25)])), vec![1]);
    let effects = hand.feed(note());
    let [(fetch, _)] = fetches(&effects)[..] else { panic!("a fetch: {effects:?}") };
    assert!(give_backs(&hand.feed(Input::QueryDone { id: fetch, result: lost() })).is_empty());
    let (give_back, known) = until_give_back(&mut hand);
    assert_eq!(known, vec![1], "the running job is known");
    assert!(fetches(&hand.feed(note())).is_empty(), "no fetch while the give-back is out");
    let effects = hand.feed(Input::QueryDone { id: give_back, result: lost() });
    assert!(give_backs(&effects).is_empty() && fetches(&effects).is_empty());
    let (give_back, known) = until_give_back(&mut hand);
    assert_eq!(known, vec![1], "sent again");
    let [_] = fetches(&hand.done(give_back))[..] else { panic!("then a fetch") };

    // Refused, for good: the driver may have failed to read rows the fetch locked, so
    // that too is followed by a give-back before the next fetch.
    let (mut hand, effects) = Hand::started(config());
    let [(fetch, 3)] = fetches(&effects)[..] else { panic!("a fetch: {effects:?}") };
    let refused = QueryResult::Err(DbError { message: "no column task_identifier".into(), retryable: false });
    hand.feed(Input::QueryDone { id: fetch, result: refused });
    let (give_back, known) = until_give_back(&mut hand);
    assert!(known.is_empty());
    let [_] = fetches(&hand.done(give_back))[..] else { panic!("then a fetch") };
}

#[test]
fn accepted_flags_reach_the_fetch_and_the_sim_database_takes_only_jobs_carrying_one() {
    let (_, effects) = Hand::started(Config { accepted_flags: vec!["gpu".into()], ..config() });
    let sent = queries(&effects).into_iter().find_map(|(_, s)| match s {
        Statement::GetJobs(FetchRequest { accepted_flags, .. }) => Some(accepted_flags),
        _ => None,
    });
    assert_eq!(sent, Some(vec!["gpu".to_owned()]));

    let mut db = Db::new(t0(), 1);
    let flagged = |flags: &[&str]| JobSpec::builder().flags(flags.iter().copied()).build();
    for (n, spec) in [
        (0, flagged(&["gpu"])),
        (1, flagged(&["gpu", "slow"])),
        (2, flagged(&["cpu"])),
        (3, JobSpec::default()),
        (4, flagged(&["cpu", "gpu"])),
    ] {
        db.add_job(&RawJob::new("t", json!(n), spec)).expect("add");
    }
    let fetch = |db: &mut Db, accepted: &[&str]| match db.execute(&Statement::GetJobs(FetchRequest {
        worker_id: "w".into(),
        task_identifiers: vec!["t".into()],
        forbidden_flags: vec!["slow".into()],
        accepted_flags: accepted.iter().map(|f| f.to_string()).collect(),
        limit: 10,
        now: None,
        excluded_queues: vec![],
        caps: vec![],
        limits: vec![],
        fair: vec![],
        walk_priorities: false,
    })) {
        QueryResult::Jobs { jobs, .. } => jobs.into_iter().map(|j| j.payload).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(fetch(&mut db, &["gpu"]), vec![json!(0), json!(4)], "one accepted flag, none forbidden");
    assert_eq!(fetch(&mut db, &[]), vec![json!(2), json!(3)], "no allowlist: any job but the forbidden");
}
