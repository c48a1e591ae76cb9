//! proptest strategies for [`Case`]s: worlds of one to three workers and the operations
//! played on them. Names come from small pools (tasks `a`..`c`, queues `q0`, `q1`, keys
//! `k0`..`k3`, flags `x`, `y`) so that keys, queues and flags collide.

use crate::case::{Case, TASKS};
use crate::ops::{for_workers, Action, NewJob, Op, Pick};
use chrono::Duration;
use formica_core::job::JobKeyMode;
use formica_core::sim::Fault;
use formica_core::worker::{Config, Pruning, RefetchDelay, Retention, TaskOutcome};
use proptest::prelude::*;
use serde_json::{json, Value};

/// A job of the pools above; its payload is `{"n": 0}` or `[{"n": 0}]` until [`case`]
/// numbers it.
pub fn new_job() -> impl Strategy<Value = NewJob> {
    (
        0..3usize,
        prop::option::weighted(0.4, 0..2u8),
        prop::option::weighted(0.5, 0..4u8),
        prop_oneof![2 => Just(0i16), 1 => -10..30i16],
        -1..=1i16,
        1..=4i16,
        prop_oneof![3 => Just(0u8), 1 => 0..4u8],
        prop::bool::weighted(0.3),
    )
        .prop_map(|(task, queue, key, delay_s, priority, max_attempts, flags, array)| {
            let flags: Vec<String> = [("x", 1u8), ("y", 2u8)]
                .iter()
                .filter(|(_, bit)| flags & bit != 0)
                .map(|(f, _)| (*f).to_owned())
                .collect();
            NewJob {
                task: TASKS[task].to_owned(),
                payload: if array { json!([{ "n": 0 }]) } else { json!({ "n": 0 }) },
                queue: queue.map(|q| format!("q{q}")),
                delay_s: (delay_s != 0).then_some(i64::from(delay_s)),
                max_attempts,
                key: key.map(|k| format!("k{k}")),
                mode: None,
                priority,
                flags: (!flags.is_empty()).then_some(flags),
            }
        })
}

fn event(action: Action) -> Op {
    Op::Event(action)
}

/// One operation; workers are numbered 0 to 2 ([`case`] wraps them to those it has).
pub fn op() -> impl Strategy<Value = Op> {
    let modes = [JobKeyMode::Replace, JobKeyMode::PreserveRunAt, JobKeyMode::UnsafeDedupe];
    let outcomes = || {
        prop_oneof![
            Just(TaskOutcome::Ok),
            Just(TaskOutcome::Skipped("manual skip".into())),
            Just(TaskOutcome::Err("manual error".into())),
            Just(TaskOutcome::Panicked("task panicked: manual".into())),
            Just(TaskOutcome::Aborted),
        ]
    };
    prop_oneof![
        25 => (new_job(), 0..3usize).prop_map(move |(job, mode)| event(Action::RawJob(NewJob { mode: Some(modes[mode]), ..job }))),
        4 => (prop::collection::vec(new_job(), 0..4), any::<bool>())
            .prop_map(|(jobs, preserve_run_at)| event(Action::AddJobs { jobs, preserve_run_at })),
        4 => (0..4u8).prop_map(|key| event(Action::RemoveJob { key: format!("k{key}") })),
        2 => any::<u8>().prop_map(|p| event(Action::CompleteJobs { pick: Pick::Nth(vec![u64::from(p)]) })),
        2 => any::<u8>().prop_map(|p| event(Action::PermanentlyFailJobs { pick: Pick::Nth(vec![u64::from(p)]), message: None })),
        2 => (any::<u8>(), prop::option::of(-5..30i64), prop::option::of(0..3i16), prop::option::of(1..4i16))
            .prop_map(|(p, delay_s, attempts, max_attempts)| event(Action::RescheduleJobs {
                pick: Pick::Nth(vec![u64::from(p)]),
                delay_s,
                priority: None,
                attempts,
                max_attempts,
            })),
        1 => Just(event(Action::ForceUnlockCrashed)),
        2 => (any::<u8>(), 0..2u8).prop_map(|(p, r)| event(Action::CancelJobs {
            pick: Pick::Nth(vec![u64::from(p)]),
            reason: format!("stop {r}"),
        })),
        25 => prop_oneof![0..3_000u32, 0..30_000u32].prop_map(Op::Wait),
        8 => (1..20u8).prop_map(|n| event(Action::Steps(n))),
        5 => (0..3usize, any::<u8>(), outcomes())
            .prop_map(|(worker, nth, outcome)| event(Action::FinishTask { worker, nth, outcome })),
        3 => (0..3usize).prop_map(|w| Op::Fault(Fault::DropListener(w))),
        2 => (0..3usize, any::<bool>()).prop_map(|(w, up)| Op::Fault(Fault::ListenerAvailable(w, up))),
        2 => (-1..3i8).prop_map(|count| event(Action::Notify(format!("{{\"r\":0.5,\"count\":{count}}}")))),
        3 => prop_oneof![-3600..3600i64, Just(5 * 3600)].prop_map(|secs| Op::Fault(Fault::JumpClock(secs))),
        1 => (0..3usize).prop_map(|w| Op::Fault(Fault::Restart(w))),
        1 => (0..3usize).prop_map(|w| Op::Fault(Fault::Crash(w))),
        2 => (0..3usize, any::<bool>()).prop_map(|(worker, graceful)| event(Action::Shutdown { worker, graceful })),
        1 => (0..3usize, 1..4u32).prop_map(|(w, n)| Op::Fault(Fault::FailQueries(w, n))),
        1 => (0..3usize, 1..4u32).prop_map(|(w, n)| Op::Fault(Fault::LoseAnswers(w, n))),
    ]
}

