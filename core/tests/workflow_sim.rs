//! Workflows in `core::sim`, with racing workers, random task outcomes, crashes, restarts,
//! lost answers and clock jumps.
//!
//! Three workers run the jobs of random workflows (random DAGs, diamonds, wide
//! fan-out/fan-in, mixed policies, callbacks of both kinds); tasks succeed or fail at
//! random, with one to three attempts. Meanwhile jobs are completed or failed for good
//! outside Formica (graphile-worker's `complete_jobs` and `permanently_fail_jobs`, as
//! graphile-worker's own workers would: the resolver's pass settles them), workflows are
//! cancelled and retried. After every step, judged from the jobs table and the log of jobs
//! added for workflow jobs (not from the rules' own bookkeeping):
//!
//! - a job's handler starts only once the job was released;
//! - a workflow job is released at most once, plus once per retry that runs it again or
//!   brings it back to waiting; nothing is released after its workflow was cancelled;
//! - a job is released only when what it depends on allows it: all completed, or all
//!   settled (policy release, `all_finished` callback), or one failed or cancelled
//!   (`first_failure` callback);
//! - a callback's payload counts what its dependencies' jobs did.
//!
//! Once the faults end and the workers' resolvers have run, every workflow is terminal and every job's
//! state is what the rules give for the outcomes that happened
//! ([`Checker::check_quiescent`]).

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Duration;
use formica_core::job::{Job, JobSpec, RawJob};
use formica_core::sim::faults::{heal, run_checked, run_ops, App};
use formica_core::sim::strategies::{ops, workflow_nodes, Faults};
use formica_core::sim::{Db, Traced, WorkflowJob, World, WorldConfig};
use formica_core::sim::{SimWorkflow, TaskPlan};
use formica_core::worker::{Config, Effect, QueryResult, Retention, Statement, TaskOutcome};
use formica_core::workflow::{Callback, JobState, Node, OnDependencyFailure, WorkflowState};
use proptest::prelude::*;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

const TASK: &str = "step";

fn config(n: usize) -> Config {
    Config {
        worker_id: format!("w{n}"),
        task_identifiers: vec![TASK.into()],
        concurrency: 3,
        // Each worker's own resolver settles what was done outside Formica.
        resolve_workflows: Some(Duration::seconds(2)),
        ..Config::default()
    }
}

fn world(seed: u64) -> World {
    let mut world = World::new(WorldConfig { seed, ..WorldConfig::default() });
    // One attempt in four fails; tasks take 10 ms to 2 s.
    world.set_script(|_, rng| {
        let outcome = if rng.unit() < 0.25 { TaskOutcome::Err("boom".into()) } else { TaskOutcome::Ok };
        TaskPlan::finish(Duration::milliseconds(rng.between(10, 2_000)), outcome)
    });
    for n in 0..3 {
        world.add_worker(config(n));
    }
    world
}

/// The jobs of a workflow of `nodes`: one to three attempts each, callbacks with an object
/// payload.
fn workflow_jobs(nodes: &[Node]) -> Vec<WorkflowJob> {
    nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let spec = JobSpec::builder().max_attempts(1 + (i * 7 % 3) as i16).build();
            WorkflowJob { node: node.clone(), job: RawJob::new(TASK, json!({ "job": node.name }), spec) }
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Event {
    Add(Vec<Node>),
    /// The `n`th job waiting to run completed outside Formica (as graphile-worker's workers
    /// and its `complete_jobs` do).
    CompleteOutside(usize),
    /// The `n`th job waiting to run failed for good outside Formica (`permanently_fail_jobs`).
    FailOutside(usize),
    Resolve,
    Cancel(usize),
    Retry(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => workflow_nodes(1..12).prop_map(Event::Add),
        2 => any::<usize>().prop_map(Event::CompleteOutside),
        1 => any::<usize>().prop_map(Event::FailOutside),
        3 => Just(Event::Resolve),
        1 => any::<usize>().prop_map(Event::Cancel),
        1 => any::<usize>().prop_map(Event::Retry),
    ]
}

/// What a workflow job's job did, read from the jobs table: gone is completed, no attempt
/// left and not running is failed (cancelled if its last error says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Unfinished,
    Completed,
    Failed,
    Cancelled,
}

