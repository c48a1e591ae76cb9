//! Rate limits in `core::sim`, with racing workers, crashes and restarts, lost listeners
//! and clock jumps.
//!
//! Four workers run jobs of the limited task `r` (some with a customer in the payload, some
//! in the named queue `q`) beside jobs of the free task `u`. The limit is in force from the
//! start, on the whole task or per customer. Every lock of a job of `r` is observed (its
//! `locked_at`, the database clock of the fetch): no period-long window of those times, in
//! any partition, holds more locks than the limit. Once the run ends every job has run.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::flow::{Limit, Partition};
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

fn world(seed: u64, limit: &Limit) -> World {
    let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
    world.set_script(|_, rng| {
        TaskPlan::finish(Duration::milliseconds(10 + (rng.unit() * 200.0) as i64), TaskOutcome::Ok)
    });
    world.db_mut().set_rate_limit(limit.clone());
    for n in 0..4 {
        world.add_worker(Config {
            worker_id: format!("w{n}"),
            task_identifiers: vec!["r".into(), "u".into()],
            concurrency: 4,
            flow_control: true,
            ..Config::default()
        });
    }
    for n in 0..100 {
        let task = if n % 4 == 3 { "u" } else { "r" };
        let spec = if n % 10 == 0 { JobSpec::builder().queue_name("q").build() } else { JobSpec::default() };
        let payload = serde_json::json!({ "customer": format!("k{}", n % 3) });
        world.db_mut().add_job(&RawJob::new(task, payload, spec)).unwrap();
    }
    world
}

/// Every lock of a job of the limited task seen so far: (partition, locked_at), by job,
/// attempt and time (a lock seen over several steps counts once).
#[derive(Default)]
struct Locks {
    seen: BTreeSet<(i64, i16, Timestamp)>,
    by_partition: BTreeMap<String, Vec<Timestamp>>,
}

impl Locks {
    fn observe(&mut self, world: &World, limit: &Limit) {
        for job in world.db().jobs().filter(|j| j.task_identifier == limit.task) {
            let Some(at) = job.locked_at else { continue };
            if self.seen.insert((job.id, job.attempts, at)) {
                let partition = limit
                    .partition
                    .as_ref()
                    .map(|p| p.of(&job.payload, job.key.as_deref()))
                    .unwrap_or_default();
                self.by_partition.entry(partition).or_default().push(at);
            }
        }
    }

    /// No window `(t - period, t]` of one partition's lock times holds more than the limit.
    fn check(&self, limit: &Limit) -> Result<(), String> {
        let period = Duration::milliseconds(i64::from(limit.period_ms));
        for (partition, times) in &self.by_partition {
            let mut times = times.clone();
            times.sort();
            for (end, t) in times.iter().enumerate() {
                let start = times.partition_point(|s| *s <= *t - period);
                let upto = times.partition_point(|s| s <= t);
                let n = upto - start;
                if n > limit.max_starts as usize {
                    return Err(format!(
                        "{n} locks of {} in partition {partition:?} in the {period} up to {t} (the {end}th), limit {}",
                        limit.task, limit.max_starts
                    ));
                }
            }
        }
        Ok(())
    }
}

fn limits() -> impl Strategy<Value = Limit> {
    let partition = prop_oneof![Just(None), Just(Some(Partition::Field("customer".into())))];
    (1..5u32, prop_oneof![Just(200u32), Just(1_000), Just(5_000)], partition).prop_map(
        |(max_starts, period_ms, partition)| Limit { task: "r".into(), max_starts, period_ms, partition },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_rate_limit_is_never_exceeded_in_any_window_and_every_job_runs(
        seed in any::<u64>(),
        limit in limits(),
        ops in proptest::collection::vec((1..3_000i64, action()), 0..15),
    ) {
        let mut world = world(seed, &limit);
        let mut locks = Locks::default();
        for (wait, action) in ops {
            let until = world.elapsed() + Duration::milliseconds(wait);
            while world.elapsed() < until && world.step().is_some() {
                locks.observe(&world, &limit);
            }
            match action {
                Action::Restart(w) => world.restart(w),
                Action::Crash(w) => world.crash(w),
                Action::DropListener(w) => world.drop_listener(w),
                Action::JumpClock(ms) => world.jump_clock(Duration::milliseconds(ms)),
            }
        }
        for w in 0..world.workers() {
            if world.is_crashed(w) {
                world.restart(w);
            }
        }
        let end = world.elapsed() + Duration::seconds(3_600);
        while world.db().jobs().count() > 0 && world.elapsed() < end && world.step().is_some() {
            locks.observe(&world, &limit);
        }
        locks.check(&limit).map_err(TestCaseError::fail)?;
        prop_assert_eq!(world.db().jobs().count(), 0, "jobs left once the run ended");
    }
}

/// No eligible job waits while the limit has room, beyond the next fetch: with every
/// worker up, `jobs` jobs of the limited task drain in the periods the limit needs, each
/// late by at most a poll interval (the fetch that finds the room) and a little work.
#[test]
fn a_rate_limited_drain_takes_the_periods_the_limit_needs_and_no_more() {
    for seed in 0..20u64 {
        let limit = Limit { task: "r".into(), max_starts: 4, period_ms: 1_000, partition: None };
        let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
        world.set_script(|_, _| TaskPlan::finish(Duration::milliseconds(10), TaskOutcome::Ok));
        world.db_mut().set_rate_limit(limit.clone());
        let poll = Duration::milliseconds(100);
        for n in 0..4 {
            world.add_worker(Config {
                worker_id: format!("w{n}"),
                task_identifiers: vec!["r".into()],
                concurrency: 4,
                poll_interval: poll,
                flow_control: true,
                ..Config::default()
            });
        }
        for _ in 0..40 {
            world.db_mut().add_job(&RawJob::new("r", serde_json::json!({}), JobSpec::default())).unwrap();
        }
        let start = world.elapsed();
        let mut locks = Locks::default();
        while world.db().jobs().count() > 0 && world.elapsed() < start + Duration::seconds(60) {
            if world.step().is_none() {
                break;
            }
            locks.observe(&world, &limit);
        }
        let took = world.elapsed() - start;
        locks.check(&limit).unwrap();
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
        let limit = Limit { task: "r".into(), max_starts: 2, period_ms: 1_000, partition: None };
        let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
        world.set_script(|_, _| TaskPlan::finish(Duration::milliseconds(10), TaskOutcome::Ok));
        world.db_mut().set_rate_limit(limit.clone());
        world.add_worker(Config {
            worker_id: "w".into(),
            task_identifiers: vec!["r".into()],
            concurrency: 4,
            poll_interval: Duration::seconds(10),
            flow_control: true,
            ..Config::default()
        });
        for _ in 0..12 {
            world.db_mut().add_job(&RawJob::new("r", serde_json::json!({}), JobSpec::default())).unwrap();
        }
        let start = world.elapsed();
        let mut locks = Locks::default();
        while world.db().jobs().count() > 0 && world.elapsed() < start + Duration::seconds(120) {
            if world.step().is_none() {
                break;
            }
            locks.observe(&world, &limit);
        }
        let took = world.elapsed() - start;
        locks.check(&limit).unwrap();
        assert_eq!(world.db().jobs().count(), 0, "seed {seed}: every job ran");
        assert!(
            took >= Duration::seconds(5) && took <= Duration::milliseconds(6_500),
            "seed {seed}: drained in {took}, 5 s implied"
        );
    }
}
