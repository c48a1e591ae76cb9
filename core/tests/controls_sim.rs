//! Caps and rate limits (`formica_core::flow::Control`) in `core::sim`, with racing
//! workers, crashes and restarts, lost listeners and clock jumps.
//!
//! Four workers run jobs of the controlled task (some with a customer in the payload, some
//! in the named queue `q`) beside jobs of the free task `u`. The control is in force from
//! the start, on the whole task or per customer. A cap: after every step, in the database
//! (jobs locked by anyone) and among the tasks running on live workers, no partition holds
//! more jobs than the cap. A rate limit: every lock is observed (its `locked_at`, the
//! database clock of the fetch), and no period-long window of those times, in any
//! partition, holds more locks than the limit. Once the run ends every job has run:
//! capacity freed is used.
//!
//! `controls_sim.proptest-regressions` holds the seeds of the two former files
//! (`caps_sim`, `rate_sim`): each property replays every seed, and the seeds found by one
//! draw the same case in it as before.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::flow::{Control, Partition};
use formica_core::job::{JobSpec, RawJob};
use formica_core::sim::{TaskPlan, World, WorldConfig};
use formica_core::time::Timestamp;
use formica_core::worker::{Config, TaskOutcome};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

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

fn ops() -> impl Strategy<Value = Vec<(i64, Action)>> {
    proptest::collection::vec((1..3_000i64, action()), 0..15)
}

fn per_customer() -> impl Strategy<Value = Option<Partition>> {
    prop_oneof![Just(None), Just(Some(Partition::Field("customer".into())))]
}

/// The work of each job, the jobs added and each worker's concurrency.
struct Shape {
    work_ms: (i64, f64),
    jobs: usize,
    concurrency: usize,
}

fn world(seed: u64, control: &Control, shape: Shape) -> World {
    let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
    let (least, spread) = shape.work_ms;
    world.set_script(move |_, rng| {
        TaskPlan::finish(Duration::milliseconds(least + (rng.unit() * spread) as i64), TaskOutcome::Ok)
    });
    world.db_mut().set_control(control.clone());
    for n in 0..4 {
        world.add_worker(Config {
            worker_id: format!("w{n}"),
            task_identifiers: vec![control.task.clone(), "u".into()],
            concurrency: shape.concurrency,
            flow_control: true,
            ..Config::default()
        });
    }
    for n in 0..shape.jobs {
        let task = if n % 4 == 3 { "u" } else { control.task.as_str() };
        let spec = if n % 10 == 0 { JobSpec::builder().queue_name("q").build() } else { JobSpec::default() };
        let payload = serde_json::json!({ "customer": format!("k{}", n % 3) });
        world.db_mut().add_job(&RawJob::new(task, payload, spec)).unwrap();
    }
    world
}