fn seen_in(db: &Db, job_id: i64) -> Seen {
    match db.job(job_id) {
        None => Seen::Completed,
        Some(Job { attempts, max_attempts, locked_at: None, last_error, .. }) if attempts >= max_attempts => {
            if last_error.as_deref().is_some_and(|e| e.starts_with("cancelled: ")) {
                Seen::Cancelled
            } else {
                Seen::Failed
            }
        }
        Some(_) => Seen::Unfinished,
    }
}

/// The independent view of the workflows: every job added for a workflow job, read off
/// [`Db::releases`] as they come, and what each did, read off the jobs table.
#[derive(Default)]
struct Checker {
    /// Releases and trace lines already checked.
    releases: usize,
    trace: usize,
    /// The latest job of each workflow job, and the workflow job of every job ever added.
    latest: BTreeMap<(i64, usize), i64>,
    of_job: BTreeMap<i64, (i64, usize)>,
    /// How often each workflow job was released, and how often it may be.
    released: BTreeMap<(i64, usize), usize>,
    allowed: BTreeMap<(i64, usize), usize>,
    /// Releases made by a retry's reruns (their dependencies were judged the first time).
    reruns: BTreeSet<usize>,
    /// The workflows cancelled, with the number of releases then.
    cancelled: BTreeMap<i64, usize>,
}

impl Checker {
    /// What dependency `d` of `workflow` did: its latest job's fate, or, never released,
    /// cancelled or not yet.
    fn seen(&self, db: &Db, workflow: &SimWorkflow, d: usize) -> Seen {
        match self.latest.get(&(workflow.id(), d)) {
            Some(&job_id) => seen_in(db, job_id),
            None if workflow.state(d) == JobState::Cancelled => Seen::Cancelled,
            None => Seen::Unfinished,
        }
    }

    fn check_release(&mut self, db: &Db, n: usize) -> Result<(), String> {
        let release = db.releases()[n].clone();
        let key = (release.workflow, release.job);
        let count = self.released.entry(key).or_default();
        *count += 1;
        let allowed = 1 + self.allowed.get(&key).copied().unwrap_or_default();
        if *count > allowed {
            return Err(format!("workflow job {key:?} released {count} times, {allowed} allowed"));
        }
        self.latest.insert(key, release.job_id);
        self.of_job.insert(release.job_id, key);
        if self.cancelled.get(&release.workflow).is_some_and(|&at| n >= at) {
            return Err(format!("workflow job {key:?} released after its workflow was cancelled"));
        }
        if self.reruns.contains(&n) {
            return Ok(());
        }
        let workflow = db.workflow(release.workflow).ok_or("a release of no workflow")?;
        let node = &workflow.graph().nodes()[release.job];
        let deps: Vec<Seen> =
            workflow.graph().dependencies(release.job).iter().map(|&d| self.seen(db, workflow, d)).collect();
        let all = |s: Seen| deps.iter().all(|&d| d == s);
        let settled = deps.iter().all(|&d| d != Seen::Unfinished);
        let a_failure = deps.iter().any(|&d| matches!(d, Seen::Failed | Seen::Cancelled));
        let allows = match (node.callback, node.on_dependency_failure) {
            (Some(Callback::FirstFailure), _) => all(Seen::Completed) || a_failure,
            (Some(Callback::AllFinished), _) | (None, OnDependencyFailure::Release) => settled,
            (None, OnDependencyFailure::Cancel) => all(Seen::Completed),
        };
        if !allows {
            return Err(format!(
                "{} of workflow {} released with its dependencies at {deps:?}",
                node.name,
                workflow.id()
            ));
        }
        if node.callback.is_some() {
            let job = db.job(release.job_id).ok_or("a callback's job vanished in its own step")?;
            let count = |key: &str| job.payload["batch"][key].as_u64().unwrap_or(u64::MAX) as usize;
            let of = |s: Seen| deps.iter().filter(|&&d| d == s).count();
            let (completed, failed, cancelled, unfinished) =
                (count("completed"), count("failed"), count("cancelled"), count("unfinished"));
            let exact = node.callback == Some(Callback::AllFinished);
            let right = completed + failed + cancelled + unfinished == deps.len()
                && if exact {
                    (completed, failed, cancelled, unfinished)
                        == (of(Seen::Completed), of(Seen::Failed), of(Seen::Cancelled), 0)
                } else {
                    completed <= of(Seen::Completed)
                        && failed <= of(Seen::Failed)
                        && cancelled <= of(Seen::Cancelled)
                };
            if !right {
                return Err(format!(
                    "callback {} counts {} for dependencies at {deps:?}",
                    node.name, job.payload["batch"]
                ));
            }
        }
        Ok(())
    }

