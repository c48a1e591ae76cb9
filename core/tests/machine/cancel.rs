//! Aborting a running task: cancelled by an admin (a request read on a wake-up or after a
//! heartbeat), or past its task's timeout (`core/src/worker/cancel.rs`, `slots.rs`).

use super::*;
use formica_core::lease::HEARTBEAT_INTERVAL;
use formica_core::sim::{CancelOutcome, WorkerIndex};

/// The statements of `effects` that read cancel requests.
fn reads(effects: &[Effect]) -> Vec<QueryId> {
    queries(effects)
        .into_iter()
        .filter_map(|(id, s)| matches!(s, Statement::ReadCancels { .. }).then_some(id))
        .collect()
}

fn cancels(requests: &[(i64, &str)]) -> QueryResult {
    QueryResult::Cancels(requests.iter().map(|(id, r)| (*id, (*r).to_owned())).collect())
}

/// A worker whose listener is up, running one job whose task hangs: the world, the worker
/// and the job.
fn one_job_running_and_listening() -> (World, WorkerIndex, i64) {
    let mut world = World::new(WorldConfig::default());
    world.set_script(|_, _| TaskPlan::Hang);
    let w = world.add_worker(config());
    let job = world.db_mut().add_job(&RawJob::new("t", json!({}), JobSpec::default())).unwrap().id;
    assert!(world.run_until(Duration::seconds(5), |w| w.running(0).count() == 1 && w.listening(0)));
    (world, w, job)
}

fn aborts(world: &World) -> usize {
    let abort = |e: &&formica_core::sim::TraceEntry| {
        matches!(e.what, formica_core::sim::Traced::Effect(Effect::AbortTask { .. }))
    };
    world.trace().iter().filter(abort).count()
}

#[test]
fn a_cancelled_running_job_is_aborted_once_and_fails_for_good_with_the_reason() {
    let (mut world, w, job) = one_job_running_and_listening();
    // Twice, and with a job that does not exist: one abort, the first reason.
    for reason in ["stop", "again"] {
        let outcome = world.db_mut().cancel_jobs(&[job, 424_242], reason);
        let worker_id = world.worker_id(w);
        assert_eq!(outcome, vec![(job, CancelOutcome::Recorded { worker_id, leased: true })]);
    }
    assert!(world.run_until(Duration::seconds(1), |w| w.db().job(job).is_some_and(|j| j.locked_by.is_none())));
    let row = world.db().job(job).unwrap();
    assert_eq!((row.attempts, row.last_error.as_deref()), (row.max_attempts, Some("cancelled: stop")));
    assert_eq!(aborts(&world), 1);
    world.shutdown(w, true);
    assert!(world.run_until_stopped(Duration::seconds(10)));
}

#[test]
fn a_request_recorded_while_the_listener_is_down_is_found_after_a_heartbeat() {
    let (mut world, w, job) = one_job_running_and_listening();
    world.set_listener_available(w, false);
    world.drop_listener(w);
    world.db_mut().cancel_jobs(&[job], "unheard");
    let failed = |w: &World| w.db().job(job).is_some_and(|j| j.last_error.is_some());
    assert!(world.run_until(HEARTBEAT_INTERVAL + Duration::seconds(1), failed), "read with a heartbeat");
    assert!(!world.listening(w), "no notification could have come");
    let row = world.db().job(job).unwrap();
    assert_eq!((row.attempts, row.last_error.as_deref()), (row.max_attempts, Some("cancelled: unheard")));
}

#[test]
fn a_request_recorded_while_the_listener_is_down_is_read_as_it_comes_back() {
    let (mut world, w, job) = one_job_running_and_listening();
    world.drop_listener(w);
    world.db_mut().cancel_jobs(&[job], "unheard");
    assert!(world.run_until(Duration::seconds(10), |w| w.listening(0)), "the listener comes back");
    let back = world.now();
    let failed = |w: &World| w.db().job(job).is_some_and(|j| j.last_error.is_some());
    assert!(world.run_until(Duration::milliseconds(100), failed), "read as the listener came back");
    let heartbeat = |e: &&formica_core::sim::TraceEntry| {
        e.at >= back && matches!(e.what, formica_core::sim::Traced::Input(Input::Heartbeat { .. }))
    };
    assert_eq!(world.trace().iter().filter(heartbeat).count(), 0, "read without a heartbeat");
}

#[test]
fn a_cancelled_job_of_a_dead_worker_fails_for_good_instead_of_running_again() {
    let mut world = World::new(WorldConfig::default());
    world.set_script(|_, _| TaskPlan::Hang);
    let dead = world.add_worker(config());
    let job = world.db_mut().add_job(&RawJob::new("t", json!({}), JobSpec::default())).unwrap().id;
    assert!(world.run_until(Duration::seconds(5), |w| w.running(0).count() == 1));
    world.crash(dead);
    world.db_mut().cancel_jobs(&[job], "no longer wanted");
    world.add_worker(Config { worker_id: "other".into(), ..config() });
    let freed = |w: &World| w.db().job(job).is_some_and(|j| j.locked_by.is_none());
    assert!(world.run_until(Duration::seconds(40), freed), "recovered");
    let row = world.db().job(job).unwrap();
    assert_eq!(
        (row.attempts, row.last_error.as_deref()),
        (row.max_attempts, Some("cancelled: no longer wanted"))
    );
    world.run_for(Duration::seconds(10));
    assert_eq!(world.db().cancel_requests().count(), 0, "the request is forgotten");
    let starts = world
        .trace()
        .iter()
        .filter(|e| matches!(&e.what, formica_core::sim::Traced::Effect(Effect::StartTask { .. })))
        .count();
    assert_eq!(starts, 1, "never started again");
}

#[test]
fn a_landed_heartbeat_reads_the_requests_while_a_job_is_held_one_read_at_a_time() {
    let (mut hand, effects) = Hand::started(config());
    assert!(reads(&hand.renew(t0())).is_empty(), "nothing held: nothing read");
    let (fetch, _) = fetches(&effects)[0];
    hand.jobs(fetch, vec![job(1, None, 1, 25), job(2, None, 1, 25)]);
    let [read] = reads(&hand.renew(t0()))[..] else { panic!("one read after a heartbeat") };
    // Meanwhile a wake-up and another heartbeat: one more read, after this one.
    let woken = Input::Notification { channel: "formica:cancel".into(), payload: String::new() };
    assert!(reads(&hand.feed(woken)).is_empty());
    assert!(reads(&hand.renew(t0())).is_empty());
    let effects = hand.feed(Input::QueryDone { id: read, result: cancels(&[(2, "stop"), (9, "not mine")]) });
    assert_eq!(aborted(&effects), vec![2]);
    let [again] = reads(&effects)[..] else { panic!("the owed read: {effects:?}") };
    let effects = hand.feed(Input::QueryDone { id: again, result: cancels(&[(2, "later")]) });
    assert!(aborted(&effects).is_empty() && reads(&effects).is_empty(), "once; nothing owed");
    let effects = hand.finish(2, TaskOutcome::Aborted);
    let [(_, Statement::FailJobs { failures, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!((failures[0].message.as_str(), failures[0].permanent), ("cancelled: stop", true));
    // A failed read waits for the next heartbeat.
    let [read] = reads(&hand.renew(t0()))[..] else { panic!("read") };
    let error = DbError { message: "gone".into(), retryable: true };
    assert!(reads(&hand.feed(Input::QueryDone { id: read, result: QueryResult::Err(error) })).is_empty());
    assert_eq!(reads(&hand.renew(t0())).len(), 1);
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
