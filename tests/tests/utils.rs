//! WorkerUtils: adding jobs (typed, raw, batches, inside a transaction), validation before
//! the database is asked, and the admin functions, including on locked jobs.

use chrono::{Duration, TimeZone, Utc};
use formica_tests::TestDb;
use formica_tokio::{
    CleanupTask, Error, JobFilter, JobKeyMode, JobSpec, JobSpecError, RawJob, RescheduleJobOptions, Task,
};
use serde::Serialize;
use serde_json::json;

#[derive(Serialize)]
struct SendEmail {
    to: String,
}

impl Task for SendEmail {
    const IDENTIFIER: &'static str = "send_email";
}

async fn count(db: &TestDb, filter: &str) -> i64 {
    db.client()
        .await
        .query_one(&format!("select count(*) from graphile_worker.jobs where {filter}"), &[])
        .await
        .expect("count")
        .get(0)
}

#[tokio::test]
async fn typed_raw_and_batch_adds_store_what_was_asked() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let at = Utc.with_ymd_and_hms(2031, 5, 6, 7, 8, 9).unwrap();
    let spec = JobSpec::builder()
        .queue_name("user:1")
        .run_at(at)
        .max_attempts(3)
        .job_key("welcome:1")
        .priority(-5)
        .flags(["email", "slow"])
        .build();
    let job = utils.add_job(&SendEmail { to: "a@example.com".into() }, spec).await.expect("add");
    assert_eq!(job.task_identifier, "send_email");
    assert_eq!(job.queue_name.as_deref(), Some("user:1"), "the name of a queue created by this very call");
    assert_eq!(job.payload, json!({"to": "a@example.com"}));
    assert_eq!((job.run_at, job.max_attempts, job.priority), (at, 3, -5));
    assert_eq!(job.key.as_deref(), Some("welcome:1"));
    assert_eq!(job.flags.iter().map(String::as_str).collect::<Vec<_>>(), vec!["email", "slow"]);
    assert_eq!((job.attempts, job.revision, job.locked_at.is_none()), (0, 0, true));

    let raw = utils.add_raw_job("resize", json!({"w": 10}), JobSpec::default()).await.expect("raw");
    assert_eq!((raw.task_identifier.as_str(), raw.queue_name, raw.max_attempts), ("resize", None, 25));

    let spec = JobSpec::builder().job_key("digest").build();
    utils.add_batch_job(&[SendEmail { to: "x".into() }], spec.clone()).await.expect("batch 1");
    let merged = utils.add_batch_job(&[SendEmail { to: "y".into() }], spec).await.expect("batch 2");
    assert_eq!(merged.payload, json!([{"to": "x"}, {"to": "y"}]));
}

#[tokio::test]
async fn add_jobs_is_one_call_and_names_new_tasks_and_queues() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    utils.add_raw_job("known", json!({}), JobSpec::default()).await.unwrap();
    let jobs = utils
        .add_raw_jobs(&[
            RawJob { identifier: "known".into(), payload: json!({"i": 1}), spec: JobSpec::default() },
            RawJob {
                identifier: "fresh".into(),
                payload: json!({"i": 2}),
                spec: JobSpec::builder().queue_name("new-queue").build(),
            },
            RawJob {
                identifier: "other".into(),
                payload: json!({"i": 3}),
                spec: JobSpec::builder().job_key("k").job_key_mode(JobKeyMode::PreserveRunAt).build(),
            },
        ])
        .await
        .expect("add_raw_jobs");
    let mut got: Vec<(String, Option<String>, serde_json::Value)> =
        jobs.into_iter().map(|j| (j.task_identifier, j.queue_name, j.payload.into())).collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        got,
        vec![
            ("fresh".into(), Some("new-queue".into()), json!({"i": 2})),
            ("known".into(), None, json!({"i": 1})),
            ("other".into(), None, json!({"i": 3})),
        ]
    );
    let typed = utils
        .add_jobs(&[
            (SendEmail { to: "a".into() }, &JobSpec::default()),
            (SendEmail { to: "b".into() }, &JobSpec::default()),
        ])
        .await
        .expect("typed batch");
    assert_eq!(typed.len(), 2);
    assert!(typed.iter().all(|j| j.task_identifier == "send_email"));
    assert!(utils.add_raw_jobs(&[]).await.expect("empty").is_empty());
    assert_eq!(count(&db, "true").await, 6);
}