    fn check_starts(&mut self, world: &World) -> Result<(), String> {
        for entry in &world.trace()[self.trace..] {
            if let Traced::Effect(Effect::StartTask { job }) = &entry.what {
                if !self.of_job.contains_key(&job.id) {
                    return Err(format!("job {} ({}) started but was never released", job.id, job.payload));
                }
            }
        }
        self.trace = world.trace().len();
        Ok(())
    }

    /// Once nothing runs: every workflow is terminal; a job released ended as its job did;
    /// one never released is cancelled, and the rules agree that it had to be (its workflow
    /// was cancelled, or, policy cancel, a dependency did not complete).
    fn check_quiescent(&self, db: &Db) -> Result<(), String> {
        for workflow in db.workflows() {
            let id = workflow.id();
            if workflow.workflow_state() == WorkflowState::Running {
                return Err(format!("workflow {id} is still running: {:?}", workflow.progress()));
            }
            for (i, node) in workflow.graph().nodes().iter().enumerate() {
                let state = workflow.state(i);
                let expected = match self.latest.get(&(id, i)) {
                    Some(&job_id) => match seen_in(db, job_id) {
                        Seen::Completed => JobState::Completed,
                        Seen::Failed => JobState::Failed,
                        Seen::Cancelled => JobState::Cancelled,
                        Seen::Unfinished => {
                            return Err(format!("{} of workflow {id}: its job {job_id} is left", node.name))
                        }
                    },
                    None => {
                        let deps: Vec<Seen> = workflow
                            .graph()
                            .dependencies(i)
                            .iter()
                            .map(|&d| self.seen(db, workflow, d))
                            .collect();
                        let must_cancel = node.callback.is_none()
                            && node.on_dependency_failure == OnDependencyFailure::Cancel
                            && deps.iter().any(|&d| d != Seen::Completed);
                        if !(must_cancel || workflow.progress().is_cancelled()) {
                            return Err(format!(
                                "{} of workflow {id} never released, dependencies at {deps:?}",
                                node.name
                            ));
                        }
                        JobState::Cancelled
                    }
                };
                if state != expected {
                    return Err(format!(
                        "{} of workflow {id} is {state:?}, its outcome says {expected:?}",
                        node.name
                    ));
                }
            }
            let expected = if workflow.progress().is_cancelled() {
                WorkflowState::Cancelled
            } else if (0..workflow.graph().len()).all(|i| workflow.state(i) == JobState::Completed) {
                WorkflowState::Completed
            } else {
                WorkflowState::Failed
            };
            if workflow.workflow_state() != expected {
                return Err(format!(
                    "workflow {id} is {:?}, its jobs say {expected:?}",
                    workflow.workflow_state()
                ));
            }
        }
        Ok(())
    }
}

