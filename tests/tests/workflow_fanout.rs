//! Fan-out at runtime and sub-workflows (docs/guide/workflows.md) on real PostgreSQL: a job
//! adds children to its workflow from its handler and the fan-in after it waits for all of
//! them, once each even when the adder is SIGKILLed after adding them and run again; an add
//! meeting a cancel waits for it and adds its jobs cancelled. A job that is a whole workflow
//! settles with that workflow's end (once, when its last two jobs settle at once), its
//! outputs passed up to a callback after it, or fails; and cancelling a workflow cancels its
//! sub-workflows, with the worker running the sub-workflow's job SIGKILLed. A released
//! sub-workflow job says it waits for its workflow.
//!
//! The crash tests start this same test binary as the worker (`worker_process`, with
//! `FORMICA_FANOUT_HALT` naming where its handler stops: it says so in the table `halts`,
//! then sleeps), SIGKILL it, release its jobs and let a worker of this process go on.
//! Every run of a handler is a row of `runs`, outside any transaction, in the order of the
//! runs.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{
    BatchReport, Callback, Error, JobContext, OutputTaskHandler, Task, WorkerOptions, Workflow,
    WorkflowError, WorkflowJob,
};
use formica_tests::{Running, TestDb};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TABLES: &str = "create table runs (id bigserial primary key, name text not null);
    create table halts (point text not null);";

const WITHIN: Duration = Duration::from_secs(30);

/// How many children `spawn` adds.
const WIDTH: i64 = 8;

/// A child: its output is ten times its number.
#[derive(Serialize, Deserialize)]
struct Child10 {
    n: i64,
}

impl Task for Child10 {
    const IDENTIFIER: &'static str = "child";
}

impl OutputTaskHandler for Child10 {
    type Output = i64;
    async fn run(self, ctx: JobContext) -> Result<i64, Box<dyn std::error::Error + Send + Sync>> {
        ran(&ctx, &format!("child {}", self.n)).await?;
        if self.n < 0 {
            return Err("a negative child fails".into());
        }
        Ok(self.n * 10)
    }
}

/// Record a run of `name`.
async fn ran(ctx: &JobContext, name: &str) -> Result<(), Error> {
    let client = ctx.client().await?;
    client.execute("insert into runs (name) values ($1)", &[&name]).await?;
    Ok(())
}