/// Runs `ops`, then every worker up until the jobs are gone (or `end` passes), calling
/// `observe` after every step.
fn run(
    world: &mut World,
    ops: Vec<(i64, Action)>,
    end: Duration,
    mut observe: impl FnMut(&World) -> Result<(), String>,
) -> Result<(), TestCaseError> {
    for (wait, action) in ops {
        let until = world.elapsed() + Duration::milliseconds(wait);
        while world.elapsed() < until && world.step().is_some() {
            observe(world).map_err(TestCaseError::fail)?;
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
    let end = world.elapsed() + end;
    while world.db().jobs().count() > 0 && world.elapsed() < end && world.step().is_some() {
        observe(world).map_err(TestCaseError::fail)?;
    }
    Ok(())
}

/// Jobs of the capped task per partition: locked in the database, and running on live workers.
fn check_cap(world: &World, cap: &Control) -> Result<(), String> {
    let mut locked: BTreeMap<String, usize> = BTreeMap::new();
    for job in world.db().jobs().filter(|j| j.task_identifier == cap.task && j.locked_at.is_some()) {
        *locked.entry(cap.partition_of(job)).or_default() += 1;
    }
    let mut running: BTreeMap<String, usize> = BTreeMap::new();
    for w in (0..world.workers()).filter(|w| !world.is_crashed(*w)) {
        for job in world.running(w).filter(|j| j.task_identifier == cap.task) {
            *running.entry(cap.partition_of(job)).or_default() += 1;
        }
    }
    let max = cap.max() as usize;
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

/// Every lock of a job of the limited task seen so far: (partition, locked_at), by job,
/// attempt and time (a lock seen over several steps counts once).
#[derive(Default)]
struct Locks {
    seen: BTreeSet<(i64, i16, Timestamp)>,
    by_partition: BTreeMap<String, Vec<Timestamp>>,
}

impl Locks {
    fn observe(&mut self, world: &World, limit: &Control) {
        for job in world.db().jobs().filter(|j| j.task_identifier == limit.task) {
            let Some(at) = job.locked_at else { continue };
            if self.seen.insert((job.id, job.attempts, at)) {
                self.by_partition.entry(limit.partition_of(job)).or_default().push(at);
            }
        }
    }

    /// No window `(t - period, t]` of one partition's lock times holds more than the limit.
    fn check(&self, limit: &Control) -> Result<(), String> {
        let period = limit.period().expect("a rate limit");
        for (partition, times) in &self.by_partition {
            let mut times = times.clone();
            times.sort();
            for (end, t) in times.iter().enumerate() {
                let start = times.partition_point(|s| *s <= *t - period);
                let upto = times.partition_point(|s| s <= t);
                let n = upto - start;
                if n > limit.max() as usize {
                    return Err(format!(
                        "{n} locks of {} in partition {partition:?} in the {period} up to {t} (the {end}th), limit {}",
                        limit.task,
                        limit.max()
                    ));
                }
            }
        }
        Ok(())
    }
}

fn caps() -> impl Strategy<Value = Control> {
    (1..4u32, per_customer()).prop_map(|(max, partition)| Control { partition, ..Control::cap("c", max) })
}

fn limits() -> impl Strategy<Value = Control> {
    (1..5u32, prop_oneof![Just(200u32), Just(1_000), Just(5_000)], per_customer()).prop_map(
        |(max, period_ms, partition)| Control { partition, ..Control::rate_limit("r", max, period_ms) },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_cap_is_never_exceeded_and_every_job_runs(seed in any::<u64>(), cap in caps(), ops in ops()) {
        let shape = Shape { work_ms: (50, 450.0), jobs: 120, concurrency: 3 };
        let mut world = world(seed, &cap, shape);
        run(&mut world, ops, Duration::seconds(900), |world| check_cap(world, &cap))?;
        prop_assert_eq!(world.db().jobs().count(), 0, "jobs left once the run ended");
    }

    #[test]
    fn a_rate_limit_is_never_exceeded_in_any_window_and_every_job_runs(
        seed in any::<u64>(),
        limit in limits(),
        ops in ops(),
    ) {
        let shape = Shape { work_ms: (10, 200.0), jobs: 100, concurrency: 4 };
        let mut world = world(seed, &limit, shape);
        let mut locks = Locks::default();
        run(&mut world, ops, Duration::seconds(3_600), |world| {
            locks.observe(world, &limit);
            Ok(())
        })?;
        locks.check(&limit).map_err(TestCaseError::fail)?;
        prop_assert_eq!(world.db().jobs().count(), 0, "jobs left once the run ended");
    }
}

/// Drains `jobs` jobs of `limit`'s task with `workers` workers polling every `poll`, and
/// answers how long it took; every lock kept to the limit.
fn drain(
    seed: u64,
    limit: &Control,
    workers: usize,
    poll: Duration,
    jobs: usize,
    within: Duration,
) -> Duration {
    let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
    world.set_script(|_, _| TaskPlan::finish(Duration::milliseconds(10), TaskOutcome::Ok));
    world.db_mut().set_control(limit.clone());
    for n in 0..workers {
        world.add_worker(Config {
            worker_id: format!("w{n}"),
            task_identifiers: vec![limit.task.clone()],
            concurrency: 4,
            poll_interval: poll,
            flow_control: true,
            ..Config::default()
        });
    }
    for _ in 0..jobs {
        world.db_mut().add_job(&RawJob::new(&limit.task, serde_json::json!({}), JobSpec::default())).unwrap();
    }
    let start = world.elapsed();
    let mut locks = Locks::default();
    while world.db().jobs().count() > 0 && world.elapsed() < start + within {
        if world.step().is_none() {
            break;
        }
        locks.observe(&world, limit);
    }
    locks.check(limit).unwrap();
    assert_eq!(world.db().jobs().count(), 0, "seed {seed}: every job ran");
    world.elapsed() - start
}

/// No eligible job waits while the limit has room, beyond the next fetch: with every
/// worker up, `jobs` jobs of the limited task drain in the periods the limit needs, each
/// late by at most a poll interval (the fetch that finds the room) and a little work.
#[test]
fn a_rate_limited_drain_takes_the_periods_the_limit_needs_and_no_more() {
    for seed in 0..20u64 {
        let poll = Duration::milliseconds(100);
        let took = drain(seed, &Control::rate_limit("r", 4, 1_000), 4, poll, 40, Duration::seconds(60));
        // 40 jobs at 4 a second: the last 4 start 9 periods after the first 4.
        let periods = 9;
        assert!(took >= Duration::seconds(periods), "seed {seed}: drained in {took}, faster than the limit");
        let bound = (Duration::seconds(1) + poll) * periods as i32 + Duration::seconds(1);
        assert!(
            took <= bound,
            "seed {seed}: drained in {took}, over {bound}: jobs waited while the limit had room"
        );
    }
}

/// Room returning wakes the worker, not its poll: one worker polling every 10 s drains 12
/// jobs limited to 2 a second in the 5 periods the limit needs (and a little work each),
/// where it took 18.6 s waiting for its poll and flow reads.
#[test]
fn a_rate_limited_worker_fetches_when_room_returns_not_at_its_poll() {
    for seed in 0..10u64 {
        let limit = Control::rate_limit("r", 2, 1_000);
        let took = drain(seed, &limit, 1, Duration::seconds(10), 12, Duration::seconds(120));
        assert!(
            took >= Duration::seconds(5) && took <= Duration::milliseconds(6_500),
            "seed {seed}: drained in {took}, 5 s implied"
        );
    }
}