#[tokio::test]
async fn invalid_specs_are_refused_before_the_database_with_graphile_codes() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let cases: Vec<(String, JobSpec, &str)> = vec![
        ("t".repeat(129), JobSpec::default(), "GWBID"),
        ("t".into(), JobSpec::builder().queue_name("q".repeat(129)).build(), "GWBQN"),
        ("t".into(), JobSpec::builder().job_key("k".repeat(513)).build(), "GWBJK"),
        ("t".into(), JobSpec::builder().max_attempts(0).build(), "GWBMA"),
    ];
    for (identifier, spec, code) in cases {
        match utils.add_raw_job(&identifier, json!({}), spec).await {
            Err(Error::Spec(e)) => assert_eq!(e.code(), code, "{e}"),
            other => panic!("expected {code}, got {other:?}"),
        }
    }
    let batch = [RawJob {
        identifier: "t".into(),
        payload: json!({}),
        spec: JobSpec::builder().job_key("k").job_key_mode(JobKeyMode::UnsafeDedupe).build(),
    }];
    assert!(matches!(utils.add_raw_jobs(&batch).await, Err(Error::Spec(JobSpecError::UnsafeDedupeInBatch))));
    assert_eq!(count(&db, "true").await, 0, "nothing was stored");
}

#[tokio::test]
async fn a_job_added_in_a_transaction_exists_only_if_it_commits() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let mut client = db.client().await;
    let tx = client.transaction().await.unwrap();
    utils
        .add_job_in(&tx, &SendEmail { to: "rolled back".into() }, JobSpec::default())
        .await
        .expect("add in tx");
    tx.rollback().await.unwrap();
    assert_eq!(count(&db, "true").await, 0);

    let tx = client.transaction().await.unwrap();
    let job =
        utils.add_raw_job_in(&tx, "t", json!({"kept": true}), JobSpec::default()).await.expect("add in tx");
    assert_eq!(count(&db, "true").await, 0, "invisible before commit");
    tx.commit().await.unwrap();
    assert_eq!(count(&db, &format!("id = {}", job.id)).await, 1);
}

/// Three jobs: one free, one locked now, one locked five hours ago (a dead worker's).
async fn free_busy_stale(db: &TestDb) -> [i64; 3] {
    let utils = db.utils();
    let mut ids = [0; 3];
    for (i, id) in ids.iter_mut().enumerate() {
        *id = utils
            .add_raw_job("t", json!({ "i": i }), JobSpec::builder().max_attempts(9).build())
            .await
            .unwrap()
            .id;
    }
    let client = db.client().await;
    client
        .execute(
            "update graphile_worker._private_jobs set locked_by = 'w', attempts = 1,
               locked_at = case when id = $1 then now() else now() - interval '5 hours' end
             where id = any($2)",
            &[&ids[1], &vec![ids[1], ids[2]]],
        )
        .await
        .unwrap();
    ids
}

