//! Workflow jobs that wait for a signal or a timer (records step 23) on real PostgreSQL:
//! what each way of sending a signal answers (received, sent twice, for no waiting job, to a
//! workflow gone), the release in the signal's own transaction, a signal sent by an
//! application's trigger, the timeouts (released or cancelled, then left by a retry), the
//! timer's run_at; and, with a worker SIGKILLed while signals and completions race, every
//! job waiting for both released exactly once.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::inspect::{JobRef, Reason};
use formica::{JobSpec, OnSignalTimeout, SignalReport, SignalSent, SignalWait, Workflow, WorkflowJob};
use formica_tests::dashboard::Dashboard;
use formica_tests::{Running, TestDb};
use formica_ui::Options;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// The payload of workflow `workflow`'s job `name` as released (none if not released).
async fn released_payload(db: &TestDb, workflow: i64, name: &str) -> Option<Value> {
    let sql = "select live.payload::jsonb from formica_graphile_worker.workflow_jobs as jobs \
        join graphile_worker._private_jobs as live on live.id = jobs.job_id \
        where jobs.workflow_id = $1 and jobs.name = $2 and jobs.state = 'released'";
    db.client().await.query_opt(sql, &[&workflow, &name]).await.unwrap().map(|r| r.get(0))
}

/// Workflow `workflow`'s job `name`'s state.
async fn state(db: &TestDb, workflow: i64, name: &str) -> String {
    let sql = "select state from formica_graphile_worker.workflow_jobs where workflow_id = $1 and name = $2";
    db.client().await.query_one(sql, &[&workflow, &name]).await.unwrap().get(0)
}

/// Complete workflow `workflow`'s released job `name` as graphile-worker's workers would (a
/// delete), told by the resolver.
async fn complete_outside(db: &TestDb, workflow: i64, name: &str) {
    let sql = "delete from graphile_worker._private_jobs where id = (select job_id from \
        formica_graphile_worker.workflow_jobs where workflow_id = $1 and name = $2)";
    assert_eq!(db.client().await.execute(sql, &[&workflow, &name]).await.unwrap(), 1);
    db.utils().resolve_workflows().await.unwrap();
}

