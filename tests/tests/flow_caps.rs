//! Global concurrency caps on real PostgreSQL (`WorkerUtils::set_control` with a `Control::cap`; docs/guide/flow-control.md).
//!
//! - 6 workers (each its own pool and worker id), a cap of 3 on a task with slow jobs: over
//!   2,000 jobs the number running at once, sampled from the database and counted by the
//!   tasks themselves, never exceeds 3, and reaches it;
//! - a cap of 1 per customer (a payload field) over 20 customers: never two jobs of a
//!   customer at once, and every customer's slot used while its jobs wait;
//! - a cap set at runtime reaches running workers, a lifted one lets them go.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::controls::{Control, ControlKind, Partition};
use formica::{JobContext, JobSpec, RawJob, Runtime};
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LEFT: &str = "select count(*) from graphile_worker._private_jobs";

/// What the tasks saw: how many ran at once per customer (`""`: all of them), now and at most.
#[derive(Default)]
struct Seen {
    now: BTreeMap<String, usize>,
    most: BTreeMap<String, usize>,
}

impl Seen {
    fn start(&mut self, customer: &str) {
        for key in ["", customer] {
            let now = self.now.entry(key.to_owned()).or_default();
            *now += 1;
            let most = self.most.entry(key.to_owned()).or_default();
            *most = (*most).max(*now);
        }
    }

    fn end(&mut self, customer: &str) {
        for key in ["", customer] {
            *self.now.entry(key.to_owned()).or_default() -= 1;
        }
    }
}

/// Options of a worker running task `c`: each job sleeps `ms` and counts itself in `seen`.
fn options(db: &TestDb, seen: &Arc<Mutex<Seen>>, ms: u64) -> formica::WorkerOptions {
    let seen = seen.clone();
    db.worker_options().concurrency(4).poll_interval(Duration::from_millis(200)).define_raw_job(
        "c",
        move |ctx: JobContext, payload| {
            let customer = payload["customer"].as_str().unwrap_or_default().to_owned();
            seen.lock().unwrap().start(&customer);
            let (rt, seen) = (ctx.utils().pool().runtime().clone(), seen.clone());
            Box::pin(async move {
                formica_tests::sleep(rt.as_ref(), Duration::from_millis(ms)).await;
                seen.lock().unwrap().end(&customer);
                Ok(())
            })
        },
    )
}

/// Starts sampling, until the flag returned is set, the most jobs of `task` locked at once
/// in the database, per value of the payload field `by` (`""`: all of them); the receiver
/// gets them.
pub(crate) async fn sampler(
    db: &TestDb,
    rt: &Arc<dyn Runtime>,
    task: &'static str,
    by: &'static str,
) -> (Arc<AtomicBool>, futures::channel::oneshot::Receiver<BTreeMap<String, i64>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (client, rt2, stopping) = (db.client().await, rt.clone(), stop.clone());
    let (tx, rx) = futures::channel::oneshot::channel();
    rt.spawn(Box::pin(async move {
        let mut most: BTreeMap<String, i64> = BTreeMap::new();
        let sql = "select coalesce(jobs.payload->>$2, ''), count(*) \
                   from graphile_worker._private_jobs as jobs \
                   inner join graphile_worker._private_tasks as tasks on tasks.id = jobs.task_id \
                   where tasks.identifier = $1 and jobs.locked_at is not null group by 1";
        while !stopping.load(Ordering::Relaxed) {
            let mut total = 0;
            for row in client.query(sql, &[&task, &by]).await.unwrap() {
                let (value, n): (String, i64) = (row.get(0), row.get(1));
                total += n;
                let entry = most.entry(value).or_default();
                *entry = (*entry).max(n);
            }
            let entry = most.entry(String::new()).or_default();
            *entry = (*entry).max(total);
            formica_tests::sleep(rt2.as_ref(), Duration::from_millis(2)).await;
        }
        let _ = tx.send(most);
    }));
    (stop, rx)
}

async fn add(db: &TestDb, n: usize, customers: usize) {
    let jobs: Vec<RawJob> = (0..n)
        .map(|i| RawJob::new("c", json!({ "customer": format!("k{}", i % customers) }), JobSpec::default()))
        .collect();
    for chunk in jobs.chunks(500) {
        db.utils().add_raw_jobs(chunk).await.unwrap();
    }
}

/// Run `n` jobs over `customers` on 6 workers under `cap`; the most seen at once per
/// customer, by the database and by the tasks.
async fn drain(
    rt: &Arc<dyn Runtime>,
    db: &TestDb,
    cap: &Control,
    n: usize,
    customers: usize,
    ms: u64,
) -> (BTreeMap<String, i64>, BTreeMap<String, usize>) {
    db.utils().set_control(cap, Some("test")).await.unwrap();
    add(db, n, customers).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut workers = Vec::new();
    for _ in 0..6 {
        workers.push(Running::listening(rt, options(db, &seen, ms)).await);
    }
    let (stop, sampler) = sampler(db, rt, "c", "customer").await;
    db.wait_for_count(LEFT, 0, Duration::from_secs(120)).await;
    stop.store(true, Ordering::Relaxed);
    let sampled = sampler.await.unwrap();
    for worker in workers {
        worker.stop(Duration::from_secs(10)).await;
    }
    let most = seen.lock().unwrap().most.clone();
    (sampled, most)
}

