//! The worker's chores in `core::sim` (`core/src/worker/chores.rs`): the history pruner,
//! the workflows' resolver and the reindexing chore, each sent by the machine as a statement
//! and answered by the simulated database. Workers started together, with queries failing at random:
//!
//! - never two passes of one chore out at once, and none sent after a shutdown request;
//! - after a pass ends, the next is due within its period, and no sooner than three quarters
//!   of it; after a failed one, the wait doubles for each failure in a row (up to a minute);
//! - workers' passes spread: no two workers send theirs at the same times;
//! - the pruner drops the days past their retention and keeps the rest; the resolver
//!   settles a workflow job graphile-worker completed and releases its dependent.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::job::RawJob;
use formica_core::sim::{Traced, WorkflowJob, World, WorldConfig};
use formica_core::worker::{
    Config, Effect, Input, Pruning, QueryResult, Retention, Statement, Timestamp, CHORE_BACKOFF_LIMIT,
};
use formica_core::workflow::Outcome;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;

const PRUNE_EVERY: Duration = Duration::seconds(3);
const RESOLVE_EVERY: Duration = Duration::seconds(2);
const REINDEX_EVERY: Duration = Duration::seconds(5);

fn retention() -> Retention {
    Retention { completed: Some(Duration::days(7)), failed: Some(Duration::days(30)), cancelled: None }
}

fn config(n: usize, seed: u64) -> Config {
    Config {
        worker_id: format!("w{n}"),
        // Nothing to fetch: the chores are what the worker does.
        task_identifiers: Vec::new(),
        seed,
        prune_history: Some(Pruning { retention: retention(), every: PRUNE_EVERY }),
        resolve_workflows: Some(RESOLVE_EVERY),
        reindex_bloated: Some(REINDEX_EVERY),
        ..Config::default()
    }
}

/// Which chore a statement is a pass of, with its period.
fn chore(statement: &Statement) -> Option<(&'static str, Duration)> {
    match statement {
        Statement::PruneHistory { .. } => Some(("prune", PRUNE_EVERY)),
        Statement::ResolveWorkflows => Some(("resolve", RESOLVE_EVERY)),
        Statement::ReindexBloated => Some(("reindex", REINDEX_EVERY)),
        _ => None,
    }
}

/// The period of the chore `name`.
fn chore_every(name: &str) -> Option<Duration> {
    [("prune", PRUNE_EVERY), ("resolve", RESOLVE_EVERY), ("reindex", REINDEX_EVERY)]
        .into_iter()
        .find_map(|(n, every)| (n == name).then_some(every))
}

/// One pass as the trace tells it.
#[derive(Debug, Clone, Copy)]
struct Pass {
    sent: Timestamp,
    ended: Option<(Timestamp, bool)>,
}

