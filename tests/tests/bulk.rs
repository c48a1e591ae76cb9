//! Bulk actions by filter (`WorkerUtils::bulk`, `formica::BulkFilter`): retry, reschedule, cancel
//! and delete the jobs a `BulkFilter` picks, in bounded batches, never a running job, each
//! job at most once, and exactly as many as the dry run counted; and the dashboard's bulk
//! action on the jobs page.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica::{BulkAction, BulkFilter, JobSpec, RawJob, RescheduleJobOptions, WorkerUtils};
use formica_tests::TestDb;
use serde_json::json;
use tokio_postgres::Client;

/// Add `n` jobs of `task` in batches, returning their ids.
async fn add(utils: &WorkerUtils, task: &str, n: usize) -> Vec<i64> {
    add_as(utils, task, n, JobSpec::default()).await
}

/// Add `n` jobs of `task`, each as `spec` says.
async fn add_as(utils: &WorkerUtils, task: &str, n: usize, spec: JobSpec) -> Vec<i64> {
    let mut ids = Vec::with_capacity(n);
    let jobs: Vec<RawJob> = (0..n).map(|i| RawJob::new(task, json!({ "n": i }), spec.clone())).collect();
    for chunk in jobs.chunks(5000) {
        ids.extend(utils.add_raw_jobs(chunk).await.unwrap().iter().map(|job| job.id));
    }
    ids
}

/// Run `sql` on the jobs `ids`.
async fn set(client: &Client, ids: &[i64], sql: &str) {
    let sql = format!("update graphile_worker._private_jobs set {sql} where id = any($1)");
    client.execute(sql.as_str(), &[&ids]).await.unwrap();
}

/// Record every update of a job row from now on: the job and the transaction.
async fn watch_updates(client: &Client) {
    client
        .batch_execute(
            "create table touched (id bigint, tx bigint);
             create function record_touch() returns trigger language plpgsql as $$
               begin insert into touched values (new.id, txid_current()); return new; end $$;
             create trigger record_touch after update on graphile_worker._private_jobs
               for each row execute function record_touch();",
        )
        .await
        .unwrap();
}

/// (attempts, max_attempts, last_error, due now, locked_by) of each of `ids`, by id.
async fn rows(client: &Client, ids: &[i64]) -> Vec<(i16, i16, Option<String>, bool, Option<String>)> {
    let sql = "select attempts, max_attempts, last_error, run_at <= now(), locked_by
               from graphile_worker._private_jobs where id = any($1) order by id";
    let rows = client.query(sql, &[&ids]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4))).collect()
}

