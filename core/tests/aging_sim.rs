//! Priority aging (`formica_core::aging`) in `core::sim`: the starvation bound.
//!
//! Two workers run the task `stream`, whose jobs (priority `q`, never aged) arrive faster
//! than they can run, so its backlog only grows, and the aged task `low`. A job of `low`
//! with priority `p > q`, added at `t`, starts by `t + B`, where, with the aging chore's
//! period `P` and the longest job `W`:
//!
//! `B = aging.reaches(p, q - 1) + max(P, every / 4) + 2 W + 100 ms`
//!
//! (the time ready that brings it below every stream job; the chore's next pass through the
//! task's jobs, which come at most a quarter of the aging's period apart; the job
//! running in each slot when it got there, and a fetch sent just before it; the queries'
//! latency). Nor does it start before aging brings it level with the stream (the stream
//! starves it until then; without aging, for as long as the stream lasts).

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::aging::Aging;
use formica_core::job::{JobSpec, RawJob};
use formica_core::sim::{TaskPlan, Traced, World, WorldConfig};
use formica_core::worker::{Config, Effect, TaskOutcome};
use proptest::prelude::*;

/// The longest job.
const WORK_MS: i64 = 80;
/// The aging chore's period.
const AGE_EVERY: Duration = Duration::milliseconds(200);

/// How long after its `run_at` the job `low` (added at `added_at` or just after) started,
/// by the database clock, if it did by `until`.
fn run(
    seed: u64,
    aging: Option<&Aging>,
    p: i16,
    q: i16,
    added_at: Duration,
    until: Duration,
) -> Option<Duration> {
    let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
    world.set_script(|_, rng| {
        TaskPlan::finish(
            Duration::milliseconds(WORK_MS / 4 + (rng.unit() * (WORK_MS * 3 / 4) as f64) as i64),
            TaskOutcome::Ok,
        )
    });
    if let Some(aging) = aging {
        world.db_mut().set_aging(aging.clone());
    }
    for n in 0..2 {
        world.add_worker(Config {
            worker_id: format!("w{n}"),
            task_identifiers: vec!["stream".into(), "low".into()],
            concurrency: 2,
            local_queue_size: None,
            age_priorities: Some(AGE_EVERY),
            ..Config::default()
        });
    }
    // Four slots of 20 to 80 ms, 50 on average: about 80 jobs a second. The stream adds 200.
    let stream = |world: &mut World| {
        for _ in 0..2 {
            let job = RawJob::new("stream", serde_json::json!({}), JobSpec::builder().priority(q).build());
            world.db_mut().add_job(&job).unwrap();
        }
    };
    let mut low = None;
    while world.elapsed() < until {
        // The database's clock moves on with its statements: its rows are dated now.
        let now = world.now();
        world.db_mut().set_now(now);
        stream(&mut world);
        if low.is_none() && world.elapsed() >= added_at {
            let job = RawJob::new("low", serde_json::json!({}), JobSpec::builder().priority(p).build());
            let added = world.db_mut().add_job(&job).unwrap();
            low = Some((added.id, added.run_at));
        }
        world.run_for(Duration::milliseconds(10));
    }
    let (low, ready) = low?;
    world.trace().iter().find_map(|entry| match &entry.what {
        Traced::Effect(Effect::StartTask { job }) if job.id == low => Some(entry.at - ready),
        _ => None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn an_aged_job_starts_within_the_bound_under_any_stream_of_higher_priority_jobs(
        seed in any::<u64>(),
        every_ms in 100..1_600i64,
        step in 1..4u16,
        q in -3..3i16,
        above in 1..8i16,
        added_ms in 200..2_000i64,
    ) {
        let (p, best) = (q + above, q - 1 - (seed % 3) as i16);
        let aging = Aging::new("low", Duration::milliseconds(every_ms), step, best);
        let pass = AGE_EVERY.max(Duration::milliseconds(every_ms / 4));
        let bound = aging.reaches(p, q - 1).unwrap() + pass + Duration::milliseconds(2 * WORK_MS + 100);
        let added_at = Duration::milliseconds(added_ms);
        let waited = run(seed, Some(&aging), p, q, added_at, added_at + bound + Duration::seconds(1));
        prop_assert!(waited.is_some_and(|w| w <= bound), "waited {waited:?}, bound {bound}");
        // Not before aging brought it level with the stream: the stream starved it till then.
        let level = aging.reaches(p, q).unwrap();
        prop_assert!(waited.is_some_and(|w| w >= level), "waited {waited:?}, before it was level ({level})");
    }
}

#[test]
fn without_aging_the_low_job_starves() {
    let added_at = Duration::milliseconds(500);
    assert_eq!(run(7, None, 5, 0, added_at, Duration::seconds(10)), None);
}
