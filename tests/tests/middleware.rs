//! Middleware on a real PostgreSQL, on both runtimes: run layers nest in the order given,
//! change the context and the payload, skip a job (completed, reported) and turn one
//! outcome into another; add layers fill and check a job's fields and refuse it, on
//! `WorkerUtils` and on the utilities of a worker's jobs.

use formica::{Error, Event, JobContext, JobSpec, Runtime, TaskResult};
use formica_tests::{on_both_runtimes, timeout, TestDb};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use formica_tokio::{Next, TaskOutcome};

// Both adapters re-export the middleware API, the same types: an application uses it from
// its runtime's crate.
const _: fn(formica_async_std::Next) -> formica_tokio::Next = |next| next;
const _: fn(formica_async_std::TaskOutcome) -> formica_tokio::TaskOutcome = |outcome| outcome;

type Log = Arc<Mutex<Vec<String>>>;

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// A run layer that logs `<name>>` before the rest of the chain and `<<name>` after it.
fn logging(
    log: &Log,
    name: &'static str,
) -> impl Fn(JobContext, Next) -> futures::future::BoxFuture<'static, TaskOutcome> + Send + Sync + 'static {
    let log = log.clone();
    move |ctx, next| {
        let log = log.clone();
        Box::pin(async move {
            log.lock().unwrap().push(format!("{name}>"));
            let outcome = next.run(ctx).await;
            log.lock().unwrap().push(format!("<{name}"));
            outcome
        })
    }
}

/// The job's tenant, handed to the task by a run layer.
struct Tenant(String);

async fn run_once(rt: &Arc<dyn Runtime>, options: formica::WorkerOptions) {
    let worker = options.init().await.expect("init");
    timeout(rt.as_ref(), Duration::from_secs(20), worker.run_once()).await.expect("returns").expect("ok");
}

async fn run_layers_nest_in_order_and_change_the_context_and_the_payload(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    db.utils().add_raw_job("t", json!({"n": 1}), JobSpec::default()).await.unwrap();
    let log: Log = Default::default();
    let task_log = log.clone();
    let options = db
        .worker_options()
        .around_run(logging(&log, "outer"))
        .around_run(|ctx, mut next| async move {
            let doubled = next.payload()["n"].as_i64().unwrap() * 2;
            next.payload_mut()["n"] = json!(doubled);
            next.run(ctx.with_extension(Tenant("acme".into()))).await
        })
        .around_run(logging(&log, "inner"))
        .define_raw_job("t", move |ctx: JobContext, payload: Value| {
            let log = task_log.clone();
            async move {
                let tenant = &ctx.extension::<Tenant>()?.0;
                log.lock().unwrap().push(format!("task n={} tenant={tenant}", payload["n"]));
                TaskResult::Ok(())
            }
        });
    run_once(&rt, options).await;
    assert_eq!(entries(&log), ["outer>", "inner>", "task n=2 tenant=acme", "<inner", "<outer"]);
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0, "completed");
}

async fn a_layer_skips_a_job_which_is_completed_unrun_and_reported(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let skipped =
        utils.add_raw_job("t", json!({"n": 1, "disabled": true}), JobSpec::default()).await.unwrap();
    utils.add_raw_job("t", json!({"n": 2}), JobSpec::default()).await.unwrap();
    let (ran, events): (Log, Arc<Mutex<Vec<Event>>>) = Default::default();
    let (ran_by_task, seen) = (ran.clone(), events.clone());
    let options = db
        .worker_options()
        .around_run(|ctx, next| async move {
            match next.payload()["disabled"] == json!(true) {
                true => TaskOutcome::Skipped("account disabled".into()),
                false => next.run(ctx).await,
            }
        })
        .on_event(move |event| {
            if let Event::JobSkipped { .. } | Event::JobSuccess { .. } = event {
                seen.lock().unwrap().push(event.clone());
            }
        })
        .define_raw_job("t", move |_, payload: Value| {
            let ran = ran_by_task.clone();
            async move {
                ran.lock().unwrap().push(payload["n"].to_string());
                TaskResult::Ok(())
            }
        });
    run_once(&rt, options).await;
    assert_eq!(entries(&ran), ["2"], "the skipped job did not run");
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0, "both completed");
    let events = events.lock().unwrap().clone();
    let skips: Vec<_> = events.iter().filter(|e| matches!(e, Event::JobSkipped { .. })).collect();
    assert_eq!(
        skips,
        [&Event::JobSkipped {
            job_id: skipped.id,
            task: "t".into(),
            queue: None,
            attempt: 1,
            reason: "account disabled".into()
        }],
        "{events:?}"
    );
    assert_eq!(events.len(), 2, "one success, one skip, not both for the skipped job: {events:?}");
}

