//! Aborting a running task: cancelled by an admin, or past its task's timeout
//! (`core/src/worker/cancel.rs`, `slots.rs`).

use super::*;

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
