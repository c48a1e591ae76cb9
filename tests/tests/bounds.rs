//! Bounded queues on real PostgreSQL (`Control::bound`; docs/guide/bounded-queues.md):
//!
//! - an add over the bound is refused with `Error::QueueFull` naming the task, partition,
//!   bound and count, and stores nothing (a batch is all or nothing); jobs due later count;
//!   a bounded add in a REPEATABLE READ transaction is refused (SQLSTATE FMISO);
//! - per partition (a payload field, a key prefix), each partition has its own room;
//! - 16 connections racing adds (single and batched) against a bound of 40: exactly 40 jobs
//!   wait in the end, and every add that did not fail is among them;
//! - an add told to wait gets in once a worker takes a job, or fails once its wait is over.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use chrono::Utc;
use formica::controls::{Control, ControlKind, Partition};
use formica::{Error, JobContext, JobSpec, RawJob, Runtime};
use formica_tests::{on_both_runtimes, Running, TestDb};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::IsolationLevel;

/// The jobs of task `b` waiting (not locked, attempts left).
const WAITING: &str = "select count(*) from graphile_worker._private_jobs as jobs \
    inner join graphile_worker._private_tasks as tasks on tasks.id = jobs.task_id \
    where tasks.identifier = 'b' and jobs.is_available";

fn full(result: Result<impl std::fmt::Debug, Error>) -> (String, Option<String>, u32, u64) {
    match result {
        Err(Error::QueueFull { task, partition, max, count }) => (task, partition, max, count),
        other => panic!("expected a full queue, got {other:?}"),
    }
}

async fn an_add_over_the_bound_is_refused_whole_and_names_task_bound_and_count(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let utils = db.utils();
    // Before the task exists: the bound is by identifier.
    utils.set_control(&Control::bound("b", 3, 0), Some("test")).await.unwrap();
    utils.add_raw_job("b", json!({}), JobSpec::default()).await.unwrap();
    let later = JobSpec::builder().run_at(Utc::now() + chrono::Duration::hours(1)).build();
    utils.add_raw_job("b", json!({}), later).await.unwrap();
    // A batch that would go one over stores none of its jobs.
    let two = vec![RawJob::new("b", json!({}), JobSpec::default()); 2];
    assert_eq!(full(utils.add_raw_jobs(&two).await), ("b".to_owned(), None, 3, 4));
    assert_eq!(db.count(WAITING).await, 2, "the batch went in whole or not at all");
    utils.add_raw_job("b", json!({}), JobSpec::default()).await.unwrap();
    let refused = utils.add_raw_job("b", json!({}), JobSpec::default()).await;
    let message = refused.as_ref().unwrap_err().to_string();
    assert_eq!(full(refused), ("b".to_owned(), None, 3, 4), "the job due in an hour counts");
    assert!(message.contains("\"b\"") && message.contains("bound of 3"), "{message}");
    assert_eq!(db.count(WAITING).await, 3);
    // Another task is not bounded.
    utils.add_raw_jobs(&vec![RawJob::new("other", json!({}), JobSpec::default()); 10]).await.unwrap();
    // A locked job does not wait: it leaves room.
    db.client()
        .await
        .execute(
            "update graphile_worker._private_jobs set locked_at = now(), locked_by = 'w' \
             where id = (select min(id) from graphile_worker._private_jobs)",
            &[],
        )
        .await
        .unwrap();
    utils.add_raw_job("b", json!({}), JobSpec::default()).await.unwrap();
    let listed = utils.controls().await.unwrap();
    assert_eq!((listed.len(), &listed[0].control), (1, &Control::bound("b", 3, 0)));
    assert!(utils.remove_control("b", ControlKind::Bound, None).await.unwrap());
    utils.add_raw_jobs(&two).await.unwrap();
    assert_eq!(db.count(WAITING).await, 5, "lifted, adds go in again");
    // A REPEATABLE READ snapshot predates the lock: such an add is refused, not miscounted.
    let mut client = db.client().await;
    let tx =
        client.build_transaction().isolation_level(IsolationLevel::RepeatableRead).start().await.unwrap();
    utils.set_control(&Control::bound("b", 100, 0), None).await.unwrap();
    let refused = utils.add_raw_job_in(&tx, "b", json!({}), JobSpec::default()).await;
    let code = match &refused {
        Err(Error::Db(e)) => e.as_db_error().map(|db| db.code().code().to_owned()),
        _ => None,
    };
    assert_eq!(code.as_deref(), Some("FMISO"), "{refused:?}");
    drop(tx);
    let zero = utils.set_control(&Control::bound("b", 0, 0), None).await;
    assert!(matches!(zero, Err(Error::Control(_))), "a bound of 0 would refuse every add: {zero:?}");
}

