//! Progress (docs/guide/progress.md): a handler reporting in a tight loop is written a few
//! times a second, the latest value last; `job_progress`, `wait_for_progress`, the job's read
//! (the dashboard and `formica job`) show it; bad values fail clearly; the pruner removes it.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{Error, JobContext, JobSpec, Progress, Retention, Runtime};
use formica_tests::dashboard::Dashboard;
use formica_tests::{on_both_runtimes, Running, TestDb};
use futures::future::BoxFuture;
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const REPORTS: i64 = 20_000;

/// What `reporting` returns: a raw task's handler.
type Handler = dyn Fn(JobContext, serde_json::Value) -> BoxFuture<'static, formica::TaskResult> + Send + Sync;

/// Reports `REPORTS` times as fast as it can, says so, then holds until `release`.
fn reporting(
    rt: Arc<dyn Runtime>,
    release: Arc<AtomicBool>,
    took: Arc<Mutex<Option<Duration>>>,
) -> Box<Handler> {
    Box::new(move |ctx, _payload| {
        let (rt, release, took) = (rt.clone(), release.clone(), took.clone());
        Box::pin(async move {
            let start = Instant::now();
            for i in 1..=REPORTS {
                ctx.set_progress(
                    Progress::fraction(i as f64 / REPORTS as f64).with_value(json!({ "i": i })),
                )?;
            }
            *took.lock().unwrap() = Some(start.elapsed());
            while !release.load(Ordering::SeqCst) {
                formica_tests::sleep(rt.as_ref(), Duration::from_millis(20)).await;
            }
            Ok(())
        })
    })
}

async fn a_tight_loop_of_reports_is_written_a_few_times_a_second_latest_last(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    db.count_inserting_statements("formica_graphile_worker.job_progress").await;
    let utils = db.utils();
    let job = utils.add_raw_job("import", json!({}), JobSpec::default()).await.unwrap();
    let bad = utils
        .add_raw_job("bad_progress", json!({}), JobSpec::builder().max_attempts(1).build())
        .await
        .unwrap();
    let (release, took) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(None)));
    // Waiting before the worker starts: the answer comes by notification.
    let waiter = utils.clone();
    let waited = async move {
        waiter.wait_for_progress(job.id, |p| p.progress.fraction == Some(1.0), Duration::from_secs(20)).await
    };
    let options = db
        .worker_options()
        .define_raw_job("import", reporting(rt.clone(), release.clone(), took.clone()))
        .define_raw_job("bad_progress", |ctx: JobContext, _| async move {
            ctx.set_progress(Progress::fraction(1.5))?;
            Ok(())
        });
    let start = async {
        formica_tests::sleep(rt.as_ref(), Duration::from_millis(200)).await;
        Running::listening(&rt, options).await
    };
    let (waited, running) = futures::join!(waited, start);
    let last = waited.unwrap();
    assert_eq!(last.progress.value, Some(json!({ "i": REPORTS })), "the latest value, written last");
    let took = took.lock().unwrap().expect("the loop ended");
    let writes = db.inserting_statements("job_progress").await;
    // One write at once, then one each PROGRESS_EVERY (250 ms) at most while reports come.
    let most = 2 + (took.as_millis() / 250) as i64;
    assert!(writes >= 1 && writes <= most, "{writes} writes for {REPORTS} reports in {took:?}");
    assert_eq!(utils.job_progress(job.id).await.unwrap().as_ref(), Some(&last));
    // The job's read, what the dashboard and `formica job` show, while it runs.
    let detail = formica::inspect::job(&utils, job.id).await.unwrap().unwrap().unwrap();
    assert_eq!(detail.progress.as_ref(), Some(&last));
    assert_eq!(last.progress.to_string(), format!("100% {}", json!({ "i": REPORTS })));
    // A fraction out of range fails the attempt saying why.
    db.wait_for_count(
        &format!(
            "select count(*) from graphile_worker.jobs \
             where id = {} and attempts = 1 and last_error like '%from 0 to 1, not 1.5%'",
            bad.id
        ),
        1,
        Duration::from_secs(10),
    )
    .await;
    // Waiting for what never comes ends at its timeout.
    let never =
        utils.wait_for_progress(job.id, |p| p.progress.value.is_none(), Duration::from_millis(300)).await;
    assert!(matches!(never, Err(Error::TimedOut(_))), "{never:?}");
    release.store(true, Ordering::SeqCst);
    running.stop(Duration::from_secs(10)).await;
    // Kept after the job ends; the pruner removes it past every retention.
    assert!(utils.job_progress(job.id).await.unwrap().is_some());
    let month_later = chrono::Utc::now() + chrono::Duration::days(31);
    utils.prune_history(&Retention::default(), Some(month_later)).await.unwrap();
    assert_eq!(utils.job_progress(job.id).await.unwrap(), None, "pruned");
}

async fn a_worker_that_stops_writes_its_jobs_last_progress_first(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let job = utils.add_raw_job("import", json!({}), JobSpec::default()).await.unwrap();
    // The first report is written at once; the last waits for the period, which the worker,
    // stopping as soon as the queue is empty (`run_once`), does not let pass.
    let worker = db
        .worker_options()
        .define_raw_job("import", |ctx: JobContext, _| async move {
            ctx.set_progress(Progress::fraction(0.1))?;
            ctx.set_progress(Progress::fraction(1.0))?;
            Ok(())
        })
        .init()
        .await
        .unwrap();
    worker.run_once().await.unwrap();
    let last = utils.job_progress(job.id).await.unwrap().expect("written");
    assert_eq!(last.progress.fraction, Some(1.0));
}

on_both_runtimes!(
    a_tight_loop_of_reports_is_written_a_few_times_a_second_latest_last,
    a_worker_that_stops_writes_its_jobs_last_progress_first
);

#[tokio::test]
async fn the_job_page_shows_the_progress() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let job = utils.add_raw_job("import", json!({}), JobSpec::default()).await.unwrap();
    let sql = "insert into formica_graphile_worker.job_progress (job_id, fraction, value) \
        values ($1, 0.425, '{\"rows\": 425}')";
    db.client().await.execute(sql, &[&job.id]).await.unwrap();
    let ui = Dashboard::start(utils, formica_ui::Options::default()).await;
    let page = ui.get(&format!("/jobs/{}", job.id)).await.body;
    assert!(
        page.contains(r#"<progress max="1" value="0.425"></progress> 42.5% {&quot;rows&quot;:425}"#),
        "{page}"
    );
}
