//! Runtime schedules in `core::sim` (core/src/cron/runtime.rs): schedules put and removed
//! while three workers run, in Paris time across a daylight-saving transition and as
//! intervals. Whatever the faults (crashes, restarts, refused statements, lost listeners,
//! clock jumps), no slot is scheduled twice; without faults, every slot of a schedule from a
//! moment after it was put until it was removed is scheduled, and none after.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::{DateTime, Duration, Utc};
use formica_core::cron::{parse, CronItem};
use formica_core::sim::faults::run_ops;
use formica_core::sim::strategies::{fault, Faults};
use formica_core::sim::{App, Op, World, WorldConfig};
use formica_core::worker::Config;
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Each schedule runs its own task (named as its identifier).
const SCHEDULES: &str = "@every 7s every7\n@every 1m every60\n*/5 * * * * paris5 ?tz=Europe/Paris\n\
                         * 2 * * * paris_two ?tz=Europe/Paris\n30 2 * * * paris_daily ?tz=Europe/Paris";

/// How long a running worker may take to hear of a change: the notification, or the poll.
const HEARING: Duration = Duration::seconds(3);

fn schedules() -> Vec<CronItem> {
    parse(SCHEDULES).unwrap().into_items()
}

#[derive(Debug, Clone)]
enum Change {
    Put(usize),
    Remove(usize),
}

/// When a schedule existed: from a put to its removal (`None`: it still exists).
type Span = (DateTime<Utc>, Option<DateTime<Utc>>);

/// Applies the changes, recording when each schedule existed (the world's clock).
#[derive(Default)]
struct Schedules {
    /// Identifier -> the spans it existed, the last one open while it exists.
    spans: BTreeMap<String, Vec<Span>>,
}

impl App<Change> for Schedules {
    fn on_event(&mut self, world: &mut World, change: &Change) {
        let now = world.now();
        match change {
            Change::Put(i) => {
                let item = &schedules()[*i];
                world.db_mut().put_schedule(item);
                let spans = self.spans.entry(item.identifier().to_owned()).or_default();
                if spans.last().is_none_or(|(_, end)| end.is_some()) {
                    spans.push((now, None));
                }
            }
            Change::Remove(i) => {
                let id = schedules()[*i].identifier().to_owned();
                world.db_mut().remove_schedule(&id);
                if let Some((_, end @ None)) = self.spans.entry(id).or_default().last_mut() {
                    *end = Some(now);
                }
            }
        }
    }

    fn check(&mut self, _: &World) -> Result<(), String> {
        Ok(())
    }
}

fn config(n: usize) -> Config {
    Config {
        worker_id: format!("w{n}"),
        task_identifiers: vec!["other".into()],
        runtime_schedules: Some(Duration::seconds(2)),
        ..Config::default()
    }
}

fn change() -> impl Strategy<Value = Change> {
    let n = schedules().len();
    prop_oneof![2 => (0..n).prop_map(Change::Put), 1 => (0..n).prop_map(Change::Remove)]
}

/// A world of three workers starting `before` minutes before a Paris transition.
fn world(seed: u64, autumn: bool, before: i64) -> World {
    let transition = if autumn { "2024-10-27T01:00:00Z" } else { "2024-03-31T01:00:00Z" };
    let start = transition.parse::<DateTime<Utc>>().unwrap() - Duration::minutes(before);
    let mut world = World::new(WorldConfig { seed, start, ..WorldConfig::default() });
    for n in 0..3 {
        world.add_worker(config(n));
    }
    world
}

/// How many jobs each (task, run_at) got.
fn scheduled(world: &World) -> BTreeMap<(String, DateTime<Utc>), usize> {
    let mut counts = BTreeMap::new();
    for job in world.db().jobs() {
        *counts.entry((job.task_identifier.clone(), job.run_at)).or_default() += 1;
    }
    counts
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn no_slot_is_scheduled_twice_whatever_the_faults(
        seed in any::<u64>(),
        autumn in any::<bool>(),
        before in 1i64..60,
        ops in proptest::collection::vec(prop_oneof![
            3 => change().prop_map(Op::Event),
            3 => (1_000..120_000u32).prop_map(Op::Wait),
            2 => fault(&Faults { may_crash: 1..3, max_jump_forward: 300, max_jump_back: 300, ..Faults::on(3) })
                .prop_map(Op::Fault),
        ], 1..20),
    ) {
        let mut world = world(seed, autumn, before);
        run_ops(&mut world, &ops, &mut Schedules::default()).map_err(TestCaseError::fail)?;
        world.run_for(Duration::seconds(5));
        for ((task, at), n) in scheduled(&world) {
            prop_assert_eq!(n, 1, "{} at {} scheduled {} times", task, at, n);
        }
    }

    #[test]
    fn each_slot_while_a_schedule_exists_is_scheduled_once_and_none_after(
        seed in any::<u64>(),
        autumn in any::<bool>(),
        before in 1i64..60,
        ops in proptest::collection::vec(prop_oneof![
            1 => change().prop_map(Op::Event),
            1 => (1_000..300_000u32).prop_map(Op::Wait),
        ], 1..16),
    ) {
        let mut world = world(seed, autumn, before);
        let mut app = Schedules::default();
        run_ops(&mut world, &ops, &mut app).map_err(TestCaseError::fail)?;
        let end = world.now();
        world.run_for(Duration::seconds(5));
        let counts = scheduled(&world);
        for item in schedules() {
            let spans = app.spans.get(item.identifier()).cloned().unwrap_or_default();
            let existed = |at: DateTime<Utc>, margin: Duration| {
                spans.iter().any(|(from, to)| at >= *from + margin && to.is_none_or(|to| at < to - margin))
            };
            let mut at = world.db().jobs().map(|j| j.run_at).min().unwrap_or(end).min(end) - Duration::hours(1);
            while let Some(next) = item.next_after(at).filter(|n| *n <= end) {
                at = next;
                let n = counts.get(&(item.task().to_owned(), at)).copied().unwrap_or(0);
                if existed(at, HEARING) {
                    prop_assert_eq!(n, 1, "{} at {} while it existed ({:?})", item.identifier(), at, spans);
                } else if !existed(at, -HEARING) {
                    prop_assert_eq!(n, 0, "{} at {} when it did not exist ({:?})", item.identifier(), at, spans);
                }
            }
        }
    }
}