#[tokio::test]
async fn bulk_retry_of_50000_failed_jobs_by_filter_makes_each_due_once_in_bounded_batches() {
    let db = TestDb::migrated().await;
    let (utils, client) = (db.utils(), db.client().await);
    // 50,000 invoices added in the last hour that failed: half for good, half waiting a day.
    let failed = add(&utils, "invoice", 50_000).await;
    let (for_good, waiting) = failed.split_at(25_000);
    set(&client, for_good, "attempts = max_attempts, last_error = 'Boom: timeout'").await;
    set(&client, waiting, "attempts = 3, last_error = 'boom: refused', run_at = now() + interval '1 day'")
        .await;
    // Outside the filter: another task, another error, added earlier, never failed.
    let other_task = add(&utils, "email", 10).await;
    set(&client, &other_task, "attempts = max_attempts, last_error = 'boom'").await;
    let other_error = add(&utils, "invoice", 10).await;
    set(&client, &other_error, "attempts = max_attempts, last_error = 'bad payload'").await;
    let older = add(&utils, "invoice", 10).await;
    set(
        &client,
        &older,
        "attempts = max_attempts, last_error = 'boom', created_at = now() - interval '2 days'",
    )
    .await;
    let never_failed = add(&utils, "invoice", 10).await;
    set(&client, &never_failed, "run_at = now() + interval '1 day'").await;
    // And one a worker runs (graphile-worker's workers hold no lease: only the lock says so).
    let running = add(&utils, "invoice", 1).await;
    set(&client, &running, "attempts = 1, last_error = 'boom', locked_at = now(), locked_by = 'node-1'")
        .await;
    let outside: Vec<i64> =
        [&other_task, &other_error, &older, &never_failed, &running].into_iter().flatten().copied().collect();
    let before = rows(&client, &outside).await;
    watch_updates(&client).await;

    let filter = BulkFilter {
        task: Some("invoice".into()),
        error: Some("BOOM".into()),
        since: Some(chrono::Utc::now() - chrono::Duration::hours(1)),
        ..BulkFilter::default()
    };
    let counted = utils.bulk_dry_run(&BulkAction::Retry, &filter).await.unwrap();
    assert_eq!(counted, 50_000, "the dry run counts the failed invoices added in the last hour");
    assert_eq!(db.count("select count(*) from touched").await, 0, "the dry run changes nothing");
    let changed = utils.bulk_in_batches_of(&BulkAction::Retry, &filter, 1000).await.unwrap();
    assert_eq!(changed, counted, "the real run changes what the dry run counted");

    let due = "select count(*) from graphile_worker._private_jobs
               where id = any($1) and attempts = 0 and run_at <= now() and is_available";
    let n: i64 = client.query_one(due, &[&failed]).await.unwrap().get(0);
    assert_eq!(n, 50_000, "every retried job is due with a fresh set of attempts");
    let once = "select count(*), count(distinct id), count(distinct tx) from touched";
    let row = client.query_one(once, &[]).await.unwrap();
    let (updates, jobs, transactions): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((updates, jobs), (50_000, 50_000), "each job is changed once");
    assert_eq!(transactions, 50, "in 50 transactions of 1,000 jobs, none holding more");
    let touched_outside: i64 = client
        .query_one("select count(*) from touched where id = any($1)", &[&outside])
        .await
        .unwrap()
        .get(0);
    assert_eq!(touched_outside, 0);
    assert_eq!(
        rows(&client, &outside).await,
        before,
        "jobs outside the filter, and the running one, are as they were"
    );
    assert_eq!(
        utils.bulk_dry_run(&BulkAction::Retry, &filter).await.unwrap(),
        50_000,
        "still failed: they keep last_error"
    );
}

#[tokio::test]
async fn each_action_picks_its_own_jobs_and_never_a_running_one() {
    let db = TestDb::migrated().await;
    let (utils, client) = (db.utils(), db.client().await);
    let ids = add(&utils, "report", 6).await;
    // 0 failed for good, 1 waiting to retry, 2 scheduled, 3 ready, 4 running, 5 failed for
    // good with 7 attempts.
    set(&client, &ids[0..1], "attempts = max_attempts, last_error = 'e0'").await;
    set(&client, &ids[1..2], "attempts = 2, last_error = 'e1', run_at = now() + interval '1 hour'").await;
    set(&client, &ids[2..3], "run_at = now() + interval '1 hour'").await;
    set(&client, &ids[4..5], "locked_at = now(), locked_by = 'w', last_error = 'e4'").await;
    set(&client, &ids[5..6], "attempts = 7, max_attempts = 7, last_error = 'e5'").await;
    let every = BulkFilter::default();
    let count = |action: BulkAction, filter: BulkFilter| {
        let utils = utils.clone();
        async move { utils.bulk_dry_run(&action, &filter).await.unwrap() }
    };
    let cancel = || BulkAction::Cancel { reason: "outage".into() };
    let later = RescheduleJobOptions { priority: Some(5), ..Default::default() };
    assert_eq!(
        count(BulkAction::Retry, every.clone()).await,
        3,
        "retry: the failed ones, not the running one"
    );
    assert_eq!(count(cancel(), every.clone()).await, 3, "cancel: those that would still run");
    assert_eq!(count(BulkAction::Reschedule(later.clone()), every.clone()).await, 5);
    assert_eq!(count(BulkAction::Delete, every.clone()).await, 5, "never the running job");
    let states = |s: &[&str]| BulkFilter {
        states: s.iter().map(|s| s.to_string()).collect(),
        ..BulkFilter::default()
    };
    assert_eq!(count(BulkAction::Delete, states(&["failed", "scheduled"])).await, 2);
    assert_eq!(count(BulkAction::Delete, states(&["running"])).await, 0);
    let attempts =
        BulkFilter { attempts_at_least: Some(2), attempts_at_most: Some(7), ..BulkFilter::default() };
    assert_eq!(count(BulkAction::Delete, attempts).await, 2, "jobs 1 and 5 (25 is too many)");
    let by_id = BulkFilter { ids: Some(vec![ids[0], ids[4], 999_999]), ..BulkFilter::default() };
    assert_eq!(count(BulkAction::Delete, by_id.clone()).await, 1, "by id: the running one is skipped");

    // Cancel the waiting ones: they fail for good with the reason; the failed ones keep theirs.
    assert_eq!(utils.bulk(&cancel(), &every).await.unwrap(), 3);
    let after = rows(&client, &ids).await;
    assert_eq!(after[0].2.as_deref(), Some("e0"));
    for job in [&after[1], &after[2], &after[3]] {
        assert_eq!((job.0, job.2.as_deref()), (job.1, Some("cancelled: outage")));
    }
    assert_eq!(after[4], (0, 25, Some("e4".into()), true, Some("w".into())), "the running job is untouched");
    // Retry brings them back; delete by id removes only what it may.
    assert_eq!(utils.bulk(&BulkAction::Retry, &every).await.unwrap(), 5);
    assert!(rows(&client, &ids).await.iter().all(|r| r.3 && (r.0 == 0 || r.4.is_some())));
    assert_eq!(utils.bulk(&BulkAction::Delete, &by_id).await.unwrap(), 1);
    assert_eq!(rows(&client, &ids).await.len(), 5);

    let wrong = utils.bulk(&BulkAction::Delete, &states(&["dead"])).await.unwrap_err();
    assert!(wrong.to_string().contains("unknown state \"dead\""), "{wrong}");
    let nothing = utils.bulk(&BulkAction::Reschedule(RescheduleJobOptions::default()), &every).await;
    assert!(nothing.unwrap_err().to_string().contains("at least one of run_at"));
}

