//! Cron across several workers in `core::sim`: whatever the workers do (crash, restart,
//! refused statements, lost listeners) and however the clock moves (late, forward, back), each due
//! (identifier, minute) is scheduled exactly once while a worker keeps running, never
//! twice in any case, and a restart backfills only within `fill`.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::{DateTime, Duration, DurationRound, Utc};
use formica_core::cron::{parse, CronItem};
use formica_core::sim::faults::{run_ops, Fault};
use formica_core::sim::strategies::{fault, Faults};
use formica_core::sim::{App, Op, World, WorldConfig};
use formica_core::worker::Config;
use proptest::prelude::*;
use std::collections::BTreeMap;

const CRONTAB: &str = "* * * * * every ?fill=10m\n*/7 * * * * sevens ?fill=1h\n0 * * * * hourly";

/// Workers 1 and 2 crash and restart; worker 0 keeps running (it only loses its listener
/// and queries). Forward jumps stay within the smallest `fill` (10 minutes): a worker
/// whose clock leaps further than another worker's backfill window can lose the minutes in
/// between to that worker's later `last_execution` (one high-water mark per item, as
/// graphile-worker).
fn faults() -> Faults {
    Faults {
        may_crash: 1..3,
        max_jump_forward: 540,
        max_jump_back: 600,
        max_failed_queries: 3,
        ..Faults::on(3)
    }
}

/// Faults and waits of up to five minutes.
fn op() -> impl Strategy<Value = Op<()>> {
    prop_oneof![
        4 => (1_000..300_000u32).prop_map(Op::Wait),
        4 => fault(&faults()).prop_map(Op::Fault),
    ]
}

/// No events, and nothing to check during the run: the workers do not run the cron tasks,
/// so every scheduled job stays in the table for the checks at the end.
struct Cron;

impl App<()> for Cron {
    fn on_event(&mut self, _: &mut World, _: &()) {}

    fn check(&mut self, _: &World) -> Result<(), String> {
        Ok(())
    }
}

/// Items in Paris time, for runs across its daylight-saving transitions: every five
/// minutes, every minute of the hour that is skipped or repeated, and a daily 02:30.
const PARIS: &str =
    "CRON_TZ=Europe/Paris\n*/5 * * * * fives ?fill=10m\n* 2 * * * two ?fill=10m\n30 2 * * * daily";

fn items() -> Vec<CronItem> {
    parse(CRONTAB).expect("valid crontab").into_items()
}

fn worker_config(n: usize) -> Config {
    worker_with(n, items())
}

fn worker_with(n: usize, crontab: Vec<CronItem>) -> Config {
    Config {
        worker_id: format!("w{n}"),
        // The workers do not run the cron tasks, so every scheduled job stays in the table.
        task_identifiers: vec!["other".into()],
        crontab,
        ..Config::default()
    }
}

/// How many jobs each (task, minute) got.
fn scheduled(world: &World) -> BTreeMap<(String, DateTime<Utc>), usize> {
    let mut counts = BTreeMap::new();
    for job in world.db().jobs() {
        *counts.entry((job.task_identifier.clone(), job.run_at)).or_default() += 1;
    }
    counts
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn each_due_minute_is_scheduled_once_across_workers_restarts_and_clock_jumps(
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..25),
    ) {
        each_due_minute_once(items(), WorldConfig { seed, ..WorldConfig::default() }, ops)?;
    }

    /// The same in Paris time, starting shortly before a spring-forward or a fall-back
    /// (2024-03-31 and 2024-10-27, 01:00 UTC both): clock jumps across the transition
    /// included, each slot by the daylight-saving rule is scheduled once.
    #[test]
    fn each_zoned_slot_is_scheduled_once_across_dst_transitions_and_clock_jumps(
        seed in any::<u64>(),
        autumn in any::<bool>(),
        before in 1i64..90,
        ops in proptest::collection::vec(op(), 1..25),
    ) {
        let transition = if autumn { "2024-10-27T01:00:00Z" } else { "2024-03-31T01:00:00Z" };
        let start = transition.parse::<DateTime<Utc>>().unwrap() - Duration::minutes(before);
        let items = parse(PARIS).unwrap().into_items();
        each_due_minute_once(items, WorldConfig { seed, start, ..WorldConfig::default() }, ops)?;
    }
}

