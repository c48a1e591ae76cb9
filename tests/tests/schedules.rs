//! Runtime schedules on a real PostgreSQL (driver/src/schedules.rs, core/src/cron/runtime.rs):
//! added through `WorkerUtils` while two workers run, each slot is scheduled once across
//! them; removed, no more; changed, the change is taken up; an interval of one second
//! yields a job a second.

use chrono::{DateTime, Utc};
use formica::cron::Cron;
use formica::WorkerOptions;
use formica_tests::TestDb;
use std::time::Duration;

/// A worker taking runtime schedules (reading them every `poll` without notification); it
/// runs no scheduled task, so their jobs stay in the table.
async fn worker(db: &TestDb, poll: Duration) -> formica::Worker {
    WorkerOptions::<()>::with_runtime(std::sync::Arc::new(formica_tokio::TokioRuntime))
        .database_url(&db.url)
        .max_pool_size(3)
        .define_raw_job("unrelated", |_, _| async { Ok(()) })
        .runtime_schedules(poll)
        .init()
        .await
        .expect("init")
}

/// The slots (`run_at`) of `task`'s jobs, in order, and how many jobs each got.
async fn slots(db: &TestDb, task: &str) -> Vec<(DateTime<Utc>, i64)> {
    let rows = db
        .client()
        .await
        .query(
            "select run_at, count(*) from graphile_worker._private_jobs as jobs
             join graphile_worker._private_tasks as tasks on tasks.id = jobs.task_id
             where tasks.identifier = $1 group by run_at order by run_at",
            &[&task],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Runs `workers` on tokio until `body` returns, then stops them.
async fn running<F: std::future::Future<Output = ()>>(workers: Vec<formica::Worker>, body: F) {
    let handles: Vec<_> = workers.iter().map(|w| w.handle()).collect();
    let runs: Vec<_> = workers.into_iter().map(|w| tokio::spawn(w.run())).collect();
    body.await;
    for handle in handles {
        handle.stop();
    }
    for run in runs {
        tokio::time::timeout(Duration::from_secs(10), run).await.expect("stops").unwrap().expect("ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_added_at_runtime_fires_once_per_slot_on_two_workers_and_stops_when_removed() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    // A poll longer than the test: the workers learn of each change by its notification.
    let workers =
        vec![worker(&db, Duration::from_secs(60)).await, worker(&db, Duration::from_secs(60)).await];
    running(workers, async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let added = Utc::now();
        assert!(utils.put_schedule("@every 2s pulse {from: 'runtime'}").await.unwrap(), "new");
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(utils.remove_schedule("pulse").await.unwrap());
        let removed = Utc::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let at_removal = slots(&db, "pulse").await;
        assert!(
            at_removal.iter().all(|(_, n)| *n == 1),
            "each slot once across both workers: {at_removal:?}"
        );
        assert!((4..=5).contains(&at_removal.len()), "a slot every 2 s for 9 s: {at_removal:?}");
        assert!(at_removal.iter().all(|(at, _)| *at >= added && *at <= removed), "{at_removal:?}");
        assert!(
            at_removal.windows(2).all(|w| w[1].0 - w[0].0 == chrono::Duration::seconds(2)),
            "{at_removal:?}"
        );
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(slots(&db, "pulse").await, at_removal, "removed: no more slots");
        assert!(!utils.remove_schedule("pulse").await.unwrap(), "already gone");
    })
    .await;
    let listed = db.utils().schedules().await.unwrap();
    assert!(listed.is_empty(), "{listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_of_one_second_over_sixty_seconds_yields_sixty_jobs_with_two_workers() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    utils.put_schedule(Cron::every_for_task("second", Duration::from_secs(1))).await.unwrap();
    let workers = vec![worker(&db, Duration::from_secs(5)).await, worker(&db, Duration::from_secs(5)).await];
    let mut window = (Utc::now(), Utc::now());
    running(workers, async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        window.0 = Utc::now();
        tokio::time::sleep(Duration::from_secs(60)).await;
        window.1 = Utc::now();
    })
    .await;
    let inside: Vec<_> =
        slots(&db, "second").await.into_iter().filter(|(at, _)| *at >= window.0 && *at < window.1).collect();
    assert!(inside.iter().all(|(_, n)| *n == 1), "each second once: {inside:?}");
    assert!((59..=61).contains(&inside.len()), "{} jobs in 60 s", inside.len());
    assert!(inside.windows(2).all(|w| w[1].0 - w[0].0 == chrono::Duration::seconds(1)), "no second skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_schedule_is_taken_up_and_listed_with_its_last_slot() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let workers = vec![worker(&db, Duration::from_secs(60)).await];
    running(workers, async {
        utils.put_schedule("@every 1h report").await.unwrap();
        assert!(!utils.put_schedule("@every 1s report ?queue=reports").await.unwrap(), "replaced");
        // Two slots of the new line, long before the old one's hour (a loaded machine may
        // take the change up a few seconds late).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while slots(&db, "report").await.len() < 2 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let slots = slots(&db, "report").await;
    assert!(slots.len() >= 2, "the change was taken up: {slots:?}");
    let listed = utils.schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].line, "@every 1s report ?queue=reports");
    assert_eq!(listed[0].last_execution, slots.last().map(|(at, _)| *at));
    let queue: Option<String> = db
        .client()
        .await
        .query_one(
            "select queue_name from graphile_worker.jobs where task_identifier = 'report' limit 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(queue.as_deref(), Some("reports"));
    // A bad line is refused before it reaches the table.
    assert!(utils.put_schedule("@every 0s report").await.is_err());
    assert!(utils.put_schedule("* * * * * a\n* * * * * b").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cron_page_lists_puts_and_removes_runtime_schedules() {
    let db = TestDb::migrated().await;
    let ui = formica_tests::dashboard::Dashboard::start(db.utils(), formica_ui::Options::default()).await;
    let r = ui
        .action("/api/schedules", serde_json::json!({ "line": "0 8 * * 1-5 report ?tz=Europe/Paris" }))
        .await;
    assert_eq!((r.status, r.json()["added"].as_bool()), (200, Some(true)), "{}", r.body);
    let listed = ui.get("/api/schedules").await.json();
    assert_eq!(listed[0]["line"], "0 8 * * 1-5 report ?tz=Europe/Paris", "{listed}");
    let page = ui.get("/cron").await.body;
    assert!(page.contains("Runtime schedules") && page.contains("?tz=Europe/Paris"), "{page}");
    assert!(page.contains(r#"data-action="/api/schedules/report/remove""#), "{page}");
    let bad = ui.action("/api/schedules", serde_json::json!({ "line": "61 * * * * report" })).await;
    assert_eq!(bad.status, 400, "a mistake is the caller's: {}", bad.body);
    assert_eq!(ui.action("/api/schedules/report/remove", serde_json::json!({})).await.status, 200);
    assert_eq!(ui.action("/api/schedules/report/remove", serde_json::json!({})).await.status, 404);
    assert!(db.utils().schedules().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_the_parser_refuses_is_not_put_and_a_stored_one_is_reported_once_and_not_scheduled() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    for bad in ["@every 1w weekly", "@every 1s2m odd", "@every 30s zoned ?tz=Europe/Paris"] {
        let error = utils.put_schedule(bad).await.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("@every") || error.contains("'tz'"), "{bad}: {error:?}");
    }
    assert!(utils.schedules().await.unwrap().is_empty(), "none stored");
    // Rows stored by hand (or before the parser refused their text).
    utils.put_schedule("@every 1s good").await.unwrap();
    db.client()
        .await
        .batch_execute(
            "insert into formica_graphile_worker.schedules (identifier, line) values
               ('weekly', '@every 1w weekly'), ('zoned', '@every 30s zoned ?tz=Europe/Paris')",
        )
        .await
        .unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let worker = WorkerOptions::<()>::with_runtime(std::sync::Arc::new(formica_tokio::TokioRuntime))
        .database_url(&db.url)
        .max_pool_size(3)
        .define_raw_job("unrelated", |_, _| async { Ok(()) })
        .runtime_schedules(Duration::from_millis(200))
        .on_event(move |event| {
            if let formica::Event::ScheduleUnreadable { identifier, error, .. } = event {
                record.lock().unwrap().push((identifier.clone(), error.clone()));
            }
        })
        .init()
        .await
        .expect("init");
    running(vec![worker], tokio::time::sleep(Duration::from_secs(2))).await;
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let names: Vec<_> = seen.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(names, ["weekly", "zoned"], "once each over about ten reads: {seen:?}");
    assert!(seen[0].1.contains("invalid period") && seen[1].1.contains("'tz'"), "{seen:?}");
    assert!(slots(&db, "good").await.len() >= 2, "the readable schedule runs");
    assert!(slots(&db, "weekly").await.is_empty() && slots(&db, "zoned").await.is_empty());
}
