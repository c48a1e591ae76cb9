//! Recurring jobs and the wall clock, on a real PostgreSQL and both runtimes. Workers run on
//! a shifted wall clock (a `Runtime` whose `now` is set by the test), so minute boundaries
//! come within milliseconds instead of a real minute, and the clock can be set back.

use chrono::{DateTime, TimeZone, Utc};
use formica::{Address, Runtime, Socket, WorkerOptions};
use formica_tests::{on_both_runtimes, sleep, timeout, TestDb};
use futures::future::BoxFuture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A runtime whose wall clock reads `start` at creation, runs at normal speed, and can be
/// set back or forward.
struct Shifted {
    inner: Arc<dyn Runtime>,
    offset: Mutex<chrono::Duration>,
}

impl Shifted {
    fn new(inner: Arc<dyn Runtime>, start: DateTime<Utc>) -> Arc<Shifted> {
        let offset = Mutex::new(start - inner.now());
        Arc::new(Shifted { inner, offset })
    }

    fn starting_at(inner: Arc<dyn Runtime>, start: DateTime<Utc>) -> Arc<dyn Runtime> {
        Shifted::new(inner, start)
    }

    fn jump(&self, by: chrono::Duration) {
        *self.offset.lock().unwrap() += by;
    }
}

impl Runtime for Shifted {
    fn connect(&self, address: Address) -> BoxFuture<'static, std::io::Result<Box<dyn Socket>>> {
        self.inner.connect(address)
    }
    fn spawn(&self, task: BoxFuture<'static, ()>) {
        self.inner.spawn(task)
    }
    fn sleep_until(&self, deadline: Instant) -> BoxFuture<'static, ()> {
        self.inner.sleep_until(deadline)
    }
    fn now(&self) -> DateTime<Utc> {
        self.inner.now() + *self.offset.lock().unwrap()
    }
    fn dedicated(&self, name: &'static str) -> Option<std::io::Result<Arc<dyn Runtime>>> {
        self.inner.dedicated(name)
    }
}

fn at(h: u32, m: u32, s: u32, ms: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 1, h, m, s).unwrap() + chrono::Duration::milliseconds(ms.into())
}

/// A worker on `clock` with `crontab`; it runs no task, so scheduled jobs stay in the table.
async fn cron_worker(db: &TestDb, clock: Arc<dyn Runtime>, crontab: &str) -> formica::Worker {
    WorkerOptions::<()>::with_runtime(clock)
        .database_url(&db.url)
        .max_pool_size(3)
        .define_raw_job("unrelated", |_, _| async { Ok(()) })
        .cron(crontab)
        .init()
        .await
        .expect("init")
}

/// (`_cron.ts`, `_cron.backfilled`) of the `tick` jobs, in order.
async fn ticks(db: &TestDb) -> Vec<(String, bool)> {
    let rows = db
        .client()
        .await
        .query(
            "select payload->'_cron'->>'ts', (payload->'_cron'->>'backfilled')::bool, run_at
             from graphile_worker._private_jobs as jobs
             join graphile_worker._private_tasks as tasks on tasks.id = jobs.task_id
             where tasks.identifier = 'tick' order by run_at",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| {
            let ts: String = r.get(0);
            let run_at: DateTime<Utc> = r.get(2);
            assert_eq!(ts, run_at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(), "runs at its minute");
            (ts, r.get(1))
        })
        .collect()
}

async fn run_for(rt: &Arc<dyn Runtime>, workers: Vec<formica::Worker>, real: Duration) {
    let handles: Vec<_> = workers.iter().map(|w| w.handle()).collect();
    let mut done = Vec::new();
    for worker in workers {
        let (tx, rx) = futures::channel::oneshot::channel();
        rt.spawn(Box::pin(async move {
            let _ = tx.send(worker.run().await);
        }));
        done.push(rx);
    }
    sleep(rt.as_ref(), real).await;
    for handle in handles {
        handle.stop();
    }
    for rx in done {
        timeout(rt.as_ref(), Duration::from_secs(10), rx).await.expect("stops").unwrap().expect("ok");
    }
}

