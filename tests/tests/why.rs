//! Why a job is not running, and when it will (`formica::inspect::why`,
//! docs/guide/why.md), on a real PostgreSQL: each reason built for real (a job due later, a
//! named queue held by a running job, a pause, a full cap, a used-up rate limit, flags no
//! worker takes, no worker for the task, a workflow's dependencies, attempts used up, a lock
//! of a dead worker), and the answer checked: the reason, its evidence, and when it ends;
//! a running job says where and since when; a job that never existed is an error naming it;
//! the estimate counts the jobs ahead and reads the task's pace from the history.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::{Duration as Span, Utc};
use formica::controls::{Control, Pause};
use formica::inspect::{self, Holder, JobRef, Reason, Why};
use formica::{Error, JobContext, JobSpec, WorkerUtils, Workflow, WorkflowJob};
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A worker running `tasks`, each job of which waits until `gate` opens (then succeeds).
fn gated(db: &TestDb, tasks: &[&str], gate: &Arc<AtomicBool>) -> formica::WorkerOptions {
    let mut options = db.worker_options().concurrency(4).poll_interval(Duration::from_millis(100));
    for task in tasks {
        let gate = gate.clone();
        options = options.define_raw_job(task, move |ctx: JobContext, _payload| {
            let (rt, gate) = (ctx.utils().pool().runtime().clone(), gate.clone());
            Box::pin(async move {
                while !gate.load(Ordering::Relaxed) {
                    formica_tests::sleep(rt.as_ref(), Duration::from_millis(20)).await;
                }
                Ok(())
            })
        });
    }
    options
}

async fn why(utils: &WorkerUtils, id: i64) -> Why {
    inspect::why(utils, &JobRef::Id(id)).await.unwrap()
}

