//! Cron shared with the real graphile-worker 0.18.0: a Node worker and a Formica worker with
//! the same crontab schedule each minute once, with the same payload. Ignored by default
//! (it waits for a real minute boundary): run through `scripts/compat-graphile-worker`,
//! which sets `FORMICA_GRAPHILE_WORKER` to graphile-worker's CLI.

use chrono::{DateTime, DurationRound, Utc};
use formica_tests::node::node_url;
use formica_tests::TestDb;
use std::process::{Command, Stdio};
use std::time::Duration;

/// What `formica crontab check` marks (a zone, a `CRON_TZ=` line, an interval), the real
/// graphile-worker refuses at start; the same crontab without them it runs.
#[tokio::test]
#[ignore]
async fn graphile_worker_refuses_the_lines_formica_marks_and_runs_the_rest() {
    let cli = std::env::var("FORMICA_GRAPHILE_WORKER").expect("run scripts/compat-graphile-worker");
    let db = TestDb::migrated().await;
    let url = node_url(&db);
    let dir = std::env::temp_dir().join(format!("formica-cron-refusal-{}", db.name));
    std::fs::create_dir_all(dir.join("tasks")).unwrap();
    std::fs::write(dir.join("tasks/t.js"), "module.exports = async () => {};\n").unwrap();
    let crontabs = [
        ("0 8 * * * t ?tz=Europe/Paris", false),
        ("CRON_TZ=Europe/Paris\n0 8 * * * t", false),
        ("@every 5s t", false),
        ("0 8 * * * t ?max=3", true),
    ];
    for (crontab, runs) in crontabs {
        let item = formica::cron::parse(crontab).unwrap().into_items().remove(0);
        assert_eq!(item.graphile_worker_refuses().is_none(), runs, "formica's verdict on {crontab:?}");
        std::fs::write(dir.join("crontab"), format!("{crontab}\n")).unwrap();
        let mut node = Command::new("node")
            .arg(&cli)
            .args(["-c", &url, "--crontab", "crontab"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start graphile-worker");
        let mut exited = None;
        for _ in 0..50 {
            exited = node.try_wait().unwrap();
            if exited.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = node.kill();
        let _ = node.wait();
        if runs {
            assert_eq!(exited, None, "graphile-worker runs {crontab:?}");
        } else {
            assert!(exited.is_some_and(|s| !s.success()), "graphile-worker refuses {crontab:?}: {exited:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
#[ignore]
async fn graphile_worker_and_formica_with_one_crontab_schedule_each_minute_once() {
    let cli = std::env::var("FORMICA_GRAPHILE_WORKER").expect("run scripts/compat-graphile-worker");
    let db = TestDb::migrated().await;
    let dir = std::env::temp_dir().join(format!("formica-cron-compat-{}", db.name));
    std::fs::create_dir_all(dir.join("tasks")).unwrap();
    std::fs::write(dir.join("tasks/other.js"), "module.exports = async () => {};\n").unwrap();
    let crontab = "* * * * * tick ?max=3 {source: 'crontab'}\n";
    std::fs::write(dir.join("crontab"), crontab).unwrap();

    let url = node_url(&db);
    let mut node = Command::new("node")
        .arg(&cli)
        .args(["-c", &url, "--crontab", "crontab"])
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start graphile-worker");
    let worker = db
        .worker_options()
        .define_raw_job("other", |_, _| async { Ok(()) })
        .cron(crontab)
        .init()
        .await
        .unwrap();
    let handle = worker.handle();
    let run = tokio::spawn(worker.run());

    // Both run across the next minute boundary.
    let boundary =
        Utc::now().duration_trunc(chrono::Duration::minutes(1)).unwrap() + chrono::Duration::minutes(1);
    tokio::time::sleep((boundary - Utc::now()).to_std().unwrap() + Duration::from_secs(3)).await;
    handle.stop();
    run.await.unwrap().unwrap();
    let _ = node.kill();
    let _ = node.wait();

    let rows = db
        .client()
        .await
        .query(
            "select jobs.run_at, jobs.payload, jobs.max_attempts from graphile_worker._private_jobs as jobs
             join graphile_worker._private_tasks as tasks on tasks.id = jobs.task_id
             where tasks.identifier = 'tick' and jobs.run_at = $1",
            &[&boundary],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "the minute {boundary} is scheduled once by the two workers");
    let payload: serde_json::Value = rows[0].get(1);
    let ts = boundary.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    assert_eq!(
        payload,
        serde_json::json!({ "source": "crontab", "_cron": { "ts": ts, "backfilled": false } })
    );
    assert_eq!(rows[0].get::<_, i16>(2), 3);
    let last: DateTime<Utc> = db
        .client()
        .await
        .query_one(
            "select last_execution from graphile_worker._private_known_crontabs where identifier = 'tick'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(last, boundary);
    let _ = std::fs::remove_dir_all(dir);
}
