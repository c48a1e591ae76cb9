//! Pause and resume in `core::sim`, with racing workers, crashes, restarts, lost listeners
//! and clock jumps.
//!
//! Three workers run quick jobs of tasks `a` and `b`, some in the named queue `q`, while an
//! operator pauses and resumes task `a`, queue `q` or everything at random times. After
//! every step:
//!
//! - no job held back by a pause starts later than [`bound`] after the pause was written
//!   (the poll's read, when the notification is lost); with every listener up the pause
//!   lands within [`LISTENING_BOUND`] (`a_pause_lands_within_milliseconds_with_listeners_up`);
//! - no worker starts a job that the pauses it last read hold back (the core's decision);
//! - a held-back job spends no attempt: a job never runs more often than its attempts say.
//!
//! Once everything is resumed, every job runs: no eligible job waits while capacity is free.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::flow::{Controls, FlowState, Pause, Scope};
use formica_core::job::{Job, JobSpec, RawJob};
use formica_core::sim::{TaskPlan, Traced, World, WorldConfig};
use formica_core::worker::{Config, Effect, Event, TaskOutcome};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// With the listener lost, a pause lands by the poll's read: a poll interval after the
/// last read ended, plus the read itself, a restart or listener reconnect, and a second back
/// a clock may jump.
fn bound() -> Duration {
    Config::default().poll_interval + Duration::seconds(2)
}

/// With listeners up: the notification, a read out before it (its snapshot older than the
/// pause) and the read after it.
const LISTENING_BOUND: Duration = Duration::milliseconds(50);

fn config(n: usize) -> Config {
    Config {
        worker_id: format!("w{n}"),
        task_identifiers: vec!["a".into(), "b".into()],
        concurrency: 3,
        flow_control: true,
        ..Config::default()
    }
}

fn world(seed: u64, jobs: usize) -> World {
    let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
    world.set_script(|_, rng| {
        TaskPlan::finish(Duration::milliseconds(20 + (rng.unit() * 300.0) as i64), TaskOutcome::Ok)
    });
    for n in 0..3 {
        world.add_worker(config(n));
    }
    for n in 0..jobs {
        let task = if n % 2 == 0 { "a" } else { "b" };
        let spec = if n % 3 == 0 { JobSpec::builder().queue_name("q").build() } else { JobSpec::default() };
        world.db_mut().add_job(&RawJob::new(task, serde_json::json!(n), spec)).unwrap();
    }
    world
}

#[derive(Debug, Clone)]
enum Action {
    Pause(Scope),
    Resume(Scope),
    DropListener(usize),
    ListenerGone(usize),
    Restart(usize),
    JumpClock(i64),
}

fn scope() -> impl Strategy<Value = Scope> {
    prop_oneof![Just(Scope::Task), Just(Scope::Queue), Just(Scope::All)]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => scope().prop_map(Action::Pause),
        3 => scope().prop_map(Action::Resume),
        1 => (0..3usize).prop_map(Action::DropListener),
        1 => (0..3usize).prop_map(Action::ListenerGone),
        1 => (0..3usize).prop_map(Action::Restart),
        1 => (-1_000..60_000i64).prop_map(Action::JumpClock),
    ]
}

/// What the operator paused: `a` for a task, `q` for a queue.
fn target(scope: Scope) -> &'static str {
    match scope {
        Scope::Task => "a",
        Scope::Queue => "q",
        Scope::All => "",
    }
}

/// The history of the pauses: when each was written and lifted (by elapsed time).
#[derive(Default)]
struct Pauses {
    spans: Vec<(Scope, Duration, Option<Duration>)>,
}

impl Pauses {
    fn pause(&mut self, scope: Scope, at: Duration) {
        if !self.spans.iter().any(|(s, _, end)| *s == scope && end.is_none()) {
            self.spans.push((scope, at, None));
        }
    }

    fn resume(&mut self, scope: Scope, at: Duration) {
        for span in self.spans.iter_mut().filter(|(s, _, end)| *s == scope && end.is_none()) {
            span.2 = Some(at);
        }
    }

    /// A pause that held `job` back since `settled` before `at` at least.
    fn holding_back(&self, job: &Job, at: Duration, settled: Duration) -> Option<Scope> {
        let state = |scope: Scope| {
            FlowState::new(&Controls {
                pauses: vec![Pause { scope, name: target(scope).into() }],
                ..Controls::default()
            })
        };
        self.spans
            .iter()
            .find(|(scope, from, to)| {
                *from + settled <= at
                    && to.is_none_or(|to| to > at)
                    && state(*scope).holds_back(&job.task_identifier, job.queue_name.as_deref())
            })
            .map(|(scope, ..)| *scope)
    }
}

/// Checks the trace from `*seen` on: every start against the pauses written by then, and
/// against what its worker last read; a job never runs more often than its attempts.
struct Checker {
    seen: usize,
    read: BTreeMap<usize, FlowState>,
    runs: BTreeMap<i64, i16>,
}