/// The answer for job `id` once `done` holds of it (the workers' leases and fetches settle
/// within a few seconds), or a panic showing the last answer.
async fn why_once(db: &TestDb, id: i64, what: &str, done: impl Fn(&Why) -> bool) -> Why {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let answer = why(&db.utils(), id).await;
        if done(&answer) {
            return answer;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {answer:#?}");
        formica_tests::sleep(db.runtime.as_ref(), Duration::from_millis(50)).await;
    }
}

fn names(why: &Why) -> Vec<&'static str> {
    why.reasons.iter().map(Reason::name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_no_worker_is_not_due_paused_and_runs_nowhere() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let later = Utc::now() + Span::hours(1);
    let spec = JobSpec { run_at: Some(later), queue_name: Some("mail".into()), ..JobSpec::default() };
    let job = utils.add_raw_job("send_email", json!({}), spec).await.unwrap();
    utils.pause(&Pause::queue("mail"), Some("provider down"), Some("alice")).await.unwrap();

    let answer = why(&utils, job.id).await;
    assert_eq!((answer.state.as_str(), answer.running.is_none()), ("scheduled", true));
    assert_eq!(names(&answer), ["not_due", "paused", "no_worker"], "{answer:#?}");
    match &answer.reasons[0] {
        Reason::NotDue { run_at, retrying } => {
            assert_eq!(((*run_at - later).num_milliseconds().abs() < 1, *retrying), (true, false))
        }
        other => panic!("{other:?}"),
    }
    match &answer.reasons[1] {
        Reason::Paused { scope, name, why, by, .. } => assert_eq!(
            (scope.as_str(), name.as_str(), why.as_deref(), by.as_str()),
            ("queue", "mail", Some("provider down"), "alice")
        ),
        other => panic!("{other:?}"),
    }
    assert!(matches!(answer.reasons[2], Reason::NoWorker { live_workers: 0 }));
    assert_eq!(answer.reasons[0].until(), Some(job.run_at), "not due: until its run_at");
    assert!(answer.estimate.is_none(), "paused, with no worker: no start can be estimated");
    let text = answer.reasons[1].describe("send_email", &|t| t.to_rfc3339());
    assert!(text.contains(r#"queue "mail" is paused by alice"#) && text.contains("provider down"), "{text}");

    // A job that never existed is an error naming it; a malformed reference is refused.
    let missing = inspect::why(&utils, &JobRef::Id(job.id + 1000)).await.unwrap_err();
    assert!(matches!(&missing, Error::JobNotFound(m) if m.contains(&format!("no job {}", job.id + 1000))));
    let refused = "7/".parse::<JobRef>().unwrap_err();
    assert!(refused.contains(r#""7/" names no job"#), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_holds_its_queue_and_its_cap_and_others_wait_on_them() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    utils.set_control(&Control::cap("import", 1), Some("ops")).await.unwrap();
    let gate = Arc::new(AtomicBool::new(false));
    let worker = Running::listening(&db.runtime, gated(&db, &["import", "mail"], &gate)).await;
    let in_queue = JobSpec { queue_name: Some("q".into()), ..JobSpec::default() };
    let first = utils.add_raw_job("mail", json!({}), in_queue.clone()).await.unwrap();
    let holder = utils.add_raw_job("import", json!({}), JobSpec::default()).await.unwrap();

    // The running jobs: where and since when.
    let running = why_once(&db, first.id, "the first job runs", |w| w.running.is_some()).await;
    let at = running.running.as_ref().unwrap();
    assert_eq!((at.worker.as_str(), at.alive_until.is_some()), (worker.worker_id(), true));
    assert!(at.since.is_some() && running.reasons.is_empty(), "{running:#?}");
    why_once(&db, holder.id, "the import runs", |w| w.running.is_some()).await;

    // The second job of the queue waits for the queue; the second import for the cap.
    let second = utils.add_raw_job("mail", json!({}), in_queue).await.unwrap();
    let answer = why(&utils, second.id).await;
    assert_eq!(names(&answer), ["queue_held"], "{answer:#?}");
    match &answer.reasons[0] {
        Reason::QueueHeld { queue, worker: by, holder: Holder::Alive { .. }, since } => {
            assert_eq!((queue.as_str(), by.as_str(), since.is_some()), ("q", worker.worker_id(), true))
        }
        other => panic!("{other:?}"),
    }
    let waiting = utils.add_raw_job("import", json!({}), JobSpec::default()).await.unwrap();
    let answer = why(&utils, waiting.id).await;
    assert_eq!(names(&answer), ["cap_full"], "{answer:#?}");
    match &answer.reasons[0] {
        Reason::CapFull { max: 1, holders, control, .. } => {
            assert_eq!(control, "import<=1");
            assert_eq!((holders.len(), holders[0].job_id), (1, holder.id));
            assert_eq!(holders[0].worker.as_deref(), Some(worker.worker_id()));
        }
        other => panic!("{other:?}"),
    }
    // Neither reason blocks for good: the estimate is there, counting the job ahead of it
    // (the mail job, due first) and none of its own task.
    let estimate = answer.estimate.as_ref().expect("an estimate");
    assert_eq!((estimate.ahead, estimate.ahead_of_task, estimate.more_ahead), (1, 0, false), "{estimate:?}");
    assert!(estimate.starts_at.is_some());
    gate.store(true, Ordering::Relaxed);
    worker.stop(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_used_up_says_when_it_has_room() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    utils.set_control(&Control::rate_limit("ping", 1, 60_000), None).await.unwrap();
    let gate = Arc::new(AtomicBool::new(true));
    // Added before the worker starts, so that its first fetch takes it.
    let first = utils.add_raw_job("ping", json!({}), JobSpec::default()).await.unwrap();
    let worker = Running::listening(&db.runtime, gated(&db, &["ping"], &gate)).await;
    db.wait_for_count(
        &format!("select count(*) from graphile_worker._private_jobs where id = {}", first.id),
        0,
        Duration::from_secs(30),
    )
    .await;
    let second = utils.add_raw_job("ping", json!({}), JobSpec::default()).await.unwrap();
    let answer = why(&utils, second.id).await;
    assert_eq!(names(&answer), ["rate_limited"], "{answer:#?}");
    let started: chrono::DateTime<Utc> = db
        .client()
        .await
        .query_one("select max(started_at) from formica_graphile_worker.rate_starts", &[])
        .await
        .unwrap()
        .get(0);
    match &answer.reasons[0] {
        Reason::RateLimited { started: 1, room_at, max: 1, period_ms: 60_000, .. } => {
            assert_eq!(*room_at, started + Span::minutes(1), "room when the start ages out of the minute")
        }
        other => panic!("{other:?}"),
    }
    // The first job ended: the answer says how, from the history.
    let ended = why(&utils, first.id).await;
    assert_eq!(ended.state, "completed");
    assert!(
        matches!(&ended.reasons[..], [Reason::Finished { outcome, finished_at: Some(_) }] if outcome == "completed")
    );
    // The first job's run is in the history: the task's pace is known.
    let estimate = answer.estimate.as_ref().expect("an estimate");
    assert!(estimate.per_minute.is_some_and(|p| p > 0.0), "{estimate:?}");
    assert!(estimate.starts_at.is_some_and(|t| t >= started + Span::minutes(1)), "{estimate:?}");
    worker.stop(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_no_live_worker_takes_and_tasks_none_runs_are_told_apart() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let gate = Arc::new(AtomicBool::new(true));
    let options = gated(&db, &["render"], &gate).forbidden_flags(["gpu"]);
    let worker = Running::listening(&db.runtime, options).await;
    let flagged = JobSpec { flags: Some(vec!["gpu".into()]), ..JobSpec::default() };
    let job = utils.add_raw_job("render", json!({}), flagged).await.unwrap();
    let other = utils.add_raw_job("transcode", json!({}), JobSpec::default()).await.unwrap();
    // The worker records what it runs beside its first heartbeat.
    let answer = why_once(&db, job.id, "flags refused", |w| names(w) == ["flags_refused"]).await;
    match &answer.reasons[0] {
        Reason::FlagsRefused { flags, workers } => {
            assert_eq!(
                (flags.clone(), workers.clone()),
                (vec!["gpu".to_owned()], vec![worker.worker_id().to_owned()])
            )
        }
        other => panic!("{other:?}"),
    }
    let answer = why(&utils, other.id).await;
    assert!(matches!(answer.reasons[..], [Reason::NoWorker { live_workers: 1 }]), "{answer:#?}");
    worker.stop(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_job_waits_for_what_it_depends_on_by_name() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let workflow = Workflow::new("w")
        .job(WorkflowJob::raw("a", "step", json!({})))
        .job(WorkflowJob::raw("b", "step", json!({})).depends_on(["a"]));
    let added = utils.add_workflow(&workflow).await.unwrap();
    let b = JobRef::Workflow { workflow: added.id, name: "b".into() };
    let answer = inspect::why(&utils, &b).await.unwrap();
    assert_eq!((answer.job_id, answer.state.as_str()), (None, "waiting"));
    match &answer.reasons[..] {
        [Reason::Dependencies { workflow, waiting_for }] => {
            assert_eq!((*workflow, waiting_for.len(), waiting_for[0].name.as_str()), (added.id, 1, "a"));
            assert!(waiting_for[0].job_id.is_some(), "a is released: its job is named");
        }
        other => panic!("{other:?}"),
    }
    let missing = JobRef::Workflow { workflow: added.id, name: "z".into() };
    let error = inspect::why(&utils, &missing).await.unwrap_err();
    assert!(error.to_string().contains(r#"has no job named "z""#), "{error}");
}

/// A job that is a whole workflow, released, waits for its sub-workflow: named, with its
/// jobs not settled counted down as they settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subworkflow_job_waits_for_its_subworkflow_and_says_how_much_is_left() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let inner = Workflow::new("inner")
        .job(WorkflowJob::raw("x", "step", json!({})))
        .job(WorkflowJob::raw("y", "step", json!({})).depends_on(["x"]));
    let outer = Workflow::new("outer").job(WorkflowJob::workflow("sub", inner));
    let added = utils.add_workflow(&outer).await.unwrap();
    let sub_ref = JobRef::Workflow { workflow: added.id, name: "sub".into() };
    let sql = "select subworkflow_id from formica_graphile_worker.workflow_jobs where workflow_id = $1";
    let sub: i64 = db.client().await.query_one(sql, &[&added.id]).await.unwrap().get(0);
    let left = |answer: &Why| match &answer.reasons[..] {
        [Reason::Subworkflow { workflow, subworkflow, name, unsettled, total }] => {
            assert_eq!((*workflow, *subworkflow, name.as_str(), *total), (added.id, sub, "inner", 2));
            *unsettled
        }
        other => panic!("{other:?}"),
    };
    let answer = inspect::why(&utils, &sub_ref).await.unwrap();
    assert_eq!((answer.job_id, answer.state.as_str()), (None, "released"));
    assert_eq!(left(&answer), 2);
    assert!(answer.estimate.is_none(), "it starts when its sub-workflow ends: no estimate");
    let said = answer.reasons[0].describe("", &|t| t.to_rfc3339());
    assert!(
        said.contains(&format!("waits for its sub-workflow {sub} (\"inner\"), 2 of whose 2 jobs")),
        "{said}"
    );

    let x = utils.workflow(sub).await.unwrap().unwrap().jobs[0].job_id.unwrap();
    utils.complete_jobs(&[x]).await.unwrap();
    utils.resolve_workflows().await.unwrap();
    assert_eq!(left(&inspect::why(&utils, &sub_ref).await.unwrap()), 1, "x settled, y is left");

    let y = utils.workflow(sub).await.unwrap().unwrap().jobs[1].job_id.unwrap();
    utils.complete_jobs(&[y]).await.unwrap();
    utils.resolve_workflows().await.unwrap();
    let answer = inspect::why(&utils, &sub_ref).await.unwrap();
    assert!(
        matches!(&answer.reasons[..], [Reason::Finished { outcome, .. }] if outcome == "completed"),
        "its sub-workflow ended, so did it: {answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_used_up_and_a_dead_workers_lock_are_reasons_too() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let failed = utils.add_raw_job("sync", json!({}), JobSpec::default()).await.unwrap();
    utils.permanently_fail_jobs(&[failed.id], Some("gave up")).await.unwrap();
    let answer = why(&utils, failed.id).await;
    match &answer.reasons[..] {
        [Reason::OutOfAttempts { attempts, max_attempts, last_error }] => {
            assert_eq!((attempts, last_error.as_deref()), (max_attempts, Some("gave up")))
        }
        other => panic!("{other:?}"),
    }

    // A worker whose lease lapsed (it died) still holds a job: it is freed by a live
    // worker's sweep, which there is none of yet.
    let held = utils.add_raw_job("sync", json!({}), JobSpec::default()).await.unwrap();
    let client = db.client().await;
    client
        .batch_execute(&format!(
            "insert into formica_graphile_worker.leases (worker_id, expires_at) values ('gone', now() - interval '1 minute');
             update graphile_worker._private_jobs set locked_by = 'gone', locked_at = now() - interval '2 minutes' where id = {}",
            held.id
        ))
        .await
        .unwrap();
    let answer = why(&utils, held.id).await;
    assert!(answer.running.is_none(), "a dead worker runs nothing: {answer:#?}");
    match &answer.reasons[..] {
        [Reason::DeadWorker {
            worker, holder: Holder::Lapsed { stopped: false, freed_at: None, .. }, ..
        }] => {
            assert_eq!(worker, "gone")
        }
        other => panic!("{other:?}"),
    }

    // With a live worker to sweep, the lapsed holder of a named queue is freed at about its
    // lapse, plus a sweep to suspect it, the grace, and a sweep to free it.
    let queued = JobSpec { queue_name: Some("q2".into()), ..JobSpec::default() };
    let waiting = utils.add_raw_job("sync", json!({}), queued).await.unwrap();
    client
        .batch_execute(
            "insert into formica_graphile_worker.leases (worker_id, expires_at) values ('alive', now() + interval '1 minute');
             update graphile_worker._private_job_queues set locked_by = 'gone', locked_at = now() where queue_name = 'q2'",
        )
        .await
        .unwrap();
    let lapsed: chrono::DateTime<Utc> = client
        .query_one("select expires_at from formica_graphile_worker.leases where worker_id = 'gone'", &[])
        .await
        .unwrap()
        .get(0);
    let answer = why(&utils, waiting.id).await;
    match &answer.reasons[..] {
        [Reason::QueueHeld {
            queue, worker, holder: Holder::Lapsed { at, freed_at: Some(freed), .. }, ..
        }] => {
            assert_eq!((queue.as_str(), worker.as_str(), *at), ("q2", "gone", lapsed));
            assert_eq!(*freed, lapsed + Span::seconds(3 + 5 + 3), "{answer:#?}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_page_says_why_and_the_api_answers_the_same() {
    use formica_tests::dashboard::Dashboard;
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let job = utils.add_raw_job("send_email", json!({}), JobSpec::default()).await.unwrap();
    utils.pause(&Pause::task("send_email"), Some("<b>down</b>"), Some("alice")).await.unwrap();
    let ui = Dashboard::start(utils.clone(), formica_ui::Options::default()).await;

    let page = ui.get(&format!("/jobs/{}", job.id)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let section = &page.body[page.body.find(r#"<div id="why">"#).expect("the section")..];
    let section = &section[..section.find("</div>").unwrap()];
    assert!(section.contains(r#"<li class="reason paused"><strong>paused</strong>: task &quot;send_email&quot; is paused by alice"#), "{section}");
    assert!(
        section.contains("&lt;b&gt;down&lt;/b&gt;") && !section.contains("<b>down"),
        "escaped: {section}"
    );
    assert!(section.contains(r#"<li class="reason no_worker">"#), "{section}");
    assert!(!section.contains("estimate"), "paused: no estimate: {section}");

    let api = ui.get(&format!("/api/jobs/{}/why", job.id)).await;
    assert_eq!(api.status, 200, "{}", api.body);
    let answer: serde_json::Value = serde_json::from_str(&api.body).unwrap();
    assert_eq!(
        (&answer["reasons"][0]["reason"], &answer["reasons"][1]["reason"]),
        (&json!("paused"), &json!("no_worker"))
    );
    let gone = ui.get(&format!("/api/jobs/{}/why", job.id + 1000)).await;
    assert_eq!(gone.status, 404, "{}", gone.body);

    // Once resumed and run by a worker, the page says where it runs.
    utils.resume(&Pause::task("send_email")).await.unwrap();
    let gate = Arc::new(AtomicBool::new(false));
    let worker = Running::listening(&db.runtime, gated(&db, &["send_email"], &gate)).await;
    why_once(&db, job.id, "it runs", |w| w.running.is_some()).await;
    let page = ui.get(&format!("/jobs/{}", job.id)).await;
    assert!(
        page.body.contains(&format!(r#"<p class="running">Running: worker {}"#, worker.worker_id())),
        "{}",
        page.body
    );
    gate.store(true, Ordering::Relaxed);
    worker.stop(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_waits_for_its_retry() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let options = db
        .worker_options()
        .poll_interval(Duration::from_millis(100))
        .define_raw_job("flaky", |_ctx: JobContext, _payload| Box::pin(async { Err("upstream 503".into()) }));
    let worker = Running::listening(&db.runtime, options).await;
    let job = utils.add_raw_job("flaky", json!({}), JobSpec::default()).await.unwrap();
    let answer = why_once(&db, job.id, "it failed once", |w| w.state == "failed").await;
    match &answer.reasons[..] {
        [Reason::NotDue { run_at, retrying: true }] => assert!(*run_at > answer.checked_at, "{answer:#?}"),
        other => panic!("{other:?}"),
    }
    let text = answer.reasons[0].describe("flaky", &|t| t.to_rfc3339());
    assert!(text.starts_with("it failed and retries at "), "{text}");
    let estimate = answer.estimate.expect("a retry's start is estimated");
    assert!(estimate.starts_at.is_some_and(|t| t >= answer.reasons[0].until().unwrap()), "{estimate:?}");
    worker.stop(Duration::from_secs(10)).await;
}
