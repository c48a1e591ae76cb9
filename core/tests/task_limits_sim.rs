//! Per-worker task concurrency (`Config::task_concurrency`) in `core::sim`: with local
//! queues of any size, listener losses and clock jumps, a worker never runs more jobs of a
//! limited task than its limit, its other slots keep running other jobs, and every job runs.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::job::{JobSpec, RawJob};
use formica_core::sim::{TaskPlan, World, WorldConfig};
use formica_core::worker::{Config, TaskOutcome};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_worker_runs_no_more_of_a_task_than_its_limit_and_every_job_runs(
        seed in any::<u64>(),
        limit in 1..3usize,
        local in prop_oneof![Just(None), (1..50usize).prop_map(Some)],
        drops in proptest::collection::vec((1..2_000i64, 0..2usize), 0..5),
    ) {
        let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
        world.set_script(|_, rng| {
            TaskPlan::finish(Duration::milliseconds(20 + (rng.unit() * 200.0) as i64), TaskOutcome::Ok)
        });
        for n in 0..2 {
            world.add_worker(Config {
                worker_id: format!("w{n}"),
                task_identifiers: vec!["slow".into(), "other".into()],
                concurrency: 4,
                local_queue_size: local,
                task_concurrency: [("slow".to_owned(), limit)].into_iter().collect(),
                ..Config::default()
            });
        }
        for n in 0..80 {
            let task = if n % 2 == 0 { "slow" } else { "other" };
            world.db_mut().add_job(&RawJob::new(task, serde_json::json!(n), JobSpec::default())).unwrap();
        }
        let mut most_other = 0;
        let mut drops = drops.into_iter();
        let mut next_drop = drops.next();
        let limit_at = world.elapsed() + Duration::seconds(600);
        while world.db().jobs().count() > 0 && world.elapsed() < limit_at && world.step().is_some() {
            for w in 0..world.workers() {
                let slow = world.running(w).filter(|j| j.task_identifier == "slow").count();
                prop_assert!(slow <= limit, "w{w} runs {slow} jobs of slow, limit {limit}");
                most_other = most_other.max(world.running(w).count() - slow);
            }
            if let Some((at, w)) = next_drop {
                if world.elapsed() >= Duration::milliseconds(at) {
                    world.drop_listener(w);
                    next_drop = drops.next();
                }
            }
        }
        prop_assert_eq!(world.db().jobs().count(), 0, "jobs left");
        prop_assert!(most_other >= 4 - limit, "the other slots ran other jobs: at most {}", most_other);
    }
}
