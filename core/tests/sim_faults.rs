//! The fault driver of `core::sim` (`sim::faults`): faults and ops as data, the driver
//! that plays them and checks after every step, `heal`, and the readable trace.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::job::{JobSpec, RawJob};
use formica_core::sim::faults::{heal, render_trace, run_ops};
use formica_core::sim::{App, Fault, Op, TaskPlan, World, WorldConfig};
use formica_core::worker::{Config, TaskOutcome};

fn config(n: usize) -> Config {
    Config { worker_id: format!("w{n}"), task_identifiers: vec!["email".into()], ..Config::default() }
}

/// Adds an `email` job per event; fails the check once more than `max_running` tasks run
/// at once.
struct Mailer {
    events: usize,
    max_running: usize,
}

impl Mailer {
    fn new(max_running: usize) -> Self {
        Mailer { events: 0, max_running }
    }
}

impl App<&'static str> for Mailer {
    fn on_event(&mut self, world: &mut World, event: &&'static str) {
        self.events += 1;
        let payload = serde_json::json!({ "to": event });
        world.db_mut().add_job(&RawJob::new("email", payload, JobSpec::default())).expect("valid");
    }

    fn check(&mut self, world: &World) -> Result<(), String> {
        let running: usize = (0..world.workers()).map(|w| world.running(w).count()).sum();
        if running > self.max_running {
            return Err(format!("{running} tasks run at once"));
        }
        Ok(())
    }
}

#[test]
fn ops_print_as_a_short_story() {
    let ops = vec![
        Op::Event("ada"),
        Op::Fault(Fault::Crash(1)),
        Op::Fault(Fault::JumpClock(-300)),
        Op::Fault(Fault::ListenerAvailable(0, false)),
        Op::Fault(Fault::FailQueries(2, 3)),
        Op::Wait(1500),
    ];
    assert_eq!(
        format!("{ops:?}"),
        r#"["ada", crash w1, jump -300s, listener refused w0, fail 3 queries w2, wait 1.5s]"#
    );
}

#[test]
fn the_driver_checks_after_every_step_and_names_the_op() {
    let mut world = World::new(WorldConfig::default());
    world.add_worker(config(0));
    let mut app = Mailer::new(1);
    // Two jobs on one worker of concurrency 10 run together: the check fails during the wait,
    // not only at its end (both tasks are over after a second).
    let ops = [Op::Event("ada"), Op::Event("bob"), Op::Wait(5_000)];
    let err = run_ops(&mut world, &ops, &mut app).unwrap_err();
    assert_eq!(err, "op 2 (wait 5s): 2 tasks run at once");
    assert_eq!(app.events, 2);
}

#[test]
fn faults_act_on_the_world_and_heal_ends_them() {
    let mut world = World::new(WorldConfig::default());
    for n in 0..3 {
        world.add_worker(config(n));
    }
    world.run_for(Duration::seconds(1));
    assert!(world.listening(0));
    let before = world.now();
    let ops = [
        Op::Fault(Fault::Crash(1)),
        Op::Fault(Fault::ListenerAvailable(0, false)),
        Op::Fault(Fault::DropListener(0)),
        Op::Fault(Fault::FailQueries(2, 1000)),
        Op::Fault(Fault::JumpClock(-60)),
        Op::Wait(10_000),
    ];
    run_ops(&mut world, &ops, &mut Mailer::new(1)).unwrap();
    assert!(world.is_crashed(1));
    assert!(!world.listening(0), "reconnects are refused");
    assert_eq!(world.now(), before - Duration::seconds(60) + Duration::seconds(10));

    heal(&mut world);
    assert!(!world.is_crashed(1));
    assert_eq!(world.worker_id(1), "w1~1", "a restart is a new process");
    world.run_for(Duration::minutes(2));
    assert!(world.listening(0), "the listener is back");
    // Worker 2's queries work again: with the others stopped, it runs a new job.
    world.crash(0);
    world.crash(1);
    world.db_mut().add_job(&RawJob::new("email", serde_json::json!({}), JobSpec::default())).unwrap();
    world.run_for(Duration::seconds(5));
    assert_eq!(world.db().jobs().count(), 0, "worker 2 ran the job");
}

#[test]
#[should_panic(expected = "names worker 3 of 1")]
fn a_fault_on_a_worker_the_world_lacks_is_refused() {
    let mut world = World::new(WorldConfig::default());
    world.add_worker(config(0));
    Fault::Crash(3).apply(&mut world);
}

