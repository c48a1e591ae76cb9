//! Job history (docs/guide/history.md): one row for each job a Formica worker ends for good,
//! written with the outcome; outputs read back with `job_outcome` and `wait_for_job` on both
//! runtimes; none with the option off; the pruner's retention.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{
    Error, FinalState, HistoryOptions, JobContext, JobSpec, OutputTaskHandler, RawJob, Retention, Runtime,
    Task,
};
use formica_tests::{on_both_runtimes, Running, TestDb};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const HISTORY: &str = "select count(*) from formica_graphile_worker.job_history";

/// A task that returns a report, or fails when asked to.
#[derive(Serialize, Deserialize)]
struct Report {
    customer: i64,
    fail: bool,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Summary {
    customer: i64,
    lines: Vec<String>,
}

impl Task for Report {
    const IDENTIFIER: &'static str = "report";
}

impl OutputTaskHandler for Report {
    type Output = Summary;
    async fn run(self, _: JobContext) -> Result<Summary, Box<dyn std::error::Error + Send + Sync>> {
        if self.fail {
            return Err(format!("no data for customer {}", self.customer).into());
        }
        Ok(Summary { customer: self.customer, lines: vec!["paid".into(), "nul \u{0} kept".into()] })
    }
}

fn once() -> JobSpec {
    JobSpec::builder().max_attempts(1).build()
}

async fn a_handler_s_output_round_trips_through_wait_for_job_and_job_outcome(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let ok = utils.add_job(&Report { customer: 42, fail: false }, once()).await.unwrap();
    let bad = utils.add_job(&Report { customer: 7, fail: true }, once()).await.unwrap();
    // Waiting before any worker runs: the answer comes by notification.
    let (waiter, other) = (utils.clone(), utils.clone());
    let waited_ok = async move { waiter.wait_for_job(ok.id, Duration::from_secs(20)).await };
    let waited_bad = async move { other.wait_for_job(bad.id, Duration::from_secs(20)).await };
    let start = async {
        formica_tests::sleep(rt.as_ref(), Duration::from_millis(300)).await;
        Running::listening(&rt, db.worker_options().define_job_with_output::<Report>()).await
    };
    let (waited_ok, waited_bad, running) = futures::join!(waited_ok, waited_bad, start);
    let done = waited_ok.unwrap().expect("a history row");
    assert_eq!(done.outcome, FinalState::Completed);
    let summary = Summary { customer: 42, lines: vec!["paid".into(), "nul \u{0} kept".into()] };
    assert_eq!(done.output_as::<Summary>().unwrap(), Some(summary));
    assert_eq!(utils.job_outcome(ok.id).await.unwrap(), Some(done.clone()), "the same row");
    assert_eq!(
        (done.task_identifier.as_str(), done.attempts, done.worker_id.as_deref()),
        ("report", 1, Some(running.worker_id()))
    );
    assert!(done.started_at.is_some_and(|s| s >= done.added_at && s <= done.finished_at), "{done:?}");
    let failed = waited_bad.unwrap().expect("a history row");
    assert_eq!(
        (failed.outcome, failed.last_error.as_deref(), failed.output),
        (FinalState::Failed, Some("no data for customer 7"), None)
    );
    // A job that will not run in time: the wait says so.
    let later = JobSpec::builder().run_at(chrono::Utc::now() + chrono::Duration::hours(1)).build();
    let later = utils.add_job(&Report { customer: 1, fail: false }, later).await.unwrap();
    let timed_out = utils.wait_for_job(later.id, Duration::from_millis(200)).await;
    assert!(matches!(timed_out, Err(Error::TimedOut(_))), "{timed_out:?}");
    assert_eq!(utils.job_outcome(later.id).await.unwrap(), None, "still to run");
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(
        db.count("select count(*) from formica_graphile_worker.job_waiters").await,
        0,
        "waiters forgotten"
    );
}

on_both_runtimes!(a_handler_s_output_round_trips_through_wait_for_job_and_job_outcome);

/// The task of the drain test: `{"i": n}`; every tenth fails for good, every hundredth (from
/// 1) is cancelled while it runs, every tenth from 5 fails its first attempt then succeeds.
async fn drain_task(ctx: JobContext, payload: serde_json::Value) -> formica::TaskResult {
    let i = payload["i"].as_i64().unwrap();
    if i % 10 == 0 {
        return Err(format!("job {i} failed").into());
    }
    if i % 100 == 1 {
        ctx.utils().cancel_job(ctx.job().id, "not wanted").await?;
        // Until the worker aborts it.
        futures::future::pending::<()>().await;
    }
    if i % 10 == 5 && ctx.job().attempts == 1 {
        return Err("first try".into());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jobs_leave_exactly_one_row_each_with_its_outcome_attempts_and_error() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let jobs: Vec<RawJob> = (0..10_000)
        .map(|i| {
            let attempts = if i % 10 == 5 { 2 } else { 1 };
            RawJob::new("drain", json!({ "i": i }), JobSpec::builder().max_attempts(attempts).build())
        })
        .collect();
    for chunk in jobs.chunks(2_000) {
        utils.add_raw_jobs(chunk).await.unwrap();
    }
    let later = JobSpec::builder().run_at(chrono::Utc::now() + chrono::Duration::hours(1)).build();
    let waiting =
        (0..100).map(|i| RawJob::new("drain", json!({ "i": i + 1 }), later.clone())).collect::<Vec<_>>();
    utils.add_raw_jobs(&waiting).await.unwrap();
    let options = db.worker_options().concurrency(20).define_raw_job("drain", drain_task);
    let running = Running::listening(&db.runtime, options).await;
    db.wait_for_count(HISTORY, 10_000, Duration::from_secs(120)).await;
    running.stop(Duration::from_secs(10)).await;
    let client = db.client().await;
    let rows = client
        .query(
            "select (payload->>'i')::int, outcome, attempts, last_error, count(*) over (partition by job_id) \
             from formica_graphile_worker.job_history",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 10_000);
    for row in rows {
        let (i, outcome, attempts, error, runs): (i32, String, i16, Option<String>, i64) =
            (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
        let expected = match i {
            i if i % 10 == 0 => ("failed", 1, Some(format!("job {i} failed"))),
            i if i % 100 == 1 => ("cancelled", 1, Some("cancelled: not wanted".into())),
            i if i % 10 == 5 => ("completed", 2, Some("first try".into())),
            _ => ("completed", 1, None),
        };
        assert_eq!(
            (outcome.as_str(), attempts, error, runs),
            (expected.0, expected.1, expected.2, 1),
            "job {i}"
        );
    }
    assert_eq!(db.count(&format!("{HISTORY} where finished_at > now() - interval '1 hour'")).await, 10_000);
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs where attempts = 0").await, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_history_off_a_worker_writes_none_and_wait_for_job_says_no_history() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let ok = utils.add_job(&Report { customer: 1, fail: false }, once()).await.unwrap();
    let bad = utils.add_job(&Report { customer: 2, fail: true }, once()).await.unwrap();
    let options = db.worker_options().history(HistoryOptions::off()).define_job_with_output::<Report>();
    let running = Running::listening(&db.runtime, options).await;
    db.wait_for_count(
        "select count(*) from graphile_worker._private_jobs where attempts = 0",
        0,
        Duration::from_secs(20),
    )
    .await;
    // No history write, no notification: the wait looks once more when its time is up.
    for id in [ok.id, bad.id] {
        let waited = utils.wait_for_job(id, Duration::from_millis(100)).await.unwrap();
        assert_eq!(waited, None, "finished, without history");
    }
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(db.count(HISTORY).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_given_back_leaves_no_row_until_it_finishes_on_its_next_run_then_exactly_one() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let job = utils.add_raw_job("hang", json!({}), JobSpec::default()).await.unwrap();
    let options = db.worker_options().define_raw_job("hang", |_: JobContext, _| async move {
        futures::future::pending::<()>().await;
        Ok(())
    });
    let running = Running::listening(&db.runtime, options).await;
    db.wait_for_count(
        "select count(*) from graphile_worker._private_jobs where locked_at is not null",
        1,
        Duration::from_secs(10),
    )
    .await;
    // A forced shutdown aborts the run: the job goes back, no outcome, no row.
    running.handle().kill();
    db.wait_for_count(
        "select count(*) from graphile_worker._private_jobs where locked_at is null",
        1,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(db.count(HISTORY).await, 0);
    let options = db.worker_options().define_raw_job("hang", |_: JobContext, _| async { Ok(()) });
    let running = Running::listening(&db.runtime, options).await;
    let done = utils.wait_for_job(job.id, Duration::from_secs(20)).await.unwrap().expect("a row");
    assert_eq!((done.outcome, done.attempts), (FinalState::Completed, 1), "the aborted attempt was refunded");
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(db.count(HISTORY).await, 1);
}

/// The four-hour sweep frees jobs a worker without a lease (graphile-worker's) locked
/// long ago; each lost attempt leaves its error, and a job out of attempts so ends for good
/// with its history row, as a recovered one does (cli/tests/crash.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_hour_sweep_leaves_the_lost_attempt_s_error_and_a_row_for_a_job_out_of_attempts() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let last = utils.add_raw_job("other", json!({}), once()).await.unwrap().id;
    let more =
        utils.add_raw_job("other", json!({}), JobSpec::builder().max_attempts(3).build()).await.unwrap().id;
    let client = db.client().await;
    client
        .execute(
            "update graphile_worker._private_jobs set attempts = 1, locked_by = 'gw-old', \
             locked_at = now() - interval '5 hours'",
            &[],
        )
        .await
        .unwrap();
    let options = db
        .worker_options()
        .lock_sweep_interval(Duration::from_secs(1))
        .define_raw_job("unused", |_: JobContext, _| async { Ok(()) });
    let running = Running::listening(&db.runtime, options).await;
    db.wait_for_count(
        "select count(*) from graphile_worker._private_jobs where locked_at is null",
        2,
        Duration::from_secs(20),
    )
    .await;
    running.stop(Duration::from_secs(10)).await;
    let lost = formica_core::worker::stale_error(Some("gw-old"), 1);
    for id in [last, more] {
        let row = client
            .query_one("select last_error from graphile_worker._private_jobs where id = $1", &[&id])
            .await
            .unwrap();
        assert_eq!(row.get::<_, Option<String>>(0).as_deref(), Some(lost.as_str()), "job {id}");
    }
    let rows = client
        .query("select job_id, outcome, worker_id, last_error from formica_graphile_worker.job_history", &[])
        .await
        .unwrap();
    let rows: Vec<(i64, String, Option<String>, Option<String>)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    assert_eq!(rows, vec![(last, "failed".to_owned(), Some("gw-old".to_owned()), Some(lost))]);
}

/// A history row of `outcome` finished `ago` before now, by SQL.
async fn finished(client: &tokio_postgres::Client, job_id: i64, outcome: &str, ago: &str) {
    client
        .execute(
            &format!(
                "insert into formica_graphile_worker.job_history (job_id, task_identifier, payload, attempts, \
                 max_attempts, outcome, added_at, finished_at) \
                 values ($1, 't', '{{}}', 1, 1, $2, now() - interval '{ago}', now() - interval '{ago}')"
            ),
            &[&job_id, &outcome],
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_prunes_the_history_itself_soon_after_its_start() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    db.utils().prune_history(&Retention::default(), None).await.unwrap();
    finished(&client, 1, "completed", "10 days").await;
    finished(&client, 2, "completed", "1 second").await;
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = errors.clone();
    // The worker prepares its statements (the default): the pass must bind as prepared too.
    let options = db.worker_options().on_event(move |event| {
        if let formica::Event::DatabaseError { statement, error } = event {
            seen.lock().unwrap().push(format!("{statement}: {error}"));
        }
    });
    let running = Running::listening(&db.runtime, options).await;
    let old = "select count(*) from formica_graphile_worker.job_history where job_id = 1";
    db.wait_for_count(old, 0, Duration::from_secs(10)).await;
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(db.count(HISTORY).await, 1, "the recent row is kept");
    assert_eq!(*errors.lock().unwrap(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pruner_removes_rows_past_their_outcome_s_retention_and_keeps_the_rest() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    let retention = Retention::default(); // completed 7 days, failed and cancelled 30
                                          // The first pass creates the days around now; older rows land in the default partitions.
    utils.prune_history(&retention, None).await.unwrap();
    finished(&client, 1, "completed", "10 days").await;
    finished(&client, 2, "completed", "6 days").await;
    finished(&client, 3, "failed", "10 days").await;
    finished(&client, 4, "cancelled", "31 days").await;
    finished(&client, 5, "completed", "1 second").await;
    finished(&client, 6, "failed", "1 second").await;
    let pruned = utils.prune_history(&retention, None).await.unwrap();
    assert_eq!(pruned.deleted, 2, "{pruned:?}");
    let ids: Vec<i64> = client
        .query("select job_id from formica_graphile_worker.job_history order by job_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [2, 3, 5, 6]);
    // Ten days on, today's completed rows are past 7 days: their day is dropped whole, the
    // failed ones (30 days) stay.
    let later = chrono::Utc::now() + chrono::Duration::days(10);
    let pruned = utils.prune_history(&retention, Some(later)).await.unwrap();
    assert!(pruned.dropped >= 1, "{pruned:?}");
    let ids: Vec<i64> = client
        .query("select job_id from formica_graphile_worker.job_history order by job_id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids, [3, 6]);
    // Rows still go in on any day: the partitions ahead, or the default.
    finished(&client, 7, "completed", "0 seconds").await;
    assert_eq!(db.count(HISTORY).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_role_cannot_write_history_refuses_to_start_and_a_role_without_ddl_rights_prunes() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    let role = format!("no_history_{}", std::process::id());
    client
        .batch_execute(&format!(
            "drop role if exists {role}; create role {role} login password 'pw'; \
             grant usage on schema graphile_worker, formica_graphile_worker to {role}; \
             grant all on all tables in schema graphile_worker to {role}; \
             grant all on all tables in schema formica_graphile_worker to {role}; \
             revoke insert on formica_graphile_worker.job_history from {role}"
        ))
        .await
        .unwrap();
    let url = db.url_as(&role);
    let refused = db.worker_options().database_url(&url).init().await.err().expect("refused");
    assert!(
        refused.to_string().contains("cannot insert into \"formica_graphile_worker\".job_history"),
        "{refused}"
    );
    let off = db.worker_options().database_url(&url).history(HistoryOptions::off()).init().await;
    assert!(off.is_ok(), "history off needs no such right");
    drop(off);
    // The pruner runs as the migrating role: a role with DML rights alone creates and drops
    // the day partitions through it.
    let as_role = formica::WorkerUtils::new(
        formica::Pool::from_url(db.runtime.clone(), &url, 2).unwrap(),
        "graphile_worker",
    );
    as_role.prune_history(&Retention::default(), None).await.unwrap();
    let later = chrono::Utc::now() + chrono::Duration::days(10);
    let pruned = as_role.prune_history(&Retention::default(), Some(later)).await.unwrap();
    assert!(pruned.dropped >= 1, "{pruned:?}");
    client.batch_execute(&format!("drop owned by {role}; drop role {role}")).await.unwrap();
}

/// Drain `n` no-op jobs with a new worker, doing `during` meanwhile: how long from the add of
/// the jobs (one statement) to the last one gone.
async fn drain(db: &TestDb, n: usize, during: impl std::future::Future<Output = ()>) -> Duration {
    // The worker's own pruner keeps completed rows: the test's pass is the one measured.
    let keep = Retention { completed: None, ..Retention::default() };
    let options =
        db.worker_options().concurrency(20).history(HistoryOptions { retention: keep, ..Default::default() });
    let options = options.define_raw_job("noop", |_: JobContext, _| async { Ok(()) });
    let running = Running::listening(&db.runtime, options).await;
    let jobs: Vec<RawJob> =
        (0..n).map(|i| RawJob::new("noop", json!({ "i": i }), JobSpec::default())).collect();
    let started = std::time::Instant::now();
    db.utils().add_raw_jobs(&jobs).await.unwrap();
    let left = "select count(*) from graphile_worker._private_jobs";
    futures::join!(db.wait_for_count(left, 0, Duration::from_secs(120)), during);
    let took = started.elapsed();
    running.stop(Duration::from_secs(10)).await;
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_a_million_rows_during_a_drain_neither_blocks_nor_slows_it() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    let retention = Retention::default();
    // A million completed rows of a day three weeks ago, in that day's own partition.
    let then = chrono::Utc::now() - chrono::Duration::days(21);
    utils.prune_history(&Retention { completed: None, ..Retention::default() }, Some(then)).await.unwrap();
    client
        .batch_execute(
            "insert into formica_graphile_worker.job_history (job_id, task_identifier, payload, attempts, \
             max_attempts, outcome, added_at, finished_at) \
             select i, 'old', '{}', 1, 1, 'completed', now() - interval '21 days', now() - interval '21 days' \
             from generate_series(1, 1000000) as i",
        )
        .await
        .unwrap();
    let old = "select count(*) from formica_graphile_worker.job_history where task_identifier = 'old'";
    assert_eq!(db.count(old).await, 1_000_000);
    let n = 20_000;
    let before = drain(&db, n, async {}).await;
    let pruning = async {
        formica_tests::sleep(db.runtime.as_ref(), Duration::from_millis(300)).await;
        let started = std::time::Instant::now();
        let pruned = utils.prune_history(&retention, None).await.unwrap();
        assert!(pruned.dropped >= 1, "{pruned:?}");
        assert!(started.elapsed() < Duration::from_secs(1), "a pass took {:?}", started.elapsed());
    };
    let with_pruning = drain(&db, n, pruning).await;
    let after = drain(&db, n, async {}).await;
    assert_eq!(db.count(old).await, 0, "the old day is gone");
    // Drains of about two seconds, beside the other tests of this file: a bound loose enough
    // for a loaded CI machine, and far below what a drain blocked by a lock on the history,
    // or by a million-row DELETE, takes. The figures are printed: run this test alone with
    // `--nocapture` to measure the cost (docs/performance.md).
    eprintln!("drains of {n}: alone {before:?} and {after:?}, while pruning a million rows {with_pruning:?}");
    let limit = (before + after).mul_f64(1.5 / 2.0) + Duration::from_millis(250);
    assert!(with_pruning <= limit, "alone {before:?} and {after:?}, while pruning {with_pruning:?}");
    assert_eq!(db.count(&format!("{HISTORY} where task_identifier = 'noop'")).await, 3 * n as i64);
}

/// A statement ending jobs reads as of its start and locks each job as it reaches it: a
/// waiter that registers and looks in between finds its job still to finish, and must still
/// be told when the statement ends it. A test-only trigger holds the statement on its first
/// job (the lower id) for 2 s while the second job's waiter registers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_registering_while_the_statement_ending_its_job_runs_is_told_when_it_commits() {
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute(
            "create function public.hold_slow_delete() returns trigger language plpgsql as $$
             begin
               if old.payload ->> 'slow' = 'true' then perform pg_sleep(2); end if;
               return old;
             end $$;
             create trigger hold_slow_delete before delete on graphile_worker._private_jobs
               for each row execute function public.hold_slow_delete();",
        )
        .await
        .unwrap();
    let utils = db.utils();
    let slow = utils.add_raw_job("noop", json!({ "slow": true }), once()).await.unwrap();
    let waited = utils.add_raw_job("noop", json!({}), once()).await.unwrap();
    assert!(slow.id < waited.id);
    // Both jobs end in one completion statement (a batch gathered over 500 ms).
    let options = db
        .worker_options()
        .concurrency(2)
        .complete_job_batch_delay(Duration::from_millis(500))
        .define_raw_job("noop", |_: JobContext, _| async { Ok(()) });
    let running = Running::listening(&db.runtime, options).await;
    let sleeping = "select count(*) from pg_stat_activity where wait_event = 'PgSleep'";
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while db.count(sleeping).await == 0 {
        assert!(std::time::Instant::now() < deadline, "the completion statement never reached the slow job");
        formica_tests::sleep(db.runtime.as_ref(), Duration::from_millis(20)).await;
    }
    let started = std::time::Instant::now();
    let outcome = utils.wait_for_job(waited.id, Duration::from_secs(30)).await.unwrap().unwrap();
    assert_eq!((outcome.job_id, outcome.outcome), (waited.id, FinalState::Completed));
    // Told when the statement committed (about 2 s), not at the 30 s timeout.
    assert!(started.elapsed() < Duration::from_secs(15), "the waiter waited {:?}", started.elapsed());
    let both = format!("{HISTORY} where job_id in ({}, {})", slow.id, waited.id);
    assert_eq!(db.count(&both).await, 2);
    assert_eq!(db.count("select count(*) from formica_graphile_worker.job_waiters").await, 0);
    running.stop(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_registering_while_a_drain_ends_their_jobs_each_hear_of_it_without_waiting_out_their_timeout()
{
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let jobs: Vec<RawJob> =
        (0..2_000).map(|i| RawJob::new("noop", json!({ "i": i }), JobSpec::default())).collect();
    let added = utils.add_raw_jobs(&jobs).await.unwrap();
    let options =
        db.worker_options().concurrency(10).define_raw_job("noop", |_: JobContext, _| async { Ok(()) });
    let running = Running::listening(&db.runtime, options).await;
    // Twenty waiters on jobs spread over the drain, registering while it runs: one that missed
    // its job's end would answer only when its 60 s are up.
    let started = std::time::Instant::now();
    let waits = added.iter().step_by(100).map(|job| {
        let utils = utils.clone();
        async move { (job.id, utils.wait_for_job(job.id, Duration::from_secs(60)).await) }
    });
    for (id, waited) in futures::future::join_all(waits).await {
        let outcome = waited.unwrap().unwrap_or_else(|| panic!("job {id} has history"));
        assert_eq!((outcome.job_id, outcome.outcome), (id, FinalState::Completed));
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "a waiter waited out its timeout: {:?}",
        started.elapsed()
    );
    running.stop(Duration::from_secs(10)).await;
}

/// The pruner's partition DDL locks the history against every insert until its pass
/// commits, so it comes last in the pass (records step 30): a pass slow in deleting the
/// reports past retention (here each row's delete sleeps a second, by a trigger of this
/// test's) holds no completion's history row up. Before, this fresh database's first pass
/// created its days first, and the insert waited for the whole pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_slow_in_its_deletes_holds_no_history_write_up() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "insert into formica_graphile_worker.job_logs (job_id, attempt, line, at, level, message)
             values (1, 1, 0, now() - interval '40 days', 'info', 'old');
             create function public.slow_delete() returns trigger language plpgsql as
               $$ begin perform pg_sleep(2); return old; end $$;
             create trigger slow_delete before delete on formica_graphile_worker.job_logs
               for each row execute function public.slow_delete();",
        )
        .await
        .unwrap();
    let utils = db.utils();
    let pass = tokio::spawn(async move { utils.prune_history(&Retention::default(), None).await });
    let deleting = "select count(*) from pg_stat_activity
        where wait_event = 'PgSleep' and datname = current_database()";
    db.wait_for_count(deleting, 1, Duration::from_secs(10)).await;
    tokio::time::timeout(Duration::from_secs(1), finished(&client, 1, "completed", "1 second"))
        .await
        .expect("the history row goes in while the pass deletes");
    let pruned = pass.await.unwrap().unwrap();
    assert_eq!(pruned.deleted, 1, "the old log line: {pruned:?}");
    let days = "select count(*) from pg_inherits
        where inhparent = 'formica_graphile_worker.job_history_completed'::regclass
          and inhrelid::regclass::text ~ '_\\d{8}$'";
    assert!(db.count(days).await >= 3, "the pass still creates the days around now");
    assert_eq!(db.count(HISTORY).await, 1);
}

/// The pruner makes each new day's partition apart and attaches it (records step 32), which
/// no insert conflicts with: it makes its days while a completion's history row is not yet
/// committed, and history rows go in while the pass's transaction is still open. Making a
/// day `partition of` the history waited behind that row until the pass's lock wait ran out
/// (the days were then not made), and every completion after it queued behind it. And the
/// migration makes the days around its date, so a new database's first rows have their day.
#[tokio::test]
async fn making_a_day_s_partition_holds_no_history_write_up() {
    let db = TestDb::migrated().await;
    let (in_flight, pruner, client) = (db.client().await, db.client().await, db.client().await);
    let today = "select count(*) from pg_class where relname = 'job_history_completed_' || to_char(now() at time zone 'UTC', 'YYYYMMDD')";
    assert_eq!(db.count(today).await, 1, "the migration made today's partition: the first rows go there");
    in_flight.batch_execute("begin").await.unwrap();
    finished(&in_flight, 1, "completed", "1 second").await;
    pruner.batch_execute("begin").await.unwrap();
    // As of 30 days on, keeping everything: four days to make for each outcome.
    let row = pruner
        .query_one(
            "select dropped, deleted from formica_graphile_worker.prune_pass(now() + interval '30 days', \
             null, null, null, 1000, '2s')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, i64>(1)), (0, 0));
    tokio::time::timeout(Duration::from_secs(1), finished(&client, 2, "completed", "1 second"))
        .await
        .expect("a history row goes in while the pass that made days is open");
    pruner.batch_execute("commit").await.unwrap();
    in_flight.batch_execute("commit").await.unwrap();
    let days = "select count(*) from pg_inherits
        join pg_class as parent on parent.oid = pg_inherits.inhparent
        join pg_class as child on child.oid = pg_inherits.inhrelid
        where parent.relname ~ '^job_history_(completed|failed|cancelled)$'
          and child.relname ~ '_\\d{8}$'
          and to_date(right(child.relname, 8), 'YYYYMMDD') >= (now() + interval '29 days')::date";
    assert_eq!(db.count(days).await, 12, "each outcome's four days around the pass's date were made");
    let in_days = "select count(*) from formica_graphile_worker.job_history_completed_default";
    assert_eq!(db.count(in_days).await, 0, "both rows went to today's partition");
    assert_eq!(db.count(HISTORY).await, 2);
}

/// After each statement that writes history, the waiters' trigger finds each waiter's job
/// by its key (records step 31): with a thousand waiters it hashed the whole jobs table at
/// every completion. It still tells the waiter whose job ended, and keeps the others.
#[tokio::test]
async fn the_waiters_trigger_probes_each_waiter_s_job_without_scanning_the_jobs() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "select count(*) from graphile_worker.add_jobs(array(
               select ('other', '{}'::json, null, null, null, null, null, null)::graphile_worker.job_spec
               from generate_series(1, 150000)));
             insert into formica_graphile_worker.job_waiters (job_id)
               select id from graphile_worker._private_jobs where id % 150 = 0;
             insert into formica_graphile_worker.job_waiters (job_id) values (-1);",
        )
        .await
        .unwrap();
    client
        .batch_execute("vacuum analyze graphile_worker._private_jobs, formica_graphile_worker.job_waiters")
        .await
        .unwrap();
    client.batch_execute("begin").await.unwrap();
    finished(&client, -1, "completed", "1 second").await;
    // Rows of the jobs table the statement read: a row a waiter at most, not the queue.
    let read: i64 = client
        .query_one(
            "select seq_tup_read + coalesce(idx_tup_fetch, 0) from pg_stat_xact_user_tables
             where relid = 'graphile_worker._private_jobs'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    client.batch_execute("commit").await.unwrap();
    assert!(read <= 2000, "the trigger read {read} rows of the 150,000 jobs for 1,001 waiters");
    let waiting = "select count(*) from formica_graphile_worker.job_waiters";
    assert_eq!(db.count(waiting).await, 1000, "the waiter of the job that ended was told and forgotten");
}
