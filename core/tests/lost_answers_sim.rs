//! Fetches whose answers are lost, in `core::sim`: the statement ran and locked jobs for the
//! worker, but the worker saw only a lost connection. No job stays locked by a live worker
//! that does not know it holds it: the worker gives back what it holds unknowingly before it
//! fetches again, and every job runs while the workers go on.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::job::{JobSpec, RawJob};
use formica_core::sim::faults::{heal, render_trace, settle};
use formica_core::sim::{TaskPlan, Traced, World, WorldConfig};
use formica_core::worker::{Config, Effect, Input, QueryResult, Statement, TaskOutcome};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// How long a job may stay locked by a live worker that does not know it: a retry of the
/// fetch (the poll interval, 2 s) for each of a run of lost answers, and latency.
const UNKNOWN_FOR_AT_MOST: i64 = 30;

fn config(n: usize, local_queue: bool) -> Config {
    Config {
        worker_id: format!("w{n}"),
        task_identifiers: vec!["t".into()],
        concurrency: 2,
        local_queue_size: local_queue.then_some(10),
        ..Config::default()
    }
}

fn add_jobs(world: &mut World, n: usize) {
    for i in 0..n {
        let spec = JobSpec { queue_name: (i % 4 == 0).then(|| "q".to_owned()), ..JobSpec::default() };
        world.db_mut().add_job(&RawJob::new("t", serde_json::json!({ "i": i }), spec)).unwrap();
    }
}

/// Since when each (worker, job) has been locked unknowingly; an error once one has been so
/// for longer than [`UNKNOWN_FOR_AT_MOST`], or if two workers run a job at once.
fn check(world: &World, since: &mut BTreeMap<(usize, i64), Duration>) -> Result<(), String> {
    let mut unknown = BTreeMap::new();
    let mut runs = BTreeMap::new();
    for w in 0..world.workers() {
        for job in world.unknown_locks(w) {
            let at = since.get(&(w, job)).copied().unwrap_or(world.elapsed());
            if world.elapsed() - at > Duration::seconds(UNKNOWN_FOR_AT_MOST) {
                return Err(format!("job {job} locked by live w{w} unknowingly since {at}"));
            }
            unknown.insert((w, job), at);
        }
        for job in world.running(w) {
            if let Some(other) = runs.insert(job.id, w) {
                return Err(format!("job {} runs on w{other} and w{w} at once", job.id));
            }
        }
    }
    *since = unknown;
    Ok(())
}

/// A fetch locks two jobs, its answer is lost: the worker gives them back (attempt refunded)
/// before fetching again, then runs them, without stopping.
#[test]
fn jobs_locked_by_a_fetch_whose_answer_was_lost_are_given_back_and_run() {
    let mut world = World::new(WorldConfig::default());
    world.set_script(|_, _| TaskPlan::finish(Duration::milliseconds(100), TaskOutcome::Ok));
    let w = world.add_worker(config(0, false));
    // Started: registered, listening, its sweeps done; its next query is the fetch the
    // poll sends.
    world.run_for(Duration::milliseconds(2500));
    world.lose_next_answers(w, 1);
    add_jobs(&mut world, 2);
    let lost_at = world.elapsed();
    let locked = world.run_until(Duration::seconds(3), |world| world.unknown_locks(w).len() == 2);
    assert!(locked, "locked unknowingly: {}", render_trace(world.trace()));
    let lost = world
        .trace()
        .iter()
        .any(|e| matches!(&e.what, Traced::Input(Input::QueryDone { result: QueryResult::Err(_), .. })));
    assert!(lost, "the fetch's answer was lost");
    assert!(world.run_until(Duration::seconds(10), |w| w.db().jobs().next().is_none()), "both jobs ran");
    assert!(world.elapsed() - lost_at < Duration::seconds(5), "without waiting for a sweep or a stop");
    let statements: Vec<&Statement> = world
        .trace()
        .iter()
        .filter_map(|e| match &e.what {
            Traced::Effect(Effect::Query { statement, .. }) if e.elapsed >= lost_at => Some(statement),
            _ => None,
        })
        .collect();
    assert!(matches!(statements[0], Statement::GetJobs { .. }), "the lost fetch: {statements:?}");
    let after = &statements[1..];
    let give_back = after.iter().position(|s| matches!(s, Statement::ReturnUnknown { .. }));
    let refetch = after.iter().position(|s| matches!(s, Statement::GetJobs { .. }));
    assert!(give_back.is_some(), "{statements:?}");
    assert!(give_back < refetch, "given back before the next fetch: {statements:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Answers lost at random moments (fetches, writes, give-backs alike): no job stays
    /// locked unknowingly by a live worker, and once the faults stop every job runs.
    #[test]
    fn no_job_stays_locked_by_a_live_worker_that_does_not_know_it(
        seed in any::<u64>(),
        ops in proptest::collection::vec((0..3_000i64, 0..2usize, 0..4u32), 1..30),
    ) {
        let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
        world.set_script(|_, rng| {
            TaskPlan::finish(Duration::milliseconds(rng.between(10, 1_500)), TaskOutcome::Ok)
        });
        world.add_worker(config(0, false));
        world.add_worker(config(1, true));
        let mut since = BTreeMap::new();
        for (wait, w, lose) in ops {
            add_jobs(&mut world, 3);
            world.lose_next_answers(w, lose);
            let until = world.elapsed() + Duration::milliseconds(wait);
            while world.next_at().is_some_and(|at| at <= until) {
                world.step();
                check(&world, &mut since).map_err(TestCaseError::fail)?;
            }
            world.run_for(until - world.elapsed());
        }
        heal(&mut world);
        settle(&mut world, Duration::minutes(2), |w| w.db().jobs().next().is_none(), |w| check(w, &mut since))
            .map_err(TestCaseError::fail)?;
        prop_assert!((0..2).all(|w| !world.is_crashed(w) && world.unknown_locks(w).is_empty()));
    }
}