async fn a_global_cap_of_3_holds_across_6_workers_over_2000_jobs(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let cap = Control::cap("c", 3);
    let (sampled, seen) = drain(&rt, &db, &cap, 2000, 1, 10).await;
    eprintln!("at most {} locked (database), {} running (tasks)", sampled[""], seen[""]);
    assert!(sampled[""] <= 3, "{} jobs locked at once", sampled[""]);
    assert_eq!(seen[""], 3, "the tasks ran at most 3 at once, and used the 3 slots");
    let caps = db.utils().controls().await.unwrap();
    assert_eq!((caps.len(), &caps[0].control, caps[0].set_by.as_str()), (1, &cap, "test"));
}

async fn a_cap_per_customer_holds_for_each_and_uses_each_slot(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let cap = Control::cap("c", 1).per(Partition::Field("customer".into()));
    // Tasks of 100 ms: shorter ones (30 ms) overlapped too little on a loaded CI machine for
    // the count below (14 at once, with 20 jobs locked), though no slot was held back.
    let (sampled, seen) = drain(&rt, &db, &cap, 400, 20, 100).await;
    eprintln!("at most {} locked and {} running at once over 20 customers", sampled[""], seen[""]);
    for customer in (0..20).map(|k| format!("k{k}")) {
        assert!(sampled.get(&customer).copied().unwrap_or_default() <= 1, "{customer}: {sampled:?}");
        assert_eq!(seen.get(&customer), Some(&1), "{customer} ran one at a time: {seen:?}");
    }
    // 24 slots for 20 customers: while each has jobs waiting, most run at once.
    assert!(seen[""] >= 15, "capacity left idle while jobs waited: at most {} at once", seen[""]);
}

async fn a_cap_set_and_lifted_at_runtime_reaches_running_workers(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let worker = Running::listening(&rt, options(&db, &seen, 100)).await;
    let utils = db.utils();
    utils.set_control(&Control::cap("c", 1), None).await.unwrap();
    formica_tests::sleep(rt.as_ref(), Duration::from_millis(300)).await;
    add(&db, 20, 1).await;
    formica_tests::sleep(rt.as_ref(), Duration::from_millis(500)).await;
    assert_eq!(seen.lock().unwrap().most.get(""), Some(&1), "the cap reached the running worker");
    assert!(utils.remove_control("c", ControlKind::Cap, None).await.unwrap());
    assert!(!utils.remove_control("c", ControlKind::Cap, None).await.unwrap(), "nothing left to lift");
    db.wait_for_count(LEFT, 0, Duration::from_secs(10)).await;
    assert_eq!(seen.lock().unwrap().most.get(""), Some(&4), "lifted, the worker used its 4 slots");
    let refused = utils.set_control(&Control::cap("c", 0), None).await;
    assert!(
        matches!(refused, Err(formica::Error::Control(_))),
        "a cap of 0 would stop the task: pause it instead"
    );
    worker.stop(Duration::from_secs(10)).await;
}

/// `WorkerOptions::task_concurrency`: one worker of 4 slots runs at most 1 job of `c` at
/// once, while its other slots run `u`'s jobs (all 4 when no job of `c` runs).
async fn task_concurrency_limits_a_task_within_one_worker(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let seen = Arc::new(Mutex::new(Seen::default()));
    let others = Arc::new(Mutex::new(Seen::default()));
    let options = options(&db, &seen, 20).task_concurrency("c", 1);
    let counted = others.clone();
    let options = options.define_raw_job("u", move |ctx: JobContext, _payload| {
        counted.lock().unwrap().start("u");
        let (rt, counted) = (ctx.utils().pool().runtime().clone(), counted.clone());
        Box::pin(async move {
            formica_tests::sleep(rt.as_ref(), Duration::from_millis(20)).await;
            counted.lock().unwrap().end("u");
            Ok(())
        })
    });
    add(&db, 40, 1).await;
    let jobs: Vec<RawJob> =
        (0..40).map(|i| RawJob::new("u", json!({ "i": i }), JobSpec::default())).collect();
    db.utils().add_raw_jobs(&jobs).await.unwrap();
    let worker = Running::listening(&rt, options).await;
    db.wait_for_count(LEFT, 0, Duration::from_secs(30)).await;
    assert_eq!(seen.lock().unwrap().most.get(""), Some(&1), "at most 1 job of c at once");
    let most_others = others.lock().unwrap().most.get("").copied().unwrap_or_default();
    assert!(most_others >= 3, "the other slots ran u's jobs: at most {most_others} at once");
    worker.stop(Duration::from_secs(10)).await;
    let refused =
        db.worker_options().task_concurrency("c", 0).define_raw_job("c", |_, _| Box::pin(async { Ok(()) }));
    assert!(refused.init().await.is_err(), "a limit of 0 is refused");
}

formica_tests::on_both_runtimes!(
    a_global_cap_of_3_holds_across_6_workers_over_2000_jobs,
    a_cap_per_customer_holds_for_each_and_uses_each_slot,
    a_cap_set_and_lifted_at_runtime_reaches_running_workers,
    task_concurrency_limits_a_task_within_one_worker,
);
