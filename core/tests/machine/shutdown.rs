//! Stopping: graceful and forced shutdowns, run-once, a breaking migration, and a bounded
//! stop against a database that refuses every write.

use super::*;

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

/// Answer every statement of `effects` and of what follows (no job, no crontab known,
/// done) until none is sent; returns them all.
fn settle(hand: &mut Hand, effects: Vec<Effect>) -> Vec<Statement> {
    let mut sent = Vec::new();
    let mut waiting = queries(&effects);
    while let Some((id, statement)) = waiting.pop() {
        let result = match &statement {
            Statement::RegisterCrontabs { .. } => QueryResult::KnownCrontabs(vec![]),
            Statement::GetJobs { .. } => QueryResult::jobs(vec![]),
            _ => QueryResult::Done,
        };
        waiting.extend(queries(&hand.feed(Input::QueryDone { id, result })));
        sent.push(statement);
    }
    sent
}

/// A worker that knows graphile-worker's migrations up to 20.
fn knowing_20() -> Config {
    Config { latest_migration: 20, ..config() }
}

fn migrate(hand: &mut Hand, payload: &str) -> Vec<Effect> {
    hand.feed(Input::Notification { channel: "worker:migrate".into(), payload: payload.into() })
}

#[test]
fn a_breaking_migration_newer_than_the_worker_knows_stops_it_whatever_the_payloads_spacing() {
    // PostgreSQL's json_build_object writes `{"migrationNumber" : 21, "breaking" : true}`:
    // the text Formica's own migrator sends. A substring match on `"breaking":true` missed it.
    for payload in
        [r#"{"migrationNumber" : 21, "breaking" : true}"#, r#"{"migrationNumber":21,"breaking":true}"#]
    {
        let (mut hand, _) = Hand::started(knowing_20());
        let effects = migrate(&mut hand, payload);
        let breaking = Effect::Emit(Event::BreakingMigration { migration: 21 });
        assert!(effects.contains(&breaking), "{payload}: {effects:?}");
        assert!(events(&effects).iter().any(|e| matches!(e, Event::Shutdown { graceful: true, .. })));
        assert_eq!(hand.machine.deadline(TimerKind::Poll), None, "{payload}: no more fetching");
    }
    let (mut hand, _) = Hand::started(knowing_20());
    let effects = migrate(&mut hand, r#"{"migrationNumber" : 21, "breaking" : false}"#);
    assert!(effects.is_empty(), "a migration that is not breaking changes nothing: {effects:?}");
}

#[test]
fn a_breaking_migration_the_worker_knows_announced_again_is_a_reinstall_and_it_goes_on() {
    // Dropping the schema and migrating it anew announces migrations 1 to 20 again, seven of
    // them breaking. The worker keeps fetching, and registers its crontab in the new tables.
    let crontab = formica_core::cron::parse("* * * * * t").expect("crontab").into_items();
    let mut hand = Hand::new(Config { crontab, ..knowing_20() });
    hand.drain();
    let (_, effects) = hand.fire();
    assert!(queries(&effects).iter().any(|(_, s)| matches!(s, Statement::RegisterCrontabs { .. })));
    let sent = settle(&mut hand, effects);
    assert!(sent.iter().any(|s| matches!(s, Statement::ScheduleCron(_))), "the first minute: {sent:?}");
    for migration in [1, 19, 20] {
        let effects =
            migrate(&mut hand, &format!(r#"{{"migrationNumber" : {migration}, "breaking" : true}}"#));
        assert!(effects.contains(&Effect::Emit(Event::SchemaReinstalled { migration })), "{effects:?}");
        assert!(!events(&effects)
            .iter()
            .any(|e| matches!(e, Event::Shutdown { .. } | Event::BreakingMigration { .. })));
        let now = hand.now;
        let sent = settle(&mut hand, effects);
        let again = |s: &Statement| matches!(s, Statement::RegisterCrontabs { known_since, .. } if *known_since == now);
        assert_eq!(sent.iter().filter(|s| again(s)).count(), 1, "the crontab is registered again: {sent:?}");
        let effects = hand.feed(Input::Notification { channel: "jobs:insert".into(), payload: "{}".into() });
        assert_eq!(fetches(&effects).len(), 1, "still fetching: {effects:?}");
        settle(&mut hand, effects);
        assert!(hand.machine.deadline(TimerKind::Poll).is_some());
        hand.advance(Duration::seconds(1));
    }
    assert!(!hand.machine.is_stopped());
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
fn run_once_gives_up_once_when_two_needed_statements_are_refused_for_good() {
    let (mut hand, effects) = Hand::started(Config { run_once: true, ..config() });
    let [(fetch, _)] = &fetches(&effects)[..] else { panic!("{effects:?}") };
    let refused = DbError { message: "relation does not exist".into(), retryable: false };
    let mut seen =
        events(&hand.feed(Input::QueryDone { id: *fetch, result: QueryResult::Err(refused.clone()) }));
    seen.extend(events(&hand.feed(Input::Heartbeat { sent: hand.now, result: Err(refused) })));
    let gave_up = seen.iter().filter(|e| matches!(e, Event::GaveUp { .. })).count();
    let shutdowns = seen.iter().filter(|e| matches!(e, Event::Shutdown { .. })).count();
    let errors = seen.iter().filter(|e| matches!(e, Event::DatabaseError { .. })).count();
    assert_eq!((gave_up, shutdowns, errors), (1, 1, 1), "the second refusal is a database error: {seen:?}");
}