impl App<Event> for Checker {
    fn on_event(&mut self, world: &mut World, event: &Event) {
        let unlocked = |world: &World, n: usize| {
            let runnable = |j: &&Job| j.locked_at.is_none() && j.attempts < j.max_attempts;
            let ids: Vec<i64> = world.db().jobs().filter(runnable).map(|j| j.id).collect();
            (!ids.is_empty()).then(|| ids[n % ids.len()])
        };
        match event {
            Event::Add(nodes) => {
                let name = format!("wf{}", world.db().workflows().count());
                world.add_workflow(&name, workflow_jobs(nodes)).expect("a valid workflow");
            }
            Event::CompleteOutside(n) => {
                if let Some(id) = unlocked(world, *n) {
                    world.db_mut().complete_jobs(&[id]);
                }
            }
            Event::FailOutside(n) => {
                if let Some(id) = unlocked(world, *n) {
                    world.db_mut().permanently_fail_jobs(&[id], None);
                }
            }
            Event::Resolve => _ = world.resolve_workflows(),
            Event::Cancel(n) | Event::Retry(n) => {
                let ids: Vec<i64> = world.db().workflows().map(SimWorkflow::id).collect();
                let Some(&id) = ids.get(n % ids.len().max(1)) else { return };
                if matches!(event, Event::Cancel(_)) {
                    if world.db_mut().cancel_workflow(id, "test") {
                        // Releases logged so far were made before the cancel.
                        self.cancelled.insert(id, world.db().releases().len());
                    }
                } else {
                    let before = world.db().releases().len();
                    if let Ok((rerun, back)) = world.db_mut().retry_workflow(id) {
                        for i in rerun.iter().chain(&back) {
                            *self.allowed.entry((id, *i)).or_default() += 1;
                        }
                        self.reruns.extend(before..world.db().releases().len());
                    }
                }
            }
        }
    }

    fn check(&mut self, world: &World) -> Result<(), String> {
        let db = world.db();
        while self.releases < db.releases().len() {
            self.check_release(db, self.releases)?;
            self.releases += 1;
        }
        self.check_starts(world)
    }
}

/// After the faults: let the healed world run, its workers' resolvers passing every two
/// seconds, until every workflow job has settled and no job is left to run (or two simulated
/// hours pass).
fn quiesce(world: &mut World, checker: &mut Checker) -> Result<(), String> {
    heal(world);
    for _ in 0..3600 {
        run_checked(world, Duration::seconds(2), |w| checker.check(w))?;
        // Not only "not running": a cancelled workflow's released job whose run ended is
        // settled by the next resolver pass, which may not have come yet.
        let running = world.db().workflows().any(|w| !w.is_finished());
        let runnable = world.db().jobs().any(|j| j.attempts < j.max_attempts || j.locked_at.is_some());
        if !running && !runnable {
            return checker.check_quiescent(world.db());
        }
    }
    Err("the workflows did not settle in two simulated hours".into())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn workflows_release_each_job_once_when_its_dependencies_allow_and_end_as_the_rules_say(
        seed in any::<u64>(),
        ops in ops(event(), &Faults::on(3), 1..40),
    ) {
        let mut world = world(seed);
        let mut checker = Checker::default();
        run_ops(&mut world, &ops, &mut checker).map_err(TestCaseError::fail)?;
        quiesce(&mut world, &mut checker).map_err(TestCaseError::fail)?;
    }
}

/// A diamond and a 40-wide fan-out/fan-in, every task succeeding: the last jobs run once,
/// after all they depend on, and both workflows complete.
#[test]
fn a_diamond_and_a_fan_in_complete_with_their_last_jobs_run_once() {
    let mut world = world(7);
    world
        .set_script(|_, rng| TaskPlan::finish(Duration::milliseconds(rng.between(10, 500)), TaskOutcome::Ok));
    let mut checker = Checker::default();
    let diamond = vec![
        Node::new("a", Vec::<String>::new()),
        Node::new("b", ["a"]),
        Node::new("c", ["a"]),
        Node::new("d", ["b", "c"]),
    ];
    let mut fan = vec![Node::new("split", Vec::<String>::new())];
    fan.extend((0..40).map(|i| Node::new(format!("page{i}"), ["split"])));
    fan.push(Node::new("stitch", (0..40).map(|i| format!("page{i}"))));
    for nodes in [&diamond, &fan] {
        checker.on_event(&mut world, &Event::Add(nodes.clone()));
    }
    quiesce(&mut world, &mut checker).unwrap();
    for workflow in world.db().workflows() {
        assert_eq!(workflow.workflow_state(), WorkflowState::Completed, "{}", workflow.name());
    }
    let last =
        |name: &str| world.db().workflows().find_map(|w| w.graph().index(name).map(|i| (w.id(), i))).unwrap();
    for name in ["d", "stitch"] {
        let starts = world
            .trace()
            .iter()
            .filter(|e| matches!(&e.what, Traced::Effect(Effect::StartTask { job }) if checker.of_job.get(&job.id) == Some(&last(name))))
            .count();
        assert_eq!(starts, 1, "{name} ran once");
    }
}

