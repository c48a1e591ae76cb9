//! Priority aging on real PostgreSQL (`WorkerUtils::set_aging`; docs/guide/priority-aging.md).
//!
//! - a job of priority 10 behind a steady stream of priority-0 jobs that never runs dry
//!   starts within the bound its aging states (and not before aging brought it level);
//! - a pass never touches a locked job, nor one a transaction holds locked; lifting the
//!   aging gives the jobs it changed their own priority back;
//! - eight passes at once, from two pools, age each job once per step: every job ends
//!   exactly where its time ready puts it.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{Aging, JobContext, JobSpec, Runtime};
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The priorities of the jobs of task `t`, by id.
const PRIORITIES: &str = "select priority from graphile_worker._private_jobs order by id";

async fn priorities(db: &TestDb) -> Vec<i16> {
    db.client().await.query(PRIORITIES, &[]).await.unwrap().iter().map(|row| row.get(0)).collect()
}

/// A job of task `t` ready since `ago`, with `priority`.
fn ready_since(ago: chrono::Duration, priority: i16) -> JobSpec {
    JobSpec::builder().run_at(chrono::Utc::now() - ago).priority(priority).build()
}

async fn a_low_priority_job_starts_within_the_bound_under_a_stream_of_higher_ones(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let aging = Aging::new("t", chrono::Duration::milliseconds(500), 5, -10);
    db.utils().set_aging(&aging, None).await.unwrap();
    let started: Arc<Mutex<Vec<(Instant, i64)>>> = Arc::default();
    let seen = started.clone();
    let options = db
        .worker_options()
        .concurrency(1)
        .local_queue_size(1)
        .poll_interval(Duration::from_millis(100))
        .age_priorities_every(Duration::from_millis(200))
        .define_raw_job("t", move |_ctx: JobContext, payload| {
            seen.lock().unwrap().push((Instant::now(), payload["n"].as_i64().unwrap_or(-1)));
            Box::pin(async {
                std::thread::sleep(Duration::from_millis(40));
                Ok(())
            })
        });
    let utils = db.utils();
    for n in 0..20 {
        utils.add_raw_job("t", json!({ "n": n }), JobSpec::builder().priority(0).build()).await.unwrap();
    }
    let worker = Running::listening(&rt, options).await;
    let added = Instant::now();
    utils.add_raw_job("t", json!({ "n": 9999 }), JobSpec::builder().priority(10).build()).await.unwrap();
    // The stream: a priority-0 job every 20 ms, twice what the worker runs, for 5 s.
    let mut n = 20;
    while added.elapsed() < Duration::from_secs(5) {
        utils.add_raw_job("t", json!({ "n": n }), JobSpec::builder().priority(0).build()).await.unwrap();
        n += 1;
        formica_tests::sleep(rt.as_ref(), Duration::from_millis(20)).await;
    }
    worker.stop(Duration::from_secs(10)).await;
    let started = started.lock().unwrap().clone();
    let low = started.iter().find(|(_, n)| *n == 9999).map(|(at, _)| at.duration_since(added));
    let waiting: i64 = db.count("select count(*) from graphile_worker._private_jobs").await;
    // Level with the stream (0) after 2 steps; below it, so ahead of every stream job
    // whatever its age, after reaches(10, -1) = 3 steps = 1.5 s; then the chore's next pass
    // (at most its 200 ms period), the job running (40 ms) and a fetch: B = 2 s stated, with
    // 1 s more for a loaded machine (the stream's adds share its two cores).
    let level = aging.reaches(10, 0).unwrap().to_std().unwrap();
    let bound = aging.reaches(10, -1).unwrap().to_std().unwrap() + Duration::from_millis(500 + 1_000);
    eprintln!("the low job started after {low:?} (bound {bound:?}); {waiting} stream jobs left waiting");
    assert!(waiting > 10, "the stream never ran dry: {waiting} jobs still waiting");
    let low = low.expect("the low-priority job started");
    assert!(low >= level, "it started after {low:?}, before aging brought it level ({level:?})");
    assert!(low <= bound, "it started after {low:?}, past the bound {bound:?}");
}

async fn a_pass_never_touches_a_locked_job_and_lifting_restores_the_rest(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    utils
        // A period long enough that the task's next pass (a quarter of it away) does not
        // come early on a loaded machine.
        .set_aging(&Aging::new("t", chrono::Duration::seconds(4), 1, -100), Some("ops"))
        .await
        .unwrap();
    let an_hour = chrono::Duration::minutes(60);
    let ids: Vec<i64> = [
        utils.add_raw_job("t", json!({}), ready_since(an_hour, 0)).await.unwrap().id,
        utils.add_raw_job("t", json!({}), ready_since(an_hour, 0)).await.unwrap().id,
        utils.add_raw_job("t", json!({}), ready_since(an_hour, 0)).await.unwrap().id,
        utils.add_raw_job("other", json!({}), ready_since(an_hour, 0)).await.unwrap().id,
    ]
    .to_vec();
    let client = db.client().await;
    // The first locked by a worker, the second held by a transaction (as a fetch holds it).
    client
        .execute(
            "update graphile_worker._private_jobs set locked_at = now(), locked_by = 'w' where id = $1",
            &[&ids[0]],
        )
        .await
        .unwrap();
    let mut holder = db.client().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute("select 1 from graphile_worker._private_jobs where id = $1 for update", &[&ids[1]])
        .await
        .unwrap();
    assert_eq!(utils.age_priorities().await.unwrap(), 1, "only the job nobody holds");
    assert_eq!(priorities(&db).await, vec![0, 0, -100, 0], "an hour ready: down to best; locked: untouched");
    tx.rollback().await.unwrap();
    assert_eq!(utils.age_priorities().await.unwrap(), 0, "the task's next pass is a quarter period away");
    formica_tests::sleep(rt.as_ref(), Duration::from_millis(1_100)).await;
    assert_eq!(utils.age_priorities().await.unwrap(), 1, "the job no longer held, at the next pass");
    assert_eq!(priorities(&db).await, vec![0, -100, -100, 0]);
    assert_eq!(utils.age_priorities().await.unwrap(), 0, "nothing left to age");
    let agings = utils.agings().await.unwrap();
    assert_eq!(
        (agings.len(), agings[0].aging.label(), agings[0].set_by.as_str()),
        (1, "t -1/4s to -100".into(), "ops")
    );
    assert!(utils.remove_aging("t").await.unwrap());
    assert!(!utils.remove_aging("t").await.unwrap(), "nothing left to lift");
    assert_eq!(priorities(&db).await, vec![0, 0, 0, 0], "lifted: their own priority back");
    let bad = Aging::new("t", chrono::Duration::zero(), 1, 0);
    match utils.set_aging(&bad, None).await {
        Err(formica::Error::Control(message)) => assert!(message.contains("every_ms 0"), "{message}"),
        other => panic!("a period of 0 was taken: {other:?}"),
    }
}

