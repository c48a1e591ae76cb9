//! Leases and recovery in `core::sim`, with crashes, pauses, stalled loops and clock skew
//! between workers.
//!
//! Three workers run long jobs (some in one named queue). Worker 0 never crashes nor
//! pauses, so a sweeper is always there; workers 1 and 2 may crash, may be paused for up
//! to [`LIVE_PAUSE`] ms at a time, at least a second from the end of one pause to the next,
//! and their loops may stall for up to [`LIVE_STALL`] ms (tasks that block every thread:
//! the loop hears nothing while the lease's keeper goes on). Each worker's clock is off the
//! database's by up to an hour either way. After every step:
//!
//! - a live worker (not crashed; its pauses are short enough that its lease is renewed in
//!   time; its loop turns within the watchdog's limit) still holds every job it runs:
//!   recovery never takes a job from it, and no two workers run a job at once;
//! - once [`bound`] has passed since a worker crashed, no job and no queue is locked by it;
//! - the named queue runs in order: a job of it starts only when no earlier job of it is
//!   left (recovery frees a job in its place, never behind the jobs queued after it).

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::job::{JobSpec, RawJob};
use formica_core::sim::{TaskPlan, Traced, World, WorldConfig};
use formica_core::worker::{
    Config, Effect, Event, Input, Statement, TaskOutcome, HEARTBEAT_INTERVAL, LEASE, RECOVERY_PERIOD,
    SUSPICION_GRACE,
};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// The longest pause a live worker may take: a lease and its grace, minus a heartbeat
/// interval and two seconds for the heartbeat to land.
fn live_pause() -> Duration {
    LEASE + SUSPICION_GRACE - HEARTBEAT_INTERVAL - Duration::seconds(2)
}
const LIVE_PAUSE: i64 = 10_000;
/// The longest stall of a live worker's loop: anything short of the watchdog's limit.
const LIVE_STALL: i64 = 29_000;

/// How soon after a crash its locks are freed: the lease (its last heartbeat landed before
/// the crash), the longest gap between two sweeps of worker 0 (the one that suspects it),
/// the grace, another gap (the sweep that frees it), and a second of latency.
fn bound() -> Duration {
    LEASE + SUSPICION_GRACE + RECOVERY_PERIOD * 8 / 3 + Duration::seconds(1)
}

#[derive(Debug, Clone)]
enum Action {
    Crash(usize),
    Pause(usize, i64),
    Stall(usize, i64),
    Nothing,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        1 => (1..3usize).prop_map(Action::Crash),
        3 => (1..3usize, 1..=LIVE_PAUSE).prop_map(|(w, ms)| Action::Pause(w, ms)),
        3 => (1..3usize, 1..=LIVE_STALL).prop_map(|(w, ms)| Action::Stall(w, ms)),
        1 => Just(Action::Nothing),
    ]
}

fn config(n: usize) -> Config {
    Config {
        worker_id: format!("w{n}"),
        task_identifiers: vec!["long".into()],
        concurrency: 2,
        ..Config::default()
    }
}

/// The named queue's jobs start in order: when one starts (in the trace from `*seen`), no
/// job of the queue added before it is left. All are added at once, so that is id order.
fn in_queue_order(world: &World, seen: &mut usize) -> Result<(), String> {
    for entry in &world.trace()[*seen..] {
        if let Traced::Effect(Effect::StartTask { job }) = &entry.what {
            let earlier = world.db().jobs().find(|j| j.queue_name.as_deref() == Some("q") && j.id < job.id);
            if let (Some("q"), Some(earlier)) = (job.queue_name.as_deref(), earlier) {
                return Err(format!(
                    "job {} of q started at {} before job {}",
                    job.id, entry.elapsed, earlier.id
                ));
            }
        }
    }
    *seen = world.trace().len();
    Ok(())
}