/// A batch whose job `a` fails for good while `b` still runs, retried then: `a` runs again,
/// and the callback waits for both again (it is released once, when `b` completes, counting
/// two completions), not when `a`'s second run ends.
#[test]
fn a_retry_while_a_batch_runs_makes_the_callback_wait_for_the_rerun_job_and_the_rest() {
    let mut world = world(3);
    let mut runs_of_a = 0;
    world.set_script(move |job, _| match job.payload["job"].as_str() {
        Some("a") => {
            runs_of_a += 1;
            let outcome = if runs_of_a == 1 { TaskOutcome::Err("boom".into()) } else { TaskOutcome::Ok };
            TaskPlan::finish(Duration::seconds(1), outcome)
        }
        Some("b") => TaskPlan::finish(Duration::seconds(60), TaskOutcome::Ok),
        _ => TaskPlan::finish(Duration::seconds(1), TaskOutcome::Ok),
    });
    let mut checker = Checker::default();
    let job =
        |name: &str| RawJob::new(TASK, json!({ "job": name }), JobSpec::builder().max_attempts(1).build());
    let none = Vec::<String>::new();
    let batch = vec![
        WorkflowJob::new("a", none.clone(), job("a")),
        WorkflowJob::new("b", none, job("b")),
        WorkflowJob::new("done", ["a", "b"], job("done")).callback(Callback::AllFinished),
    ];
    let (id, _) = world.add_workflow("batch", batch).unwrap();
    run_checked(&mut world, Duration::seconds(5), |w| checker.check(w)).unwrap();
    assert_eq!(world.db().workflow(id).unwrap().state(0), JobState::Failed);
    checker.on_event(&mut world, &Event::Retry(0));
    assert_eq!(world.db().workflow(id).unwrap().state(0), JobState::Released, "a runs again");
    run_checked(&mut world, Duration::seconds(10), |w| checker.check(w)).unwrap();
    assert_eq!(world.db().workflow(id).unwrap().state(2), JobState::Waiting, "b still runs");
    quiesce(&mut world, &mut checker).unwrap();
    let workflow = world.db().workflow(id).unwrap();
    assert_eq!(workflow.workflow_state(), WorkflowState::Completed);
    let callback = world.db().releases().iter().filter(|r| r.workflow == id && r.job == 2).count();
    assert_eq!(callback, 1, "the callback was released once");
}

/// A workflow the rules refuse (a cycle, a dependency outside the set, no jobs, a job key, a
/// callback whose payload cannot take the counts) is refused with the rule's sentence, and
/// nothing of it is added.
#[test]
fn a_refused_workflow_adds_nothing_and_says_why() {
    let mut world = world(1);
    let job = |name: &str| RawJob::new(TASK, json!({ "job": name }), JobSpec::default());
    let none = Vec::<String>::new();
    let cases = [
        (vec![WorkflowJob::new("a", ["b"], job("a")), WorkflowJob::new("b", ["a"], job("b"))], "cycle"),
        (
            vec![WorkflowJob::new("a", none.clone(), job("a")), WorkflowJob::new("b", ["z"], job("b"))],
            "\"z\"",
        ),
        (vec![], "at least one job"),
        (
            vec![WorkflowJob::new(
                "a",
                none.clone(),
                RawJob::new(TASK, json!({}), JobSpec::builder().job_key("k").build()),
            )],
            "job key",
        ),
        (
            vec![
                WorkflowJob::new("a", none.clone(), job("a")),
                WorkflowJob::new("done", ["a"], RawJob::new(TASK, json!({ "batch": 1 }), JobSpec::default()))
                    .callback(Callback::AllFinished),
            ],
            "without a key \"batch\"",
        ),
    ];
    for (jobs, says) in cases {
        let error = world.add_workflow("refused", jobs).unwrap_err();
        assert!(error.message.contains(says), "{:?} should say {says}", error.message);
        assert_eq!(world.db().jobs().count(), 0);
        assert_eq!(world.db().workflows().count(), 0);
    }
}

