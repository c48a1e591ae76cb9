//! Writing outcomes: completions and failures, batched, with backoff and batch payloads
//! (`core/src/worker/writes.rs`).

use super::*;

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
            payload: None,
            delay: None
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
fn only_writes_ending_a_job_a_workflow_released_settle_workflow_jobs() {
    let (mut hand, effects) =
        Hand::started(Config { complete_batch_delay: Duration::milliseconds(50), ..config() });
    let (fetch, _) = fetches(&effects)[0];
    let in_workflow =
        |id| Job { flags: [formica_core::workflow::FLAG.to_owned()].into(), ..job(id, None, 1, 25) };
    hand.jobs(fetch, vec![job(1, None, 1, 25), in_workflow(2), job(3, None, 1, 25), in_workflow(4)]);
    let settles = |effects: &[Effect]| -> Vec<bool> {
        writes(effects)
            .iter()
            .filter_map(|(_, statement)| match statement {
                Statement::CompleteJobs { settles_workflow_jobs, .. }
                | Statement::FailJobs { settles_workflow_jobs, .. } => Some(*settles_workflow_jobs),
                _ => None,
            })
            .collect()
    };
    hand.finish(1, TaskOutcome::Ok);
    assert_eq!(settles(&hand.fire().1), vec![false], "a plain job's completion stays plain");
    hand.finish(3, TaskOutcome::Ok);
    hand.finish(2, TaskOutcome::Ok);
    let (_, effects) = hand.fire();
    assert_eq!(settles(&effects), vec![true], "a batch with one workflow job settles it");
    let effects = hand.finish(4, TaskOutcome::Err("no".into()));
    let failed = if writes(&effects).is_empty() { hand.fire().1 } else { effects };
    assert_eq!(settles(&failed), vec![true], "a workflow job's failure settles it too");
}

#[test]
fn a_job_committed_by_its_task_is_a_success_with_nothing_left_to_write() {
    let (mut hand, effects) = Hand::started(config());
    let (fetch, _) = fetches(&effects)[0];
    hand.jobs(fetch, vec![job(1, None, 1, 25), job(2, None, 1, 25)]);
    let effects = hand.finish(1, TaskOutcome::Committed);
    assert!(writes(&effects).is_empty(), "the task wrote its completion: {effects:?}");
    let evs = events(&effects);
    assert!(evs.iter().any(|e| matches!(e, Event::JobSuccess { job_id: 1, .. })), "{evs:?}");
    // The next completion's batch holds only its own job.
    let effects = hand.finish(2, TaskOutcome::Ok);
    let [(_, Statement::CompleteJobs { ids, .. })] = &writes(&effects)[..] else { panic!("{effects:?}") };
    assert_eq!(ids, &vec![2]);
}