/// Stop here for ever if `point` is where this worker halts (saying so first).
async fn halt(ctx: &JobContext, at: &str, point: &str) -> Result<(), Error> {
    if at == point {
        let client = ctx.client().await?;
        client.execute("insert into halts (point) values ($1)", &[&point]).await?;
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// The tasks: `spawn` adds `WIDTH` children (then halts at "spawned"), `spawn_sub` adds a
/// sub-workflow, `child` (with an output), `hold` (halts at "hold"), and `report`, a callback keeping its batch in `runs`.
fn tasks<R>(options: WorkerOptions<R>, at: &str) -> WorkerOptions<R> {
    let (at_spawn, at_hold) = (at.to_owned(), at.to_owned());
    options
        .define_job_with_output::<Child10>()
        .define_raw_job("spawn", move |ctx: JobContext, _| {
            let at = at_spawn.clone();
            async move {
                ran(&ctx, "spawn").await?;
                let children = (0..WIDTH).map(|n| WorkflowJob::new(format!("p{n}"), &Child10 { n }));
                let children: Result<Vec<_>, _> = children.collect();
                ctx.add_workflow_jobs(children?).await?;
                halt(&ctx, &at, "spawned").await?;
                Ok(())
            }
        })
        .define_raw_job("spawn_sub", |ctx: JobContext, _| async move {
            let inner = Workflow::new("inner")
                .job(WorkflowJob::new("x", &Child10 { n: 5 })?)
                .job(WorkflowJob::new("y", &Child10 { n: 6 })?.depends_on(["x"]));
            ctx.add_workflow_jobs([WorkflowJob::workflow("sub", inner)]).await?;
            Ok(())
        })
        .define_raw_job("hold", move |ctx: JobContext, _| {
            let at = at_hold.clone();
            async move {
                halt(&ctx, &at, "hold").await?;
                ran(&ctx, "hold").await?;
                Ok(())
            }
        })
        .define_raw_job("report", |ctx: JobContext, payload: Value| async move {
            let batch = serde_json::to_string(&payload["batch"])?;
            ran(&ctx, &format!("report {batch}")).await?;
            Ok(())
        })
}

async fn with_tables() -> TestDb {
    let db = TestDb::migrated().await;
    db.client().await.batch_execute(TABLES).await.unwrap();
    db
}

/// The runs recorded, in order.
async fn runs(db: &TestDb) -> Vec<String> {
    let rows = db.client().await.query("select name from runs order by id", &[]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

/// Each job's (name, state) of workflow `id`, in the order added.
async fn states(db: &TestDb, id: i64) -> Vec<(String, String)> {
    let sql =
        "select name, state from formica_graphile_worker.workflow_jobs where workflow_id = $1 order by id";
    let rows = db.client().await.query(sql, &[&id]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

fn named(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(n, s)| (n.to_string(), s.to_string())).collect()
}

/// Wait until workflow `id`'s state is `state` with no job waiting or released.
async fn wait_for_end(db: &TestDb, id: i64, state: &str) {
    let sql = format!(
        "select count(*) from formica_graphile_worker.workflow_states \
         where id = {id} and state = '{state}' and waiting + released = 0"
    );
    db.wait_for_count(&sql, 1, WITHIN).await;
}

/// Run this file's tasks on a worker of this process until workflow `id` ends `state`.
async fn run_until(db: &TestDb, id: i64, state: &str) {
    let running = Running::listening(&db.runtime, tasks(db.worker_options(), "")).await;
    wait_for_end(db, id, state).await;
    running.stop(WITHIN).await;
}

/// The workflow the sub-workflow job `name` of workflow `id` started.
async fn subworkflow(db: &TestDb, id: i64, name: &str) -> i64 {
    let sql = "select subworkflow_id from formica_graphile_worker.workflow_jobs where workflow_id = $1 and name = $2";
    db.client().await.query_one(sql, &[&id, &name]).await.unwrap().get(0)
}

/// spawn, then a callback after it, which sees every child spawn added.
fn fan_out() -> Workflow {
    Workflow::new("fan-out").job(WorkflowJob::raw("spawn", "spawn", json!({}))).job(
        WorkflowJob::raw("merge", "report", json!({})).depends_on(["spawn"]).callback(Callback::AllFinished),
    )
}

/// The batch the one callback run got.
fn reported(runs: &[String]) -> BatchReport {
    let reports: Vec<&str> = runs.iter().filter_map(|r| r.strip_prefix("report ")).collect();
    assert_eq!(reports.len(), 1, "one callback run: {runs:?}");
    serde_json::from_str(reports[0]).unwrap()
}

/// Every child ran once, and `merge` after all of them.
fn check_fan_in(runs: &[String]) {
    let merge = runs.iter().position(|r| r.starts_with("report")).expect("merge ran");
    for n in 0..WIDTH {
        let child = format!("child {n}");
        let at: Vec<usize> = (0..runs.len()).filter(|&i| runs[i] == child).collect();
        assert_eq!(at.len(), 1, "{child} ran once: {runs:?}");
        assert!(at[0] < merge, "{child} before merge: {runs:?}");
    }
    let outputs: BTreeMap<String, Value> =
        (0..WIDTH).map(|n| (format!("spawn/p{n}"), json!(n * 10))).collect();
    let batch = BatchReport { completed: WIDTH + 1, failed: 0, cancelled: 0, unfinished: 0, outputs };
    assert_eq!(reported(runs), batch, "merge saw every child and its output");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_in_after_a_runtime_fan_out_waits_for_all_of_it() {
    let db = with_tables().await;
    let added = db.utils().add_workflow(&fan_out()).await.unwrap();
    run_until(&db, added.id, "completed").await;
    check_fan_in(&runs(&db).await);
    let names: Vec<String> = states(&db, added.id).await.into_iter().map(|(name, _)| name).collect();
    let mut want = vec!["spawn".to_owned(), "merge".to_owned()];
    want.extend((0..WIDTH).map(|n| format!("spawn/p{n}")));
    assert_eq!(names, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_adds_a_subworkflow_at_runtime_and_the_fan_in_gets_its_outputs() {
    let db = with_tables().await;
    let workflow = Workflow::new("fan-out").job(WorkflowJob::raw("spawn", "spawn_sub", json!({}))).job(
        WorkflowJob::raw("merge", "report", json!({})).depends_on(["spawn"]).callback(Callback::AllFinished),
    );
    let added = db.utils().add_workflow(&workflow).await.unwrap();
    run_until(&db, added.id, "completed").await;
    let runs = runs(&db).await;
    let outputs: BTreeMap<String, Value> =
        [("spawn/sub".to_owned(), json!({"x": 50, "y": 60}))].into_iter().collect();
    let batch = BatchReport { completed: 2, failed: 0, cancelled: 0, unfinished: 0, outputs };
    assert_eq!(reported(&runs), batch, "merge waited for the sub-workflow and got its outputs: {runs:?}");
    assert_eq!(runs.iter().position(|r| r.starts_with("report")), Some(2), "after x and y: {runs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_not_running_in_a_workflow_cannot_add_to_one() {
    let db = with_tables().await;
    let (tx, rx) = std::sync::mpsc::channel();
    let options = db.worker_options().define_raw_job("lonely", move |ctx: JobContext, _| {
        let tx = tx.clone();
        async move {
            let refused = ctx.add_workflow_jobs([WorkflowJob::raw("x", "t", json!({}))]).await;
            tx.send(refused.map(|_| ()).map_err(|e| e.to_string())).unwrap();
            Ok(())
        }
    });
    let job = db.utils().add_raw_job("lonely", json!({}), formica::JobSpec::default()).await.unwrap();
    let running = Running::listening(&db.runtime, options).await;
    let refused = rx.recv_timeout(WITHIN).unwrap();
    running.stop(WITHIN).await;
    let want = WorkflowError::NotRunning(format!("lonely (job {})", job.id)).to_string();
    assert!(refused.as_ref().is_err_and(|e| e.ends_with(&want)), "{refused:?}");
    assert_eq!(db.count("select count(*) from formica_graphile_worker.workflow_jobs").await, 0);
}

/// a, then the sub-workflow `sub` (x, then y and z), then a callback after `sub`.
fn nested(fail_y: bool) -> Workflow {
    let y = if fail_y { -1 } else { 2 };
    let inner = Workflow::new("inner")
        .job(WorkflowJob::new("x", &Child10 { n: 1 }).unwrap())
        .job(
            WorkflowJob::new("y", &Child10 { n: y })
                .unwrap()
                .spec(formica::JobSpec::builder().max_attempts(1).build())
                .depends_on(["x"]),
        )
        .job(WorkflowJob::new("z", &Child10 { n: 3 }).unwrap().depends_on(["x"]));
    Workflow::new("outer")
        .job(WorkflowJob::new("a", &Child10 { n: 0 }).unwrap())
        .job(WorkflowJob::workflow("sub", inner).depends_on(["a"]))
        .job(
            WorkflowJob::raw("after", "report", json!({}))
                .depends_on(["sub"])
                .callback(Callback::AllFinished),
        )
        .job(WorkflowJob::new("tail", &Child10 { n: 4 }).unwrap().depends_on(["sub"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subworkflow_settles_its_job_when_it_ends_with_its_outputs_passed_up() {
    let db = with_tables().await;
    let added = db.utils().add_workflow(&nested(false)).await.unwrap();
    run_until(&db, added.id, "completed").await;
    let inner = subworkflow(&db, added.id, "sub").await;
    assert_eq!(
        states(&db, inner).await,
        named(&[("x", "completed"), ("y", "completed"), ("z", "completed")])
    );
    let runs = runs(&db).await;
    let outputs: BTreeMap<String, Value> =
        [("sub".to_owned(), json!({"x": 10, "y": 20, "z": 30}))].into_iter().collect();
    let batch = BatchReport { completed: 1, failed: 0, cancelled: 0, unfinished: 0, outputs };
    assert_eq!(reported(&runs), batch, "the callback after sub got its outputs");
    let at = |name: &str| {
        runs.iter().position(|r| r.starts_with(name)).unwrap_or_else(|| panic!("{name}: {runs:?}"))
    };
    assert!(at("child 0") < at("child 1"), "the sub-workflow starts after a: {runs:?}");
    for inner in ["child 2", "child 3"] {
        assert!(
            at(inner) < at("report") && at(inner) < at("child 4"),
            "{inner} before sub's dependents: {runs:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subworkflow_that_fails_fails_its_job_and_cancels_what_waits_for_it() {
    let db = with_tables().await;
    let added = db.utils().add_workflow(&nested(true)).await.unwrap();
    run_until(&db, added.id, "failed").await;
    let inner = subworkflow(&db, added.id, "sub").await;
    wait_for_end(&db, inner, "failed").await;
    let states = states(&db, added.id).await;
    assert_eq!(
        states,
        named(&[("a", "completed"), ("sub", "failed"), ("after", "completed"), ("tail", "cancelled")])
    );
    assert!(!runs(&db).await.contains(&"child 4".to_owned()), "tail never ran");
}

/// The worker process the crash tests start (not a test of its own: it returns at once
/// unless started by one).
#[test]
#[ignore = "started by the crash tests of this file"]
fn worker_process() {
    let (Ok(url), Ok(at), Ok(id)) = (
        std::env::var("FORMICA_FANOUT_URL"),
        std::env::var("FORMICA_FANOUT_HALT"),
        std::env::var("FORMICA_FANOUT_WORKER"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let options = formica_tokio::WorkerOptions::default()
            .database_url(url)
            .worker_id(id)
            .concurrency(1)
            .poll_interval(Duration::from_millis(100));
        tasks(options, &at).init().await.expect("worker init").run().await.expect("worker run");
    });
}

/// A worker process `doomed` halting at `point`, once it has.
async fn halted_worker(db: &TestDb, point: &str, doomed: &str) -> Child {
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "workflow_fanout::worker_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("FORMICA_FANOUT_URL", &db.url)
        .env("FORMICA_FANOUT_HALT", point)
        .env("FORMICA_FANOUT_WORKER", doomed)
        .stdout(Stdio::null())
        .spawn()
        .expect("start a worker process");
    let halted = format!("select count(*) from halts where point = '{point}'");
    db.wait_for_count(&halted, 1, Duration::from_secs(60)).await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_from_a_job_killed_after_adding_its_children_adds_them_once() {
    let db = with_tables().await;
    let added = db.utils().add_workflow(&fan_out()).await.unwrap();
    let mut child = halted_worker(&db, "spawned", "doomed-spawn").await;
    let children = "select count(*) from formica_graphile_worker.workflow_jobs where name like 'spawn/%'";
    assert_eq!(db.count(children).await, WIDTH, "the children were added before the kill");
    child.kill().expect("SIGKILL the worker");
    child.wait().unwrap();
    db.utils().force_unlock_workers_even_if_alive(&["doomed-spawn"]).await.unwrap();
    // spawn runs again, adds the same children (nothing), completes; merge waits for all.
    run_until(&db, added.id, "completed").await;
    assert_eq!(db.count(children).await, WIDTH, "no child added twice");
    let runs = runs(&db).await;
    assert_eq!(runs.iter().filter(|r| *r == "spawn").count(), 2, "spawn ran again after the kill: {runs:?}");
    check_fan_in(&runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_workflow_cancels_its_subworkflow_while_its_worker_is_killed() {
    let db = with_tables().await;
    let inner = Workflow::new("inner")
        .job(WorkflowJob::raw("hold", "hold", json!({})))
        .job(WorkflowJob::new("next", &Child10 { n: 1 }).unwrap().depends_on(["hold"]));
    let outer = Workflow::new("outer")
        .job(WorkflowJob::workflow(
            "sub",
            Workflow::new("middle").job(WorkflowJob::workflow("deeper", inner)),
        ))
        .job(WorkflowJob::new("tail", &Child10 { n: 2 }).unwrap().depends_on(["sub"]));
    let added = db.utils().add_workflow(&outer).await.unwrap();
    assert_eq!(added.released, vec![], "a sub-workflow job has no graphile_worker job");
    let mut child = halted_worker(&db, "hold", "doomed-hold").await;
    let middle = subworkflow(&db, added.id, "sub").await;
    let inner = subworkflow(&db, middle, "deeper").await;
    let cancelled = db.utils().cancel_workflow(added.id, "by the test").await.unwrap();
    assert_eq!(cancelled.subworkflows, vec![middle, inner]);
    assert_eq!(cancelled.waiting, 2, "tail and next");
    assert_eq!(cancelled.released.recorded.len(), 1, "hold, held by the doomed worker");
    child.kill().expect("SIGKILL the worker");
    child.wait().unwrap();
    db.utils().force_unlock_workers_even_if_alive(&["doomed-hold"]).await.unwrap();
    // A worker that runs none of these: its recovery sweep cancels hold, its resolver
    // settles it, and the sub-workflows' ends settle their jobs.
    let worker = db.worker_options().define_raw_job("other", |_, _| Box::pin(async { Ok(()) }));
    let running = Running::listening(&db.runtime, worker).await;
    wait_for_end(&db, added.id, "cancelled").await;
    running.stop(WITHIN).await;
    for id in [inner, middle] {
        wait_for_end(&db, id, "cancelled").await;
    }
    assert_eq!(states(&db, inner).await, named(&[("hold", "cancelled"), ("next", "cancelled")]));
    assert_eq!(states(&db, middle).await, named(&[("deeper", "cancelled")]));
    assert_eq!(states(&db, added.id).await, named(&[("sub", "cancelled"), ("tail", "cancelled")]));
    assert_eq!(runs(&db).await, Vec::<String>::new(), "nothing of it ran to its end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_meeting_a_cancel_being_made_waits_for_it_and_adds_its_jobs_cancelled() {
    let db = with_tables().await;
    let added = db.utils().add_workflow(&fan_out()).await.unwrap();
    let spawn = added.released[0].1;
    // cancel_workflow's mark, not committed yet.
    let mut cancelling = db.client().await;
    let tx = cancelling.transaction().await.unwrap();
    let mark = "update formica_graphile_worker.workflows set cancelled_at = now() where id = $1";
    tx.execute(mark, &[&added.id]).await.unwrap();
    let add = formica_sql::render(formica_sql::workflows::ADD_JOBS, "graphile_worker");
    let spec = json!([{ "name": "late", "task_identifier": "t", "payload": {}, "depends_on": [] }]);
    let adding = db.client().await;
    let (add, spec) = (add.clone(), spec.clone());
    let pending = tokio::spawn(async move { adding.query(&add, &[&spawn, &spec]).await.unwrap().len() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "the add waits for the cancel's transaction");
    tx.commit().await.unwrap();
    assert_eq!(pending.await.unwrap(), 1);
    let late = "select count(*) from formica_graphile_worker.workflow_jobs where name = 'spawn/late' and state = 'cancelled'";
    assert_eq!(db.count(late).await, 1, "added cancelled, not left waiting in a cancelled workflow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_two_jobs_of_a_subworkflow_settling_at_once_settle_its_job_once() {
    let db = with_tables().await;
    let inner = Workflow::new("inner").job(WorkflowJob::raw("x", "t", json!({}))).job(WorkflowJob::raw(
        "y",
        "t",
        json!({}),
    ));
    let outer = Workflow::new("outer")
        .job(WorkflowJob::workflow("sub", inner))
        .job(WorkflowJob::raw("tail", "t", json!({})).depends_on(["sub"]));
    let added = db.utils().add_workflow(&outer).await.unwrap();
    let inner = subworkflow(&db, added.id, "sub").await;
    // As the completion statement settles a workflow job (sql/queries/workflows/complete.sql).
    let settle = "update formica_graphile_worker.workflow_jobs set state = 'completed', finished_at = now() \
        where workflow_id = $1 and name = $2 and state = 'released'";
    let mut first = db.client().await;
    let tx = first.transaction().await.unwrap();
    assert_eq!(tx.execute(settle, &[&inner, &"x"]).await.unwrap(), 1);
    let second = db.client().await;
    let pending = tokio::spawn(async move { second.execute(settle, &[&inner, &"y"]).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "the second waits for the first's lock on the sub-workflow job");
    tx.commit().await.unwrap();
    assert_eq!(pending.await.unwrap(), 1);
    assert_eq!(states(&db, added.id).await, named(&[("sub", "completed"), ("tail", "released")]));
}

/// A released sub-workflow job waits for its workflow, and says which: the workflow page
/// and `formica workflow show` read it from here (records step 24's `subworkflow_id`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_subworkflow_job_says_it_waits_for_its_workflow() {
    use formica::inspect::WaitingFor;
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let inner = Workflow::new("inner").job(WorkflowJob::raw("x", "noop", json!({})));
    let outer = Workflow::new("outer").job(WorkflowJob::workflow("sub", inner));
    let id = utils.add_workflow(&outer).await.unwrap().id;
    let sql = "select subworkflow_id from formica_graphile_worker.workflow_jobs where workflow_id = $1";
    let sub: i64 = db.client().await.query_one(sql, &[&id]).await.unwrap().get(0);
    let seen = utils.workflow(id).await.unwrap().unwrap();
    assert_eq!(seen.jobs[0].state, "released");
    assert_eq!(seen.jobs[0].waits_for, vec![WaitingFor::Workflow { id: sub }]);
    assert_eq!(seen.jobs[0].waits_for_text(), format!("workflow {sub}"));
    // Released without a graphile_worker job: neither a row nor its task registered there.
    let task = "select count(*) from graphile_worker._private_tasks where identifier = 'formica:subworkflow'";
    assert_eq!(db.count(task).await, 0);
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 1, "x's job only");
}