/// `cancel_workflow` mid-run: what waits is cancelled, what runs is aborted and fails as
/// cancelled, what is queued fails at once; nothing is released after, callbacks included,
/// and nothing is left running or waiting.
#[test]
fn cancel_mid_run_leaves_nothing_running_or_waiting() {
    let mut world = world(5);
    world.set_script(|job, _| match job.payload["job"].as_str() {
        Some("slow") => TaskPlan::Hang,
        _ => TaskPlan::finish(Duration::seconds(1), TaskOutcome::Ok),
    });
    let mut checker = Checker::default();
    let job = |name: &str| RawJob::new(TASK, json!({ "job": name }), JobSpec::default());
    let later = JobSpec::builder().run_at(world.now() + Duration::hours(1)).build();
    let none = Vec::<String>::new();
    let jobs = vec![
        WorkflowJob::new("slow", none.clone(), job("slow")),
        WorkflowJob::new("queued", none, RawJob::new(TASK, json!({ "job": "queued" }), later)),
        WorkflowJob::new("after", ["slow"], job("after")),
        WorkflowJob::new("done", ["slow", "queued"], job("done")).callback(Callback::AllFinished),
    ];
    let (id, released) = world.add_workflow("cancelled", jobs).unwrap();
    assert_eq!(released.len(), 2);
    run_checked(&mut world, Duration::seconds(2), |w| checker.check(w)).unwrap();
    assert!(world.db_mut().cancel_workflow(id, "operator"));
    checker.cancelled.insert(id, world.db().releases().len());
    quiesce(&mut world, &mut checker).unwrap();
    let workflow = world.db().workflow(id).unwrap();
    assert_eq!(workflow.workflow_state(), WorkflowState::Cancelled);
    assert!((0..4).all(|i| workflow.state(i) == JobState::Cancelled), "{:?}", workflow.progress());
    assert_eq!(world.db().releases().len(), 2, "nothing released after the cancel");
    assert!(world.db().jobs().all(|j| j.last_error.as_deref() == Some("cancelled: operator")));
}

