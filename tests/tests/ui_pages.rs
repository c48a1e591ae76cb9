//! What the dashboard's pages tell an operator, asserted on the rendered HTML against a real
//! database: why a ready job waits (a pause, a cap, a rate limit), a long `last_error` whole
//! on the job page and a click away in lists, the overview's completions never counted over
//! a window of zero, times with how long ago they were by the database's clock, and the
//! history charts' axes and values.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica::controls::{Control, Pause};
use formica::{JobSpec, WorkerUtils};
use formica_tests::dashboard::Dashboard;
use formica_tests::TestDb;
use formica_ui::Options;
use serde_json::json;
use std::time::Duration;

async fn add(utils: &WorkerUtils, task: &str, queue: Option<&str>) -> i64 {
    let spec = JobSpec { queue_name: queue.map(str::to_owned), ..Default::default() };
    utils.add_raw_job(task, json!({}), spec).await.expect("add a job").id
}

/// The table row of job `id` on `page`.
fn row_of(page: &str, id: i64) -> &str {
    let start =
        page.find(&format!(r#"<a href="/jobs/{id}">{id}</a>"#)).unwrap_or_else(|| panic!("job {id}: {page}"));
    page[start..].split("</tr>").next().unwrap()
}

#[tokio::test]
async fn a_ready_job_says_what_holds_it_on_the_job_and_jobs_pages() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let paused = add(&utils, "mail", Some("outbox")).await;
    let capped = add(&utils, "report", None).await;
    let running = add(&utils, "report", None).await;
    let limited = add(&utils, "import", None).await;
    let free = add(&utils, "free", None).await;
    formica_tests::spoiled::lock(&db, running, "w").await;
    utils.pause(&Pause::queue("outbox"), Some("smtp down"), None).await.unwrap();
    utils.set_control(&Control::cap("report", 1), None).await.unwrap();
    utils.set_control(&Control::rate_limit("import", 5, 60_000), None).await.unwrap();
    let ui = Dashboard::start(utils.clone(), Options::default()).await;

    let page = ui.get("/jobs").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        row_of(&page.body, paused).contains("ready</span> <span class=\"held\">— held: queue outbox paused")
    );
    let capped_row = row_of(&page.body, capped);
    assert!(capped_row.contains("— held: task report capped (1 running, at most 1)"), "{capped_row}");
    assert!(row_of(&page.body, limited).contains("— may wait: rate limit import 5/min"), "{}", page.body);
    assert!(!row_of(&page.body, free).contains("held") && !row_of(&page.body, running).contains("held"));

    let job = ui.get(&format!("/jobs/{paused}")).await.body;
    assert!(
        job.contains(r#"id="state">ready</span> <span class="held">— held: queue outbox paused"#),
        "{job}"
    );
    utils.resume(&Pause::queue("outbox")).await.unwrap();
    assert!(!ui.get(&format!("/jobs/{paused}")).await.body.contains("held"), "resumed: nothing holds it");
}

#[tokio::test]
async fn a_long_last_error_is_whole_on_the_job_page_and_a_click_away_in_lists() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let id = add(&utils, "sync", None).await;
    let long_line = format!(
        "Error: request to the billing service failed after {} retries: quota exceeded",
        "9".repeat(80)
    );
    let error = format!("{long_line}\n    at sync (sync.js:12)\nCaused by: account 42 is suspended");
    db.client()
        .await
        .execute(
            "update graphile_worker._private_jobs set attempts = 1, last_error = $2, run_at = now() + interval '1 hour' where id = $1",
            &[&id, &error],
        )
        .await
        .unwrap();
    let ui = Dashboard::start(utils, Options::default()).await;
    let job = ui.get(&format!("/jobs/{id}")).await.body;
    assert!(job.contains(&format!(r#"<pre id="last-error">{error}</pre>"#)), "whole: {job}");
    let list = ui.get("/jobs").await.body;
    let row = row_of(&list, id);
    let cut: String = long_line.chars().take(100).collect();
    assert!(row.contains(&format!("<summary>{cut}…</summary>")), "its first line, cut: {row}");
    assert!(row.contains(&format!("<pre>{error}</pre>")), "the whole text a click away: {row}");
}

#[tokio::test]
async fn the_overview_never_counts_completions_over_a_window_of_zero() {
    let db = TestDb::migrated().await;
    let ui = Dashboard::start(db.utils(), Options::default()).await;
    let first = ui.get("/").await.body;
    assert!(!first.contains("in the last 0"), "{first}");
    assert!(first.contains("counting from now") || first.contains(" s (since the dashboard"), "{first}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let later = ui.get("/").await.body;
    assert!(later.contains("</b> jobs completed or removed in the last "), "{later}");
    assert!(
        later.contains(" s (since the dashboard's first sample)") && !later.contains("last 0"),
        "{later}"
    );
}

#[tokio::test]
async fn times_say_how_long_ago_or_how_soon_by_the_database_clock() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let id = add(&utils, "later", None).await;
    db.client()
        .await
        .execute(
            "update graphile_worker._private_jobs set run_at = now() + interval '2 hours 30 seconds', created_at = now() - interval '3 minutes 10 seconds' where id = $1",
            &[&id],
        )
        .await
        .unwrap();
    let ui = Dashboard::start(utils, Options::default()).await;
    let job = ui.get(&format!("/jobs/{id}")).await.body;
    assert!(job.contains(r#"<span class="ago">(3 min ago)</span>"#), "created_at: {job}");
    assert!(job.contains(r#"<span class="ago">(in 2 h)</span>"#), "run_at: {job}");
    assert!(ui.get("/jobs").await.body.contains(r#"<span class="ago">(in 2 h)</span>"#));
    assert!(!ui.get("/api/jobs").await.body.contains("ago"), "the API's times stay plain");
}

#[tokio::test]
async fn the_history_charts_have_axes_labels_and_values() {
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute(
            "insert into formica_graphile_worker.job_history (job_id, task_identifier, payload, attempts, max_attempts, outcome, added_at, started_at, finished_at)
             select n, 'chart', '{}', 1, 25, case when n = 4 then 'failed' else 'completed' end,
               now() - interval '5 minutes 2 seconds', now() - interval '5 minutes', now() - interval '5 minutes'
             from generate_series(1, 4) as n",
        )
        .await
        .unwrap();
    let ui = Dashboard::start(db.utils(), Options::default()).await;
    let page = ui.get("/history").await.body;
    let hour = page.split(r#"id="chart-hour""#).nth(1).unwrap().split("</figure>").next().unwrap();
    assert!(hour.contains(r#"<text class="value""#) && hour.contains(">4</text>"), "the bar's total: {hour}");
    for label in [
        ">jobs</text>",
        ">mean wait</text>",
        ">time before now</text>",
        ">-60\u{a0}min</text>",
        ">now</text>",
        ">2.0 s</text>",
        ">0</text>",
    ] {
        assert!(hour.contains(label), "{label}: {hour}");
    }
    let day = page.split(r#"id="chart-day""#).nth(1).unwrap().split("</figure>").next().unwrap();
    assert!(day.contains(">-24\u{a0}h</text>") && day.contains(">4</text>"), "{day}");
}