fn check(world: &World, crashed_at: &BTreeMap<usize, Duration>) -> Result<(), String> {
    let mut runs = BTreeMap::new();
    for w in 0..world.workers() {
        let id = world.worker_id(w);
        if let Some(at) = crashed_at.get(&w) {
            if world.elapsed() >= *at + bound() {
                if let Some(job) = world.db().jobs().find(|j| j.locked_by.as_deref() == Some(id.as_str())) {
                    return Err(format!(
                        "{id} crashed at {at}: job {} still locked at {}",
                        job.id,
                        world.elapsed()
                    ));
                }
                if let Some(q) = world.db().queues().find(|q| q.locked_by.as_deref() == Some(id.as_str())) {
                    return Err(format!("{id} crashed at {at}: queue {} still locked", q.name));
                }
            }
            continue;
        }
        if world.is_wedged(w) {
            return Err(format!(
                "{id}'s loop stalled less than the watchdog's limit, yet it gave its lease up"
            ));
        }
        for running in world.running(w) {
            let row = world.db().job(running.id);
            if row.and_then(|r| r.locked_by.as_deref()) != Some(id.as_str()) {
                return Err(format!("live {id} runs job {} but the row is {row:?}", running.id));
            }
            if let Some(other) = runs.insert(running.id, w) {
                return Err(format!("job {} runs on w{other} and on {id} at once", running.id));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn live_workers_keep_their_jobs_and_dead_workers_lose_theirs_within_the_bound(
        seed in any::<u64>(),
        skews in proptest::collection::vec(-3600..=3600i64, 3),
        ops in proptest::collection::vec((1_000..20_000i64, action()), 1..20),
    ) {
        prop_assert!(Duration::milliseconds(LIVE_PAUSE) <= live_pause());
        prop_assert!(Duration::milliseconds(LIVE_STALL) < Config::default().watchdog);
        let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
        // Tasks run 20 s to 2 min, longer than a lease: recovery would take them mid-run.
        world.set_script(|_, rng| {
            TaskPlan::finish(Duration::seconds(rng.between(20, 120)), TaskOutcome::Ok)
        });
        for (n, skew) in skews.iter().enumerate() {
            world.add_skewed_worker(config(n), Duration::seconds(*skew));
        }
        for n in 0..12 {
            let queue = (n % 3 == 0).then(|| "q".to_owned());
            let spec = JobSpec { queue_name: queue, ..JobSpec::default() };
            world.db_mut().add_job(&RawJob::new("long", serde_json::json!({}), spec)).unwrap();
        }
        let mut crashed_at = BTreeMap::new();
        let mut seen = 0;
        let mut resumes = [Duration::zero(); 3];
        let mut stall_ends = [Duration::zero(); 3];
        for (wait, action) in ops {
            let until = world.elapsed() + Duration::milliseconds(wait);
            while world.next_at().is_some_and(|at| at <= until) {
                world.step();
                check(&world, &crashed_at).map_err(TestCaseError::fail)?;
                in_queue_order(&world, &mut seen).map_err(TestCaseError::fail)?;
            }
            world.run_for(until - world.elapsed());
            match action {
                Action::Crash(w) => {
                    world.crash(w);
                    crashed_at.entry(w).or_insert(world.elapsed());
                }
                // A second at least from the end of one pause to the next: the heartbeat
                // sent on resuming lands in between.
                Action::Pause(w, ms) if world.elapsed() >= resumes[w] + Duration::seconds(1) => {
                    world.pause(w, Duration::milliseconds(ms));
                    resumes[w] = world.elapsed() + Duration::milliseconds(ms);
                }
                Action::Pause(..) => {}
                // Likewise a second between stalls: the loop turns in between.
                Action::Stall(w, ms) if world.elapsed() >= stall_ends[w] + Duration::seconds(1) => {
                    world.stall_loop(w, Duration::milliseconds(ms));
                    stall_ends[w] = world.elapsed() + Duration::milliseconds(ms);
                }
                Action::Stall(..) => {}
                Action::Nothing => {}
            }
        }
        // Long enough for every crash to be recovered from.
        let until = world.elapsed() + bound() + Duration::seconds(1);
        while world.next_at().is_some_and(|at| at <= until) {
            world.step();
            check(&world, &crashed_at).map_err(TestCaseError::fail)?;
            in_queue_order(&world, &mut seen).map_err(TestCaseError::fail)?;
        }
    }
}

/// A worker paused past its lease loses its job; when it comes back, its completion of the
/// job is fenced off (the job is another worker's now) and that run's outcome stands.
#[test]
fn a_worker_paused_past_its_lease_cannot_complete_the_new_run() {
    let mut world = World::new(WorldConfig::default());
    // The first run (paused worker) ends during the pause; the second outlasts it.
    world.set_script(|job, _| {
        let secs = if job.attempts == 1 { 30 } else { 60 };
        TaskPlan::finish(Duration::seconds(secs), TaskOutcome::Ok)
    });
    let spec = JobSpec { queue_name: Some("q".into()), ..JobSpec::default() };
    let job = world.db_mut().add_job(&RawJob::new("long", serde_json::json!({}), spec)).unwrap().id;
    let a = world.add_worker(config(0));
    assert!(world.run_until(Duration::seconds(5), |w| w.running(a).count() == 1));
    let paused_at = world.elapsed();
    world.pause(a, Duration::seconds(40));
    let b = world.add_worker(config(1));
    assert!(world.run_until(bound(), |w| w.running(b).count() == 1), "b took the job");
    // a's task ended while it was paused: on resuming it writes its completion, late,
    // while b's run goes on.
    world.run_for(paused_at + Duration::seconds(41) - world.elapsed());
    assert_eq!(world.running(b).count(), 1);
    let late = world.trace().iter().any(|e| {
        e.worker == Some(a)
            && e.elapsed > paused_at
            && matches!(&e.what, Traced::Input(Input::QueryDone { .. }))
            && world.trace().iter().any(|s| {
                matches!(&s.what, Traced::Effect(Effect::Query { statement: Statement::CompleteJobs { ids, .. }, .. }) if ids == &[job])
                    && s.worker == Some(a)
            })
    });
    assert!(late, "a wrote its completion after the pause");
    // a says its outcome was fenced off, naming the worker that holds the job now.
    let fenced: Vec<&Event> = world
        .trace()
        .iter()
        .filter_map(|e| match &e.what {
            Traced::Effect(Effect::Emit(event @ Event::OutcomeFenced { .. })) if e.worker == Some(a) => {
                Some(event)
            }
            _ => None,
        })
        .collect();
    assert_eq!(fenced, [&Event::OutcomeFenced { job_id: job, holder: Some("w1".into()) }]);
    let row = world.db().job(job).expect("the new run's job is still there");
    assert_eq!(row.locked_by.as_deref(), Some("w1"));
    assert_eq!(world.db().queue("q").and_then(|q| q.locked_by.as_deref()), Some("w1"));
    assert!(world.run_until(Duration::seconds(60), |w| w.db().job(job).is_none()), "b completes it");
}

/// A worker whose loop wedges past the watchdog's limit gives its lease up: its job runs
/// elsewhere within the documented bound, exactly once more, and when the loop turns again
/// its late completion is fenced off and it renews its lease.
#[test]
fn a_wedged_loop_gives_its_lease_up_and_its_late_completion_is_fenced_off() {
    let mut world = World::new(WorldConfig::default());
    // The first run ends during the wedge; the second outlasts it.
    world.set_script(|job, _| {
        let secs = if job.attempts == 1 { 30 } else { 120 };
        TaskPlan::finish(Duration::seconds(secs), TaskOutcome::Ok)
    });
    let job =
        world.db_mut().add_job(&RawJob::new("long", serde_json::json!({}), JobSpec::default())).unwrap().id;
    let a = world.add_worker(config(0));
    assert!(world.run_until(Duration::seconds(5), |w| w.running(a).count() == 1));
    let b = world.add_worker(config(1));
    let wedged_at = world.elapsed();
    world.stall_loop(a, Duration::seconds(100));
    let watchdog = Config::default().watchdog;
    assert!(world.run_until(watchdog + HEARTBEAT_INTERVAL, |w| w.is_wedged(a)), "the keeper gives up");
    assert!(world.elapsed() - wedged_at >= watchdog, "not before the limit");
    // Its last heartbeat went out before the limit: recovered within the bound from then.
    let bound = watchdog + HEARTBEAT_INTERVAL + bound();
    assert!(world.run_until(bound, |w| w.running(b).count() == 1), "b took the job");
    assert!(
        world.elapsed() - wedged_at <= bound,
        "recovered at {} after the wedge",
        world.elapsed() - wedged_at
    );
    assert_eq!(world.db().job(job).unwrap().attempts, 2, "run exactly once more");
    // The loop turns again (the keeper hears of it at its next tick): a's completion of the
    // first run is written late, and fenced off.
    world.run_for(wedged_at + Duration::seconds(100) + HEARTBEAT_INTERVAL - world.elapsed());
    assert!(world.trace().iter().any(|e| e.worker == Some(a) && e.what == Traced::Lease(Event::LoopResumed)));
    assert!(!world.is_wedged(a));
    let wrote = world.trace().iter().any(|e| {
        e.worker == Some(a)
            && matches!(&e.what, Traced::Effect(Effect::Query { statement: Statement::CompleteJobs { ids, .. }, .. }) if ids == &[job])
    });
    assert!(wrote, "a wrote its completion after the wedge");
    world.run_for(Duration::seconds(1));
    let row = world.db().job(job).expect("the new run's job is still there");
    assert_eq!(row.locked_by.as_deref(), Some("w1"));
    assert_eq!(world.running(b).count(), 1);
    assert!(world.run_until(Duration::seconds(120), |w| w.db().job(job).is_none()), "b completes it");
}