async fn a_layer_turns_an_outcome_into_another_and_its_panic_fails_the_attempt(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    utils.add_raw_job("gone", json!({}), JobSpec::default()).await.unwrap();
    let checked = utils.add_raw_job("checked", json!({}), JobSpec::default()).await.unwrap();
    let panicky = utils.add_raw_job("panicky", json!({}), JobSpec::default()).await.unwrap();
    let options = db
        .worker_options()
        .around_run(|ctx, next| async move {
            let task = ctx.job().task_identifier.clone();
            if task == "panicky" {
                panic!("the layer broke");
            }
            match (task.as_str(), next.run(ctx).await) {
                // The resource is gone for good: nothing left to do.
                ("gone", TaskOutcome::Err(e)) if e.contains("404") => TaskOutcome::Ok,
                ("checked", TaskOutcome::Ok) => TaskOutcome::Err("the post-check failed".into()),
                (_, outcome) => outcome,
            }
        })
        .define_raw_job("gone", |_, _| async { TaskResult::Err("HTTP 404".into()) })
        .define_raw_job("checked", |_, _| async { TaskResult::Ok(()) })
        .define_raw_job("panicky", |_, _| async { TaskResult::Ok(()) });
    run_once(&rt, options).await;
    let client = db.client().await;
    let rows = client
        .query("select id, attempts, last_error from graphile_worker.jobs order by id", &[])
        .await
        .unwrap();
    let left: Vec<(i64, i16, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
    assert_eq!(
        left,
        [
            (checked.id, 1, Some("the post-check failed".to_owned())),
            (panicky.id, 1, Some("task panicked: the layer broke".to_owned()))
        ],
        "the 404 became a success (completed), the success a failure; the layer's panic failed its attempt"
    );
}

async fn add_layers_fill_and_check_fields_and_refuse_jobs(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils().before_add(|job| match job.payload.get("tenant") {
        Some(_) => Ok(()),
        None => Err("every job names its tenant".into()),
    });
    // The second layer sees what the first let through, and fills a field.
    let utils = utils.before_add(|job| {
        job.spec.queue_name.get_or_insert_with(|| format!("tenant-{}", job.payload["tenant"]));
        Ok(())
    });
    let job = utils.add_raw_job("t", json!({"tenant": 7}), JobSpec::default()).await.unwrap();
    assert_eq!(job.queue_name.as_deref(), Some("tenant-7"));
    let refused = utils.add_raw_job("t", json!({}), JobSpec::default()).await.unwrap_err();
    assert!(
        matches!(&refused, Error::Refused { task, reason } if task == "t" && reason == "every job names its tenant"),
        "{refused:?}"
    );
    let batch = [
        formica::RawJob::new("t", json!({"tenant": 1}), JobSpec::default()),
        formica::RawJob::new("t", json!({"n": 2}), JobSpec::default()),
    ];
    assert!(matches!(utils.add_raw_jobs(&batch).await, Err(Error::Refused { .. })));
    assert_eq!(
        db.count("select count(*) from graphile_worker.jobs").await,
        1,
        "neither the refused job nor any of its batch was stored"
    );

    // A worker's layers apply to what its jobs add.
    db.utils().add_raw_job("parent", json!({}), JobSpec::default()).await.unwrap();
    let options = db
        .worker_options()
        .before_add(|job| {
            job.spec.flags.get_or_insert_with(Vec::new).push("from-a-job".into());
            Ok(())
        })
        .define_raw_job("parent", |ctx: JobContext, _| async move {
            ctx.utils().add_raw_job("child", json!({}), JobSpec::default()).await?;
            TaskResult::Ok(())
        });
    run_once(&rt, options).await;
    let flags: Value = db
        .client()
        .await
        .query_one(
            "select flags from graphile_worker._private_jobs where task_id = \
                    (select id from graphile_worker._private_tasks where identifier = 'child')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(flags, json!({"from-a-job": true}));
}

/// `docs/guide/middleware.md`'s add layers, word for word (indented): run on PostgreSQL,
/// they put an account's jobs in the queue named after it.
mod guide_add_layers {
    use formica_tokio::serde_json::json;
    use formica_tokio::{Error, JobSpec, WorkerUtils};

    async fn add(utils: WorkerUtils) -> Result<(), Error> {
        let utils = utils
            .before_add(|job| match job.payload.get("account") {
                Some(account) if account.is_string() => Ok(()),
                _ => Err("every job names its account".into()),
            })
            .before_add(|job| {
                // One queue per account: an account's jobs run one at a time. (`as_str`: the
                // account's name, not its JSON text, which has quotes.)
                let account = job.payload["account"].as_str().unwrap_or_default();
                job.spec.queue_name.get_or_insert_with(|| format!("account-{account}"));
                Ok(())
            });
        let job = utils.add_raw_job("report", json!({ "account": "acme" }), JobSpec::default()).await?;
        assert_eq!(job.queue_name.as_deref(), Some("account-acme"));
        let refused = utils.add_raw_job("report", json!({}), JobSpec::default()).await;
        assert!(matches!(refused, Err(Error::Refused { .. })));
        Ok(())
    }

    #[tokio::test]
    async fn the_guide_s_add_layers_name_each_account_s_queue_after_it() {
        let db = formica_tests::TestDb::migrated().await;
        add(db.utils()).await.unwrap();
        let queues: Vec<String> = db
            .client()
            .await
            .query("select queue_name from graphile_worker.jobs", &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        assert_eq!(queues, ["account-acme"]);

        let guide = include_str!("../../docs/guide/middleware.md");
        let blocks = guide.split("```rust\n").skip(1).map(|b| &b[..b.find("```").expect("the block ends")]);
        let shown = blocks.into_iter().find(|b| b.contains(".before_add(")).expect("the guide's block");
        let indented: String = shown
            .lines()
            .map(|l| if l.is_empty() { "\n".to_owned() } else { format!("    {l}\n") })
            .collect();
        assert!(include_str!("middleware.rs").contains(&indented), "the guide's block is not this module's");
    }
}

on_both_runtimes!(
    run_layers_nest_in_order_and_change_the_context_and_the_payload,
    a_layer_skips_a_job_which_is_completed_unrun_and_reported,
    a_layer_turns_an_outcome_into_another_and_its_panic_fails_the_attempt,
    add_layers_fill_and_check_fields_and_refuse_jobs,
);
