//! Flow control on real PostgreSQL: pause and resume (`WorkerUtils::pause`, `resume`,
//! `paused`; docs/guide/flow-control.md).
//!
//! - 4 workers drain 1,000 jobs of a task; a pause lands within a second (measured: the
//!   last start after the pause committed), nothing starts after it, the running jobs
//!   finish, the held-back jobs spend no attempt, and a resume drains the rest;
//! - a worker started while a pause is in force obeys it; a paused named queue holds back
//!   its jobs only; a pause of everything holds back every job; the pauses are listed with
//!   their reason, author and time.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::controls::Pause;
use formica::{JobContext, JobSpec, RawJob, Runtime};
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Jobs left.
const LEFT: &str = "select count(*) from graphile_worker._private_jobs";

/// Options of a worker whose tasks `t`, `u` sleep `ms` and record (job id, start instant).
fn options(db: &TestDb, starts: &Arc<Mutex<Vec<(i64, Instant)>>>, ms: u64) -> formica::WorkerOptions {
    let mut options = db.worker_options().concurrency(4);
    for task in ["t", "u"] {
        let starts = starts.clone();
        options = options.define_raw_job(task, move |ctx: JobContext, _payload| {
            starts.lock().unwrap().push((ctx.job().id, Instant::now()));
            let rt = ctx.utils().pool().runtime().clone();
            Box::pin(async move {
                formica_tests::sleep(rt.as_ref(), Duration::from_millis(ms)).await;
                Ok(())
            })
        });
    }
    options
}

async fn add(db: &TestDb, task: &str, n: usize, spec: JobSpec) {
    let jobs: Vec<RawJob> = (0..n).map(|i| RawJob::new(task, json!({ "i": i }), spec.clone())).collect();
    db.utils().add_raw_jobs(&jobs).await.unwrap();
}

async fn a_pause_lands_within_a_second_running_jobs_finish_and_a_resume_drains_the_rest(
    rt: Arc<dyn Runtime>,
) {
    {
        let db = TestDb::migrated_on(rt.clone()).await;
        let starts = Arc::new(Mutex::new(Vec::new()));
        add(&db, "t", 1000, JobSpec::default()).await;
        let mut workers = Vec::new();
        for _ in 0..4 {
            workers.push(Running::listening(&rt, options(&db, &starts, 20)).await);
        }
        formica_tests::wait_until(rt.as_ref(), Duration::from_secs(30), "100 jobs started", || {
            starts.lock().unwrap().len() >= 100
        })
        .await;
        let utils = db.utils();
        utils.pause(&Pause::task("t"), Some("partner API down"), Some("test")).await.unwrap();
        let paused_at = Instant::now();
        formica_tests::sleep(rt.as_ref(), Duration::from_secs(2)).await;
        let (started, last) = {
            let starts = starts.lock().unwrap();
            (starts.len(), starts.iter().map(|(_, at)| *at).max().unwrap())
        };
        let landed = last.saturating_duration_since(paused_at);
        eprintln!("pause landed within {landed:?} (last start after the pause committed)");
        assert!(landed < Duration::from_secs(1), "a job started {landed:?} after the pause");
        // The running jobs finished: no job is locked, and none of those left spent an attempt.
        db.wait_for_count(
            "select count(*) from graphile_worker._private_jobs where locked_at is not null",
            0,
            Duration::from_secs(5),
        )
        .await;
        let left = db.count(LEFT).await;
        assert_eq!(left, 1000 - started as i64, "every job started ran to its end");
        assert!(left > 0, "the pause landed before the queue drained");
        let spent = db.count("select count(*) from graphile_worker._private_jobs where attempts > 0").await;
        assert_eq!(spent, 0, "a held-back job spent an attempt");
        let paused = utils.paused().await.unwrap();
        assert_eq!(paused.len(), 1);
        assert_eq!(
            (paused[0].pause(), paused[0].reason.as_deref()),
            (Some(Pause::task("t")), Some("partner API down"))
        );
        assert_eq!(paused[0].paused_by, "test");
        assert!(utils.resume(&Pause::task("t")).await.unwrap());
        assert!(!utils.resume(&Pause::task("t")).await.unwrap(), "nothing left to resume");
        db.wait_for_count(LEFT, 0, Duration::from_secs(60)).await;
        let mut ids: Vec<i64> = starts.lock().unwrap().iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 1000, "each job ran once");
        for worker in workers {
            worker.stop(Duration::from_secs(10)).await;
        }
    }
}

async fn a_worker_started_later_obeys_pauses_of_a_task_a_queue_and_everything(rt: Arc<dyn Runtime>) {
    {
        let db = TestDb::migrated_on(rt.clone()).await;
        let utils = db.utils();
        utils.pause(&Pause::task("t"), None, None).await.unwrap();
        utils.pause(&Pause::queue("q"), Some("maintenance"), None).await.unwrap();
        add(&db, "t", 5, JobSpec::default()).await;
        add(&db, "u", 5, JobSpec::builder().queue_name("q").build()).await;
        add(&db, "u", 5, JobSpec::default()).await;
        let starts = Arc::new(Mutex::new(Vec::new()));
        let worker = Running::listening(&rt, options(&db, &starts, 1)).await;
        // Only `u`'s jobs outside `q` run.
        db.wait_for_count(LEFT, 10, Duration::from_secs(10)).await;
        formica_tests::sleep(rt.as_ref(), Duration::from_millis(500)).await;
        assert_eq!(db.count(LEFT).await, 10, "a paused job ran");
        let by: Vec<String> = utils.paused().await.unwrap().into_iter().map(|p| p.paused_by).collect();
        assert!(by.iter().all(|b| !b.is_empty()), "the database role stands in for the author: {by:?}");
        // Everything paused: lifting the others starts nothing.
        utils.pause(&Pause::all(), None, None).await.unwrap();
        assert!(utils.resume(&Pause::task("t")).await.unwrap());
        assert!(utils.resume(&Pause::queue("q")).await.unwrap());
        formica_tests::sleep(rt.as_ref(), Duration::from_secs(1)).await;
        assert_eq!(db.count(LEFT).await, 10, "a job ran while everything was paused");
        assert!(utils.resume(&Pause::all()).await.unwrap());
        db.wait_for_count(LEFT, 0, Duration::from_secs(10)).await;
        worker.stop(Duration::from_secs(10)).await;
    }
}

formica_tests::on_both_runtimes!(
    a_pause_lands_within_a_second_running_jobs_finish_and_a_resume_drains_the_rest,
    a_worker_started_later_obeys_pauses_of_a_task_a_queue_and_everything,
);
