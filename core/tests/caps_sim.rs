//! Global concurrency caps in `core::sim`, with racing workers, crashes and restarts, lost
//! listeners and clock jumps.
//!
//! Four workers run jobs of the capped task `c` (some with a customer in the payload, some
//! in the named queue `q`) beside jobs of the uncapped task `u`. The cap is in force from
//! the start, on the whole task or per customer. After every step, in the database (jobs
//! locked by anyone) and among the tasks running on live workers, no partition holds more
//! jobs of `c` than the cap. Once the run ends every job has run: capacity freed is used.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::flow::{Cap, Partition};
use formica_core::job::{JobSpec, RawJob};
use formica_core::sim::{TaskPlan, World, WorldConfig};
use formica_core::worker::{Config, TaskOutcome};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Action {
    Restart(usize),
    Crash(usize),
    DropListener(usize),
    JumpClock(i64),
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0..4usize).prop_map(Action::Restart),
        1 => (0..4usize).prop_map(Action::Crash),
        2 => (0..4usize).prop_map(Action::DropListener),
        1 => (-1_000..60_000i64).prop_map(Action::JumpClock),
    ]
}

fn world(seed: u64, cap: &Cap) -> World {
    let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
    world.set_script(|_, rng| {
        TaskPlan::finish(Duration::milliseconds(50 + (rng.unit() * 450.0) as i64), TaskOutcome::Ok)
    });
    world.db_mut().set_cap(cap.clone());
    for n in 0..4 {
        world.add_worker(Config {
            worker_id: format!("w{n}"),
            task_identifiers: vec!["c".into(), "u".into()],
            concurrency: 3,
            flow_control: true,
            ..Config::default()
        });
    }
    for n in 0..120 {
        let task = if n % 4 == 3 { "u" } else { "c" };
        let spec = if n % 10 == 0 { JobSpec::builder().queue_name("q").build() } else { JobSpec::default() };
        let payload = serde_json::json!({ "customer": format!("k{}", n % 3) });
        world.db_mut().add_job(&RawJob::new(task, payload, spec)).unwrap();
    }
    world
}

/// Jobs of the capped task per partition: locked in the database, and running on live workers.
fn check(world: &World, cap: &Cap) -> Result<(), String> {
    let partition = |job: &formica_core::job::Job| {
        cap.partition.as_ref().map(|p| p.of(&job.payload, job.key.as_deref())).unwrap_or_default()
    };
    let mut locked: BTreeMap<String, usize> = BTreeMap::new();
    for job in world.db().jobs().filter(|j| j.task_identifier == cap.task && j.locked_at.is_some()) {
        *locked.entry(partition(job)).or_default() += 1;
    }
    let mut running: BTreeMap<String, usize> = BTreeMap::new();
    for w in (0..world.workers()).filter(|w| !world.is_crashed(*w)) {
        for job in world.running(w).filter(|j| j.task_identifier == cap.task) {
            *running.entry(partition(job)).or_default() += 1;
        }
    }
    let max = cap.max_running as usize;
    for (what, counts) in [("locked", locked), ("running", running)] {
        if let Some((part, n)) = counts.iter().find(|(_, n)| **n > max) {
            return Err(format!(
                "{n} jobs of {} {what} in partition {part:?} at {}, cap {max}",
                cap.task,
                world.elapsed()
            ));
        }
    }
    Ok(())
}

fn caps() -> impl Strategy<Value = Cap> {
    let partition = prop_oneof![Just(None), Just(Some(Partition::Field("customer".into())))];
    (1..4u32, partition).prop_map(|(max_running, partition)| Cap { task: "c".into(), max_running, partition })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_cap_is_never_exceeded_and_every_job_runs(
        seed in any::<u64>(),
        cap in caps(),
        ops in proptest::collection::vec((1..3_000i64, action()), 0..15),
    ) {
        let mut world = world(seed, &cap);
        for (wait, action) in ops {
            let until = world.elapsed() + Duration::milliseconds(wait);
            while world.elapsed() < until && world.step().is_some() {
                check(&world, &cap).map_err(TestCaseError::fail)?;
            }
            match action {
                Action::Restart(w) => world.restart(w),
                Action::Crash(w) => world.crash(w),
                Action::DropListener(w) => world.drop_listener(w),
                Action::JumpClock(ms) => world.jump_clock(Duration::milliseconds(ms)),
            }
        }
        // Crashed workers come back, so someone is left to run the jobs.
        for w in 0..world.workers() {
            if world.is_crashed(w) {
                world.restart(w);
            }
        }
        let limit = world.elapsed() + Duration::seconds(900);
        while world.db().jobs().count() > 0 && world.elapsed() < limit && world.step().is_some() {
            check(&world, &cap).map_err(TestCaseError::fail)?;
        }
        prop_assert_eq!(world.db().jobs().count(), 0, "jobs left once the run ended");
    }
}
