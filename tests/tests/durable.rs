//! Durable jobs on a real PostgreSQL: a job completed in its handler's transaction
//! (tokio-postgres and sqlx) and a job of three steps, with the worker SIGKILLed at every
//! point between a write and its commit and after it; and the fence: a job this worker no
//! longer holds cannot complete, nor record a step, and its writes roll back.
//!
//! The crash tests start this same test binary as the worker (`worker_process`, with
//! `FORMICA_DURABLE_HALT` naming where its handler stops), wait for it to reach that point
//! (it says so in the table `halts`), SIGKILL it, release its jobs at once and let a worker
//! of this process run them again. Every write a handler makes in a transaction goes to the
//! table `effects`; every run of a step's closure is counted in `runs`, outside any
//! transaction.

use formica::{Error, HistoryOptions, JobContext, JobSpec, Runtime, WorkerOptions};
use formica_tests::{on_both_runtimes, Running, TestDb};
use serde_json::json;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

const TABLES: &str = "create table effects (job_id bigint not null, what text not null);
    create table runs (job_id bigint not null, what text not null);
    create table halts (point text not null);
    create table errors (job_id bigint not null, error text not null);";

/// A new database with the schema and this file's tables, on `runtime`.
async fn with_tables(runtime: Arc<dyn Runtime>) -> TestDb {
    let db = TestDb::migrated_on(runtime).await;
    db.client().await.batch_execute(TABLES).await.unwrap();
    db
}

/// Run `test` on tokio with [`with_tables`]' database.
fn on_tokio<F: std::future::Future<Output = ()>>(test: impl FnOnce(TestDb) -> F) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async { test(with_tables(Arc::new(formica_tokio::TokioRuntime)).await).await });
}

