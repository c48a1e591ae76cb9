//! Per-job logs (docs/guide/job-logs.md): the events inside a job's span at the worker's
//! level are kept with the job, bounded per attempt, written in batches (not a statement a
//! line), read by `job_logs`, shown on the job's page, and pruned with the history; a worker
//! without the option keeps none.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica::{HistoryOptions, JobContext, JobLogLayer, JobLogs, JobSpec, Retention, Runtime};
use formica_tests::dashboard::Dashboard;
use formica_tests::{on_both_runtimes, Running, TestDb};
use serde_json::json;
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};
use tracing_subscriber::layer::SubscriberExt;

/// The process's subscriber: the registry with `JobLogLayer` (no other test sets one).
fn install_the_layer() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let subscriber = tracing_subscriber::registry().with(JobLogLayer);
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
    });
}

const JOBS: i64 = 200;

/// Logs a debug line (below the level), three info lines (one long, with a field), and a
/// warning; fails its first attempt when `{"flaky": true}`.
async fn chatty(ctx: JobContext, payload: serde_json::Value) -> formica::TaskResult {
    tracing::debug!("not kept: below the level");
    tracing::info!(rows = 42, "imported");
    tracing::info!("{}", "é".repeat(40));
    tracing::warn!("third");
    tracing::info!("fourth: over the bound");
    if payload["flaky"] == json!(true) && ctx.job().attempts == 1 {
        return Err("first attempt fails".into());
    }
    Ok(())
}

async fn a_job_s_events_are_kept_bounded_in_batches_and_pruned_with_its_history(rt: Arc<dyn Runtime>) {
    install_the_layer();
    let db = TestDb::migrated_on(rt.clone()).await;
    db.count_inserting_statements("formica_graphile_worker.job_logs").await;
    let utils = db.utils();
    let flaky = utils.add_raw_job("chatty", json!({ "flaky": true }), JobSpec::default()).await.unwrap();
    let jobs: Vec<_> =
        (0..JOBS).map(|i| formica::RawJob::new("chatty", json!({ "i": i }), JobSpec::default())).collect();
    utils.add_raw_jobs(&jobs).await.unwrap();
    let started = Instant::now();
    let logs = JobLogs { level: tracing::Level::INFO, max_lines: 3, max_line_bytes: 21 };
    let running =
        Running::listening(&rt, db.worker_options().define_raw_job("chatty", chatty).job_logs(logs)).await;
    // Each run keeps 3 lines and says how many more it did not: 4 a run, the flaky job two runs.
    db.wait_for_count(
        "select count(*) from formica_graphile_worker.job_logs",
        4 * (JOBS + 2),
        Duration::from_secs(30),
    )
    .await;
    let took = started.elapsed();
    let lines = utils.job_logs(flaky.id).await.unwrap();
    let seen: Vec<(i16, i32, &str, &str)> =
        lines.iter().map(|l| (l.attempt, l.line, l.level.as_str(), l.message.as_str())).collect();
    let cut = "é".repeat(10); // 21 bytes at most, cut at a character's boundary: 20
    let run = |attempt| {
        vec![
            (attempt, 0, "INFO", "imported rows=42"),
            (attempt, 1, "INFO", cut.as_str()),
            (attempt, 2, "WARN", "third"),
            (attempt, 3, "WARN", "1 more lines not kept (at most 3 an attempt)"),
        ]
    };
    assert_eq!(seen, [run(1), run(2)].concat());
    let writes = db.inserting_statements("job_logs").await;
    let most = 2 + (took.as_millis() / 250) as i64;
    assert!(writes <= most, "{writes} statements for {} lines in {took:?}", 4 * (JOBS + 2));
    running.stop(Duration::from_secs(10)).await;
    // A worker without the option keeps none, the layer installed or not.
    let quiet = utils.add_raw_job("chatty", json!({}), JobSpec::default()).await.unwrap();
    let running = Running::listening(&rt, db.worker_options().define_raw_job("chatty", chatty)).await;
    db.wait_for_count(
        &format!("select count(*) from formica_graphile_worker.job_history where job_id = {}", quiet.id),
        1,
        Duration::from_secs(10),
    )
    .await;
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(utils.job_logs(quiet.id).await.unwrap(), vec![]);
    // Pruned with the history, past every retention.
    let month_later = chrono::Utc::now() + chrono::Duration::days(31);
    utils.prune_history(&Retention::default(), Some(month_later)).await.unwrap();
    assert_eq!(db.count("select count(*) from formica_graphile_worker.job_logs").await, 0);
}

on_both_runtimes!(a_job_s_events_are_kept_bounded_in_batches_and_pruned_with_its_history);

#[tokio::test]
async fn the_job_page_shows_its_logs_in_the_queue_and_in_the_history() {
    install_the_layer();
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let job = utils.add_raw_job("import", json!({}), JobSpec::default()).await.unwrap();
    let sql = "insert into formica_graphile_worker.job_logs (job_id, attempt, line, at, level, message)
        values ($1, 0, 0, '2026-01-02T03:04:05.006Z', 'INFO', 'read <42> rows')";
    db.client().await.execute(sql, &[&job.id]).await.unwrap();
    let ui = Dashboard::start(utils.clone(), formica_ui::Options::default()).await;
    let line = "2026-01-02T03:04:05.006Z  INFO [attempt 0] read &lt;42&gt; rows";
    let page = ui.get(&format!("/jobs/{}", job.id)).await.body;
    assert!(page.contains(&format!(r#"<pre id="logs">{line}</pre>"#)), "{page}");
    // Run, finished and gone from the queue: its page of runs shows the lines of both.
    let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    // Keeping every report: the line above is dated past the default retentions, and the
    // worker's first pruning pass (within a second of its start) would delete it.
    let keep = Retention { completed: None, failed: None, cancelled: None };
    let options = db
        .worker_options()
        .define_raw_job("import", chatty)
        .job_logs(JobLogs::at(tracing::Level::WARN))
        .history(HistoryOptions { retention: keep, ..HistoryOptions::default() });
    let running = Running::listening(&rt, options).await;
    db.wait_for_count("select count(*) from formica_graphile_worker.job_logs", 2, Duration::from_secs(10))
        .await;
    running.stop(Duration::from_secs(10)).await;
    let page = ui.get(&format!("/jobs/{}", job.id)).await.body;
    assert!(
        page.contains(&format!("<pre id=\"logs\">{line}\n"))
            && page.contains(" WARN [attempt 1] third</pre>"),
        "{page}"
    );
}