/// The history's pruner removes a finished workflow once its last job settled longer ago
/// than the retention of its state, keeps it before, and never removes an unfinished one
/// (records migration 22's `prune_workflows`).
#[test]
fn the_pruner_removes_a_finished_workflow_past_its_retention_and_never_an_unfinished_one() {
    let start = chrono::DateTime::parse_from_rfc3339("2026-12-01T00:00:00Z").unwrap().to_utc();
    let mut db = Db::new(start, 1);
    let nodes = vec![Node::new("a", Vec::<String>::new()), Node::new("b", ["a"])];
    let (done, released) = db.add_workflow("done", workflow_jobs(&nodes)).unwrap();
    let (running, _) = db.add_workflow("running", workflow_jobs(&nodes)).unwrap();
    db.complete_jobs(&[released[0].1]);
    db.resolve_workflows();
    assert_eq!(db.workflow(done).unwrap().finished_at(), None, "b is released");
    let b = db.workflow(done).unwrap().job_id(1).unwrap();
    db.set_now(start + Duration::hours(1));
    db.complete_jobs(&[b]);
    db.resolve_workflows();
    assert_eq!(db.workflow(done).unwrap().finished_at(), Some(start + Duration::hours(1)));
    let retention =
        Retention { completed: Some(Duration::days(7)), failed: Some(Duration::days(30)), cancelled: None };
    let prune = |db: &mut Db, days: i64| {
        let at = Some(start + Duration::hours(1) + Duration::days(days));
        match db.execute(&Statement::PruneHistory { retention, at }) {
            QueryResult::Pruned { deleted, .. } => deleted,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(prune(&mut db, 6), 0);
    assert!(db.workflow(done).is_some(), "completed 6 days ago: kept 7");
    assert_eq!(prune(&mut db, 8), 1);
    assert!(db.workflow(done).is_none(), "8 days: removed");
    assert_eq!(prune(&mut db, 3650), 0);
    assert!(db.workflow(running).is_some(), "a job waits: kept whatever its age");
}

/// Records step 23 in the simulation: a signal releases its job in its statement (sent again
/// or to no workflow, it says so), a timeout passes by the simulated clock and a worker's
/// resolver releases or cancels its job, a timer makes the released job due its delay later;
/// each job gets its signal in its payload and runs once.
#[test]
fn signals_timeouts_and_timers_release_as_the_rules_say_by_the_simulated_clock() {
    use formica_core::workflow::{OnSignalTimeout, SignalWait, Signalled};
    use std::cell::RefCell;
    use std::rc::Rc;
    let mut world = world(11);
    let ran: Rc<RefCell<Vec<(String, serde_json::Value)>>> = Rc::default();
    let seen = ran.clone();
    world.set_script(move |job, rng| {
        seen.borrow_mut()
            .push((job.payload["job"].as_str().unwrap_or("").to_owned(), job.payload.clone().into()));
        TaskPlan::finish(Duration::milliseconds(rng.between(10, 200)), TaskOutcome::Ok)
    });
    let seconds = std::time::Duration::from_secs;
    let never = |s, on| SignalWait::new("never").timeout(seconds(s), on);
    let nodes = vec![
        Node::new("a", Vec::<String>::new()),
        Node::new("b", ["a"]).signal(SignalWait::new("go")),
        Node::new("late", ["a"]).signal(never(60, OnSignalTimeout::Release)),
        Node::new("gives_up", ["a"]).signal(never(30, OnSignalTimeout::Cancel)),
        Node::new("after", ["gives_up"]),
        Node::new("timer", ["b"]).delay(seconds(600)),
    ];
    let (id, released) = world.add_workflow("signals", workflow_jobs(&nodes)).unwrap();
    assert_eq!(released.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a"]);
    let a_done = world
        .run_until(Duration::seconds(10), |w| w.db().workflow(id).unwrap().state(0) == JobState::Completed);
    assert!(a_done, "a ran");
    let w = world.db().workflow(id).unwrap();
    assert!(w.signal_deadline(3).is_some() && w.signal_deadline(1).is_none(), "only a timeout runs");
    assert_eq!(
        world.signal_workflow(id, "go", json!({ "k": 1 })),
        Some(Signalled::Received { jobs: vec![1], released: vec![1] })
    );
    assert_eq!(world.signal_workflow(id, "go", json!({})), Some(Signalled::Duplicate));
    assert_eq!(world.signal_workflow(id, "nobody", json!({})), Some(Signalled::NotWaiting));
    assert_eq!(world.signal_workflow(id + 1, "go", json!({})), None);
    world.run_for(Duration::seconds(90));
    let w = world.db().workflow(id).unwrap();
    let states: Vec<JobState> = (0..6).map(|i| w.state(i)).collect();
    use JobState::{Cancelled as C, Completed as Done, Released as R};
    assert_eq!(states, [Done, Done, Done, C, C, R], "the timer's job is not due yet");
    let timer = world.db().releases().iter().find(|r| r.workflow == id && r.job == 5).unwrap();
    let due = world.db().job(timer.job_id).unwrap().run_at;
    assert_eq!(due, timer.at + Duration::seconds(600), "due its delay after its release");
    world.run_for(Duration::minutes(11));
    assert_eq!(
        world.db().workflow(id).unwrap().workflow_state(),
        WorkflowState::Failed,
        "gives_up was cancelled"
    );
    let ran = ran.borrow();
    let names: Vec<&str> = ran.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.iter().filter(|n| **n == "timer").count(), 1, "{names:?}");
    assert!(!names.contains(&"gives_up") && !names.contains(&"after"), "{names:?}");
    let payload = |name: &str| ran.iter().find(|(n, _)| n == name).map(|(_, p)| p["signal"].clone()).unwrap();
    assert_eq!(payload("b"), json!({ "name": "go", "payload": { "k": 1 }, "timed_out": false }));
    assert_eq!(payload("late"), json!({ "name": "never", "payload": null, "timed_out": true }));
}
