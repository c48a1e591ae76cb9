//! Abort on replace (`JobKeyMode::ReplaceAndAbort`; docs/guide/unique-jobs.md), on both
//! runtimes and real PostgreSQL:
//!
//! - a long job runs; the same key is added again in this mode: in one statement the old run
//!   is asked to abort and the new job is held; the old run ends cancelled in history, and
//!   the new one starts only after it stopped (by the handlers' clocks, and the database
//!   holds the old job no more when the new run starts);
//! - a job held by a worker that died: the new job waits until lease recovery frees the old
//!   one (cancelled, not run again), then runs;
//! - in a batch the mode is refused before anything is sent.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{Error, FinalState, JobContext, JobKeyMode, JobSpec, JobSpecError, RawJob, Runtime};
use formica_tests::{on_both_runtimes, Running, TestDb};
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the handlers saw: per payload `v`, when its run started and when it stopped.
type Seen = Arc<Mutex<Vec<(i64, &'static str, Instant)>>>;

/// Records a run's stop when its future ends or is dropped (an abort drops it).
struct Stop(i64, Seen);

impl Drop for Stop {
    fn drop(&mut self) {
        self.1.lock().unwrap().push((self.0, "stop", Instant::now()));
    }
}

/// Jobs other than `id` locked now, by the database.
const OTHERS_LOCKED: &str =
    "select count(*) from graphile_worker._private_jobs where locked_at is not null and id <> $1";

/// A worker of task `long`: a job with `v` 1 runs for a minute unless aborted, any other
/// first counts the other jobs locked (as `v` 0 `locked` entries, one per job locked) and
/// ends; each records its start and stop.
async fn worker(db: &TestDb, rt: &Arc<dyn Runtime>, seen: &Seen) -> Running {
    let seen = seen.clone();
    let options =
        db.worker_options().concurrency(4).define_raw_job("long", move |ctx: JobContext, payload| {
            let v = payload["v"].as_i64().unwrap_or_default();
            seen.lock().unwrap().push((v, "start", Instant::now()));
            let (rt, stop, seen) =
                (ctx.utils().pool().runtime().clone(), Stop(v, seen.clone()), seen.clone());
            Box::pin(async move {
                let _stop = stop;
                if v == 1 {
                    formica_tests::sleep(rt.as_ref(), Duration::from_secs(60)).await;
                } else {
                    let others: i64 =
                        ctx.client().await?.query_one(OTHERS_LOCKED, &[&ctx.job().id]).await?.get(0);
                    seen.lock().unwrap().extend((0..others).map(|_| (0, "locked", Instant::now())));
                }
                Ok(())
            })
        });
    Running::listening(rt, options).await
}

fn at(seen: &Seen, v: i64, what: &str) -> Option<Instant> {
    seen.lock().unwrap().iter().find(|(n, w, _)| *n == v && *w == what).map(|(_, _, at)| *at)
}

fn keyed(mode: JobKeyMode) -> JobSpec {
    JobSpec::builder().job_key("k").job_key_mode(mode).build()
}

async fn replacing_a_running_job_aborts_it_and_the_new_one_starts_after_it_stopped(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let seen: Seen = Arc::default();
    let running = worker(&db, &rt, &seen).await;
    let utils = db.utils();
    let old = utils.add_raw_job("long", json!({"v": 1}), keyed(JobKeyMode::Replace)).await.unwrap();
    formica_tests::wait_until(rt.as_ref(), Duration::from_secs(10), "the old run started", || {
        at(&seen, 1, "start").is_some()
    })
    .await;
    let new = utils.add_raw_job("long", json!({"v": 2}), keyed(JobKeyMode::ReplaceAndAbort)).await.unwrap();
    assert_ne!(new.id, old.id, "a running job is not overwritten");
    assert_eq!(new.key.as_deref(), Some("k"), "the new job holds the key");
    let held_in = format!("formica:replaced:{}", old.id);
    assert_eq!(new.queue_name.as_deref(), Some(held_in.as_str()), "held behind the old run's queue");
    let old_out = utils.wait_for_job(old.id, Duration::from_secs(20)).await.unwrap().expect("it finished");
    let new_out = utils.wait_for_job(new.id, Duration::from_secs(20)).await.unwrap().expect("it finished");
    assert_eq!(old_out.outcome, FinalState::Cancelled, "{old_out:?}");
    let error = old_out.last_error.clone().unwrap_or_default();
    assert!(error.starts_with("cancelled: replaced"), "{error}");
    assert_eq!(new_out.outcome, FinalState::Completed);
    let (stopped, started) = (at(&seen, 1, "stop").unwrap(), at(&seen, 2, "start").unwrap());
    assert!(started >= stopped, "the new run started {:?} before the old one stopped", stopped - started);
    assert_eq!(at(&seen, 0, "locked"), None, "the database held the old job still when the new one ran");
    assert_eq!(
        db.count("select count(*) from graphile_worker._private_job_queues where locked_by is not null")
            .await,
        0,
        "no queue left locked"
    );
    running.stop(Duration::from_secs(10)).await;
}

async fn a_dead_worker_s_job_is_freed_by_recovery_before_the_new_one_runs(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    let old = utils.add_raw_job("long", json!({"v": 1}), keyed(JobKeyMode::Replace)).await.unwrap();
    // A Formica worker that died running it: its lease lapsed, and was suspected, a minute ago.
    db.client()
        .await
        .batch_execute(&format!(
            "update graphile_worker._private_jobs set locked_by = 'formica-dead', locked_at = now(), \
               attempts = 1 where id = {};
             insert into formica_graphile_worker.leases values ('formica-dead', now() - interval '1 minute', now() - interval '1 minute');",
            old.id
        ))
        .await
        .unwrap();
    let new = utils.add_raw_job("long", json!({"v": 2}), keyed(JobKeyMode::ReplaceAndAbort)).await.unwrap();
    let held = "select count(*) from graphile_worker._private_job_queues where locked_by = 'formica-dead'";
    assert_eq!(db.count(held).await, 1, "the new job's queue is held by the dead worker");
    let seen: Seen = Arc::default();
    let running = worker(&db, &rt, &seen).await;
    let new_out = utils.wait_for_job(new.id, Duration::from_secs(30)).await.unwrap().expect("it finished");
    assert_eq!(new_out.outcome, FinalState::Completed);
    assert!(at(&seen, 1, "start").is_none(), "the replaced job did not run again");
    let left = db
        .client()
        .await
        .query_one(
            "select attempts = max_attempts, last_error, locked_by from graphile_worker._private_jobs where id = $1",
            &[&old.id],
        )
        .await
        .unwrap();
    let (out_of_attempts, error, holder): (bool, Option<String>, Option<String>) =
        (left.get(0), left.get(1), left.get(2));
    assert!(out_of_attempts && holder.is_none(), "freed, and never retried");
    assert!(error.unwrap_or_default().starts_with("cancelled: replaced"));
    let old_out = utils.job_outcome(old.id).await.unwrap().expect("recovery wrote its history");
    assert_eq!(old_out.outcome, FinalState::Cancelled, "{old_out:?}");
    assert_eq!(at(&seen, 0, "locked"), None, "the new run began after recovery freed the old job");
    running.stop(Duration::from_secs(10)).await;
}

async fn the_mode_is_refused_in_a_batch(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let jobs = [RawJob::new("long", json!({}), keyed(JobKeyMode::ReplaceAndAbort))];
    let refused = db.utils().add_raw_jobs(&jobs).await;
    assert!(matches!(refused, Err(Error::Spec(JobSpecError::ReplaceAndAbortInBatch))), "{refused:?}");
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0);
}

on_both_runtimes!(
    replacing_a_running_job_aborts_it_and_the_new_one_starts_after_it_stopped,
    a_dead_worker_s_job_is_freed_by_recovery_before_the_new_one_runs,
    the_mode_is_refused_in_a_batch,
);
