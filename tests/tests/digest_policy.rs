//! The policy of `examples/digest-policy` on PostgreSQL through the tokio adapter, next to
//! the same events in `core::sim`: the jobs its decisions add are the same, and a worker
//! runs each account's payments in the order the simulation runs them, leaving the same
//! digests waiting. How an application confirms on the real database what its simulated
//! property test says.

use chrono::Duration;
use digest_policy::{crontab, decide, Event, CRONTAB, TASKS};
use formica_core::job::RawJob;
use formica_core::sim::{Traced, World, WorldConfig};
use formica_core::worker::{Config, Effect};
use formica_tests::TestDb;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

const EVENTS: [Event; 7] = [
    Event::Activity { account: 0 },
    Event::Payment { account: 0, cents: 100 },
    Event::Activity { account: 0 },
    Event::Payment { account: 0, cents: 200 },
    Event::Payment { account: 1, cents: 300 },
    Event::Activity { account: 1 },
    Event::Payment { account: 0, cents: 400 },
];

/// A job as both sides are compared: task, payload (as JSON text), queue, key, attempts,
/// max_attempts.
type Shape = (String, String, Option<String>, Option<String>, i16, i16);

/// The payments in the order they started, one list per account.
fn by_account(payloads: &[Value]) -> Vec<Vec<u64>> {
    (0..2)
        .map(|a| payloads.iter().filter(|p| p["account"] == a).filter_map(|p| p["cents"].as_u64()).collect())
        .collect()
}

/// The simulation's answer: the jobs after the events, the payments' start order, and
/// what is left once a `run_once` worker stops.
fn simulated() -> (BTreeSet<Shape>, Vec<Vec<u64>>, BTreeSet<Shape>) {
    let shapes = |world: &World| -> BTreeSet<Shape> {
        world
            .db()
            .jobs()
            .map(|j| {
                let (queue, key) = (j.queue_name.clone(), j.key.clone());
                (j.task_identifier.clone(), j.payload.to_string(), queue, key, j.attempts, j.max_attempts)
            })
            .collect()
    };
    let mut world = World::new(WorldConfig::default());
    for event in &EVENTS {
        for d in decide(event, world.now()) {
            world.db_mut().add_job(&RawJob::new(d.task, d.payload, d.spec)).expect("a valid job");
        }
        world.run_for(Duration::milliseconds(10));
    }
    let added = shapes(&world);
    let tasks = TASKS.map(String::from).to_vec();
    let config = Config {
        worker_id: "w".into(),
        task_identifiers: tasks,
        crontab: crontab(),
        run_once: true,
        ..Config::default()
    };
    world.add_worker(config);
    assert!(world.run_until_stopped(Duration::minutes(1)), "the run_once worker stops");
    let started: Vec<Value> = world
        .trace()
        .iter()
        .filter_map(|e| match &e.what {
            Traced::Effect(Effect::StartTask { job }) if job.task_identifier == "record_payment" => {
                Some(job.payload.value().clone())
            }
            _ => None,
        })
        .collect();
    (added, by_account(&started), shapes(&world))
}

async fn pg_shapes(db: &TestDb) -> BTreeSet<Shape> {
    let sql = "select t.identifier, j.payload, q.queue_name, j.key, j.attempts, j.max_attempts
               from graphile_worker._private_jobs j
               join graphile_worker._private_tasks t on t.id = j.task_id
               left join graphile_worker._private_job_queues q on q.id = j.job_queue_id";
    let rows = db.client().await.query(sql, &[]).await.expect("read jobs");
    rows.iter()
        .map(|r| (r.get(0), r.get::<_, Value>(1).to_string(), r.get(2), r.get(3), r.get(4), r.get(5)))
        .collect()
}

#[tokio::test]
async fn the_digest_policy_on_postgresql_does_what_the_simulation_says() {
    let (sim_added, sim_order, sim_left) = simulated();

    let db = TestDb::migrated().await;
    let utils = db.utils();
    for event in &EVENTS {
        for d in decide(event, chrono::Utc::now()) {
            utils.add_raw_job(d.task, d.payload, d.spec).await.expect("add_raw_job");
        }
    }
    assert_eq!(pg_shapes(&db).await, sim_added, "the same jobs, one digest per account");

    let started = Arc::new(Mutex::new(Vec::new()));
    let log = started.clone();
    let worker = db
        .worker_options()
        .concurrency(4)
        .cron(CRONTAB)
        .define_raw_job("record_payment", move |_, payload| {
            log.lock().unwrap().push(payload);
            async { Ok(()) }
        })
        .define_raw_job("send_digest", |_, _| async { Ok(()) })
        .define_raw_job("reconcile", |_, _| async { Ok(()) })
        .init()
        .await
        .expect("init");
    tokio::time::timeout(std::time::Duration::from_secs(20), worker.run_once())
        .await
        .expect("run_once returns")
        .expect("run_once");
    let order = by_account(&started.lock().unwrap());
    assert_eq!(order, sim_order, "each account's payments in the order they were added");
    assert_eq!(order, [vec![100, 200, 400], vec![300]]);
    assert_eq!(pg_shapes(&db).await, sim_left, "the digests wait for their ten minutes");
}