impl Checker {
    fn new() -> Self {
        Checker { seen: 0, read: BTreeMap::new(), runs: BTreeMap::new() }
    }

    fn check(&mut self, world: &World, pauses: &Pauses, settled: Duration) -> Result<(), String> {
        for entry in &world.trace()[self.seen..] {
            let w = entry.worker.unwrap_or_default();
            match &entry.what {
                Traced::Started { .. } => _ = self.read.remove(&w),
                Traced::Effect(Effect::Emit(Event::FlowChanged { paused, .. })) => {
                    let pauses: Vec<Pause> = paused
                        .iter()
                        .map(|label| match label.split_once(':') {
                            Some(("task", name)) => Pause { scope: Scope::Task, name: name.into() },
                            Some((_, name)) => Pause { scope: Scope::Queue, name: name.into() },
                            None => Pause { scope: Scope::All, name: String::new() },
                        })
                        .collect();
                    self.read.insert(w, FlowState::new(&Controls { pauses, ..Controls::default() }));
                }
                Traced::Effect(Effect::StartTask { job }) => {
                    if let Some(scope) = pauses.holding_back(job, entry.elapsed, settled) {
                        return Err(format!(
                            "job {} ({}, {:?}) started at {} under a pause of {scope:?} written {settled} before",
                            job.id, job.task_identifier, job.queue_name, entry.elapsed
                        ));
                    }
                    let read =
                        self.read.get(&w).ok_or(format!("w{w} started job {} before reading", job.id))?;
                    if read.holds_back(&job.task_identifier, job.queue_name.as_deref()) {
                        return Err(format!("w{w} started job {} that the pauses it read hold back", job.id));
                    }
                    let runs = self.runs.entry(job.id).or_default();
                    *runs += 1;
                    if *runs > job.attempts {
                        return Err(format!("job {} ran {runs} times in {} attempts", job.id, job.attempts));
                    }
                }
                _ => {}
            }
        }
        self.seen = world.trace().len();
        Ok(())
    }
}

#[test]
fn a_pause_lands_within_milliseconds_with_listeners_up() {
    for seed in 0..20 {
        let mut world = world(seed, 400);
        let (mut pauses, mut checker) = (Pauses::default(), Checker::new());
        world.run_for(Duration::milliseconds(700));
        for (n, scope) in [Scope::Task, Scope::Queue, Scope::All].into_iter().enumerate() {
            pauses.pause(scope, world.elapsed());
            world.db_mut().pause(scope, target(scope));
            world.run_for(Duration::milliseconds(500 + 100 * n as i64));
        }
        checker.check(&world, &pauses, LISTENING_BOUND).unwrap();
        let waiting = world.db().jobs().filter(|j| j.locked_by.is_none()).count();
        world.run_for(Duration::seconds(20));
        assert_eq!(world.db().jobs().count(), waiting, "seed {seed}: a job ran while everything was paused");
        for scope in [Scope::All, Scope::Queue, Scope::Task] {
            pauses.resume(scope, world.elapsed());
            assert!(world.db_mut().resume(scope, target(scope)));
        }
        assert!(world.run_until(Duration::seconds(300), |w| w.db().jobs().count() == 0), "seed {seed}");
        checker.check(&world, &pauses, LISTENING_BOUND).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_paused_job_starts_once_the_pause_lands_and_a_resume_drains_the_rest(
        seed in any::<u64>(),
        ops in proptest::collection::vec((1..3_000i64, action()), 1..25),
    ) {
        let mut world = world(seed, 300);
        let (mut pauses, mut checker) = (Pauses::default(), Checker::new());
        for (wait, action) in ops {
            let until = world.elapsed() + Duration::milliseconds(wait);
            while world.elapsed() < until && world.step().is_some() {
                checker.check(&world, &pauses, bound()).map_err(TestCaseError::fail)?;
            }
            match action {
                Action::Pause(scope) => {
                    pauses.pause(scope, world.elapsed());
                    world.db_mut().pause(scope, target(scope));
                }
                Action::Resume(scope) => {
                    pauses.resume(scope, world.elapsed());
                    world.db_mut().resume(scope, target(scope));
                }
                Action::DropListener(w) => world.drop_listener(w),
                Action::ListenerGone(w) => {
                    world.set_listener_available(w, false);
                    world.drop_listener(w);
                }
                Action::Restart(w) => world.restart(w),
                Action::JumpClock(ms) => world.jump_clock(Duration::milliseconds(ms)),
            }
        }
        for scope in [Scope::Task, Scope::Queue, Scope::All] {
            pauses.resume(scope, world.elapsed());
            world.db_mut().resume(scope, target(scope));
        }
        let drained = world.run_until(Duration::seconds(600), |w| w.db().jobs().count() == 0);
        checker.check(&world, &pauses, bound()).map_err(TestCaseError::fail)?;
        prop_assert!(drained, "{} jobs left after every pause was lifted", world.db().jobs().count());
    }
}