async fn passes_at_once_age_each_job_once_per_step(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let (one, two) = (db.utils(), db.utils());
    one.set_aging(&Aging::new("t", chrono::Duration::seconds(10), 1, -100), None).await.unwrap();
    // Ready 25 s: two whole steps, whenever in the next 5 s the passes run.
    let jobs: Vec<formica::RawJob> = (0..200)
        .map(|_| formica::RawJob::new("t", json!({}), ready_since(chrono::Duration::seconds(25), 3)))
        .collect();
    one.add_raw_jobs(&jobs).await.unwrap();
    let passes = (0..8).map(|i| {
        let utils = if i % 2 == 0 { one.clone() } else { two.clone() };
        async move { utils.age_priorities().await.unwrap() }
    });
    let raised: u64 = futures::future::join_all(passes).await.into_iter().sum();
    assert_eq!(raised, 200, "each job changed by one pass");
    assert!(priorities(&db).await.iter().all(|p| *p == 1), "each aged two steps, once each");
}

/// What a pass costs (docs/performance.md): 100,000 waiting jobs of an aged task, ready 10.5
/// minutes, aging a step each 5 minutes (two steps, the next minutes away). The median of 20
/// passes: with no aging set; changing a full batch; going through every job once each is
/// where its time ready puts it (changing none); and between two of the task's passes.
/// `scripts/with-postgres cargo test -p formica-tests --test it aging::tokio_only::what_a_pass_costs -- --ignored --nocapture`
async fn what_a_pass_costs(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let jobs: Vec<formica::RawJob> = (0..100_000)
        .map(|_| formica::RawJob::new("t", json!({}), ready_since(chrono::Duration::seconds(630), 0)))
        .collect();
    for chunk in jobs.chunks(5_000) {
        utils.add_raw_jobs(chunk).await.unwrap();
    }
    db.client().await.batch_execute("vacuum analyze graphile_worker._private_jobs").await.unwrap();
    let median = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let passes = |expect: Option<u64>| {
        let utils = utils.clone();
        async move {
            let mut times = Vec::new();
            for _ in 0..20 {
                let at = Instant::now();
                let changed = utils.age_priorities().await.unwrap();
                times.push(at.elapsed());
                if let Some(expect) = expect {
                    assert_eq!(changed, expect);
                }
            }
            median(times)
        }
    };
    let none_set = passes(Some(0)).await;
    utils.set_aging(&Aging::new("t", chrono::Duration::minutes(5), 1, -100), None).await.unwrap();
    let full_batch = passes(Some(formica::AGING_BATCH as u64)).await;
    while utils.age_priorities().await.unwrap() > 0 {}
    let between = passes(Some(0)).await;
    let mut scans = Vec::new();
    for _ in 0..20 {
        // Set again, the aging's next pass goes through the task's jobs at once.
        utils.set_aging(&Aging::new("t", chrono::Duration::minutes(5), 1, -100), None).await.unwrap();
        let at = Instant::now();
        assert_eq!(utils.age_priorities().await.unwrap(), 0);
        scans.push(at.elapsed());
    }
    let nothing_to_change = median(scans);
    eprintln!(
        "a pass, median of 20, 100,000 waiting jobs: no aging set {none_set:?}; changing 1,000 \
         {full_batch:?}; through every job, all already aged {nothing_to_change:?}; between \
         the task's passes {between:?}"
    );
}

formica_tests::on_both_runtimes!(a_low_priority_job_starts_within_the_bound_under_a_stream_of_higher_ones);

mod tokio_only {
    use super::*;

    #[test]
    fn a_pass_never_touches_a_locked_job_and_lifting_restores_the_rest() {
        run(super::a_pass_never_touches_a_locked_job_and_lifting_restores_the_rest);
    }

    #[test]
    fn passes_at_once_age_each_job_once_per_step() {
        run(super::passes_at_once_age_each_job_once_per_step);
    }

    #[test]
    #[ignore = "a measurement (docs/performance.md), 100,000 jobs"]
    fn what_a_pass_costs() {
        run(super::what_a_pass_costs);
    }

    fn run<F: std::future::Future<Output = ()>>(test: fn(Arc<dyn Runtime>) -> F) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(test(Arc::new(formica_tokio::TokioRuntime)));
    }
}