/// Runs `ops` on three workers with `crontab`: each (task, minute) is scheduled at most
/// once, and every minute worker 0 (which never crashes) passed is scheduled.
fn each_due_minute_once(
    crontab: Vec<CronItem>,
    config: WorldConfig,
    ops: Vec<Op<()>>,
) -> Result<(), TestCaseError> {
    // A second after each fault, and after a stall of worker 0's loop a second past its
    // end: jumps one right after another, or while worker 0's loop stands still, would add
    // up past the smallest fill before worker 0 had a moment to schedule what they passed
    // (a loop that wakes to a clock further on than its fill loses the minutes before it,
    // as a process resumed after a suspension does).
    let ops: Vec<Op<()>> = ops
        .into_iter()
        .flat_map(|op| match op {
            Op::Fault(Fault::StallLoop(0, ms)) => {
                vec![Op::Fault(Fault::StallLoop(0, ms)), Op::Wait(ms + 1_000)]
            }
            Op::Fault(fault) => vec![Op::Fault(fault), Op::Wait(1_000)],
            other => vec![other],
        })
        .collect();
    let mut world = World::new(config);
    let workers: Vec<_> = (0..3).map(|n| world.add_worker(worker_with(n, crontab.clone()))).collect();
    let first = world.now();
    run_ops(&mut world, &ops, &mut Cron).map_err(TestCaseError::fail)?;
    // Let refused statements be retried (at most a poll interval later).
    world.run_for(Duration::seconds(5));

    let counts = scheduled(&world);
    for ((task, minute), n) in &counts {
        prop_assert_eq!(*n, 1, "{} at {} scheduled {} times", task, minute, n);
    }
    // Worker 0 never stopped: every minute it reached is scheduled, from the first
    // whole minute after it started to the last minute its clock finished with.
    let reached = world.machine(workers[0]).now().duration_trunc(Duration::minutes(1)).unwrap();
    let start = first.duration_trunc(Duration::minutes(1)).unwrap() + Duration::minutes(1);
    for item in &crontab {
        let mut at = start;
        while at < reached {
            if item.matches(at) {
                prop_assert!(
                    counts.contains_key(&(item.task().to_owned(), at)),
                    "{} at {} was skipped (worker 0 reached {})",
                    item.task(),
                    at,
                    reached
                );
            }
            at += Duration::minutes(1);
        }
    }
    Ok(())
}

#[test]
fn a_restart_after_downtime_backfills_within_fill_only() {
    let mut world = World::new(WorldConfig::default());
    let w = world.add_worker(worker_config(0));
    world.run_for(Duration::minutes(3));
    world.crash(w);
    let before = scheduled(&world).len();
    // Down for 30 minutes: `every` (fill 10m) gets its last 10 minutes back, `hourly` (no
    // fill) nothing, `sevens` (fill 1h) every multiple of 7 since its last run.
    world.run_for(Duration::minutes(30));
    world.restart(w);
    let now = world.now();
    world.run_for(Duration::seconds(5));
    let after = scheduled(&world);
    let backfilled: Vec<_> = world
        .db()
        .jobs()
        .filter(|j| j.payload["_cron"]["backfilled"] == serde_json::json!(true))
        .map(|j| (j.task_identifier.clone(), j.run_at))
        .collect();
    let every: Vec<_> = backfilled.iter().filter(|(t, _)| t == "every").collect();
    assert_eq!(every.len(), 10, "{backfilled:?}");
    assert!(every.iter().all(|(_, at)| *at >= now - Duration::minutes(10) && *at < now));
    assert!(backfilled.iter().all(|(t, _)| t != "hourly"));
    assert!(after.values().all(|&n| n == 1));
    assert!(after.len() > before);
}
