//! Unique jobs on PostgreSQL (docs/guide/unique-jobs.md): a key derived from chosen payload
//! fields and/or a time bucket, race-free under concurrent adds in every key mode, and an
//! ordinary job key in the row (so graphile-worker's workers and `add_job` honour it).

use chrono::{DateTime, Duration as ChronoDuration, DurationRound, Utc};
use formica::{Error, JobKeyMode, JobSpec, JobSpecError, Unique};
use formica_tests::TestDb;
use serde_json::json;
use std::time::Duration;

const ADDS: usize = 1000;
const CONNECTIONS: usize = 8;

/// Add `ADDS` jobs of `task` from `CONNECTIONS` connections at once, the `i`th with payload
/// `{"customer": 7, "n": i}` and the spec `spec(i)`: how many added a job (the others were
/// refused, their key claimed by another).
async fn add_concurrently(
    db: &TestDb,
    task: &'static str,
    spec: impl Fn(usize) -> JobSpec + Clone + Send + 'static,
) -> usize {
    let mut adders = Vec::new();
    for c in 0..CONNECTIONS {
        let (client, utils, spec) = (db.client().await, db.utils(), spec.clone());
        adders.push(tokio::spawn(async move {
            let mut added = 0;
            for i in (c..ADDS).step_by(CONNECTIONS) {
                let payload = json!({ "customer": 7, "n": i });
                match utils.add_raw_job_in(&client, task, payload, spec(i)).await {
                    Ok(_) => added += 1,
                    Err(Error::Claimed(_)) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            added
        }));
    }
    let mut added = 0;
    for adder in adders {
        added += adder.await.expect("adder");
    }
    added
}

async fn keys_of(db: &TestDb, task: &str) -> Vec<String> {
    let sql = "select key from graphile_worker.jobs where task_identifier = $1 order by key";
    let rows = db.client().await.query(sql, &[&task]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test]
async fn a_unique_by_fields_job_added_a_thousand_times_from_eight_connections_is_one_job_in_each_mode() {
    let db = TestDb::migrated().await;
    let modes = [
        ("replace", JobKeyMode::Replace),
        ("preserve", JobKeyMode::PreserveRunAt),
        ("dedupe", JobKeyMode::UnsafeDedupe),
    ];
    for (task, mode) in modes {
        let spec =
            move |_| JobSpec::builder().unique(Unique::by_fields(["customer"])).job_key_mode(mode).build();
        assert_eq!(add_concurrently(&db, task, spec).await, ADDS, "every add succeeds");
        let keys = keys_of(&db, task).await;
        let expected =
            formica::unique::key(task, &json!({"customer": 7}), &Unique::by_fields(["customer"]), Utc::now());
        assert_eq!(keys, vec![expected.unwrap()], "{task}: one job, holding the derived key");
    }
    // Another customer is another job.
    let other = JobSpec::builder().unique(Unique::by_fields(["customer"])).build();
    db.utils().add_raw_job("replace", json!({ "customer": 8 }), other).await.unwrap();
    assert_eq!(keys_of(&db, "replace").await.len(), 2);
}

#[tokio::test]
async fn with_a_one_hour_bucket_there_is_one_job_per_bucket() {
    let db = TestDb::migrated().await;
    let hour: DateTime<Utc> =
        Utc::now().duration_trunc(ChronoDuration::hours(1)).unwrap() + ChronoDuration::hours(1);
    // Due over three hours, a minute apart: three buckets.
    let spec = move |i: usize| {
        let by = Unique::by_fields(["customer"]).per(Duration::from_secs(3600));
        let run_at = hour + ChronoDuration::minutes((i % 180) as i64);
        JobSpec::builder().unique(by).run_at(run_at).job_key_mode(JobKeyMode::UnsafeDedupe).build()
    };
    assert_eq!(add_concurrently(&db, "hourly", spec).await, ADDS);
    let keys = keys_of(&db, "hourly").await;
    assert_eq!(keys.len(), 3, "{keys:?}");
    for (k, h) in keys.iter().zip(0..) {
        let start = (hour + ChronoDuration::hours(h)).format("%Y-%m-%dT%H:%M:%SZ").to_string();
        assert!(k.ends_with(&format!("@{start}")), "{k} is the bucket of {start}");
    }
}

#[tokio::test]
async fn a_unique_spec_that_names_its_own_key_is_refused_before_the_database() {
    let db = TestDb::migrated().await;
    let spec = JobSpec::builder().unique(Unique::by_payload()).job_key("mine").build();
    let refused = db.utils().add_raw_job("t", json!({}), spec).await;
    assert!(matches!(refused, Err(Error::Spec(JobSpecError::UniqueWithKey))), "{refused:?}");
    let zero = JobSpec::builder().unique(Unique::per_period(Duration::ZERO)).build();
    let refused = db.utils().add_raw_job("t", json!({}), zero).await;
    assert!(matches!(refused, Err(Error::Spec(JobSpecError::UniquePeriod))), "{refused:?}");
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0);
}

#[tokio::test]
async fn a_unique_job_within_a_period_is_not_added_again_even_once_it_has_finished() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let by = Unique::by_fields(["customer"]).within(Duration::from_secs(3));
    let spec = move |_| JobSpec::builder().unique(by.clone()).build();
    assert_eq!(add_concurrently(&db, "claimed", spec.clone()).await, 1, "one add of the thousand added");
    let keys = keys_of(&db, "claimed").await;
    assert_eq!(keys.len(), 1);

    // Finished, and still not added again within the period; another customer is.
    let id = db.count("select id from graphile_worker._private_jobs").await;
    assert_eq!(utils.complete_jobs(&[id]).await.unwrap().len(), 1);
    let again = utils.add_raw_job("claimed", json!({ "customer": 7 }), spec(0)).await;
    assert!(matches!(again, Err(Error::Claimed(ref key)) if *key == keys[0]), "{again:?}");
    utils.add_raw_job("claimed", json!({ "customer": 8 }), spec(0)).await.expect("another key");

    // Once the claim expires, the same job is added again.
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let job = utils.add_raw_job("claimed", json!({ "customer": 7 }), spec(0)).await.expect("added again");
    assert_eq!(job.key.as_deref(), Some(keys[0].as_str()));
    let batch = [formica::RawJob::new("claimed", json!({ "customer": 9 }), spec(0))];
    let refused = utils.add_raw_jobs(&batch).await;
    assert!(matches!(refused, Err(Error::Spec(JobSpecError::UniqueWithinInBatch))), "{refused:?}");
}