fn job(name: &str) -> WorkflowJob {
    WorkflowJob::raw(name, "t", json!({ "name": name }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_releases_what_waits_for_it_and_every_other_send_has_a_stated_answer() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let workflow = Workflow::new("approval")
        .job(job("draft"))
        .job(job("publish").depends_on(["draft"]).wait_for_signal(SignalWait::new("approved")))
        .job(job("notify").wait_for_signal(SignalWait::new("approved")))
        .job(job("archive").wait_for_signal(SignalWait::new("archived")));
    let added = utils.add_workflow(&workflow).await.unwrap();
    assert_eq!(added.released.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["draft"]);

    // In the caller's transaction: rolled back, nothing was received nor released.
    let mut client = db.client().await;
    let tx = client.transaction().await.unwrap();
    let sent =
        utils.signal_workflow_in(&tx, added.id, "approved", Some(&json!({ "by": "ann" }))).await.unwrap();
    let want = SignalSent::Received {
        jobs: vec!["publish".into(), "notify".into()],
        released: vec!["notify".into()],
    };
    assert_eq!(sent, want, "notify has no dependency: released at once; publish waits for draft");
    tx.rollback().await.unwrap();
    assert_eq!(state(&db, added.id, "notify").await, "waiting", "the release rolled back with the signal");

    assert_eq!(
        utils.signal_workflow(added.id, "approved", Some(&json!({ "by": "ann" }))).await.unwrap(),
        want
    );
    let payload = released_payload(&db, added.id, "notify").await.expect("notify released");
    let report: SignalReport = serde_json::from_value(payload["signal"].clone()).unwrap();
    assert_eq!(
        report,
        SignalReport { name: "approved".into(), payload: json!({ "by": "ann" }), timed_out: false }
    );
    assert_eq!(payload["name"], json!("notify"), "the job's own payload stays");

    // Sent again, with another payload: nothing changes, the first payload stays.
    let again = utils.signal_workflow(added.id, "approved", Some(&json!({ "by": "bob" }))).await.unwrap();
    assert_eq!(again, SignalSent::Duplicate);
    assert_eq!(utils.signal_workflow(added.id, "nobody", None).await.unwrap(), SignalSent::NotWaiting);
    assert_eq!(
        utils.signal_workflow(added.id + 1000, "approved", None).await.unwrap(),
        SignalSent::NoWorkflow
    );

    // The dependency settles: publish, which had its signal, is released by that settling.
    complete_outside(&db, added.id, "draft").await;
    let payload = released_payload(&db, added.id, "publish").await.expect("publish released");
    assert_eq!(payload["signal"]["payload"], json!({ "by": "ann" }));

    // Cancelled: its waiting job no longer waits.
    utils.cancel_workflow(added.id, "by the test").await.unwrap();
    assert_eq!(utils.signal_workflow(added.id, "archived", None).await.unwrap(), SignalSent::NotWaiting);
    assert_eq!(state(&db, added.id, "archive").await, "cancelled");

    // Deleted (by hand, as retention would): no workflow.
    let delete = "delete from formica_graphile_worker.workflows where id = $1";
    db.client().await.execute(delete, &[&added.id]).await.unwrap();
    assert_eq!(utils.signal_workflow(added.id, "archived", None).await.unwrap(), SignalSent::NoWorkflow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applications_trigger_sends_a_signal_in_its_own_transaction() {
    let db = TestDb::migrated().await;
    let workflow = Workflow::new("webhook").job(job("ship").wait_for_signal(SignalWait::new("paid")));
    let added = db.utils().add_workflow(&workflow).await.unwrap();
    db.client()
        .await
        .batch_execute(
            "create table payments (workflow_id bigint not null, amount int not null);
             create function payment_signal() returns trigger language plpgsql as $$
             begin
               perform formica_graphile_worker.signal_workflow(new.workflow_id, 'paid',
                 jsonb_build_object('amount', new.amount));
               return new;
             end $$;
             create trigger payment_signal after insert on payments
               for each row execute function payment_signal();",
        )
        .await
        .unwrap();
    let insert = "insert into payments (workflow_id, amount) values ($1, 42)";
    db.client().await.execute(insert, &[&added.id]).await.unwrap();
    let payload = released_payload(&db, added.id, "ship").await.expect("ship released by the trigger");
    assert_eq!(payload["signal"], json!({ "name": "paid", "payload": { "amount": 42 }, "timed_out": false }));
    let sql = "select outcome from formica_graphile_worker.signal_workflow($1, 'paid', null)";
    let outcome: String = db.client().await.query_one(sql, &[&added.id]).await.unwrap().get(0);
    assert_eq!(outcome, "duplicate", "SQL answers as WorkerUtils does");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_not_come_in_time_releases_or_cancels_its_job_as_the_workflow_says() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let within = |on| SignalWait::new("approved").timeout(Duration::from_secs(3600), on);
    let workflow = Workflow::new("timeouts")
        .job(job("first"))
        .job(job("go_anyway").depends_on(["first"]).wait_for_signal(within(OnSignalTimeout::Release)))
        .job(job("give_up").depends_on(["first"]).wait_for_signal(within(OnSignalTimeout::Cancel)))
        .job(job("after").depends_on(["give_up"]));
    let added = utils.add_workflow(&workflow).await.unwrap();
    let deadlines =
        "select count(*) from formica_graphile_worker.workflow_waits where signal_deadline is not null";
    assert_eq!(db.count(deadlines).await, 0, "the timeout counts from when the dependencies settle");
    complete_outside(&db, added.id, "first").await;
    let armed = "select count(*) from formica_graphile_worker.workflow_waits \
        where signal_deadline between now() + interval '59 minutes' and now() + interval '61 minutes'";
    assert_eq!(db.count(armed).await, 2, "both wait for their signal only, an hour from now");
    assert_eq!(utils.resolve_workflows().await.unwrap(), 0, "not due yet");
    // An hour later.
    let later = "update formica_graphile_worker.workflow_waits set signal_deadline = signal_deadline - interval '2 hours'";
    db.client().await.execute(later, &[]).await.unwrap();
    assert_eq!(utils.resolve_workflows().await.unwrap(), 2);
    let payload = released_payload(&db, added.id, "go_anyway").await.expect("released at its timeout");
    assert_eq!(payload["signal"], json!({ "name": "approved", "payload": null, "timed_out": true }));
    assert_eq!(state(&db, added.id, "give_up").await, "cancelled");
    assert_eq!(state(&db, added.id, "after").await, "cancelled", "what waits for it is settled too");
    let error = "select last_error from formica_graphile_worker.workflow_jobs where workflow_id = $1 and name = 'give_up'";
    let error: String = db.client().await.query_one(error, &[&added.id]).await.unwrap().get(0);
    assert_eq!(error, "cancelled: the signal 'approved' did not come within 01:00:00");
    assert_eq!(utils.signal_workflow(added.id, "approved", None).await.unwrap(), SignalSent::NotWaiting);
    // A retry runs failed jobs again but leaves what its timeout cancelled.
    complete_outside(&db, added.id, "go_anyway").await;
    let retried = utils.retry_workflow(added.id).await.unwrap();
    assert!(retried.rerun.is_empty() && retried.waiting.is_empty(), "{retried:?}");
    assert_eq!(state(&db, added.id, "give_up").await, "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_runs_a_job_its_delay_after_its_dependencies_settle() {
    let db = TestDb::migrated().await;
    let in_a_day = chrono::Utc::now() + chrono::Duration::days(1);
    let workflow = Workflow::new("timer")
        .job(job("first"))
        .job(job("later").depends_on(["first"]).delay(Duration::from_secs(600)))
        .job(job("at_once").delay(Duration::from_secs(60)))
        .job(
            job("own_run_at")
                .delay(Duration::from_secs(60))
                .spec(JobSpec::builder().run_at(in_a_day).build()),
        );
    let added = db.utils().add_workflow(&workflow).await.unwrap();
    complete_outside(&db, added.id, "first").await;
    let delay = "select extract(epoch from live.run_at - jobs.released_at)::float8 \
        from formica_graphile_worker.workflow_jobs as jobs \
        join graphile_worker._private_jobs as live on live.id = jobs.job_id \
        where jobs.workflow_id = $1 and jobs.name = $2";
    for (name, want) in [("later", 600.0), ("at_once", 60.0), ("own_run_at", 86_400.0)] {
        let got: f64 = db.client().await.query_one(delay, &[&added.id, &name]).await.unwrap().get(0);
        assert!((got - want).abs() < 5.0, "{name} runs {got} s after its release, not {want}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_job_waits_for_shows_in_why_and_on_the_workflow_page_whose_operator_sends_signals() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let within = SignalWait::new("approved").timeout(Duration::from_secs(3600), OnSignalTimeout::Release);
    let workflow = Workflow::new("waits")
        .job(job("first"))
        .job(job("second").depends_on(["first"]).wait_for_signal(within))
        .job(job("third").depends_on(["second"]).delay(Duration::from_secs(600)));
    let added = utils.add_workflow(&workflow).await.unwrap();
    let why = |name: &str| {
        let (utils, job) = (utils.clone(), JobRef::Workflow { workflow: added.id, name: name.into() });
        async move { formica::inspect::why(&utils, &job).await.unwrap() }
    };
    let names = |why: &formica::inspect::Why| why.reasons.iter().map(Reason::name).collect::<Vec<_>>();
    let second = why("second").await;
    assert_eq!(names(&second), ["dependencies", "signal"], "{second:?}");
    assert!(matches!(&second.reasons[1], Reason::Signal { name, deadline: None, .. } if name == "approved"));
    let at = |t: &chrono::DateTime<chrono::Utc>| t.to_rfc3339();
    let said = second.reasons[1].describe("t", &at);
    assert!(said.contains(&format!("formica workflow signal {} approved", added.id)), "{said}");

    let ui = Dashboard::start(utils.clone(), Options::default()).await;
    let page = ui.get(&format!("/workflows/{}", added.id)).await.body;
    assert!(page.contains("<td>jobs first; signal &quot;approved&quot;</td>"), "{page}");
    assert!(page.contains("<td>jobs second</td>"), "third waits for second: {page}");
    assert!(page.contains(r#"data-action="/api/workflows/"#) && page.contains("Send signal"), "{page}");
    let read_only = Dashboard::start(utils.clone(), Options { read_only: true, ..Default::default() }).await;
    let shown = read_only.get(&format!("/workflows/{}", added.id)).await.body;
    assert!(!shown.contains("Send signal") && shown.contains("signal &quot;approved&quot;"), "{shown}");

    complete_outside(&db, added.id, "first").await;
    let second = why("second").await;
    assert_eq!(names(&second), ["signal"], "its dependencies settled: {second:?}");
    assert!(matches!(second.reasons[0], Reason::Signal { deadline: Some(_), .. }), "its timeout runs");
    let path = format!("/api/workflows/{}/signal", added.id);
    let sent = ui.action(&path, json!({ "name": "approved", "payload": "{\"ok\": true}" })).await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    assert_eq!(sent.json()["released"], json!(["second"]));
    let again = ui.action(&path, json!({ "name": "approved" })).await;
    assert_eq!(again.status, 409, "sent twice: {}", again.body);
    assert!(again.body.contains("already got it"), "{}", again.body);
    let bad = ui.action(&path, json!({ "name": "approved", "payload": "{nope" })).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let gone = ui.action(&format!("/api/workflows/{}/signal", added.id + 1000), json!({ "name": "x" })).await;
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert_eq!(
        released_payload(&db, added.id, "second").await.unwrap()["signal"]["payload"],
        json!({ "ok": true })
    );

    complete_outside(&db, added.id, "second").await;
    let third = why("third").await;
    assert_eq!(names(&third), ["timer", "no_worker"], "{third:?}");
    let Reason::Timer { run_at, .. } = third.reasons[0] else { unreachable!() };
    let away = (run_at - chrono::Utc::now()).num_seconds();
    assert!((590..=600).contains(&away), "runs 600 s after its release: {away}");
    let page = ui.get(&format!("/workflows/{}", added.id)).await.body;
    assert!(page.contains("<td>timer until "), "{page}");
}

/// The race: workflows of a job `a`, and `b` waiting for `a` and for the signal `go`. A
/// worker process completes the `a`s while this process sends the signals, and is SIGKILLed
/// in the middle; a worker of this process finishes. Every `b` ran exactly once, with its
/// signal.
const RACE_WORKFLOWS: usize = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_racing_a_completion_releases_its_job_exactly_once_when_the_worker_is_killed() {
    let rt: Arc<dyn formica::Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute("create table ran (workflow bigint not null, signal jsonb)")
        .await
        .unwrap();
    let utils = db.utils();
    let race = |round: usize| {
        Workflow::new(format!("race {round}")).job(WorkflowJob::raw("a", "a", json!({}))).job(
            WorkflowJob::raw("b", "b", json!({})).depends_on(["a"]).wait_for_signal(SignalWait::new("go")),
        )
    };
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "workflow_signals::worker_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("FORMICA_SIGNALS_URL", &db.url)
        .stdout(Stdio::null())
        .spawn()
        .expect("start a worker process");
    // Once the worker runs, each workflow's a is completed by it (told by LISTEN) while this
    // process sends b's signal a moment after adding it; the worker dies part way.
    let first = utils.add_workflow(&race(0)).await.unwrap().id;
    let completed =
        "select count(*) from formica_graphile_worker.workflow_jobs where name = 'a' and state = 'completed'";
    db.wait_for_count(completed, 1, Duration::from_secs(60)).await;
    let (mut by_signal, mut by_completion) = (0, 0);
    for n in 0..RACE_WORKFLOWS {
        let id = if n == 0 { first } else { utils.add_workflow(&race(n)).await.unwrap().id };
        tokio::time::sleep(Duration::from_micros(500 * (n % 7) as u64)).await;
        match utils.signal_workflow(id, "go", Some(&json!({ "n": n }))).await.unwrap() {
            SignalSent::Received { released, .. } if released.is_empty() => by_completion += 1,
            SignalSent::Received { .. } => by_signal += 1,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("workflow {id}: {other:?}");
            }
        }
        if n == RACE_WORKFLOWS / 2 {
            child.kill().expect("SIGKILL the worker");
            child.wait().unwrap();
        }
    }
    assert!(by_signal > 0 && by_completion > 0, "both orders happened: {by_signal} released by their signal");
    db.utils().force_unlock_workers_even_if_alive(&["doomed"]).await.unwrap();
    let options = db
        .worker_options()
        .complete_job_batch_delay(Duration::ZERO)
        .poll_interval(Duration::from_millis(100))
        .define_raw_job("a", |_, _| Box::pin(async { Ok(()) }))
        .define_raw_job("b", |ctx, payload| {
            Box::pin(async move {
                let client = ctx.client().await?;
                let sql = "insert into ran (workflow, signal) values ((select workflow_id from \
                    formica_graphile_worker.workflow_jobs where job_id = $1), $2)";
                client.execute(sql, &[&ctx.job().id, &payload["signal"]]).await?;
                Ok(())
            })
        });
    let running = Running::listening(&rt, options).await;
    db.wait_for_count("select count(*) from ran", RACE_WORKFLOWS as i64, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop(Duration::from_secs(10)).await;
    let once =
        "select count(*) from (select workflow from ran group by workflow having count(*) = 1) as once";
    assert_eq!(db.count(once).await, RACE_WORKFLOWS as i64, "every b ran exactly once");
    assert_eq!(db.count("select count(*) from ran").await, RACE_WORKFLOWS as i64);
    let with_signal = "select count(*) from ran where signal ->> 'name' = 'go' and signal -> 'payload' ? 'n'";
    assert_eq!(db.count(with_signal).await, RACE_WORKFLOWS as i64, "each with its signal's payload");
}

/// The worker process the race test SIGKILLs (only when it says so).
#[test]
#[ignore = "started by a_signal_racing_a_completion_releases_its_job_exactly_once_when_the_worker_is_killed"]
fn worker_process() {
    let Ok(url) = std::env::var("FORMICA_SIGNALS_URL") else { return };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let options = formica_tokio::WorkerOptions::default()
            .database_url(url)
            .worker_id("doomed")
            .concurrency(4)
            .complete_job_batch_delay(Duration::ZERO)
            .poll_interval(Duration::from_millis(50))
            .define_raw_job("a", |_, _| Box::pin(async { Ok(()) }))
            // Never ends: the killed worker holds its b's, released to the next worker.
            .define_raw_job("b", |_, _| Box::pin(std::future::pending()));
        options.init().await.expect("worker init").run().await.expect("worker run");
    });
}