#[tokio::test]
async fn the_dashboard_acts_on_ticked_jobs_or_all_matching_the_filter_after_a_dry_run_count() {
    use formica_tests::dashboard::Dashboard;
    let db = TestDb::migrated().await;
    let (utils, client) = (db.utils(), db.client().await);
    let failed = add(&utils, "invoice", 30).await;
    set(&client, &failed, "attempts = max_attempts, last_error = 'timeout'").await;
    let running = add(&utils, "invoice", 1).await;
    set(
        &client,
        &running,
        "attempts = max_attempts, last_error = 'timeout', locked_at = now(), locked_by = 'w'",
    )
    .await;
    let other = add(&utils, "email", 3).await;
    set(&client, &other, "attempts = max_attempts, last_error = 'timeout'").await;
    let ui = Dashboard::start(utils.clone(), formica_ui::Options::default()).await;

    // The page filtered to the failed invoices offers every action on all of them.
    let page = ui.get("/jobs?task=invoice&state=permanently_failed").await;
    assert_eq!(page.status, 200);
    let all = r#"data-bulk="retry" data-filter="{&quot;states&quot;:[&quot;permanently_failed&quot;],&quot;task&quot;:&quot;invoice&quot;}""#;
    assert!(page.body.contains(all), "{}", page.body);
    assert!(page.body.contains(&format!(r#"class="pick" value="{}""#, failed[0])), "rows can be ticked");
    assert!(page
        .body
        .contains("Redrive {n} jobs matching this filter? Jobs a worker is running are left alone."));

    let filter = json!({ "task": "invoice", "states": ["permanently_failed"] });
    let dry =
        ui.action("/api/jobs/bulk", json!({ "action": "retry", "filter": filter, "dry_run": true })).await;
    assert_eq!(
        dry.json(),
        json!({ "action": "retry", "dry_run": true, "jobs": 30 }),
        "the running job is not counted"
    );
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs where attempts = 0").await, 0);
    let done = ui.action("/api/jobs/bulk", json!({ "action": "retry", "filter": filter })).await;
    assert_eq!(done.json()["jobs"], 30, "as many as the dry run said");
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs where attempts = 0").await, 30);

    // Ticked jobs: by id; a running one among them is left alone.
    let ticked = json!({ "ids": [failed[0], failed[1], running[0]] });
    let cancel = json!({ "action": "cancel", "filter": ticked, "reason": "outage", "dry_run": true });
    assert_eq!(ui.action("/api/jobs/bulk", cancel).await.json()["jobs"], 2);
    let delete = ui.action("/api/jobs/bulk", json!({ "action": "delete", "filter": ticked })).await;
    assert_eq!(delete.json()["jobs"], 2);
    assert_eq!(rows(&client, &[failed[0], failed[1], running[0]]).await.len(), 1, "the running job stays");

    // Never every job at once, nor an unknown action or state.
    let everything = ui.action("/api/jobs/bulk", json!({ "action": "delete", "filter": {} })).await;
    assert_eq!(everything.status, 400);
    let unknown =
        ui.action("/api/jobs/bulk", json!({ "action": "explode", "filter": { "task": "x" } })).await;
    assert_eq!(unknown.status, 400);
    let state = json!({ "action": "delete", "filter": { "states": ["dead"] } });
    assert_eq!(ui.action("/api/jobs/bulk", state).await.status, 400);
    let read_only =
        Dashboard::start(utils, formica_ui::Options { read_only: true, ..Default::default() }).await;
    let refused = read_only
        .action("/api/jobs/bulk", json!({ "action": "delete", "filter": { "task": "email" } }))
        .await;
    assert_eq!(refused.status, 403);
    assert!(!read_only.get("/jobs?task=email").await.body.contains("data-bulk"));
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 32);
}

/// A job a Formica worker is running (it had failed before) is never picked, by any
/// action, while the other failed jobs of its task are; it then finishes as it would have.
#[tokio::test]
async fn a_job_a_formica_worker_runs_is_left_alone_and_finishes_as_it_would() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    let db = TestDb::migrated().await;
    let (utils, client) = (db.utils(), db.client().await);
    let job = add(&utils, "slow", 1).await;
    set(&client, &job, "attempts = 1, last_error = 'boom'").await;
    let (started, release) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let (start, go) = (started.clone(), release.clone());
    let options =
        db.worker_options().concurrency(1).define_raw_job("slow", move |ctx: formica::JobContext, _| {
            let (start, go) = (start.clone(), go.clone());
            let rt = ctx.utils().pool().runtime().clone();
            Box::pin(async move {
                start.store(true, Ordering::SeqCst);
                while !go.load(Ordering::SeqCst) {
                    formica_tests::sleep(rt.as_ref(), Duration::from_millis(20)).await;
                }
                Ok(())
            })
        });
    let rt: Arc<dyn formica::Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let running = formica_tests::Running::listening(&rt, options).await;
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(10), "the job started", || {
        started.load(Ordering::SeqCst)
    })
    .await;
    // Failed jobs of the same task, added after it started, waiting a day to retry (added so:
    // due now, the worker could fetch one into its local queue, and the retry leaves it be).
    let tomorrow = JobSpec::builder().run_at(chrono::Utc::now() + chrono::Duration::days(1)).build();
    let others = add_as(&utils, "slow", 3, tomorrow).await;
    set(&client, &others, "attempts = 1, last_error = 'boom'").await;
    let before = rows(&client, &job).await;
    assert_eq!(before[0].4.as_deref(), Some(running.worker_id()), "the worker holds it");

    let slow = BulkFilter { task: Some("slow".into()), ..BulkFilter::default() };
    let cancel = BulkAction::Cancel { reason: "no".into() };
    let later = BulkAction::Reschedule(RescheduleJobOptions { priority: Some(9), ..Default::default() });
    for action in [BulkAction::Delete, cancel, later] {
        assert_eq!(
            utils
                .bulk_dry_run(&action, &BulkFilter { ids: Some(job.clone()), ..slow.clone() })
                .await
                .unwrap(),
            0
        );
    }
    assert_eq!(utils.bulk(&BulkAction::Retry, &slow).await.unwrap(), 3, "the waiting ones only");
    assert_eq!(rows(&client, &job).await, before, "the running job is untouched");

    release.store(true, Ordering::SeqCst);
    let gone = format!("select count(*) from graphile_worker._private_jobs where id = {}", job[0]);
    db.wait_for_count(&gone, 0, Duration::from_secs(10)).await;
    running.stop(Duration::from_secs(10)).await;
}