/// Stop here, for good, if this worker was told to (`halt` is where): say so first.
async fn halt(ctx: &JobContext, halt: &str, point: &str) -> Result<(), Error> {
    if halt == point {
        ctx.client().await?.execute("insert into halts (point) values ($1)", &[&point]).await?;
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// Count a run of step `what` of `ctx`'s job, outside its transaction.
async fn count_run(ctx: &JobContext, what: &str) -> Result<(), Error> {
    let client = ctx.client().await?;
    client.execute("insert into runs (job_id, what) values ($1, $2)", &[&ctx.job().id, &what]).await?;
    Ok(())
}

/// What a handler whose completion or step was refused leaves for the test to read.
async fn record_error(ctx: &JobContext, error: String) -> Result<(), Error> {
    let client = ctx.client().await?;
    client.execute("insert into errors (job_id, error) values ($1, $2)", &[&ctx.job().id, &error]).await?;
    Ok(())
}

/// Take job `job_id` from this worker, as a recovery and another worker's fetch would.
async fn steal(ctx: &JobContext) -> Result<(), Error> {
    let client = ctx.client().await?;
    let sql = "update graphile_worker._private_jobs set locked_by = 'thief' where id = $1";
    client.execute(sql, &[&ctx.job().id]).await?;
    Ok(())
}

/// What `pay` and `pay_sqlx` do after their write: halt before `commit` if told to, take the
/// job from the worker if the payload says `steal`, commit (recording a refusal), then halt
/// after the commit if told to.
async fn commit_paid(
    ctx: &JobContext,
    at: &str,
    payload: &serde_json::Value,
    commit: impl std::future::Future<Output = Result<(), Error>>,
) -> formica::TaskResult {
    let task = &ctx.job().task_identifier;
    halt(ctx, at, &format!("{task}:before_commit")).await?;
    if payload["steal"] == json!(true) {
        steal(ctx).await?;
    }
    if let Err(e) = commit.await {
        record_error(ctx, e.to_string()).await?;
        return Err(e.into());
    }
    halt(ctx, at, &format!("{task}:after_commit")).await?;
    Ok(())
}

/// The tasks of every test here, halting at `halt` ("" for nowhere):
/// - `pay` and `pay_sqlx` write an effect in a transaction (tokio-postgres, sqlx) and
///   complete the job in it; with `{"steal": true}` the job is taken from the worker first;
/// - `three_steps` runs steps `a`, `b` and `c`, each writing its effect in its transaction
///   and returning the previous one's output plus one; with `{"fail_once": true}`, step `b`
///   fails on the job's first attempt; with `{"steal": true}`, the job is taken from the
///   worker inside step `a`.
fn durable_tasks<R>(options: WorkerOptions<R>, halt_at: &str) -> WorkerOptions<R> {
    let at: Arc<str> = halt_at.into();
    let (pay_at, sqlx_at) = (at.clone(), at.clone());
    options
        .define_raw_job("pay", move |ctx, payload| {
            let at = pay_at.clone();
            async move {
                let mut client = ctx.client().await?;
                let tx = client.transaction().await?;
                tx.execute("insert into effects (job_id, what) values ($1, 'paid')", &[&ctx.job().id])
                    .await?;
                commit_paid(&ctx, &at, &payload, ctx.complete_with_transaction(tx)).await
            }
        })
        .define_raw_job("pay_sqlx", move |ctx, payload| {
            let at = sqlx_at.clone();
            async move {
                let pool = ctx.extension::<sqlx::PgPool>()?.clone();
                let mut tx = pool.begin().await?;
                sqlx::query("insert into effects (job_id, what) values ($1, 'paid')")
                    .bind(ctx.job().id)
                    .execute(&mut *tx)
                    .await?;
                commit_paid(&ctx, &at, &payload, ctx.complete_with_sqlx_transaction(tx)).await
            }
        })
        .define_raw_job("three_steps", move |ctx, payload| {
            let at = at.clone();
            async move {
                let mut last = 0_i64;
                for name in ["a", "b", "c"] {
                    let (ctx2, at2, payload) = (ctx.clone(), at.clone(), payload.clone());
                    let step = ctx
                        .step(name, move |tx| {
                            Box::pin(async move {
                                count_run(&ctx2, name).await?;
                                let id = ctx2.job().id;
                                tx.execute(
                                    "insert into effects (job_id, what) values ($1, $2)",
                                    &[&id, &name],
                                )
                                .await?;
                                halt(&ctx2, &at2, &format!("steps:in_{name}")).await?;
                                if name == "b"
                                    && payload["fail_once"] == json!(true)
                                    && ctx2.job().attempts == 1
                                {
                                    return Err("b fails on the first attempt".into());
                                }
                                if name == "a" && payload["steal"] == json!(true) {
                                    steal(&ctx2).await?;
                                }
                                Ok(last + 1)
                            })
                        })
                        .await;
                    last = match step {
                        Ok(output) => output,
                        Err(e) => {
                            record_error(&ctx, e.to_string()).await?;
                            return Err(e);
                        }
                    };
                    halt(&ctx, &at, &format!("steps:after_{name}")).await?;
                }
                Ok(())
            }
        })
}

/// A worker of this process running the durable tasks on `db` (with an sqlx pool for
/// `pay_sqlx`), history as `history` says.
async fn worker(db: &TestDb, history: bool) -> Running {
    let pool = crate::sqlx::sqlx_pool(db).await;
    let mut options = durable_tasks(db.worker_options(), "").add_extension(pool).max_pool_size(12);
    if !history {
        options = options.history(HistoryOptions::off());
    }
    Running::listening(&db.runtime, options).await
}

/// The worker process the crash tests start (not a test of its own: it returns at once
/// unless started by one).
#[test]
#[ignore = "started by the crash tests of this file"]
fn worker_process() {
    let (Ok(url), Ok(at), Ok(id)) = (
        std::env::var("FORMICA_DURABLE_URL"),
        std::env::var("FORMICA_DURABLE_HALT"),
        std::env::var("FORMICA_DURABLE_WORKER"),
    ) else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let pool = crate::sqlx::sqlx_pool_at(&url).await;
        let options = formica_tokio::WorkerOptions::default()
            .database_url(url)
            .worker_id(id)
            .concurrency(1)
            .poll_interval(Duration::from_millis(100))
            .add_extension(pool);
        durable_tasks(options, &at).init().await.expect("worker init").run().await.expect("worker run");
    });
}

/// The job of `task` (`payload`), run by a worker process SIGKILLed where its handler
/// halts at `point`, then by a worker of this process once the dead one's jobs are
/// released: the job's id, once it completed.
async fn killed_at_then_run_again(db: &TestDb, task: &str, payload: serde_json::Value, point: &str) -> i64 {
    let job = db.utils().add_raw_job(task, payload, JobSpec::default()).await.unwrap();
    let doomed = format!("doomed-{}", point.replace(':', "-"));
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "durable::worker_process", "--nocapture", "--test-threads", "1"])
        .env("FORMICA_DURABLE_URL", &db.url)
        .env("FORMICA_DURABLE_HALT", point)
        .env("FORMICA_DURABLE_WORKER", &doomed)
        .stdout(Stdio::null())
        .spawn()
        .expect("start a worker process");
    let halted = format!("select count(*) from halts where point = '{point}'");
    db.wait_for_count(&halted, 1, Duration::from_secs(60)).await;
    child.kill().expect("SIGKILL the worker");
    child.wait().unwrap();
    db.client().await.execute("delete from halts", &[]).await.unwrap();
    let held = format!(
        "select count(*) from graphile_worker._private_jobs where id = {} and locked_by = '{doomed}'",
        job.id
    );
    let gone = format!("select count(*) from graphile_worker._private_jobs where id = {}", job.id);
    if point.ends_with("after_commit") {
        assert_eq!(db.count(&gone).await, 0, "{point}: the job completed with the handler's commit");
    } else {
        assert_eq!(db.count(&held).await, 1, "{point}: the killed worker's job stays locked by it");
    }
    db.utils().force_unlock_workers_even_if_alive(&[&doomed]).await.unwrap();
    let running = worker(db, true).await;
    db.wait_for_count(&gone, 0, Duration::from_secs(30)).await;
    running.stop(Duration::from_secs(10)).await;
    job.id
}