/// The configuration of worker `index` (id `w<index>`).
pub fn worker_config(index: usize) -> impl Strategy<Value = Config> {
    (
        1..=4usize,
        prop::option::weighted(0.6, 1..=12usize),
        prop_oneof![Just(0i64), Just(1), Just(50)],
        prop_oneof![Just(0i64), Just(1), Just(50)],
        any::<bool>(),
        prop_oneof![4 => Just(TASKS.to_vec()), 2 => prop::sample::subsequence(TASKS.to_vec(), 1..=3), 1 => Just(vec![])],
        prop::sample::subsequence(vec!["x", "y"], 0..=2),
        prop_oneof![3 => Just(vec![]), 1 => prop::sample::subsequence(vec!["x", "y"], 1..=2)],
        500..3000i64,
        prop::bool::weighted(0.1),
        any::<u64>(),
        prop_oneof![Just(None), (1..=60i64).prop_map(Some)],
    )
        .prop_map(
            move |(concurrency, local, complete_ms, fail_ms, local_time, tasks, flags, accepted, poll_ms, once, seed, ttl)| {
                Config {
                    worker_id: format!("w{index}"),
                    task_identifiers: tasks.into_iter().map(str::to_owned).collect(),
                    concurrency,
                    poll_interval: Duration::milliseconds(poll_ms),
                    local_queue_size: local,
                    // One (the default) or two, by the worker's seed.
                    fetches_in_flight: 1 + (seed % 2) as usize,
                    local_queue_ttl: ttl.map_or(Duration::minutes(5), Duration::seconds),
                    lock_sweep_interval: formica_core::worker::LOCK_SWEEP_INTERVAL,
                    recovery_interval: formica_core::worker::RECOVERY_PERIOD,
                    // The model keeps no pauses (flow control has its own sim tests).
                    flow_control: false,
                    task_concurrency: Default::default(),
                    watchdog: formica_core::lease::DEFAULT_WATCHDOG,
                    complete_batch_delay: Duration::milliseconds(complete_ms),
                    fail_batch_delay: Duration::milliseconds(fail_ms),
                    graceful_shutdown_timeout: Duration::seconds(3),
                    forbidden_flags: flags.into_iter().map(str::to_owned).collect(),
                    accepted_flags: accepted.into_iter().map(str::to_owned).collect(),
                    use_local_time: local_time,
                    run_once: once,
                    max_listener_backoff: Duration::seconds(10),
                    seed,
                    crontab: Vec::new(),
                    // Half the workers run the chores, at periods that come up in a run.
                    prune_history: (seed % 4 < 2).then_some(Pruning {
                        retention: Retention { completed: Some(Duration::days(7)), failed: None, cancelled: None },
                        every: Duration::seconds(3),
                    }),
                    resolve_workflows: (seed % 4 < 2).then_some(Duration::seconds(2)),
                    // Off: the driver carries a pass out by itself, not as a bound statement.
                    reindex_bloated: None,
                    vacuum_jobs: seed % 4 < 2,
                    age_priorities: (seed % 4 < 2).then_some(Duration::seconds(2)),
                    runtime_schedules: None,
                    task_timeouts: Default::default(),
                    task_policies: Default::default(),
                    latest_migration: 20,
                    refetch_delay: seed.is_multiple_of(3).then(|| RefetchDelay {
                        duration: Duration::milliseconds(poll_ms / 4),
                        threshold: (seed % 2) as usize,
                        max_abort_threshold: (seed % 5) as usize,
                    }),
                }
            },
        )
}

/// Sets the `n` of a payload `{"n": _}` or `[{"n": _}]`.
fn number(payload: &mut Value, n: u64) {
    let object = match payload {
        Value::Array(items) => items.first_mut(),
        other => Some(other),
    };
    if let Some(Value::Object(fields)) = object {
        fields.insert("n".into(), json!(n));
    }
}

/// `ops` for a world of `workers`, each added job numbered in order (1, 2, ...) so that its
/// payload names it.
fn fitted(ops: Vec<Op>, workers: usize) -> Vec<Op> {
    let mut serial = 0;
    let mut next = |job: &mut NewJob| {
        serial += 1;
        number(&mut job.payload, serial);
    };
    ops.into_iter()
        .map(|op| match for_workers(op, workers) {
            Op::Event(Action::RawJob(mut job)) => {
                next(&mut job);
                Op::Event(Action::RawJob(job))
            }
            Op::Event(Action::AddJobs { mut jobs, preserve_run_at }) => {
                jobs.iter_mut().for_each(&mut next);
                Op::Event(Action::AddJobs { jobs, preserve_run_at })
            }
            other => other,
        })
        .collect()
}

/// A world (seed, one to three workers, how tasks end, how often queries fail) and up to 80
/// operations on it.
pub fn case() -> impl Strategy<Value = Case> {
    (
        any::<u64>(),
        (1..=3usize).prop_flat_map(|n| (0..n).map(worker_config).collect::<Vec<_>>()),
        [1..10u8, 0..5u8, 0..3u8, 0..2u8, 0..3u8],
        prop_oneof![Just(0u32), Just(100), Just(3000)],
        prop_oneof![3 => Just(0u32), 1 => Just(50)],
        prop::collection::vec(op(), 1..80),
    )
        .prop_map(|(seed, workers, mix, max_task_ms, query_failure_per_mille, ops)| {
            let ops = fitted(ops, workers.len());
            Case { seed, workers, mix, max_task_ms, query_failure_per_mille, ops }
        })
}
