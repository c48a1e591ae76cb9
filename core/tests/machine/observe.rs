//! The events the machine emits (`core/src/worker/observe.rs`).

use super::*;

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
fn a_skipped_task_completes_its_job_and_says_why_instead_of_succeeding() {
    let (mut hand, effects) = Hand::started(Config { concurrency: 1, local_queue_size: None, ..config() });
    let [(fetch, 1)] = fetches(&effects)[..] else { panic!("{effects:?}") };
    hand.jobs(fetch, vec![job(1, Some("q"), 1, 25)]);
    let effects = hand.finish(1, TaskOutcome::Skipped("account disabled".into()));
    let evs = events(&effects);
    assert!(
        evs.contains(&Event::JobSkipped {
            job_id: 1,
            task: "t".into(),
            queue: Some("q".into()),
            attempt: 1,
            reason: "account disabled".into(),
        }),
        "{evs:?}"
    );
    assert!(!evs.iter().any(|e| matches!(e, Event::JobSuccess { .. })), "not reported as a success: {evs:?}");
    let completed = writes(&effects).into_iter().map(|(_, s)| s).collect::<Vec<_>>();
    assert_eq!(
        completed,
        vec![Statement::CompleteJobs { worker_id: "w".into(), ids: vec![1], settles_workflow_jobs: false }]
    );
}
