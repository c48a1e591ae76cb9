//! Snooze and per-task retry policies on PostgreSQL (docs/guide/snooze-and-retries.md): a
//! handler that says "not now" runs again after its delay without spending an attempt or
//! touching `last_error`, within its task's snooze window; a task's own curve and default
//! `max_attempts` are the ones its jobs get.

use chrono::Duration as ChronoDuration;
use formica::{snooze, Backoff, JobContext, JobSpec, Runtime, Task, TaskHandler, TaskPolicy, TaskResult};
use formica_tests::{on_both_runtimes, wait_until, Running, TestDb};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What each run of a task saw: its attempt number and when it started.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<(i16, Instant)>>>);

impl Runs {
    fn record(&self, ctx: &JobContext) -> usize {
        let mut runs = self.0.lock().unwrap();
        runs.push((ctx.job().attempts, Instant::now()));
        runs.len()
    }
    fn all(&self) -> Vec<(i16, Instant)> {
        self.0.lock().unwrap().clone()
    }
}

/// Fails its first run, snoozes its second for 2 s, succeeds on its third.
#[derive(serde::Serialize, serde::Deserialize)]
struct Nap;

impl Task for Nap {
    const IDENTIFIER: &'static str = "nap";
}

impl TaskHandler for Nap {
    async fn run(self, ctx: JobContext) -> TaskResult {
        match ctx.extension::<Runs>()?.record(&ctx) {
            1 => Err("boom".into()),
            2 => snooze(Duration::from_secs(2)),
            _ => Ok(()),
        }
    }
}

/// The job's `(attempts, last_error, locked_by, seconds until run_at by the database clock)`.
async fn row(db: &TestDb, id: i64) -> Option<(i16, Option<String>, Option<String>, f64)> {
    let sql = "select attempts, last_error, locked_by, extract(epoch from run_at - now())::float8 \
               from graphile_worker._private_jobs where id = $1";
    let row = db.client().await.query_opt(sql, &[&id]).await.unwrap()?;
    Some((row.get(0), row.get(1), row.get(2), row.get(3)))
}

async fn a_snoozed_job_runs_again_after_the_delay_with_attempts_and_last_error_unchanged(
    rt: Arc<dyn Runtime>,
) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let id = db.utils().add_job(&Nap, JobSpec::default()).await.unwrap().id;
    let runs = Runs::default();
    let options = db.worker_options().poll_interval(Duration::from_millis(100)).define_job::<Nap>();
    let worker = Running::listening(&rt, options.add_extension(runs.clone())).await;

    // The failure (retried after e^1 s), then the snooze.
    wait_until(rt.as_ref(), Duration::from_secs(20), "two runs", || runs.all().len() >= 2).await;
    let snoozed =
        |r: &Option<(i16, Option<String>, Option<String>, f64)>| r.as_ref().is_some_and(|r| r.2.is_none());
    let mut state = row(&db, id).await;
    for _ in 0..50 {
        if snoozed(&state) {
            break;
        }
        formica_tests::sleep(rt.as_ref(), Duration::from_millis(20)).await;
        state = row(&db, id).await;
    }
    let (attempts, last_error, _, due_in) = state.expect("the job waits");
    assert_eq!(attempts, 1, "the snoozing attempt is refunded: only the failure counts");
    assert_eq!(last_error.as_deref(), Some("boom"), "the snooze leaves last_error as it was");
    assert!((1.0..=2.1).contains(&due_in), "due 2 s after the snooze: {due_in}");

    wait_until(rt.as_ref(), Duration::from_secs(10), "the third run", || runs.all().len() >= 3).await;
    let all = runs.all();
    assert_eq!(
        all.iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 2, 2],
        "the run after the snooze is attempt 2 again"
    );
    let waited = all[2].1 - all[1].1;
    assert!(waited >= Duration::from_millis(1900), "ran again after the delay: {waited:?}");
    db.wait_for_count("select count(*) from graphile_worker._private_jobs", 0, Duration::from_secs(5)).await;
    worker.stop(Duration::from_secs(10)).await;
}

on_both_runtimes!(a_snoozed_job_runs_again_after_the_delay_with_attempts_and_last_error_unchanged);

/// Snoozes for a minute, with a window of ten seconds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Insomniac;

impl Task for Insomniac {
    const IDENTIFIER: &'static str = "insomniac";
    const POLICY: TaskPolicy =
        TaskPolicy { snooze_window: ChronoDuration::seconds(10), ..TaskPolicy::DEFAULT };
}

impl TaskHandler for Insomniac {
    async fn run(self, _ctx: JobContext) -> TaskResult {
        snooze(Duration::from_secs(60))
    }
}

#[tokio::test]
async fn a_snooze_past_the_tasks_window_fails_the_attempt_and_says_why() {
    let db = TestDb::migrated().await;
    let id = db.utils().add_job(&Insomniac, JobSpec::default()).await.unwrap().id;
    db.worker_options().define_job::<Insomniac>().init().await.unwrap().run_once().await.unwrap();
    let (attempts, last_error, locked_by, due_in) = row(&db, id).await.expect("the job waits");
    assert_eq!((attempts, locked_by), (1, None), "the attempt is spent");
    let last_error = last_error.unwrap_or_default();
    assert!(
        last_error.starts_with("snoozed past its limit") && last_error.contains("at most 10s"),
        "{last_error}"
    );
    assert!(due_in < 5.0, "retried by the curve (e^1 s), not in a minute: {due_in}");
}

/// Always fails; retried every 30 s, 3 attempts unless the job says otherwise.
#[derive(serde::Serialize, serde::Deserialize)]
struct Flaky;

impl Task for Flaky {
    const IDENTIFIER: &'static str = "flaky";
    const POLICY: TaskPolicy = TaskPolicy {
        backoff: Backoff::fixed(ChronoDuration::seconds(30)),
        max_attempts: Some(3),
        ..TaskPolicy::DEFAULT
    };
}

impl TaskHandler for Flaky {
    async fn run(self, _ctx: JobContext) -> TaskResult {
        Err("still down".into())
    }
}

#[tokio::test]
async fn a_task_with_its_own_curve_is_retried_at_its_own_times_with_its_own_attempts() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let id = utils.add_job(&Flaky, JobSpec::default()).await.unwrap().id;
    let explicit = utils.add_job(&Flaky, JobSpec::builder().max_attempts(7).build()).await.unwrap();
    let raw = utils.add_raw_job("flaky", serde_json::json!(null), JobSpec::default()).await.unwrap();
    assert_eq!(explicit.max_attempts, 7, "a job's own number wins");
    assert_eq!(raw.max_attempts, 25, "a raw add knows no task type: the column default");
    let by_type = db
        .count(&format!("select max_attempts::bigint from graphile_worker._private_jobs where id = {id}"))
        .await;
    assert_eq!(by_type, 3, "the task's default");

    for (attempt, expected) in [(1, 30.0), (2, 30.0)] {
        db.worker_options().define_job::<Flaky>().init().await.unwrap().run_once().await.unwrap();
        let (attempts, last_error, _, due_in) = row(&db, id).await.expect("the job waits");
        assert_eq!((attempts, last_error.as_deref()), (attempt, Some("still down")));
        assert!((expected - 2.0..=expected).contains(&due_in), "attempt {attempt}: due in {due_in} s");
        let due = "update graphile_worker._private_jobs set run_at = now()";
        db.client().await.execute(due, &[]).await.unwrap();
    }
}
