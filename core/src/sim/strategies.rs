//! [proptest](https://docs.rs/proptest) strategies for testing scheduling in a [`World`]
//! (feature `proptest`): job specs within graphile-worker's limits, crontab items, random
//! workflows' graphs, and fault schedules mixed with an application's own events.
//!
//! Everything generated is valid: a spec passes [`JobSpec::validate`] and the schema's
//! checks, an item is one [`Cron`] builds (so a crontab line would parse to it), a fault
//! names a worker the caller has. Names come mostly from a small pool (`q0`..`q3`,
//! `k0`..`k3`) so that queues and job keys collide, and sometimes at the schema's length
//! limits. A failing scenario shrinks by dropping ops first, then by simplifying those left
//! (shorter waits, smaller jumps, lower worker numbers).
//!
//! [`World`]: super::World

// A strategy that cannot build its own value is a bug of the strategy: it panics.
#![allow(clippy::expect_used)]

use super::faults::{Fault, Op};
use super::WorkerIndex;
use crate::cron::{Cron, CronItem};
use crate::job::{JobKeyMode, JobSpec, MAX_IDENTIFIER_LEN, MAX_JOB_KEY_LEN, MAX_QUEUE_NAME_LEN};
use crate::worker::Timestamp;
use chrono::Duration;
use proptest::prelude::*;
use std::fmt;
use std::ops::Range;

/// Strings matching `pattern` (a regular expression of this module: always valid).
fn text(pattern: &str) -> proptest::string::RegexGeneratorStrategy<String> {
    proptest::string::string_regex(pattern).expect("a valid pattern")
}

/// A task identifier: a letter or `_`, then letters, digits, `_`, `-`, `:` or `/` (what
/// both `add_job` and a crontab accept), up to 128 characters.
pub fn task_identifier() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => text("[a-z_][a-z0-9_]{0,7}"),
        1 => text(&format!("[a-z_][a-z0-9_:/-]{{{}}}", MAX_IDENTIFIER_LEN - 1)),
    ]
}

/// A queue name: mostly `q0`..`q3`; sometimes 128 characters of letters, digits, `_`,
/// `-` and `:` (what both `add_job` and a crontab accept).
pub fn queue_name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0..4u8).prop_map(|n| format!("q{n}")),
        1 => text(&format!("[a-z0-9_:-]{{{MAX_QUEUE_NAME_LEN}}}")),
    ]
}

/// A job key: mostly `k0`..`k3`; sometimes any text of 1 to 512 characters, or exactly 512.
pub fn job_key() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0..4u8).prop_map(|n| format!("k{n}")),
        1 => text(&format!("\\PC{{1,{MAX_JOB_KEY_LEN}}}")),
        1 => text(&format!("k{{{MAX_JOB_KEY_LEN}}}")),
    ]
}

/// One of the three job key modes.
pub fn job_key_mode() -> impl Strategy<Value = JobKeyMode> {
    prop_oneof![Just(JobKeyMode::Replace), Just(JobKeyMode::PreserveRunAt), Just(JobKeyMode::UnsafeDedupe)]
}

/// A valid [`JobSpec`] for `add_job` (`add_jobs` refuses its `unsafe_dedupe` mode): each
/// option is left to the database default about half the time; `run_at` is within an
/// hour either side of `around`; `max_attempts` is 1 to 25; flags are from `a`, `b`, `c`.
pub fn job_spec(around: Timestamp) -> impl Strategy<Value = JobSpec> {
    (
        prop::option::of(queue_name()),
        prop::option::of((-3600..3600i64).prop_map(move |s| around + Duration::seconds(s))),
        prop::option::of(1..=25i16),
        prop::option::of(job_key()),
        prop::option::of(job_key_mode()),
        prop::option::of(-10..=10i16),
        prop::option::of(prop::sample::subsequence(vec!["a", "b", "c"], 0..=3)),
    )
        .prop_map(|(queue_name, run_at, max_attempts, job_key, job_key_mode, priority, flags)| JobSpec {
            queue_name,
            run_at,
            max_attempts,
            job_key_mode: job_key.as_ref().and(job_key_mode),
            job_key,
            priority,
            flags: flags.map(|f| f.into_iter().map(str::to_owned).collect()),
            unique: None,
        })
}

