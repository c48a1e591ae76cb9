//! Dead letters on PostgreSQL (docs/guide/dead-letters.md), on both runtimes: a job failing
//! its last attempt becomes a job of its task's dead letter task, carrying its id, task,
//! payload and last error; a failure with attempts left, and a task without a dead letter,
//! send nothing; the redrive (a bulk retry of the jobs failed for good) runs them again.

use formica::{BulkAction, BulkFilter, JobSpec, Runtime};
use formica_tests::{on_both_runtimes, wait_until, Running, TestDb};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The payloads the dead letter task received.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Value>>>);

impl Received {
    fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }
}

async fn a_job_failed_for_good_is_sent_to_its_dead_letter_and_can_be_redriven(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let utils = db.utils();
    utils.set_dead_letter("charge", "charge_failed", Some("test")).await.expect("set");
    assert!(utils.set_dead_letter("charge", "charge", None).await.is_err(), "a task is not its own");
    let spec = |max| JobSpec { max_attempts: Some(max), ..JobSpec::default() };
    let last = utils.add_raw_job("charge", json!({ "order": 7 }), spec(1)).await.unwrap().id;
    let retried = utils.add_raw_job("charge", json!({ "order": 8 }), spec(5)).await.unwrap().id;
    let unlettered = utils.add_raw_job("refund", json!({}), spec(1)).await.unwrap().id;

    let received = Received::default();
    let fixed = Arc::new(Mutex::new(false));
    let (into, fixed_now) = (received.clone(), fixed.clone());
    let options = db
        .worker_options()
        .poll_interval(Duration::from_millis(100))
        .define_raw_job("charge", move |_, _| {
            let fixed = *fixed_now.lock().unwrap();
            async move {
                match fixed {
                    true => Ok(()),
                    false => Err("card declined".into()),
                }
            }
        })
        .define_raw_job("refund", |_, _| async { Err("no".into()) })
        .define_raw_job("charge_failed", move |_, payload| {
            into.0.lock().unwrap().push(payload);
            async { Ok(()) }
        });
    let worker = Running::listening(&rt, options).await;
    wait_until(rt.as_ref(), Duration::from_secs(20), "the dead letter received", || {
        !received.all().is_empty()
    })
    .await;
    // The job with attempts left failed too (its retry waits e^1 s): it was not sent.
    db.wait_for_count(
        &format!("select count(*) from graphile_worker.jobs where id in ({retried}, {unlettered}) and attempts = 1 and locked_by is null"),
        2,
        Duration::from_secs(10),
    )
    .await;
    let got = received.all();
    assert_eq!(
        got,
        [json!({
            "job_id": last,
            "task": "charge",
            "payload": { "order": 7 },
            "last_error": "card declined",
            "attempts": 1,
        })],
        "only the job out of attempts is sent, once"
    );
    let letters = utils.dead_letters().await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (letters[0].target.as_str(), letters[0].sent, letters[0].set_by.as_str()),
        ("charge_failed", 1, "test")
    );
    assert!(letters[0].last_sent.is_some_and(|(job, _)| job != last), "the receiving job is a new one");
    // The sent job stays, failed for good, until redriven.
    let state = "select count(*) from graphile_worker.jobs where id = $1 and attempts >= max_attempts";
    assert_eq!(db.count(&state.replace("$1", &last.to_string())).await, 1);

    // The cause fixed, the redrive (a retry of the jobs failed for good) runs it again.
    *fixed.lock().unwrap() = true;
    let failed_for_good = BulkFilter {
        task: Some("charge".into()),
        states: vec!["permanently_failed".into()],
        ..Default::default()
    };
    assert_eq!(utils.bulk(&BulkAction::Retry, &failed_for_good).await.unwrap(), 1);
    db.wait_for_count(
        &format!("select count(*) from graphile_worker.jobs where id = {last}"),
        0,
        Duration::from_secs(10),
    )
    .await;
    worker.stop(Duration::from_secs(10)).await;
    assert_eq!(received.all().len(), 1, "nothing more sent");
    assert!(utils.remove_dead_letter("charge").await.unwrap());
    assert!(utils.dead_letters().await.unwrap().is_empty());
}

on_both_runtimes!(a_job_failed_for_good_is_sent_to_its_dead_letter_and_can_be_redriven);