/// Per worker and chore, its passes in order; checks the promises that hold at each line.
fn passes(world: &World) -> Result<BTreeMap<(usize, &'static str), Vec<Pass>>, String> {
    let mut passes: BTreeMap<(usize, &'static str), Vec<Pass>> = BTreeMap::new();
    let mut out: BTreeMap<(usize, u64), &'static str> = BTreeMap::new();
    let mut stopping = BTreeMap::new();
    for entry in world.trace() {
        let Some(w) = entry.worker else { continue };
        match &entry.what {
            Traced::Started { .. } | Traced::Crashed => {
                out.retain(|(worker, _), _| *worker != w);
            }
            Traced::Input(Input::ShutdownRequested { .. }) => _ = stopping.insert(w, entry.at),
            Traced::Effect(Effect::Query { id, statement }) => {
                let Some((name, _)) = chore(statement) else { continue };
                if out.values().zip(out.keys()).any(|(n, (worker, _))| *n == name && *worker == w) {
                    return Err(format!("w{w} sent a {name} pass while another was out, at {}", entry.at));
                }
                if stopping.contains_key(&w) {
                    return Err(format!("w{w} sent a {name} pass after a shutdown request, at {}", entry.at));
                }
                out.insert((w, *id), name);
                passes.entry((w, name)).or_default().push(Pass { sent: entry.at, ended: None });
            }
            Traced::Input(Input::QueryDone { id, result }) => {
                let Some(name) = out.remove(&(w, *id)) else { continue };
                let pass = passes.get_mut(&(w, name)).and_then(|p| p.last_mut()).expect("a pass was sent");
                pass.ended = Some((entry.at, !matches!(result, QueryResult::Err(_))));
            }
            _ => {}
        }
    }
    Ok(passes)
}

/// The waits between passes: each within `[3/4, 1]` of the period, doubled per failure in a
/// row up to the limit.
fn check_spacing(name: &str, every: Duration, passes: &[Pass]) -> Result<(), String> {
    let mut failures = 0u32;
    for pair in passes.windows(2) {
        let Some((ended, ok)) = pair[0].ended else { return Err(format!("{name}: a pass never ended")) };
        failures = if ok { 0 } else { failures + 1 };
        let limit = every.max(CHORE_BACKOFF_LIMIT);
        let wait = (0..failures).fold(every, |w, _| (w * 2).min(limit));
        let waited = pair[1].sent - ended;
        if waited < wait * 3 / 4 - Duration::milliseconds(1) || waited > wait {
            return Err(format!("{name}: waited {waited} after a pass ({failures} failed in a row), want 3/4 to all of {wait}"));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn chores_run_one_pass_at_a_time_jittered_backed_off_on_failure_and_none_after_stop(
        seed in any::<u64>(),
        workers in 3..6usize,
        failing in prop_oneof![Just(0u32), 50..400u32],
    ) {
        let mut world = World::new(WorldConfig { seed, query_failure_per_mille: failing, ..WorldConfig::default() });
        for n in 0..workers {
            world.add_worker(config(n, seed.wrapping_add(n as u64)));
        }
        world.run_for(Duration::minutes(3));
        for w in 0..workers {
            world.shutdown(w, true);
        }
        prop_assert!(world.run_until_stopped(Duration::minutes(1)), "every worker stops");
        world.run_for(Duration::minutes(5));
        let passes = passes(&world).map_err(TestCaseError::fail)?;
        for ((w, name), passes) in &passes {
            let every = chore_every(name).expect("a chore's period");
            prop_assert!(passes.len() >= 3, "w{w} ran its {name} chore {} times", passes.len());
            check_spacing(name, every, passes).map_err(|e| TestCaseError::fail(format!("w{w} {e}")))?;
        }
        // Workers started together spread: no two send their passes at the same times.
        for name in ["prune", "resolve", "reindex"] {
            let times: Vec<Vec<Timestamp>> =
                (0..workers).map(|w| passes[&(w, name)].iter().map(|p| p.sent).collect()).collect();
            for (a, b) in times.iter().enumerate().flat_map(|(i, a)| times[i + 1..].iter().map(move |b| (a, b))) {
                prop_assert_ne!(a, b, "two workers' {} passes in lockstep", name);
            }
        }
    }
}

#[test]
fn a_failed_pass_backs_off_then_the_chore_runs_again_at_its_period() {
    let mut world = World::new(WorldConfig::default());
    let w = world.add_worker(config(0, 7));
    // Every query fails for the first three minutes.
    world.fail_next_queries(w, u32::MAX);
    world.run_for(Duration::minutes(3));
    world.fail_next_queries(w, 0);
    world.run_for(Duration::minutes(2));
    let passes = passes(&world).unwrap();
    let resolves = &passes[&(w, "resolve")];
    check_spacing("resolve", RESOLVE_EVERY, resolves).unwrap();
    let failed = resolves.iter().take_while(|p| p.ended.is_some_and(|(_, ok)| !ok)).count();
    // 2, 4, 8, 16, 32 s, then a minute: 7 or 8 failures in three minutes, not 90.
    assert!((5..=9).contains(&failed), "{failed} failed passes: {resolves:?}");
    let after = &resolves[failed..];
    assert!(after.len() >= 40, "back at every two seconds once the database answers: {}", after.len());
}

#[test]
fn the_pruner_drops_the_days_past_their_retention_and_the_resolver_settles_what_graphile_worker_ran() {
    let mut world = World::new(WorldConfig::default());
    let now = world.now();
    let days = |n: i64| now - Duration::days(n);
    // Completed rows are kept 7 days, failed ones 30, cancelled ones for ever.
    let rows = [
        (1, Outcome::Completed, days(9)),
        (2, Outcome::Completed, days(3)),
        (3, Outcome::Failed, days(9)),
        (4, Outcome::Failed, days(40)),
        (5, Outcome::Cancelled, days(400)),
    ];
    for (job_id, outcome, at) in rows {
        world.db_mut().add_history(job_id, outcome, at);
    }
    let step = |name: &str, on: &[&str]| {
        WorkflowJob::new(name, on.to_vec(), RawJob::new("step", json!({}), Default::default()))
    };
    let (_, released) = world.add_workflow("chain", vec![step("a", &[]), step("b", &["a"])]).unwrap();
    // graphile-worker's own worker completes `a`: only the resolver sees it.
    world.db_mut().complete_jobs(&[released[0].1]);
    world.add_worker(config(0, 1));
    world.run_for(Duration::seconds(5));
    let kept: Vec<i64> = world.db().history().iter().map(|r| r.job_id).collect();
    assert_eq!(kept, [2, 3, 5]);
    let released: Vec<usize> = world.db().releases().iter().map(|r| r.job).collect();
    assert_eq!(released, [0, 1], "b released once a settled");
}