async fn two_workers_with_one_crontab_schedule_each_minute_once(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    // Both start 0.3 s before 10:01 (a new item: nothing is backfilled) and run past 10:02.
    let start = at(10, 0, 59, 700);
    let a = cron_worker(&db, Shifted::starting_at(rt.clone(), start), "* * * * * tick ?fill=1h").await;
    let b = cron_worker(&db, Shifted::starting_at(rt.clone(), start), "* * * * * tick ?fill=1h").await;
    run_for(&rt, vec![a, b], Duration::from_millis(1200)).await;
    assert_eq!(ticks(&db).await, vec![("2030-01-01T10:01:00.000Z".to_owned(), false)]);
    let last: DateTime<Utc> = db
        .client()
        .await
        .query_one("select last_execution from graphile_worker._private_known_crontabs", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(last, at(10, 1, 0, 0));
}

async fn after_downtime_a_known_item_is_backfilled_over_its_fill_period(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    db.client()
        .await
        .execute(
            "insert into graphile_worker._private_known_crontabs (identifier, known_since, last_execution)
             values ('tick', $1, $2)",
            &[&at(8, 0, 0, 0), &at(9, 57, 0, 0)],
        )
        .await
        .unwrap();
    // Down since 9:57; back at 10:00:30 with fill=5m: 9:58, 9:59 and 10:00 are made up.
    let worker =
        cron_worker(&db, Shifted::starting_at(rt.clone(), at(10, 0, 30, 0)), "* * * * * tick ?fill=5m").await;
    run_for(&rt, vec![worker], Duration::from_millis(500)).await;
    let want: Vec<(String, bool)> =
        ["09:58", "09:59", "10:00"].iter().map(|m| (format!("2030-01-01T{m}:00.000Z"), true)).collect();
    assert_eq!(ticks(&db).await, want);
}

async fn a_new_item_is_not_backfilled(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let worker =
        cron_worker(&db, Shifted::starting_at(rt.clone(), at(10, 0, 30, 0)), "* * * * * tick ?fill=1h").await;
    run_for(&rt, vec![worker], Duration::from_millis(500)).await;
    assert_eq!(ticks(&db).await, vec![]);
    let row = db
        .client()
        .await
        .query_one("select known_since, last_execution from graphile_worker._private_known_crontabs", &[])
        .await
        .unwrap();
    let known_since: DateTime<Utc> = row.get(0);
    assert!(
        (at(10, 0, 30, 0)..at(10, 0, 31, 0)).contains(&known_since),
        "registered at start: {known_since}"
    );
    assert_eq!(row.get::<_, Option<DateTime<Utc>>>(1), None);
}

/// `cron_time_zone` reads the crontab's items that name no zone in that zone: 11:00 in
/// Paris is 10:00 UTC in January; an item with `?tz=UTC` keeps its own.
async fn a_default_zone_reads_the_items_that_name_none_in_that_zone(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let paris: formica::cron::Tz = "Europe/Paris".parse().unwrap();
    let worker = WorkerOptions::<()>::with_runtime(Shifted::starting_at(rt.clone(), at(9, 59, 59, 700)))
        .database_url(&db.url)
        .max_pool_size(3)
        .define_raw_job("unrelated", |_, _| async { Ok(()) })
        .cron("0 11 * * * tick\n0 11 * * * utc_eleven ?tz=UTC")
        .cron_time_zone(paris)
        .init()
        .await
        .expect("init");
    run_for(&rt, vec![worker], Duration::from_millis(1200)).await;
    assert_eq!(ticks(&db).await, vec![("2030-01-01T10:00:00.000Z".to_owned(), false)]);
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 1, "11:00 UTC is not due");
}

async fn a_bad_crontab_fails_init_with_its_line_and_column(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let error = db
        .worker_options()
        .define_raw_job("tick", |_, _| async { Ok(()) })
        .cron("* * * * * tick\n61 * * * * tick ?id=other")
        .init()
        .await
        .err()
        .expect("a bad crontab is refused")
        .to_string();
    assert!(error.contains("line 2") && error.contains("column 1"), "{error}");
}

async fn a_wall_clock_set_back_does_not_stall_polling(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let clock = Shifted::new(rt.clone(), at(10, 0, 0, 0));
    let worker = WorkerOptions::<()>::with_runtime(clock.clone())
        .database_url(&db.url)
        .poll_interval(Duration::from_millis(200))
        .define_raw_job("polled", |_, _| async { Ok(()) })
        .init()
        .await
        .expect("init");
    let handle = worker.handle();
    let (tx, rx) = futures::channel::oneshot::channel();
    rt.spawn(Box::pin(async move {
        let _ = tx.send(worker.run().await);
    }));
    sleep(rt.as_ref(), Duration::from_millis(300)).await;
    clock.jump(-chrono::Duration::hours(1));
    sleep(rt.as_ref(), Duration::from_millis(300)).await;
    // Inserted without add_job, so no NOTIFY: only the poll can find it.
    let client = db.client().await;
    client
        .batch_execute("insert into graphile_worker._private_tasks (identifier) values ('polled')")
        .await
        .unwrap();
    let inserted = client
        .execute(
            "insert into graphile_worker._private_jobs (task_id, payload, run_at)
             select id, '{}', now() from graphile_worker._private_tasks where identifier = 'polled'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(inserted, 1);
    db.wait_for_count("select count(*) from graphile_worker._private_jobs", 0, Duration::from_secs(3)).await;
    handle.stop();
    timeout(rt.as_ref(), Duration::from_secs(10), rx).await.expect("stops").unwrap().expect("ok");
}

on_both_runtimes!(
    a_wall_clock_set_back_does_not_stall_polling,
    two_workers_with_one_crontab_schedule_each_minute_once,
    after_downtime_a_known_item_is_backfilled_over_its_fill_period,
    a_new_item_is_not_backfilled,
    a_bad_crontab_fails_init_with_its_line_and_column,
    a_default_zone_reads_the_items_that_name_none_in_that_zone,
);
