//! Workflows (docs/guide/workflows.md) on real PostgreSQL: a diamond and a 200-wide
//! fan-out/fan-in run each job once, after all it depends on completed; a dependency that
//! fails for good cancels its dependents or releases them (per job); `cancel_workflow` leaves
//! nothing running or waiting; batch callbacks fire once with counts and outputs;
//! `retry_workflow`; refusals add nothing; jobs that settle outside a Formica worker are
//! settled by the resolver; and adding and settling many workflows in one transaction scans
//! no table.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::statements::{bind, Catalog};
use formica::BatchReport;
use formica::{
    Callback, Error, JobContext, JobSpec, OnDependencyFailure, OutputTaskHandler, Task, Workflow,
    WorkflowError, WorkflowJob,
};
use formica_core::worker::Statement;
use formica_tests::{Running, TestDb};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the handlers did, in order: (job name, "start" or "end").
type Log = Arc<Mutex<Vec<(String, &'static str)>>>;

const WITHIN: Duration = Duration::from_secs(30);

/// A `step` job named `name` (its payload names it, for the handlers' log).
fn step(name: &str) -> WorkflowJob {
    WorkflowJob::raw(name, "step", json!({ "name": name }))
}

/// One attempt only: a failure is for good.
fn once() -> JobSpec {
    JobSpec::builder().max_attempts(1).build()
}

/// Worker options running `step` jobs that log their start and end; a job whose payload has
/// `"fail": true` fails.
fn logging(db: &TestDb, log: &Log) -> formica::WorkerOptions {
    let log = log.clone();
    db.worker_options().define_raw_job("step", move |_ctx: JobContext, payload: Value| {
        let log = log.clone();
        async move {
            let name = payload["name"].as_str().unwrap_or_default().to_owned();
            log.lock().unwrap().push((name.clone(), "start"));
            tokio::time::sleep(Duration::from_millis(5)).await;
            log.lock().unwrap().push((name, "end"));
            if payload["fail"] == json!(true) {
                return Err("asked to fail".into());
            }
            Ok(())
        }
    })
}

/// Each job's (name, state), in the order added.
async fn states(db: &TestDb, workflow: i64) -> Vec<(String, String)> {
    let client = db.client().await;
    let rows = client
        .query(
            "select name, state from formica_graphile_worker.workflow_jobs where workflow_id = $1 order by id",
            &[&workflow],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

fn named(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, s)| (n.to_string(), s.to_string())).collect()
}

/// Wait until the workflow's state (the view) is `state`.
async fn wait_for_state(db: &TestDb, workflow: i64, state: &str) {
    let sql = format!(
        "select count(*) from formica_graphile_worker.workflow_states where id = {workflow} and state = '{state}'"
    );
    db.wait_for_count(&sql, 1, WITHIN).await;
}

/// Where `(name, what)` is in the log; panics if it is not there exactly once.
fn at(log: &Log, name: &str, what: &str) -> usize {
    let log = log.lock().unwrap();
    let found: Vec<usize> = (0..log.len()).filter(|&i| log[i].0 == name && log[i].1 == what).collect();
    assert_eq!(found.len(), 1, "{name} {what} once: {log:?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_runs_d_once_after_b_and_c_completed() {
    let db = TestDb::migrated().await;
    let log = Log::default();
    let diamond = Workflow::new("diamond")
        .job(step("a"))
        .job(step("b").depends_on(["a"]))
        .job(step("c").depends_on(["a"]))
        .job(step("d").depends_on(["b", "c"]));
    let added = db.utils().add_workflow(&diamond).await.unwrap();
    assert_eq!(added.released.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a"]);
    assert_eq!(
        db.count("select count(*) from graphile_worker._private_jobs").await,
        1,
        "b, c, d wait unseen"
    );
    let running = Running::listening(&db.runtime, logging(&db, &log)).await;
    wait_for_state(&db, added.id, "completed").await;
    running.stop(WITHIN).await;
    let d = at(&log, "d", "start");
    assert!(at(&log, "b", "end") < d && at(&log, "c", "end") < d, "{log:?}");
    assert!(at(&log, "a", "end") < at(&log, "b", "start") && at(&log, "a", "end") < at(&log, "c", "start"));
    assert_eq!(
        states(&db, added.id).await,
        named(&[("a", "completed"), ("b", "completed"), ("c", "completed"), ("d", "completed")])
    );
}

/// A Formica worker settles the workflow jobs it completes or fails in the statement that
/// ends them: with the resolver all but off, a chain still runs through, with history off and
/// on (the two forms of the statements), and a failure for good still cancels what waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_formica_worker_settles_the_workflow_jobs_it_ends_in_the_same_statement() {
    for history in [false, true] {
        let db = TestDb::migrated().await;
        let log = Log::default();
        let chain = Workflow::new("chain")
            .job(step("a"))
            .job(step("b").depends_on(["a"]))
            .job(
                WorkflowJob::raw("c", "step", json!({ "name": "c", "fail": true }))
                    .spec(once())
                    .depends_on(["b"]),
            )
            .job(step("d").depends_on(["c"]));
        let added = db.utils().add_workflow(&chain).await.unwrap();
        let flagged = "select count(*) from graphile_worker._private_jobs where flags ? 'formica:workflow'";
        assert_eq!(db.count(flagged).await, 1, "the job released carries the workflow flag");
        let mut options = logging(&db, &log).workflow_resolve_every(Duration::from_secs(3600));
        if !history {
            options = options.history(formica::HistoryOptions::off());
        }
        let running = Running::listening(&db.runtime, options).await;
        wait_for_state(&db, added.id, "failed").await;
        running.stop(WITHIN).await;
        assert_eq!(
            states(&db, added.id).await,
            named(&[("a", "completed"), ("b", "completed"), ("c", "failed"), ("d", "cancelled")]),
            "history {history}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_wide_fan_out_and_fan_in_on_4_workers_runs_the_fan_in_once_after_every_page() {
    let db = TestDb::migrated().await;
    let log = Log::default();
    let pages: Vec<String> = (0..200).map(|i| format!("page-{i}")).collect();
    let mut workflow = Workflow::new("pdf").job(step("split"));
    for page in &pages {
        workflow = workflow.job(step(page).depends_on(["split"]));
    }
    workflow = workflow.job(step("stitch").depends_on(pages.clone()));
    let added = db.utils().add_workflow(&workflow).await.unwrap();
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(Running::listening(&db.runtime, logging(&db, &log).concurrency(8)).await);
    }
    wait_for_state(&db, added.id, "completed").await;
    for worker in workers {
        worker.stop(WITHIN).await;
    }
    let stitch = at(&log, "stitch", "start");
    for page in &pages {
        assert!(at(&log, page, "end") < stitch, "{page} ended before the fan-in started");
        assert!(at(&log, "split", "end") < at(&log, page, "start"));
    }
    assert_eq!(log.lock().unwrap().len(), 2 * 202, "every job ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossed_dependencies_settled_at_once_by_4_workers_never_deadlock() {
    let db = TestDb::migrated().await;
    let log = Log::default();
    // Layers of 40 jobs, each waiting for 3 jobs of the layer before, far apart: workers
    // completing a layer in batches lock shared dependents from every side.
    let mut workflow = Workflow::new("crossed");
    for layer in 0..6 {
        for i in 0..40 {
            let job = step(&format!("{layer}-{i}"));
            workflow = workflow.job(match layer {
                0 => job,
                _ => job.depends_on([0, 13, 27].map(|k| format!("{}-{}", layer - 1, (i + k) % 40))),
            });
        }
    }
    let added = db.utils().add_workflow(&workflow).await.unwrap();
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(Running::listening(&db.runtime, logging(&db, &log).concurrency(10)).await);
    }
    wait_for_state(&db, added.id, "completed").await;
    for worker in workers {
        worker.stop(WITHIN).await;
    }
    // Backends flush their statistics within a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let deadlocks = "select deadlocks from pg_stat_database where datname = current_database()";
    assert_eq!(db.count(deadlocks).await, 0);
    assert_eq!(log.lock().unwrap().len(), 2 * 240, "every job ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_failing_for_good_cancels_its_dependents_transitively_or_releases_them_by_policy() {
    let db = TestDb::migrated().await;
    let log = Log::default();
    let workflow = Workflow::new("failing")
        .job(WorkflowJob::raw("a", "step", json!({"name": "a", "fail": true})).spec(once()))
        .job(step("b").depends_on(["a"]))
        .job(step("c").depends_on(["b"]))
        .job(step("d").depends_on(["a"]).on_dependency_failure(OnDependencyFailure::Release));
    let added = db.utils().add_workflow(&workflow).await.unwrap();
    let running = Running::listening(&db.runtime, logging(&db, &log)).await;
    wait_for_state(&db, added.id, "failed").await;
    running.stop(WITHIN).await;
    assert_eq!(
        states(&db, added.id).await,
        named(&[("a", "failed"), ("b", "cancelled"), ("c", "cancelled"), ("d", "completed")])
    );
    let ran: Vec<String> = log.lock().unwrap().iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(ran, ["a", "a", "d", "d"], "b and c never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_workflow_mid_run_leaves_nothing_running_or_waiting() {
    let db = TestDb::migrated().await;
    let started = Arc::new(AtomicBool::new(false));
    let seen = started.clone();
    let options = db.worker_options().define_raw_job("slow", move |ctx: JobContext, _| {
        let started = seen.clone();
        async move {
            started.store(true, Ordering::SeqCst);
            ctx.abort_signal().aborted().await;
            Err("aborted".into())
        }
    });
    let workflow = Workflow::new("long")
        .job(WorkflowJob::raw("a", "slow", json!({})))
        .job(
            WorkflowJob::raw("later", "slow", json!({}))
                .spec(JobSpec::builder().run_at(chrono::Utc::now() + chrono::Duration::hours(1)).build()),
        )
        .job(WorkflowJob::raw("b", "slow", json!({})).depends_on(["a"]))
        .job(
            WorkflowJob::raw("callback", "slow", json!({}))
                .depends_on(["a", "b"])
                .callback(Callback::AllFinished),
        );
    let added = db.utils().add_workflow(&workflow).await.unwrap();
    let running = Running::listening(&db.runtime, options).await;
    formica_tests::wait_until(db.runtime.as_ref(), WITHIN, "a started", || started.load(Ordering::SeqCst))
        .await;
    let cancelled = db.utils().cancel_workflow(added.id, "not needed").await.unwrap();
    assert_eq!(cancelled.waiting, 2, "b and the callback");
    assert_eq!(cancelled.released.failed.len() + cancelled.released.recorded.len(), 2, "a (running), later");
    db.wait_for_count(
        "select count(*) from formica_graphile_worker.workflow_jobs where state in ('waiting', 'released')",
        0,
        WITHIN,
    )
    .await;
    running.stop(WITHIN).await;
    assert_eq!(
        states(&db, added.id).await,
        named(&[("a", "cancelled"), ("later", "cancelled"), ("b", "cancelled"), ("callback", "cancelled")])
    );
    let live = "select count(*) from graphile_worker._private_jobs where locked_at is not null or attempts < max_attempts";
    assert_eq!(db.count(live).await, 0, "nothing runs or will run");
    wait_for_state(&db, added.id, "cancelled").await;
    let err = db.utils().retry_workflow(added.id).await.unwrap_err();
    assert!(matches!(err, Error::WorkflowCancelled(id) if id == added.id), "{err}");
}

/// A page that returns its number, or fails for good when asked to.
#[derive(Serialize, Deserialize)]
struct Page {
    n: i64,
    fail: bool,
}

impl Task for Page {
    const IDENTIFIER: &'static str = "page";
}

impl OutputTaskHandler for Page {
    type Output = i64;
    async fn run(self, _: JobContext) -> Result<i64, Box<dyn std::error::Error + Send + Sync>> {
        if self.fail {
            return Err("bad page".into());
        }
        Ok(self.n * 10)
    }
}

/// A callback's payload: what it reports on, and the batch.
#[derive(Deserialize)]
struct Report {
    batch: BatchReport,
}

/// Worker options running pages and a `report` callback that keeps each batch it gets.
fn reporting(db: &TestDb, reports: &Arc<Mutex<Vec<BatchReport>>>) -> formica::WorkerOptions {
    let reports = reports.clone();
    db.worker_options().define_job_with_output::<Page>().define_raw_job("report", move |_, payload: Value| {
        let reports = reports.clone();
        async move {
            let report: Report = serde_json::from_value(payload)?;
            reports.lock().unwrap().push(report.batch);
            Ok(())
        }
    })
}

fn page(n: i64, fail: bool) -> WorkflowJob {
    WorkflowJob::new(format!("page-{n}"), &Page { n, fail }).unwrap().spec(once())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_callback_fires_once_with_the_counts_and_the_outputs() {
    let db = TestDb::migrated().await;
    let reports = Arc::new(Mutex::new(Vec::new()));
    let jobs = (0..5).map(|n| page(n, n % 2 == 1)).collect();
    let callback = WorkflowJob::raw("report", "report", json!({"to": "ada"}));
    let added = db
        .utils()
        .add_workflow(&Workflow::batch("pages", jobs, callback, Callback::AllFinished))
        .await
        .unwrap();
    let running = Running::listening(&db.runtime, reporting(&db, &reports)).await;
    wait_for_state(&db, added.id, "failed").await;
    running.stop(WITHIN).await;
    let outputs: BTreeMap<String, Value> = [("page-0", 0), ("page-2", 20), ("page-4", 40)]
        .iter()
        .map(|(n, v)| (n.to_string(), json!(v)))
        .collect();
    let want = BatchReport { completed: 3, failed: 2, cancelled: 0, unfinished: 0, outputs };
    assert_eq!(*reports.lock().unwrap(), vec![want]);
    let payload =
        "select payload::jsonb::text from formica_graphile_worker.workflow_jobs where name = 'report'";
    let kept: String = db.client().await.query_one(payload, &[]).await.unwrap().get(0);
    assert_eq!(kept, r#"{"to": "ada"}"#, "the stored payload is the one given; the batch goes to the job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_failure_callback_fires_at_the_first_failure_and_only_once() {
    let db = TestDb::migrated().await;
    let reports = Arc::new(Mutex::new(Vec::new()));
    let later =
        JobSpec::builder().run_at(chrono::Utc::now() + chrono::Duration::seconds(3)).max_attempts(1).build();
    let jobs = vec![
        page(0, true),
        WorkflowJob::new("page-1", &Page { n: 1, fail: false }).unwrap().spec(later),
        page(2, true),
    ];
    let callback = WorkflowJob::raw("report", "report", json!({}));
    let added = db
        .utils()
        .add_workflow(&Workflow::batch("pages", jobs, callback, Callback::FirstFailure))
        .await
        .unwrap();
    let running = Running::listening(&db.runtime, reporting(&db, &reports)).await;
    let done = format!(
        "select count(*) from formica_graphile_worker.workflow_jobs where workflow_id = {} and state = 'completed' and name = 'report'",
        added.id
    );
    db.wait_for_count(&done, 1, WITHIN).await;
    wait_for_state(&db, added.id, "failed").await;
    running.stop(WITHIN).await;
    let reports = reports.lock().unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(reports[0].failed >= 1 && reports[0].unfinished >= 1, "told while page-1 waits: {reports:?}");
    assert_eq!(reports[0].completed, 0);
}

/// A `first_failure` callback that two failure waves reach is released once, as one job: its
/// dependency fails (the first wave), which cancels a dependent it also waits for (the
/// second). Before records step 33 each wave's naming of it added a graphile_worker job, so
/// the callback ran twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_failure_callback_two_failure_waves_reach_runs_once() {
    let db = TestDb::migrated().await;
    let reports = Arc::new(Mutex::new(Vec::new()));
    let workflow = Workflow::new("waves").job(page(0, true)).job(page(1, false).depends_on(["page-0"])).job(
        WorkflowJob::raw("report", "report", json!({}))
            .depends_on(["page-0", "page-1"])
            .callback(Callback::FirstFailure),
    );
    let added = db.utils().add_workflow(&workflow).await.unwrap();
    let running = Running::listening(&db.runtime, reporting(&db, &reports)).await;
    wait_for_state(&db, added.id, "failed").await;
    running.stop(WITHIN).await;
    assert_eq!(
        states(&db, added.id).await,
        named(&[("page-0", "failed"), ("page-1", "cancelled"), ("report", "completed")])
    );
    assert_eq!(reports.lock().unwrap().len(), 1, "the callback ran once");
    let left = "select count(*) from graphile_worker.jobs where task_identifier = 'report'";
    assert_eq!(db.count(left).await, 0, "no second job of the callback is left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_workflow_runs_the_failed_jobs_again_and_their_cancelled_dependents() {
    let db = TestDb::migrated().await;
    let failing = Arc::new(AtomicBool::new(true));
    let ran = Log::default();
    let (fails, log) = (failing.clone(), ran.clone());
    let options = db.worker_options().define_raw_job("flaky", move |_, payload: Value| {
        let (fails, log) = (fails.load(Ordering::SeqCst), log.clone());
        async move {
            log.lock().unwrap().push((payload["name"].as_str().unwrap().to_owned(), "start"));
            if fails && payload["name"] == "a" {
                return Err("not yet".into());
            }
            Ok(())
        }
    });
    let job = |name: &str| WorkflowJob::raw(name, "flaky", json!({ "name": name })).spec(once());
    let workflow =
        Workflow::new("flaky").job(job("a")).job(job("b").depends_on(["a"])).job(job("c").depends_on(["b"]));
    let added = db.utils().add_workflow(&workflow).await.unwrap();
    let running = Running::listening(&db.runtime, options).await;
    wait_for_state(&db, added.id, "failed").await;
    assert_eq!(
        states(&db, added.id).await,
        named(&[("a", "failed"), ("b", "cancelled"), ("c", "cancelled")])
    );
    failing.store(false, Ordering::SeqCst);
    let retried = db.utils().retry_workflow(added.id).await.unwrap();
    assert_eq!(
        (retried.rerun, retried.waiting),
        (vec!["a".to_owned()], vec!["b".to_owned(), "c".to_owned()])
    );
    wait_for_state(&db, added.id, "completed").await;
    running.stop(WITHIN).await;
    let names: Vec<String> = ran.lock().unwrap().iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names, ["a", "a", "b", "c"]);
    let attempts = "select count(*) from graphile_worker._private_jobs";
    assert_eq!(db.count(attempts).await, 0, "a's failed row was rescheduled, not added again, and ran");
}

/// How many workflows, workflow jobs and graphile_worker jobs there are.
async fn rows(db: &TestDb) -> [i64; 3] {
    [
        db.count("select count(*) from formica_graphile_worker.workflows").await,
        db.count("select count(*) from formica_graphile_worker.workflow_jobs").await,
        db.count("select count(*) from graphile_worker._private_jobs").await,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_an_outside_dependency_an_empty_workflow_and_a_keyed_job_are_refused_adding_nothing() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let refused = |result: Result<formica::AddedWorkflow, Error>| match result {
        Err(Error::Workflow(e)) => e,
        other => panic!("refused, not {other:?}"),
    };
    let cycle = Workflow::new("cycle")
        .job(step("start"))
        .job(step("x").depends_on(["start", "z"]))
        .job(step("y").depends_on(["x"]))
        .job(step("z").depends_on(["y"]));
    let e = refused(utils.add_workflow(&cycle).await);
    assert!(matches!(&e, WorkflowError::Cycle(names) if names.len() == 3), "{e}");
    for name in ["\"x\"", "\"y\"", "\"z\""] {
        assert!(e.to_string().contains(name), "the error names the cycle's jobs: {e}");
    }
    let outside = Workflow::new("outside").job(step("a")).job(step("b").depends_on(["elsewhere"]));
    let e = refused(utils.add_workflow(&outside).await);
    assert_eq!(e.to_string(), "job \"b\" depends on \"elsewhere\", which is not a job of the workflow");
    assert_eq!(refused(utils.add_workflow(&Workflow::new("empty")).await), WorkflowError::Empty);
    let keyed = Workflow::new("keyed").job(step("a").spec(JobSpec::builder().job_key("k").build()));
    assert_eq!(refused(utils.add_workflow(&keyed).await), WorkflowError::JobKey("a".into()));
    let callback = Workflow::new("cb")
        .job(step("a"))
        .job(WorkflowJob::raw("r", "report", json!([1])).depends_on(["a"]).callback(Callback::AllFinished));
    assert_eq!(refused(utils.add_workflow(&callback).await), WorkflowError::CallbackPayload("r".into()));
    assert_eq!(rows(&db).await, [0, 0, 0], "nothing added");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_settled_outside_a_formica_worker_are_settled_by_the_resolver() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let workflow = Workflow::new("outside")
        .job(step("a"))
        .job(step("b").depends_on(["a"]))
        .job(step("c").depends_on(["b"]))
        .job(step("d").depends_on(["c"]))
        .job(step("e").depends_on(["d"]));
    let added = utils.add_workflow(&workflow).await.unwrap();
    assert_eq!(utils.resolve_workflows().await.unwrap(), 0, "nothing settled yet");
    // graphile-worker's complete_jobs deletes the row: completed.
    utils.complete_jobs(&[added.released[0].1]).await.unwrap();
    assert_eq!(utils.resolve_workflows().await.unwrap(), 1);
    let job = |name: &str| {
        format!("select job_id from formica_graphile_worker.workflow_jobs where name = '{name}'")
    };
    let client = db.client().await;
    // A raw delete (remove_job, a DBA): completed too.
    let b: i64 = client.query_one(&job("b"), &[]).await.unwrap().get(0);
    client.execute("delete from graphile_worker._private_jobs where id = $1", &[&b]).await.unwrap();
    assert_eq!(utils.resolve_workflows().await.unwrap(), 1);
    // Out of attempts, no worker holding it: failed, and its dependents cancelled.
    let c: i64 = client.query_one(&job("c"), &[]).await.unwrap().get(0);
    utils.permanently_fail_jobs(&[c], Some("gave up")).await.unwrap();
    assert_eq!(utils.resolve_workflows().await.unwrap(), 1);
    assert_eq!(
        states(&db, added.id).await,
        named(&[
            ("a", "completed"),
            ("b", "completed"),
            ("c", "failed"),
            ("d", "cancelled"),
            ("e", "cancelled")
        ])
    );
    assert_eq!(utils.resolve_workflows().await.unwrap(), 0, "each settles once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_s_resolver_settles_a_job_completed_outside_it_and_releases_its_dependent() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let added = utils
        .add_workflow(&Workflow::new("outside").job(step("a")).job(step("b").depends_on(["a"])))
        .await
        .unwrap();
    utils.complete_jobs(&[added.released[0].1]).await.unwrap();
    // A worker running no task of the workflow: only its resolver acts on it.
    let options = db.worker_options().workflow_resolve_every(Duration::from_millis(200));
    let running = Running::listening(&db.runtime, options).await;
    // a is released from the start: wait for its settling, which releases b in the same
    // transaction.
    let completed = format!(
        "select count(*) from formica_graphile_worker.workflow_jobs where workflow_id = {} and state = 'completed'",
        added.id
    );
    db.wait_for_count(&completed, 1, Duration::from_secs(10)).await;
    running.stop(WITHIN).await;
    assert_eq!(states(&db, added.id).await, named(&[("a", "completed"), ("b", "released")]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_role_with_the_deploying_guide_s_grants_runs_every_workflow_operation() {
    let db = TestDb::new().await;
    let [as_superuser, as_owner] = db.deploying_guide_grants();
    db.client().await.batch_execute(&as_superuser).await.unwrap();
    let as_role = |role: &str| format!("{} user={}_{role}", db.url.split(" user=").next().unwrap(), db.name);
    let utils_as = |role: &str| {
        formica::WorkerUtils::new(
            formica::Pool::from_url(db.runtime.clone(), &as_role(role), 4).unwrap(),
            "graphile_worker",
        )
    };
    utils_as("owner").migrate().await.unwrap();
    formica_tests::connect(db.runtime.as_ref(), &as_role("owner"))
        .await
        .batch_execute(&as_owner)
        .await
        .unwrap();
    let utils = utils_as("worker");
    let log = Log::default();
    let diamond = Workflow::new("diamond")
        .job(step("a"))
        .job(WorkflowJob::raw("b", "step", json!({"name": "b", "fail": true})).spec(once()).depends_on(["a"]))
        .job(step("c").depends_on(["a"]))
        .job(step("d").depends_on(["b", "c"]));
    let added = utils.add_workflow(&diamond).await.unwrap();
    let options = logging(&db, &log).database_url(as_role("worker")).migrate(false);
    let running = Running::listening(&db.runtime, options).await;
    wait_for_state(&db, added.id, "failed").await;
    running.stop(WITHIN).await;
    assert_eq!(
        states(&db, added.id).await,
        named(&[("a", "completed"), ("b", "failed"), ("c", "completed"), ("d", "cancelled")])
    );
    assert_eq!(utils.retry_workflow(added.id).await.unwrap().rerun, ["b"]);
    assert_eq!(utils.resolve_workflows().await.unwrap(), 0);
    let cancelled = utils.cancel_workflow(added.id, "enough").await.unwrap();
    assert_eq!(
        (cancelled.waiting, cancelled.released.failed.len()),
        (1, 1),
        "d waited, b was released again"
    );
    assert_eq!(utils.resolve_workflows().await.unwrap(), 1, "b, cancelled");
    assert_eq!(utils.delete_workflow(added.id, false).await.unwrap().waiting, 0, "finished: deleted");
    let server = formica_tests::connect(
        db.runtime.as_ref(),
        &db.url.replace(&format!("dbname={}", db.name), "dbname=postgres"),
    )
    .await;
    drop(utils);
    let _ = server.batch_execute(&format!("drop database {} with (force)", db.name)).await;
    for role in ["owner", "worker", "dashboard"] {
        let _ = server.batch_execute(&format!("drop role if exists {}_{role}", db.name)).await;
    }
}

/// Sequential scans of the workflows' tables and graphile_worker's jobs in this transaction.
async fn scans_so_far(tx: &tokio_postgres::Transaction<'_>) -> i64 {
    tx.query_one(
        "select coalesce(sum(seq_scan), 0)::bigint from pg_stat_xact_user_tables
         where relname in ('workflows', 'workflow_jobs', 'workflow_dependencies', 'workflow_waits', '_private_jobs')",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// Rows of `workflow_jobs` read by index scans so far in this transaction.
async fn fetched_so_far(tx: &tokio_postgres::Transaction<'_>) -> i64 {
    tx.query_one(
        "select coalesce(sum(idx_tup_fetch), 0)::bigint from pg_stat_xact_user_tables where relname = 'workflow_jobs'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// Adding workflows and settling their jobs scan no table, however many one transaction
/// adds: the functions' plans, made while the tables were empty, once scanned
/// `workflow_jobs` at every release (n^2 for n workflows added in one statement).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adding_and_settling_many_workflows_in_one_transaction_scans_no_table() {
    let db = TestDb::migrated().await;
    let mut client = db.client().await;
    let tx = client.transaction().await.unwrap();
    let before = scans_so_far(&tx).await;
    let fetched_before = fetched_so_far(&tx).await;
    let chain = json!([
        {"name": "a", "task_identifier": "step", "payload": {}},
        {"name": "b", "task_identifier": "step", "payload": {}, "depends_on": ["a"]},
        {"name": "c", "task_identifier": "step", "payload": {}, "depends_on": ["b"]},
    ]);
    let added: i64 = tx
        .query_one(
            "select count(*) from generate_series(1, 300) as n,
               lateral formica_graphile_worker.add_workflow('chain ' || n, $1::json)",
            &[&chain],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(added, 300, "each workflow released its first job");
    let after_add = scans_so_far(&tx).await;
    assert_eq!(after_add - before, 0, "adding 300 workflows scanned a table");
    // Each add reads its own jobs by a key (about a dozen rows), not every workflow's
    // released jobs (n^2: some 45,000 rows for 300).
    let fetched = fetched_so_far(&tx).await - fetched_before;
    assert!(fetched < 300 * 30, "adding 300 workflows read {fetched} rows by index");
    let released: Vec<i64> = tx
        .query_one(
            "select array_agg(id order by id) from formica_graphile_worker.workflow_jobs where state = 'released'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(released.len(), 300);
    let before_settling = scans_so_far(&tx).await;
    // Settle them as a completing statement's trigger does: their dependents are released.
    let outcomes = vec!["completed"; released.len()];
    tx.execute("select formica_graphile_worker.settle_workflow_jobs($1, $2)", &[&released, &outcomes])
        .await
        .unwrap();
    let settled_scans = scans_so_far(&tx).await - before_settling;
    let dependents: i64 = tx
        .query_one(
            "select count(*) from formica_graphile_worker.workflow_jobs where name = 'b' and state = 'released'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(dependents, 300, "every dependent was released");
    assert_eq!(settled_scans, 0, "settling 300 jobs scanned a table");
}

/// A workflow job's release and its settling each update its row in place (records step
/// 33): no index names a column either changes, and the table keeps room on its pages, so
/// PostgreSQL writes no index entry for either (a heap-only update). Before, every release
/// and settling made a new entry in each of the table's indexes. Each round locks the
/// released jobs and completes them with the worker's own settling completion (history on, as
/// by default), in a transaction of its own, and reads what that statement added to the
/// counts. Few enough rows that every version fits in one page: whether PostgreSQL could
/// prune the page first (other tests' transactions may hold it back) does not matter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_jobs_release_and_settling_are_heap_only_updates() {
    let db = TestDb::migrated().await;
    let mut client = db.client().await;
    let chain = json!([
        {"name": "a", "task_identifier": "step", "payload": {}},
        {"name": "b", "task_identifier": "step", "payload": {}, "depends_on": ["a"]},
        {"name": "c", "task_identifier": "step", "payload": {}, "depends_on": ["b"]},
    ]);
    client
        .execute(
            "select count(*) from generate_series(1, 4) as n,
               lateral formica_graphile_worker.add_workflow('chain ' || n, $1::json)",
            &[&chain],
        )
        .await
        .unwrap();
    let catalog = Catalog::new("graphile_worker", true).expect("the worker's SQL");
    // The counts not yet flushed to the statistics, this transaction's and the last ones'.
    let counts = "select n_tup_upd, n_tup_hot_upd from pg_stat_xact_user_tables
        where relname = 'workflow_jobs' and schemaname = 'formica_graphile_worker'";
    let (mut updates, mut in_place) = (0, 0);
    for round in ["a", "b"] {
        let tx = client.transaction().await.unwrap();
        let ids: Vec<i64> = tx
            .query_one(
                "with locked as (
                   update graphile_worker._private_jobs set locked_by = 'w', locked_at = now(), attempts = attempts + 1
                   returning id)
                 select array_agg(id) from locked",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(ids.len(), 4, "round {round}");
        let before = tx.query_one(counts, &[]).await.unwrap();
        let statement = Statement::CompleteJobs { worker_id: "w".into(), ids, settles_workflow_jobs: true };
        let bound = bind(&catalog, statement, &[]);
        tx.execute(bound.sql, &bound.values()).await.unwrap();
        let after = tx.query_one(counts, &[]).await.unwrap();
        updates += after.get::<_, i64>(0) - before.get::<_, i64>(0);
        in_place += after.get::<_, i64>(1) - before.get::<_, i64>(1);
        tx.commit().await.unwrap();
    }
    let left =
        "select count(*) from formica_graphile_worker.workflow_jobs where name = 'c' and state = 'released'";
    assert_eq!(db.count(left).await, 4, "the last jobs released");
    assert_eq!(updates, 16, "4 settlings and 4 releases a round");
    assert_eq!(in_place, updates, "every update heap-only");
}

/// A settling completion (the worker's own statement, one job, then two of different
/// workflows, one dependent a callback) releases each dependent once, with its job and its
/// own payload, and add_jobs's notification announces the jobs added, with their count:
/// workers elsewhere, graphile-worker's too, fetch them at once instead of at their next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settling_completion_releases_each_dependent_once_with_its_job_and_announces_it() {
    use futures::StreamExt;
    let db = TestDb::migrated().await;
    let mut client = db.client().await;
    let (_listener, mut notes) = formica_tests::listen(&db.url, "jobs:insert").await;
    let chain = json!([
        {"name": "a", "task_identifier": "step", "payload": {}},
        {"name": "b", "task_identifier": "step", "payload": {"n": 2}, "depends_on": ["a"]},
    ]);
    let with_callback = json!([
        {"name": "x", "task_identifier": "step", "payload": {}},
        {"name": "y", "task_identifier": "step", "payload": {}, "depends_on": ["x"], "callback": "all_finished"},
    ]);
    client
        .execute(
            "select formica_graphile_worker.add_workflow('chain 1', $1::json),
               formica_graphile_worker.add_workflow('chain 2', $1::json),
               formica_graphile_worker.add_workflow('callback', $2::json)",
            &[&chain, &with_callback],
        )
        .await
        .unwrap();
    // The adds' own announcements (one a workflow).
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(5), notes.next())
            .await
            .expect("the add's notification")
            .expect("listening");
    }
    let catalog = Catalog::new("graphile_worker", true).expect("the worker's SQL");
    let job_of = "select jobs.job_id from formica_graphile_worker.workflow_jobs as jobs
        join formica_graphile_worker.workflows as workflows on workflows.id = jobs.workflow_id
        where workflows.name = $1 and jobs.name = $2";
    for (round, ending) in [(1, vec![("chain 1", "a")]), (2, vec![("chain 2", "a"), ("callback", "x")])] {
        let mut ids = Vec::new();
        for (workflow, name) in &ending {
            ids.push(client.query_one(job_of, &[workflow, name]).await.unwrap().get::<_, i64>(0));
        }
        let tx = client.transaction().await.unwrap();
        tx.execute(
            "update graphile_worker._private_jobs set locked_by = 'w', locked_at = now(), attempts = 1
             where id = any($1)",
            &[&ids],
        )
        .await
        .unwrap();
        let statement =
            Statement::CompleteJobs { worker_id: "w".into(), ids: ids.clone(), settles_workflow_jobs: true };
        let bound = bind(&catalog, statement, &[]);
        tx.execute(bound.sql, &bound.values()).await.unwrap();
        tx.commit().await.unwrap();
        // Each dependent released once, with its job, and the jobs announced.
        let mut announced = 0u64;
        while announced < ending.len() as u64 {
            let note: Value = serde_json::from_str(
                &tokio::time::timeout(Duration::from_secs(5), notes.next())
                    .await
                    .unwrap_or_else(|_| panic!("round {round}: the release's notification"))
                    .expect("listening"),
            )
            .unwrap();
            announced += note["count"].as_u64().expect("a count");
        }
        assert_eq!(announced, ending.len() as u64, "round {round}");
    }
    let released = db
        .count(
            "select count(*) from formica_graphile_worker.workflow_jobs as jobs
             join graphile_worker._private_jobs as queued on queued.id = jobs.job_id
             where jobs.name in ('b', 'y') and jobs.state = 'released' and queued.flags ? 'formica:workflow'",
        )
        .await;
    assert_eq!(released, 3, "b of both chains and the callback y, each with its job");
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 3, "no job added twice");
    let payload: Value = client
        .query_one(
            "select queued.payload from graphile_worker._private_jobs as queued
             join formica_graphile_worker.workflow_jobs as jobs on jobs.job_id = queued.id
             join formica_graphile_worker.workflows as workflows on workflows.id = jobs.workflow_id
             where workflows.name = 'chain 1' and jobs.name = 'b'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(payload, json!({"n": 2}), "the dependent's own payload");
    let resolver_rows = db.count("select count(*) from formica_graphile_worker.released_workflow_jobs").await;
    assert_eq!(resolver_rows, 3, "the resolver's table holds the released jobs, not the settled ones");
}