#[test]
fn the_trace_renders_one_readable_line_per_entry() {
    let mut world = World::new(WorldConfig::default());
    world.add_worker(config(0));
    world
        .db_mut()
        .add_job(&RawJob::new("email", serde_json::json!({"to": "ada"}), JobSpec::default()))
        .unwrap();
    world.run_for(Duration::seconds(2));
    world.jump_clock(Duration::seconds(-60));
    world.crash(0);
    let text = render_trace(world.trace());
    assert_eq!(text.lines().count(), world.trace().len());
    let first = text.lines().next().unwrap();
    assert_eq!(first, "+     0.000s 00:00:00.000 w0 started as w0");
    for expected in [
        r#"w0 -> start job 1 email (attempt 1/25) {"to":"ada"}"#,
        "w0 <- task of job 1 ended: ok",
        "w0 -> query 3: ReadCancels",
        "w0 -> query 5: complete jobs [1]",
        "w0 <- query 5: Done",
        "w0 lease: heartbeat Done",
        "w0 <- heartbeat landed",
        "CLOCK JUMPED -60s",
        "w0 CRASHED",
    ] {
        assert!(text.contains(expected), "{expected:?} missing from\n{text}");
    }
}

#[cfg(feature = "proptest")]
mod strategies {
    use super::*;
    use formica_core::cron::parse;
    use formica_core::sim::strategies::{crontab, fault, job_spec, ops, task_identifier, Faults};
    use formica_core::sim::Db;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn job_specs_pass_validation_and_the_schema_checks(
            task in task_identifier(),
            spec in job_spec(WorldConfig::default().start),
        ) {
            prop_assert_eq!(spec.validate(&task), Ok(()));
            let mut db = Db::new(WorldConfig::default().start, 0);
            let job = db.add_job(&RawJob::new(task.clone(), serde_json::json!({}), spec.clone()));
            prop_assert!(job.is_ok(), "{:?}", job);
        }

        #[test]
        fn crontab_items_print_as_lines_that_parse_back(
            items in crontab(vec!["report".into(), "sync:all".into()], 1..4),
        ) {
            let text: String = items.iter().map(|i| format!("{i}\n")).collect();
            let parsed = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
            prop_assert_eq!(parsed.items(), &items[..]);
        }

        #[test]
        fn faults_stay_within_their_limits(
            fault in fault(&Faults { workers: 3, may_crash: 1..3, max_jump_forward: 60, max_jump_back: 30, max_failed_queries: 2, max_stall_ms: 20_000 }),
        ) {
            match fault {
                Fault::Crash(w) | Fault::Restart(w) => prop_assert!((1..3).contains(&w)),
                Fault::JumpClock(s) => prop_assert!((-30..=60).contains(&s)),
                Fault::DropListener(w) | Fault::ListenerAvailable(w, _) => prop_assert!(w < 3),
                Fault::FailQueries(w, n) | Fault::LoseAnswers(w, n) => prop_assert!(w < 3 && (1..=2).contains(&n)),
                Fault::StallLoop(w, ms) => prop_assert!(w < 3 && (1..=20_000).contains(&ms)),
            }
        }

        /// Whatever the faults did, a healed world runs what is added afterwards.
        #[test]
        fn after_any_schedule_a_healed_world_runs_new_jobs(
            seed in any::<u64>(),
            ops in ops(prop::sample::select(vec!["ada", "bob"]), &Faults::on(3), 0..20),
        ) {
            let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
            for n in 0..3 {
                world.add_worker(Config { concurrency: 1, ..config(n) });
            }
            // Three workers of concurrency 1 run three tasks at most.
            run_ops(&mut world, &ops, &mut Mailer::new(3)).map_err(TestCaseError::fail)?;
            heal(&mut world);
            prop_assert!((0..3).all(|w| !world.is_crashed(w)));
            let fresh = world.db_mut().add_job(&RawJob::new("email", serde_json::json!({"to": "new"}), JobSpec::default())).unwrap();
            world.run_for(Duration::minutes(1));
            prop_assert!(world.db().job(fresh.id).is_none(), "job {} still waits", fresh.id);
        }
    }
}

/// A task that completed its job in its own transaction (`TaskOutcome::Committed`): the
/// simulated database holds the completion when the machine hears of the end, as the
/// driver's does, and the worker stops cleanly with nothing left to write.
#[test]
fn a_job_committed_by_its_task_is_gone_when_the_machine_hears_of_it() {
    let mut world = World::new(WorldConfig::default());
    world.set_script(|_, _| TaskPlan::finish(Duration::seconds(1), TaskOutcome::Committed));
    let config = Config { worker_id: "w".into(), task_identifiers: vec!["pay".into()], ..Config::default() };
    let w = world.add_worker(config);
    world.db_mut().add_job(&RawJob::new("pay", serde_json::json!({}), JobSpec::default())).unwrap();
    world.run_for(Duration::seconds(3));
    assert_eq!(world.db().jobs().count(), 0, "the task's own transaction completed it");
    world.shutdown(w, true);
    assert!(world.run_until_stopped(Duration::minutes(1)));
}