/// How many rows of `table` job `job_id` has, by `what`.
async fn counts(db: &TestDb, table: &str, job_id: i64) -> serde_json::Value {
    let sql = format!(
        "select coalesce(json_object_agg(what, n order by what), '{{}}')::text from \
         (select what, count(*) as n from {table} where job_id = $1 group by what) as c"
    );
    let text: String = db.client().await.query_one(&sql, &[&job_id]).await.unwrap().get(0);
    serde_json::from_str(&text).unwrap()
}

/// The `steps` of job `job_id`'s history row.
async fn history_steps(db: &TestDb, job_id: i64) -> serde_json::Value {
    let sql = "select steps::text from formica_graphile_worker.job_history where job_id = $1";
    let row = db.client().await.query_one(sql, &[&job_id]).await.unwrap();
    row.get::<_, Option<String>>(0).map_or(serde_json::Value::Null, |t| serde_json::from_str(&t).unwrap())
}

#[test]
fn a_job_completed_in_its_transaction_keeps_its_writes_exactly_once_when_the_worker_is_killed() {
    on_tokio(|db| async move {
        for task in ["pay", "pay_sqlx"] {
            for point in ["before_commit", "after_commit"] {
                let point = format!("{task}:{point}");
                let id = killed_at_then_run_again(&db, task, json!({}), &point).await;
                assert_eq!(counts(&db, "effects", id).await, json!({"paid": 1}), "{point}: the write, once");
                let history = format!(
                    "select count(*) from formica_graphile_worker.job_history where job_id = {id} and outcome = 'completed'"
                );
                assert_eq!(
                    db.count(&history).await,
                    1,
                    "{point}: one history row, written with the completion"
                );
            }
        }
    });
}

#[test]
fn each_step_of_a_job_commits_once_whenever_the_worker_is_killed() {
    on_tokio(|db| async move {
        for step in ["a", "b", "c"] {
            for when in ["in", "after"] {
                let point = format!("steps:{when}_{step}");
                let id = killed_at_then_run_again(&db, "three_steps", json!({}), &point).await;
                let once = json!({"a": 1, "b": 1, "c": 1});
                assert_eq!(counts(&db, "effects", id).await, once, "{point}: each step's write exactly once");
                // The step killed before its commit ran again; the ones committed did not.
                let mut runs = once.clone();
                if when == "in" {
                    runs[step] = json!(2);
                }
                assert_eq!(counts(&db, "runs", id).await, runs, "{point}: the closures run");
                // Each step's output fed the next, across the crash; the steps went into the
                // job's history row.
                assert_eq!(history_steps(&db, id).await, json!({"a": 1, "b": 2, "c": 3}), "{point}");
                let left =
                    format!("select count(*) from formica_graphile_worker.job_steps where job_id = {id}");
                assert_eq!(db.count(&left).await, 0, "{point}: no step row outlives the job");
            }
        }
    });
}

/// Wait for job `job_id`'s handler to record the error it got.
async fn recorded_error(db: &TestDb, job_id: i64) -> String {
    let sql = format!("select count(*) from errors where job_id = {job_id}");
    db.wait_for_count(&sql, 1, Duration::from_secs(20)).await;
    let row =
        db.client().await.query_one("select error from errors where job_id = $1", &[&job_id]).await.unwrap();
    row.get(0)
}

async fn a_job_taken_from_its_worker_cannot_complete_in_its_transaction(rt: Arc<dyn Runtime>) {
    let db = with_tables(rt.clone()).await;
    let running = worker(&db, true).await;
    for task in ["pay", "pay_sqlx", "three_steps"] {
        let job = db.utils().add_raw_job(task, json!({"steal": true}), JobSpec::default()).await.unwrap();
        let error = recorded_error(&db, job.id).await;
        let lost = format!(
            "job {} is no longer this worker's (held by thief): its transaction was rolled back",
            job.id
        );
        assert!(error.contains(&lost), "{task}: {error}");
        assert_eq!(
            counts(&db, "effects", job.id).await,
            json!({}),
            "{task}: the handler's writes rolled back"
        );
        let held = format!(
            "select count(*) from graphile_worker._private_jobs where id = {} and locked_by = 'thief'",
            job.id
        );
        assert_eq!(db.count(&held).await, 1, "{task}: the job is still the thief's, untouched");
        let steps =
            format!("select count(*) from formica_graphile_worker.job_steps where job_id = {}", job.id);
        assert_eq!(db.count(&steps).await, 0, "{task}: no step recorded");
    }
    running.stop(Duration::from_secs(10)).await;
}