/// A valid crontab item running one of `tasks`, identified as `id`: a pattern that fires
/// often enough to be seen in a simulated hour (minutes `*`, `*/n`, `n`, `a-b` or `a,b`;
/// hours mostly `*`), with or without `fill` (up to two hours), `max`, `queue`,
/// `priority` and `jobKey` with its mode.
pub fn cron_item(id: impl Into<String>, tasks: Vec<String>) -> impl Strategy<Value = CronItem> {
    let id = id.into();
    let minutes = prop_oneof![
        Just("*".to_owned()),
        (2..=30u32).prop_map(|n| format!("*/{n}")),
        (0..60u32).prop_map(|n| n.to_string()),
        (0..50u32, 1..10u32).prop_map(|(a, n)| format!("{a}-{}", a + n)),
        (0..30u32, 30..60u32).prop_map(|(a, b)| format!("{a},{b}")),
    ];
    let hours = prop_oneof![4 => Just("*".to_owned()), 1 => (0..24u32).prop_map(|h| h.to_string())];
    let options = (
        prop::option::of(0..=7200u64),
        prop::option::of(1..=25i16),
        prop::option::of((0..4u8).prop_map(|n| format!("q{n}"))),
        prop::option::of(-10..=10i16),
        prop::option::of(((0..4u8).prop_map(|n| format!("k{n}")), any::<bool>())),
    );
    (prop::sample::select(tasks), minutes, hours, options).prop_map(
        move |(task, minutes, hours, (fill, max, queue, priority, key))| {
            let mut cron = Cron::for_task(task, format!("{minutes} {hours} * * *")).id(id.clone());
            if let Some(secs) = fill {
                cron = cron.fill(std::time::Duration::from_secs(secs));
            }
            if let Some(n) = max {
                cron = cron.max_attempts(n);
            }
            if let Some(queue) = queue {
                cron = cron.queue(queue);
            }
            if let Some(p) = priority {
                cron = cron.priority(p);
            }
            if let Some((key, preserve)) = key {
                let mode = if preserve { JobKeyMode::PreserveRunAt } else { JobKeyMode::Replace };
                cron = cron.job_key(key).job_key_mode(mode);
            }
            cron.build().expect("the strategy builds valid items only")
        },
    )
}

/// Any zone of the IANA database, for items read in a time zone (`Cron::time_zone`).
pub fn time_zone() -> impl Strategy<Value = crate::cron::Tz> {
    prop::sample::select(chrono_tz::TZ_VARIANTS.to_vec())
}

/// An interval item (`@every`) of 1 s to 10 minutes running one of `tasks`, identified as
/// `id`, with or without a `fill` of up to an hour.
pub fn interval_item(id: impl Into<String>, tasks: Vec<String>) -> impl Strategy<Value = CronItem> {
    let id = id.into();
    (prop::sample::select(tasks), 1..=600u64, prop::option::of(0..=3600u64)).prop_map(
        move |(task, secs, fill)| {
            let mut cron = Cron::every_for_task(task, std::time::Duration::from_secs(secs)).id(id.clone());
            if let Some(fill) = fill {
                cron = cron.fill(std::time::Duration::from_secs(fill));
            }
            cron.build().expect("the strategy builds valid items only")
        },
    )
}

/// A crontab of `items` items (`item0`, `item1`, ...: identifiers are unique, as a
/// crontab requires) running `tasks`.
pub fn crontab(tasks: Vec<String>, items: Range<usize>) -> impl Strategy<Value = Vec<CronItem>> {
    items.prop_flat_map(move |n| {
        (0..n).map(|i| cron_item(format!("item{i}"), tasks.clone())).collect::<Vec<_>>()
    })
}

/// What faults [`fault`] and [`ops`] generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Faults {
    /// Workers in the world: every fault names one of `0..workers`.
    pub workers: usize,
    /// Workers that crash and restart (the others only lose listeners and queries).
    pub may_crash: Range<WorkerIndex>,
    /// Longest clock jump forward, in seconds.
    pub max_jump_forward: i64,
    /// Longest clock jump back, in seconds.
    pub max_jump_back: i64,
    /// Most queries one [`Fault::FailQueries`] fails (or [`Fault::LoseAnswers`] loses the answers of).
    pub max_failed_queries: u32,
    /// Longest [`Fault::StallLoop`], in milliseconds.
    pub max_stall_ms: u32,
}

impl Faults {
    /// Every kind of fault on `workers` workers, all of which may crash; the clock jumps up
    /// to an hour either way; up to 5 queries fail in a row.
    pub fn on(workers: usize) -> Self {
        Faults {
            workers,
            may_crash: 0..workers,
            max_jump_forward: 3600,
            max_jump_back: 3600,
            max_failed_queries: 5,
            // Below the default watchdog (30 s): tasks that block, not a wedged loop.
            max_stall_ms: 20_000,
        }
    }
}