#[tokio::test]
async fn admin_functions_skip_jobs_held_by_a_live_worker() {
    let db = TestDb::migrated().await;
    let utils = db.utils();

    let [free, busy, stale] = free_busy_stale(&db).await;
    let done: Vec<i64> =
        utils.complete_jobs(&[free, busy, stale]).await.unwrap().iter().map(|j| j.id).collect();
    assert_eq!(done, vec![free, stale]);
    assert_eq!(count(&db, "true").await, 1);
    assert_eq!(count(&db, &format!("id = {busy} and attempts = 1")).await, 1, "the live job is untouched");
    utils.force_unlock_workers(&["w"]).await.unwrap();
    utils.complete_jobs(&[busy]).await.unwrap();

    let [free, busy, stale] = free_busy_stale(&db).await;
    let failed = utils.permanently_fail_jobs(&[free, busy, stale], Some("no longer needed")).await.unwrap();
    assert_eq!(failed.iter().map(|j| j.id).collect::<Vec<_>>(), vec![free, stale]);
    assert!(failed.iter().all(|j| j.attempts == 9 && j.last_error.as_deref() == Some("no longer needed")));
    let default_reason = utils.permanently_fail_jobs(&[free], None).await.unwrap();
    assert_eq!(default_reason[0].last_error.as_deref(), Some("Manually marked as failed"));
    assert_eq!(count(&db, &format!("id = {busy} and attempts = 1 and last_error is null")).await, 1);

    let at = Utc::now() + Duration::days(3);
    let options = RescheduleJobOptions {
        run_at: Some(at),
        priority: Some(7),
        attempts: Some(0),
        max_attempts: Some(4),
    };
    let moved = utils.reschedule_jobs(&[free, busy, stale], &options).await.unwrap();
    assert_eq!(moved.iter().map(|j| j.id).collect::<Vec<_>>(), vec![free, stale]);
    for job in &moved {
        assert_eq!((job.priority, job.attempts, job.max_attempts), (7, 0, 4));
        assert!((job.run_at - at).num_milliseconds().abs() < 1);
    }
    let partial = utils
        .reschedule_jobs(&[free], &RescheduleJobOptions { priority: Some(1), ..Default::default() })
        .await
        .unwrap();
    assert_eq!((partial[0].priority, partial[0].max_attempts), (1, 4), "unset options leave columns alone");
    assert_eq!(count(&db, &format!("id = {busy} and priority = 0")).await, 1);
}