async fn each_partition_has_its_own_room(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let utils = db.utils();
    let per_customer = Control::bound("b", 2, 0).per(Partition::Field("customer".into()));
    utils.set_control(&per_customer, None).await.unwrap();
    let of = |c: &str| RawJob::new("b", json!({ "customer": c }), JobSpec::default());
    utils.add_raw_jobs(&[of("c1"), of("c1"), of("c2")]).await.unwrap();
    let refused = utils.add_raw_job("b", json!({"customer": "c1"}), JobSpec::default()).await;
    assert_eq!(full(refused), ("b".to_owned(), Some("c1".to_owned()), 2, 3));
    utils.add_raw_job("b", json!({"customer": "c2"}), JobSpec::default()).await.unwrap();
    utils.add_raw_job("b", json!({}), JobSpec::default()).await.unwrap();
    let by_key = Control::bound("b", 1, 0).per(Partition::KeyPrefix(":".into()));
    utils.set_control(&by_key, None).await.unwrap();
    let keyed = |k: &str| JobSpec::builder().job_key(k).build();
    utils.add_raw_job("b", json!({}), keyed("t1:a")).await.unwrap();
    // Replacing the key's waiting job adds none: room is not needed.
    utils.add_raw_job("b", json!({"v": 2}), keyed("t1:a")).await.unwrap();
    let refused = utils.add_raw_job("b", json!({}), keyed("t1:b")).await;
    assert_eq!(full(refused), ("b".to_owned(), Some("t1".to_owned()), 1, 2));
    utils.add_raw_job("b", json!({}), keyed("t2:a")).await.unwrap();
}

async fn racing_adds_from_16_connections_never_leave_more_waiting_than_the_bound(rt: Arc<dyn Runtime>) {
    let db = Arc::new(TestDb::migrated_on(rt.clone()).await);
    db.utils().set_control(&Control::bound("b", 40, 0), None).await.unwrap();
    let mut adders = Vec::new();
    for adder in 0..16 {
        let (tx, rx) = futures::channel::oneshot::channel();
        let db = db.clone();
        rt.spawn(Box::pin(async move {
            let utils = db.utils();
            let (mut added, mut refused) = (0_i64, 0_i64);
            for round in 0..8 {
                let result = match (adder + round) % 2 {
                    0 => utils.add_raw_job("b", json!({}), JobSpec::default()).await.map(|_| 1),
                    _ => utils
                        .add_raw_jobs(&vec![RawJob::new("b", json!({}), JobSpec::default()); 3])
                        .await
                        .map(|j| j.len()),
                };
                match result {
                    Ok(n) => added += n as i64,
                    Err(Error::QueueFull { max: 40, .. }) => refused += 1,
                    Err(other) => panic!("adder {adder}: {other}"),
                }
            }
            let _ = tx.send((added, refused));
        }));
        adders.push(rx);
    }
    let (mut added, mut refused) = (0, 0);
    for adder in adders {
        let (a, r) = adder.await.unwrap();
        added += a;
        refused += r;
    }
    eprintln!("{added} jobs added, {refused} adds refused");
    assert_eq!(db.count(WAITING).await, 40, "the bound was reached and never passed");
    assert_eq!(added, 40, "every add that succeeded is stored, none partly");
    assert!(refused > 0);
}

async fn an_add_that_waits_gets_in_when_a_worker_takes_a_job_or_fails_at_its_deadline(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    utils.set_control(&Control::bound("b", 1, 300), None).await.unwrap();
    utils.add_raw_job("b", json!({}), JobSpec::default()).await.unwrap();
    let started = Instant::now();
    let refused = utils.add_raw_job("b", json!({}), JobSpec::default()).await;
    assert_eq!(full(refused), ("b".to_owned(), None, 1, 2));
    assert!(started.elapsed() >= Duration::from_millis(300), "it waited its 300 ms: {:?}", started.elapsed());
    utils.set_control(&Control::bound("b", 1, 20_000), None).await.unwrap();
    let worker =
        db.worker_options().define_raw_job("b", |_ctx: JobContext, _payload| Box::pin(async { Ok(()) }));
    let (tx, rx) = futures::channel::oneshot::channel();
    {
        let utils = db.utils();
        rt.spawn(Box::pin(async move {
            let started = Instant::now();
            let added = utils.add_raw_job("b", json!({"second": true}), JobSpec::default()).await;
            let _ = tx.send((added.map(|j| j.id), started.elapsed()));
        }));
    }
    formica_tests::sleep(rt.as_ref(), Duration::from_millis(500)).await;
    assert_eq!(db.count(WAITING).await, 1, "the second add is waiting, uncommitted");
    let running = Running::listening(&rt, worker).await;
    let (added, waited) = rx.await.unwrap();
    added.expect("room was made by the worker");
    assert!(waited >= Duration::from_millis(500) && waited < Duration::from_secs(20), "{waited:?}");
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    running.stop(Duration::from_secs(10)).await;
}

on_both_runtimes!(
    an_add_over_the_bound_is_refused_whole_and_names_task_bound_and_count,
    each_partition_has_its_own_room,
    racing_adds_from_16_connections_never_leave_more_waiting_than_the_bound,
    an_add_that_waits_gets_in_when_a_worker_takes_a_job_or_fails_at_its_deadline,
);