async fn a_job_completes_in_its_transaction_once_and_a_failed_step_runs_again(rt: Arc<dyn Runtime>) {
    let db = with_tables(rt.clone()).await;
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = events.clone();
    let pool = crate::sqlx::sqlx_pool(&db).await;
    let options = durable_tasks(db.worker_options(), "")
        .add_extension(pool)
        .max_pool_size(12)
        .history(HistoryOptions::off())
        .on_event(move |e| seen.lock().unwrap().push(format!("{e:?}")));
    let running = Running::listening(&rt, options).await;
    let mut ids = Vec::new();
    for (task, payload) in
        [("pay", json!({})), ("pay_sqlx", json!({})), ("three_steps", json!({"fail_once": true}))]
    {
        ids.push(db.utils().add_raw_job(task, payload, JobSpec::default()).await.unwrap().id);
    }
    let left = format!(
        "select count(*) from graphile_worker._private_jobs where id = any('{{{}}}')",
        ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
    );
    db.wait_for_count(&left, 0, Duration::from_secs(30)).await;
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(counts(&db, "effects", ids[0]).await, json!({"paid": 1}));
    assert_eq!(counts(&db, "effects", ids[1]).await, json!({"paid": 1}));
    // Step `b` failed once, its write rolled back, and ran again; `a` ran once.
    assert_eq!(counts(&db, "effects", ids[2]).await, json!({"a": 1, "b": 1, "c": 1}));
    assert_eq!(counts(&db, "runs", ids[2]).await, json!({"a": 1, "b": 2, "c": 1}));
    let steps = format!("select count(*) from formica_graphile_worker.job_steps where job_id = {}", ids[2]);
    assert_eq!(db.count(&steps).await, 0, "with history off, the steps went with the job");
    // No completion of the worker's own followed the handlers': none was fenced off.
    let events = events.lock().unwrap();
    assert!(!events.iter().any(|e| e.starts_with("OutcomeFenced")), "{events:?}");
    let successes = events.iter().filter(|e| e.starts_with("JobSuccess")).count();
    assert_eq!(successes, 3, "each job reported a success once: {events:?}");
}

on_both_runtimes!(
    a_job_taken_from_its_worker_cannot_complete_in_its_transaction,
    a_job_completes_in_its_transaction_once_and_a_failed_step_runs_again,
);

#[test]
fn a_step_name_must_be_text() {
    on_tokio(|db| async move {
        let options = db.worker_options().define_raw_job("bad_step", |ctx, _| async move {
            let refused = ctx.step("", |_| Box::pin(async { Ok(1) })).await;
            let error = refused.err().map(|e| e.to_string()).unwrap_or_default();
            record_error(&ctx, error).await?;
            Ok(())
        });
        let running = Running::listening(&db.runtime, options).await;
        let job = db.utils().add_raw_job("bad_step", json!({}), JobSpec::default()).await.unwrap();
        assert_eq!(
            recorded_error(&db, job.id).await,
            "invalid step name \"\": a step is named by non-empty text without NUL"
        );
        running.stop(Duration::from_secs(10)).await;
    });
}

/// A workflow's job completed in its handler's transaction settles in it, as the worker's
/// own completion would: with the resolver's first pass gone by and the next an hour away,
/// the job waiting for it is released by that commit and runs.
#[test]
fn a_workflow_job_completed_in_its_transaction_releases_what_waits_for_it() {
    on_tokio(|db| async move {
        let pool = crate::sqlx::sqlx_pool(&db).await;
        let options = durable_tasks(db.worker_options(), "")
            .add_extension(pool)
            .max_pool_size(12)
            .workflow_resolve_every(Duration::from_secs(3600));
        let running = Running::listening(&db.runtime, options).await;
        formica_tests::sleep(db.runtime.as_ref(), Duration::from_millis(1500)).await;
        let chain = formica::Workflow::new("pay twice")
            .job(formica::WorkflowJob::raw("first", "pay", json!({})))
            .job(formica::WorkflowJob::raw("second", "pay_sqlx", json!({})).depends_on(["first"]));
        db.utils().add_workflow(&chain).await.unwrap();
        db.wait_for_count("select count(*) from effects", 2, Duration::from_secs(10)).await;
        db.wait_for_count("select count(*) from graphile_worker._private_jobs", 0, Duration::from_secs(10))
            .await;
        running.stop(Duration::from_secs(10)).await;
    });
}