/// Who holds each job, by job id.
async fn holders(db: &TestDb) -> Vec<Option<String>> {
    let client = db.client().await;
    let rows =
        client.query("select locked_by from graphile_worker._private_jobs order by id", &[]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test]
async fn force_unlock_workers_refuses_a_worker_with_a_live_lease_unless_even_if_alive() {
    use formica_tests::spoiled::{lease, lock};
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let mut ids = Vec::new();
    for queue in ["q-alive", "q-lapsed", "q-graphile"] {
        let spec = JobSpec::builder().queue_name(queue).build();
        ids.push(utils.add_raw_job("t", json!({}), spec).await.unwrap().id);
    }
    // A live Formica worker, one whose lease lapsed, and one with no lease (graphile-worker's).
    lease(&db, "alive", 60).await;
    lease(&db, "lapsed", -1).await;
    for (id, worker) in ids.iter().zip(["alive", "lapsed", "graphile"]) {
        lock(&db, *id, worker).await;
    }
    let all = || vec![Some("alive".to_owned()), Some("lapsed".to_owned()), Some("graphile".to_owned())];

    let refused = utils.force_unlock_workers(&["lapsed", "alive", "graphile"]).await;
    let Err(Error::WorkersAlive(alive)) = refused else { panic!("not refused: {refused:?}") };
    assert_eq!(alive.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["alive"]);
    let until = alive[0].1 - Utc::now();
    assert!(until > Duration::seconds(50) && until <= Duration::seconds(61), "alive for {until}");
    let message = Error::WorkersAlive(alive).to_string();
    assert!(message.contains("\"alive\" is alive until") && message.contains("twice"), "{message}");
    assert_eq!(holders(&db).await, all(), "a refusal releases nothing, not even the dead workers'");
    let queues = "select count(*) from graphile_worker._private_job_queues where locked_by is not null";
    assert_eq!(db.count(queues).await, 3);

    utils.force_unlock_workers(&["lapsed", "graphile"]).await.expect("no live lease: unlocked");
    assert_eq!(holders(&db).await, vec![Some("alive".to_owned()), None, None]);
    utils.force_unlock_workers_even_if_alive(&["alive"]).await.expect("forced");
    assert_eq!(holders(&db).await, vec![None, None, None]);
    assert_eq!(db.count(queues).await, 0);
}

/// A worker that stops cleanly (here: gracefully, with its job run) ends its lease at once
/// rather than leaving it to lapse: the other workers stop counting it alive (their fetches
/// stop taking turns) and `force_unlock_workers` takes it. The row stays for the recovery
/// sweep, which forgets it after its grace.
#[tokio::test]
async fn a_worker_that_stops_cleanly_ends_its_lease_at_once() {
    use formica_tests::{sleep, Running};
    let db = TestDb::migrated().await;
    let rt = db.runtime.clone();
    let running =
        Running::listening(&rt, db.worker_options().define_raw_job("t", |_, _| async { Ok(()) })).await;
    let worker_id = running.worker_id().to_owned();
    let live = "select count(*) from formica_graphile_worker.leases where expires_at > now()";
    for _ in 0..500 {
        if db.count(live).await == 1 {
            break;
        }
        sleep(rt.as_ref(), std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(db.count(live).await, 1, "the running worker holds a live lease");
    db.utils().add_raw_job("t", json!({}), JobSpec::default()).await.unwrap();
    let jobs = "select count(*) from graphile_worker._private_jobs";
    for _ in 0..500 {
        if db.count(jobs).await == 0 {
            break;
        }
        sleep(rt.as_ref(), std::time::Duration::from_millis(10)).await;
    }
    running.stop(std::time::Duration::from_secs(10)).await;
    assert_eq!(db.count(live).await, 0, "no live lease once it stopped");
    assert_eq!(db.count("select count(*) from formica_graphile_worker.leases").await, 1, "left to the sweep");
    db.utils().force_unlock_workers(&[&worker_id]).await.expect("not alive any more");
}

#[tokio::test]
async fn force_unlock_workers_waits_for_a_lease_renewal_in_flight_and_then_refuses() {
    use formica_tests::spoiled::{lease, lock};
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let id = utils.add_raw_job("t", json!({}), JobSpec::default()).await.unwrap().id;
    lease(&db, "w", -1).await;
    lock(&db, id, "w").await;
    // The worker renews its lapsed lease; the renewal has not committed yet.
    let mut renewing = db.client().await;
    let renewal = renewing.transaction().await.unwrap();
    renewal
        .execute("update formica_graphile_worker.leases set expires_at = now() + interval '1 minute'", &[])
        .await
        .unwrap();
    let unlocking = tokio::spawn(async move { utils.force_unlock_workers(&["w"]).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!unlocking.is_finished(), "the unlock waits for the lease row");
    renewal.commit().await.unwrap();
    let refused = unlocking.await.unwrap();
    assert!(matches!(refused, Err(Error::WorkersAlive(_))), "{refused:?}");
    assert_eq!(holders(&db).await, vec![Some("w".to_owned())]);
}

#[tokio::test]
async fn force_unlock_workers_releases_only_the_named_workers() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let a = utils.add_raw_job("t", json!({}), JobSpec::builder().queue_name("qa").build()).await.unwrap();
    let b = utils.add_raw_job("t", json!({}), JobSpec::builder().queue_name("qb").build()).await.unwrap();
    let client = db.client().await;
    client
        .batch_execute(&format!(
            "update graphile_worker._private_jobs set locked_at = now(), attempts = 1,
               locked_by = case when id = {} then 'dead' else 'alive' end;
             update graphile_worker._private_job_queues set locked_at = now(),
               locked_by = case when queue_name = 'qa' then 'dead' else 'alive' end;",
            a.id
        ))
        .await
        .unwrap();
    utils.force_unlock_workers(&["dead", "unknown"]).await.unwrap();
    let rows = client
        .query(
            "select j.id, j.locked_by, q.locked_by, j.attempts from graphile_worker._private_jobs j
             join graphile_worker._private_job_queues q on q.id = j.job_queue_id order by j.id",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<(i64, Option<String>, Option<String>, i16)> =
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect();
    assert_eq!(got, vec![(a.id, None, None, 1), (b.id, Some("alive".into()), Some("alive".into()), 1)]);
}

#[tokio::test]
async fn remove_job_through_utils() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    utils.add_raw_job("t", json!({}), JobSpec::builder().job_key("k").build()).await.unwrap();
    let removed = utils.remove_job("k").await.unwrap().expect("a job held the key");
    assert_eq!(removed.key.as_deref(), Some("k"));
    assert_eq!(removed.task_identifier, "t");
    assert!(utils.remove_job("k").await.unwrap().is_none());
    assert_eq!(count(&db, "true").await, 0);
}

#[tokio::test]
async fn cleanup_removes_only_what_is_unused() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    utils
        .add_raw_job("dead", json!({}), JobSpec::builder().queue_name("q-dead").max_attempts(1).build())
        .await
        .unwrap();
    utils.add_raw_job("live", json!({}), JobSpec::builder().queue_name("q-live").build()).await.unwrap();
    let done =
        utils.add_raw_job("gone", json!({}), JobSpec::builder().queue_name("q-gone").build()).await.unwrap();
    utils.complete_jobs(&[done.id]).await.unwrap();
    utils.add_raw_job("keep-me", json!({}), JobSpec::default()).await.unwrap();
    let client = db.client().await;
    client
        .batch_execute("update graphile_worker._private_jobs set attempts = 1 where max_attempts = 1")
        .await
        .unwrap();
    client.batch_execute("delete from graphile_worker._private_jobs where task_id = (select id from graphile_worker._private_tasks where identifier = 'keep-me')").await.unwrap();

    utils
        .cleanup(
            &[CleanupTask::GcJobQueues, CleanupTask::GcTaskIdentifiers, CleanupTask::DeletePermafailedJobs],
            &["keep-me"],
        )
        .await
        .unwrap();
    let names = |sql: &'static str| {
        let client = &client;
        async move {
            let mut v: Vec<String> = client.query(sql, &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
            v.sort();
            v
        }
    };
    assert_eq!(names("select identifier from graphile_worker._private_tasks").await, vec!["keep-me", "live"]);
    assert_eq!(names("select queue_name from graphile_worker._private_job_queues").await, vec!["q-live"]);
    assert_eq!(count(&db, "true").await, 1);
    assert!("GC_JOB_QUEUES".parse::<CleanupTask>().is_ok());
    assert!("GC_EVERYTHING".parse::<CleanupTask>().unwrap_err().contains("unknown cleanup task"));
}

/// Jobs without key and queue take a faster statement than `add_jobs`: they must land as
/// `add_jobs` would store them, announce themselves the same way, and a task not yet
/// registered must still get its jobs (the statement then inserts none and `add_jobs` runs).
#[tokio::test]
async fn a_plain_batch_is_stored_and_announced_as_add_jobs_would() {
    use futures::StreamExt;
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let at = Utc.with_ymd_and_hms(2031, 5, 6, 7, 8, 9).unwrap();
    let specs = [
        (json!({"i": 1}), JobSpec::default()),
        (json!(null), JobSpec::builder().run_at(at).max_attempts(3).priority(-4).build()),
        (json!([1, 2]), JobSpec::builder().flags(["a", "b"]).build()),
    ];
    let batch = |identifier: &str| -> Vec<RawJob> {
        specs
            .iter()
            .map(|(payload, spec)| RawJob {
                identifier: identifier.into(),
                payload: payload.clone(),
                spec: spec.clone(),
            })
            .collect()
    };
    let (_listener, mut notes) = formica_tests::listen(&db.url, "jobs:insert").await;
    let mut answered = Vec::new();
    // "fresh" is registered by this call (through add_jobs), then known to the plain path.
    for identifier in ["fresh", "fresh"] {
        let added = utils.add_raw_jobs(&batch(identifier)).await.expect("plain batch");
        answered.extend(added.clone());
        assert_eq!(
            added.iter().map(|j| j.payload.clone()).collect::<Vec<_>>(),
            vec![json!({"i": 1}), json!({}), json!([1, 2])]
        );
        assert!(added.iter().all(|j| j.task_identifier == identifier && j.queue_name.is_none()));
        let note = formica_tests::timeout(
            &formica_tokio::TokioRuntime,
            std::time::Duration::from_secs(5),
            notes.next(),
        )
        .await
        .expect("a notification")
        .expect("the listener is up");
        let note: serde_json::Value = serde_json::from_str(&note).expect("JSON");
        assert_eq!(note["count"], 3, "{note}");
    }
    // The plain path answers with jobs it builds from what it sent: they must be the rows.
    let stored = utils.list_jobs(&JobFilter::default()).await.expect("list").jobs;
    assert_eq!(answered, stored, "the jobs answered are the jobs stored");
    // The same specs through the add_jobs function itself.
    let client = db.client().await;
    let specs_json: Vec<serde_json::Value> = specs
        .iter()
        .map(|(payload, spec)| {
            json!({"identifier": "fresh", "payload": payload, "run_at": spec.run_at,
                   "max_attempts": spec.max_attempts, "priority": spec.priority, "flags": spec.flags})
        })
        .collect();
    client
        .execute(
            "select graphile_worker.add_jobs(array(select json_populate_recordset(null::graphile_worker.job_spec, $1::json)))",
            &[&serde_json::Value::Array(specs_json)],
        )
        .await
        .expect("add_jobs");
    let rows = client
        .query(
            "select payload::text, max_attempts, priority, flags::text, attempts, key, job_queue_id, revision, \
             locked_at is null, run_at = created_at or run_at = $1 as run_at_as_asked
             from graphile_worker._private_jobs order by id",
            &[&at],
        )
        .await
        .expect("rows");
    let rows: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{:?}",
                (
                    r.get::<_, String>(0),
                    r.get::<_, i16>(1),
                    r.get::<_, i16>(2),
                    r.get::<_, Option<String>>(3),
                    r.get::<_, i16>(4),
                    r.get::<_, Option<String>>(5),
                    r.get::<_, Option<i32>>(6),
                    r.get::<_, i32>(7),
                    r.get::<_, bool>(8),
                    r.get::<_, bool>(9),
                )
            )
        })
        .collect();
    assert_eq!(rows.len(), 9);
    assert_eq!(rows[0..3], rows[6..9], "the plain path (first) and add_jobs (last) store the same");
    assert_eq!(rows[3..6], rows[6..9], "the plain path (second) and add_jobs (last) store the same");
    assert!(rows[2].contains(&format!("{:?}", Some(r#"{"a": true, "b": true}"#))), "{}", rows[2]);
}

/// A plain batch of several tasks, interleaved: each job keeps its task, and the jobs are
/// numbered in the order given (what the queue's order falls back on).
#[tokio::test]
async fn a_plain_batch_of_several_tasks_keeps_each_job_s_task_and_order() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let job = formica_tests::numbered_job;
    // Registers both tasks (through add_jobs); the next batch takes the plain path.
    utils.add_raw_jobs(&[job("a", -2), job("b", -1)]).await.expect("registers");
    let tasks = |i: i64| if i % 3 == 0 { "b" } else { "a" };
    let added =
        utils.add_raw_jobs(&(0..7).map(|i| job(tasks(i), i)).collect::<Vec<_>>()).await.expect("batch");
    let stored = utils.list_jobs(&JobFilter::default()).await.expect("list").jobs.split_off(2);
    assert_eq!(added, stored, "the jobs answered are the jobs stored");
    assert_eq!(
        stored.iter().map(|j| (j.task_identifier.as_str(), j.payload["n"].as_i64())).collect::<Vec<_>>(),
        (0..7).map(|i| (tasks(i), Some(i))).collect::<Vec<_>>(),
    );
    assert!(stored.windows(2).all(|w| w[0].id < w[1].id));
}