/// One fault as `faults` allows. A crash or restart is as likely as each other kind (when
/// no worker may crash, that share goes to dropped listeners).
pub fn fault(faults: &Faults) -> impl Strategy<Value = Fault> {
    assert!(faults.workers > 0, "faults need a worker");
    let any_worker = 0..faults.workers;
    let crashing = faults.may_crash.clone();
    let crash: BoxedStrategy<Fault> = if crashing.is_empty() {
        any_worker.clone().prop_map(Fault::DropListener).boxed()
    } else {
        prop_oneof![crashing.clone().prop_map(Fault::Crash), crashing.prop_map(Fault::Restart)].boxed()
    };
    prop_oneof![
        crash,
        (-faults.max_jump_back..=faults.max_jump_forward).prop_map(Fault::JumpClock),
        any_worker.clone().prop_map(Fault::DropListener),
        (any_worker.clone(), any::<bool>()).prop_map(|(w, up)| Fault::ListenerAvailable(w, up)),
        (any_worker.clone(), 1..=faults.max_failed_queries.max(1))
            .prop_map(|(w, n)| Fault::FailQueries(w, n)),
        (any_worker.clone(), 1..=faults.max_failed_queries.max(1))
            .prop_map(|(w, n)| Fault::LoseAnswers(w, n)),
        (any_worker, 1..=faults.max_stall_ms.max(1)).prop_map(|(w, ms)| Fault::StallLoop(w, ms)),
    ]
}

/// A scenario of `len` ops: the application's `events`, `faults` and waits, in the ratio
/// 4 : 1 : 4. Half the waits are under two seconds (to land between a query and its
/// answer, or during a task), half up to ten minutes (to let retries and cron minutes
/// come due).
pub fn ops<E: Clone + fmt::Debug>(
    events: impl Strategy<Value = E> + 'static,
    faults: &Faults,
    len: Range<usize>,
) -> impl Strategy<Value = Vec<Op<E>>> {
    let op = prop_oneof![
        4 => events.prop_map(Op::Event),
        1 => fault(faults).prop_map(Op::Fault),
        4 => prop_oneof![0..2_000u32, 0..600_000u32].prop_map(Op::Wait),
    ];
    prop::collection::vec(op, len)
}

/// The graph of a random workflow of about `jobs` jobs, named `j0`, `j1`, ...: a random DAG
/// (each job depends on up to three earlier ones), a diamond, or a fan-out/fan-in of up to
/// 40 jobs between one first and one last job. Each job is independently an ordinary job
/// with policy cancel (most), one with policy release, or a callback of either kind (a job
/// without dependencies stays ordinary); a graph always passes
/// [`Graph::new`](crate::workflow::Graph::new).
pub fn workflow_nodes(jobs: Range<usize>) -> impl Strategy<Value = Vec<crate::workflow::Node>> {
    let random = jobs.prop_flat_map(|n| {
        (0..n)
            .map(|i| prop::sample::subsequence((0..i).collect::<Vec<_>>(), 0..=i.min(3)))
            .collect::<Vec<_>>()
    });
    let diamond = Just(vec![vec![], vec![0], vec![0], vec![1, 2]]);
    let fan = (2..=40usize).prop_map(|width| {
        let mut deps: Vec<Vec<usize>> = vec![vec![]];
        deps.extend((0..width).map(|_| vec![0]));
        deps.push((1..=width).collect());
        deps
    });
    prop_oneof![3 => random, 1 => diamond, 1 => fan]
        .prop_flat_map(|deps| {
            let kinds = prop::collection::vec(0..8u8, deps.len());
            (Just(deps), kinds)
        })
        .prop_map(|(deps, kinds)| {
            use crate::workflow::{Callback, Node, OnDependencyFailure};
            deps.into_iter()
                .zip(kinds)
                .enumerate()
                .map(|(i, (deps, kind))| {
                    let node = Node::new(format!("j{i}"), deps.iter().map(|d| format!("j{d}")));
                    match kind {
                        _ if deps.is_empty() => node,
                        5 => node.on_dependency_failure(OnDependencyFailure::Release),
                        6 => node.callback(Callback::AllFinished),
                        7 => node.callback(Callback::FirstFailure),
                        _ => node,
                    }
                })
                .collect()
        })
}
