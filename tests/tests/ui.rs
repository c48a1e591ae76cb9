//! The dashboard's routes against a real database: every API route, its filters and
//! paging, each action and its effect on the table, the token, read-only mode, the
//! refusal of cross-site requests, and escaping in the pages.
//!
//! `ui_jobs_page_at_a_million_jobs` (ignored) measures the jobs page at 1,000,000 jobs:
//! `scripts/with-postgres cargo test -p formica-tests --test it ui:: -- --ignored --nocapture`.

use chrono::{Duration as ChronoDuration, Utc};
use formica::{JobSpec, WorkerUtils};
use formica_tests::dashboard::Dashboard;
use formica_tests::{Running, TestDb};
use formica_ui::Options;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A database with one job in each state, and the ids by state.
struct Fixture {
    db: TestDb,
    utils: WorkerUtils,
    ready: i64,
    scheduled: i64,
    running: i64,
    failed: i64,
    permanently_failed: i64,
}

async fn add(utils: &WorkerUtils, task: &str, payload: Value, spec: JobSpec) -> i64 {
    utils.add_raw_job(task, payload, spec).await.expect("add a job").id
}

async fn fixture() -> Fixture {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let later = Some(Utc::now() + ChronoDuration::hours(1));
    let ready = add(
        &utils,
        "mail",
        json!({"to": "a"}),
        JobSpec { job_key: Some("k-ready".into()), ..Default::default() },
    )
    .await;
    let scheduled = add(&utils, "mail", json!({}), JobSpec { run_at: later, ..Default::default() }).await;
    let running =
        add(&utils, "report", json!({}), JobSpec { queue_name: Some("q1".into()), ..Default::default() })
            .await;
    let failed = add(&utils, "report", json!({}), JobSpec::default()).await;
    let permanently_failed = add(&utils, "mail", json!({}), JobSpec::default()).await;
    let client = db.client().await;
    client
        .execute(
            "update graphile_worker._private_jobs set locked_at = now(), locked_by = 'worker-a', attempts = 1 where id = $1",
            &[&running],
        )
        .await
        .unwrap();
    client
        .execute(
            "update graphile_worker._private_job_queues set locked_at = now(), locked_by = 'worker-a' where queue_name = 'q1'",
            &[],
        )
        .await
        .unwrap();
    client
        .execute(
            "update graphile_worker._private_jobs set attempts = 1, last_error = 'Boom: disk full', run_at = now() + interval '1 hour' where id = $1",
            &[&failed],
        )
        .await
        .unwrap();
    utils.permanently_fail_jobs(&[permanently_failed], Some("gave up")).await.unwrap();
    Fixture { db, utils, ready, scheduled, running, failed, permanently_failed }
}

fn ids(page: &Value) -> Vec<i64> {
    page["jobs"].as_array().expect("jobs").iter().map(|j| j["id"].as_i64().unwrap()).collect()
}

#[tokio::test]
async fn overview_counts_each_job_in_one_state() {
    let f = fixture().await;
    let ui = Dashboard::start(f.utils.clone(), Options::default()).await;
    let o = ui.get("/api/overview").await;
    assert_eq!(o.status, 200, "{}", o.body);
    let o = o.json();
    for state in ["ready", "scheduled", "running", "failed", "permanently_failed"] {
        assert_eq!(o["totals"][state], 1, "{state}: {o}");
    }
    let sum: i64 = o["counts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["states"].as_object().unwrap().values().map(|n| n.as_i64().unwrap()))
        .sum();
    assert_eq!(sum, 5, "each job counted once: {o}");
    let report_q1 =
        o["counts"].as_array().unwrap().iter().find(|c| c["task"] == "report" && c["queue"] == "q1");
    assert_eq!(report_q1.expect("report in q1")["states"]["running"], 1);
    assert_eq!(o["failed_last_hour"], 2, "the failed and the permanently failed job: {o}");
    assert!(o["oldest_ready_age_seconds"].as_i64().is_some(), "{o}");
    assert_eq!(o["completed"], 0);
    let html = ui.get("/").await;
    assert_eq!(html.status, 200);
    assert!(html.body.contains(r#"id="total-permanently_failed">1<"#), "{}", html.body);
}

#[tokio::test]
async fn overview_counts_jobs_completed_since_it_started() {
    let f = fixture().await;
    let ui = Dashboard::start(f.utils.clone(), Options::default()).await;
    assert_eq!(ui.get("/api/overview").await.json()["completed"], 0);
    f.utils.complete_jobs(&[f.ready, f.scheduled]).await.unwrap();
    // PostgreSQL publishes a backend's counters within seconds of its going idle.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let completed = ui.get("/api/overview").await.json()["completed"].as_i64().unwrap();
        if completed == 2 {
            break;
        }
        assert!(completed < 2 && std::time::Instant::now() < deadline, "completed: {completed}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn jobs_filter_by_task_queue_state_key_and_error_text() {
    let f = fixture().await;
    let ui = Dashboard::start(f.utils.clone(), Options::default()).await;
    let list = |q: &'static str| {
        let ui = &ui;
        async move {
            let r = ui.get(&format!("/api/jobs{q}")).await;
            assert_eq!(r.status, 200, "{q}: {}", r.body);
            let mut ids = ids(&r.json());
            ids.sort();
            ids
        }
    };
    let mut all = vec![f.ready, f.scheduled, f.running, f.failed, f.permanently_failed];
    all.sort();
    assert_eq!(list("").await, all);
    assert_eq!(list("?state=ready").await, vec![f.ready]);
    assert_eq!(list("?state=scheduled").await, vec![f.scheduled]);
    assert_eq!(list("?state=running").await, vec![f.running]);
    assert_eq!(list("?state=failed").await, vec![f.failed]);
    assert_eq!(list("?state=permanently_failed").await, vec![f.permanently_failed]);
    assert_eq!(list("?task=report").await, vec![f.running, f.failed]);
    assert_eq!(list("?queue=q1").await, vec![f.running]);
    assert_eq!(list("?key=k-ready").await, vec![f.ready]);
    assert_eq!(list("?error=DISK").await, vec![f.failed]);
    assert_eq!(list("?task=mail&state=ready&error=").await, vec![f.ready], "empty fields are no filter");
    assert_eq!(list("?task=nope").await, Vec::<i64>::new());
    let bad = ui.get("/api/jobs?state=exploded").await;
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().contains("unknown state"), "{}", bad.body);
    assert_eq!(ui.get("/api/jobs?sort=sideways").await.status, 400);
    assert_eq!(ui.get("/api/jobs?after=x").await.status, 400);
    assert_eq!(ui.get("/api/jobs?limit=0").await.status, 400);
    let page = ui.get("/jobs?state=failed").await;
    assert!(page.body.contains("Boom: disk full") && !page.body.contains(&format!(">{}</a>", f.ready)));
}

#[tokio::test]
async fn jobs_pages_through_every_order_without_gaps_or_repeats() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let now = Utc::now();
    let mut added = Vec::new();
    // (priority, minutes from now, id): pairs share a run_at so the id breaks ties, and
    // two priorities make the workers' order differ from run_at's.
    let mut next_order = Vec::new();
    for i in 0..9i64 {
        let (priority, minutes) = (if i % 3 == 0 { -1i16 } else { 0 }, 10 - i / 2);
        let spec = JobSpec {
            run_at: Some(now + ChronoDuration::minutes(minutes)),
            priority: Some(priority),
            ..Default::default()
        };
        let id = add(&utils, "t", json!({ "i": i }), spec).await;
        added.push(id);
        next_order.push((priority, minutes, id));
    }
    // Out of attempts: listed, but never next to run.
    let given_up = add(&utils, "t", json!({}), JobSpec::default()).await;
    utils.permanently_fail_jobs(&[given_up], None).await.unwrap();
    added.push(given_up);
    next_order.sort();
    let ui = Dashboard::start(utils.clone(), Options::default()).await;
    for sort in ["newest", "oldest", "next"] {
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let cursor =
                after.as_deref().map(|a| format!("&after={}", a.replace('+', "%2B"))).unwrap_or_default();
            let page = ui.get(&format!("/api/jobs?sort={sort}&limit=3{cursor}")).await;
            assert_eq!(page.status, 200, "{}", page.body);
            let page = page.json();
            let got = ids(&page);
            assert!(got.len() <= 3);
            seen.extend(got);
            match page["next"].as_str() {
                Some(next) => after = Some(next.to_owned()),
                None => break,
            }
        }
        let expected: Vec<i64> = match sort {
            "newest" => added.iter().rev().copied().collect(),
            "oldest" => added.clone(),
            _ => next_order.iter().map(|&(_, _, id)| id).collect(),
        };
        assert_eq!(seen, expected, "{sort}");
    }
    let html = ui.get("/jobs?limit=3").await;
    assert!(html.body.contains(r#"id="next-page""#), "{}", html.body);
}

#[tokio::test]
async fn a_job_is_shown_whole() {
    let f = fixture().await;
    let long_error = format!("first line\n{}\nstderr ends with: the end", "x".repeat(3000));
    f.db.client()
        .await
        .execute(
            "update graphile_worker._private_jobs set last_error = $2 where id = $1",
            &[&f.failed, &long_error],
        )
        .await
        .unwrap();
    let ui = Dashboard::start(f.utils.clone(), Options::default()).await;
    let job = ui.get(&format!("/api/jobs/{}", f.failed)).await.json();
    assert_eq!(job["last_error"], long_error.as_str());
    assert_eq!((job["state"].as_str(), job["task_identifier"].as_str()), (Some("failed"), Some("report")));
    let running = ui.get(&format!("/api/jobs/{}", f.running)).await.json();
    assert_eq!(
        (running["locked_by"].as_str(), running["queue_locked_by"].as_str()),
        (Some("worker-a"), Some("worker-a"))
    );
    let page = ui.get(&format!("/jobs/{}", f.failed)).await;
    assert!(page.body.contains("stderr ends with: the end"), "the whole error is on the page");
    assert!(page.body.contains("/run_now"));
    let out_of_attempts = ui.get(&format!("/jobs/{}", f.permanently_failed)).await;
    assert!(!out_of_attempts.body.contains("/run_now") && out_of_attempts.body.contains("Out of attempts"));
    let ready = ui.get(&format!("/jobs/{}", f.ready)).await;
    assert!(ready.body.contains("&quot;to&quot;: &quot;a&quot;"), "pretty payload: {}", ready.body);
    let missing = ui.get("/api/jobs/999999").await;
    assert_eq!(missing.status, 404);
    assert_eq!(ui.get("/jobs/999999").await.status, 404);
}

#[tokio::test]
async fn actions_go_through_worker_utils_and_change_the_table() {
    let f = fixture().await;
    let ui = Dashboard::start(f.utils.clone(), Options::default()).await;
    let row = |id: i64| {
        let db = &f.db;
        async move {
            let client = db.client().await;
            client
                .query_opt(
                    "select attempts, max_attempts, run_at <= now() as due, priority, last_error from graphile_worker._private_jobs where id = $1",
                    &[&id],
                )
                .await
                .unwrap()
                .map(|r| (r.get::<_, i16>(0), r.get::<_, i16>(1), r.get::<_, bool>(2), r.get::<_, i16>(3), r.get::<_, Option<String>>(4)))
        }
    };

    // Run now: due at once, attempts kept.
    let r = ui.action(&format!("/api/jobs/{}/run_now", f.failed), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(row(f.failed).await, Some((1, 25, true, 0, Some("Boom: disk full".into()))));

    // Reschedule: each field given is set, the others stay.
    let at = Utc::now() + ChronoDuration::days(2);
    let r = ui
        .action(
            &format!("/api/jobs/{}/reschedule", f.scheduled),
            json!({ "run_at": at, "priority": 4, "max_attempts": 9 }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(row(f.scheduled).await, Some((0, 9, false, 4, None)));
    assert_eq!(ui.action(&format!("/api/jobs/{}/reschedule", f.scheduled), json!({})).await.status, 400);
    assert_eq!(
        ui.action(&format!("/api/jobs/{}/reschedule", f.scheduled), json!({ "when": 1 })).await.status,
        422
    );

    // Permanently fail, with a reason.
    let r = ui.action(&format!("/api/jobs/{}/fail", f.ready), json!({ "reason": "not wanted" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (attempts, max, _, _, error) = row(f.ready).await.unwrap();
    assert_eq!((attempts, error.as_deref()), (max, Some("not wanted")));

    // Remove.
    let r = ui.action(&format!("/api/jobs/{}/remove", f.permanently_failed), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(row(f.permanently_failed).await, None);
    assert_eq!(ui.action(&format!("/api/jobs/{}/remove", f.permanently_failed), json!({})).await.status, 404);

    // Cancel a waiting job: it fails for good, the reason in its error.
    let r = ui.action(&format!("/api/jobs/{}/cancel", f.scheduled), json!({ "reason": "not needed" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let (attempts, max, _, _, error) = row(f.scheduled).await.unwrap();
    assert_eq!((attempts, error.as_deref()), (max, Some("cancelled: not needed")));
    assert_eq!(ui.action("/api/jobs/999999/cancel", json!({})).await.status, 404);

    // A job a worker holds is left alone, and the answer says so.
    for action in ["run_now", "remove", "fail"] {
        let r = ui.action(&format!("/api/jobs/{}/{action}", f.running), json!({})).await;
        assert_eq!(r.status, 409, "{action}: {}", r.body);
    }
    assert!(row(f.running).await.is_some());
    // Cancelling it records a request for its holder, and says so.
    let r = ui.action(&format!("/api/jobs/{}/cancel", f.running), json!({ "reason": "stop" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let answer = r.json();
    assert_eq!(answer["recorded"]["worker"], "worker-a", "{answer}");
    assert!(answer["message"].as_str().unwrap().starts_with("recorded for worker-a"), "{answer}");

    // Unlock a dead worker: its job and queue are free.
    let r = ui.action("/api/workers/unlock", json!({ "worker_id": "worker-a" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let held =
        f.db.count("select count(*) from graphile_worker._private_jobs where locked_by is not null").await
            + f.db
                .count("select count(*) from graphile_worker._private_job_queues where locked_by is not null")
                .await;
    assert_eq!(held, 0);
    assert_eq!(ui.action("/api/workers/unlock", json!({ "worker_id": " " })).await.status, 400);
}

#[tokio::test]
async fn queues_workers_and_cron_are_listed() {
    let f = fixture().await;
    f.db.client()
        .await
        .execute(
            "insert into graphile_worker._private_known_crontabs (identifier, known_since, last_execution) values ('nightly', now(), now() - interval '1 day'), ('gone', now(), null)",
            &[],
        )
        .await
        .unwrap();
    let crontab = formica::cron::parse("0 3 * * * nightly_task ?id=nightly\n*/5 * * * * poll\n").unwrap();
    let ui =
        Dashboard::start(f.utils.clone(), Options { crontab: Some(crontab), ..Default::default() }).await;
    let queues = ui.get("/api/queues").await.json();
    assert_eq!(
        queues,
        json!([{ "name": "q1", "locked_by": "worker-a", "locked_at": queues[0]["locked_at"] }])
    );
    let workers = ui.get("/api/workers").await.json();
    assert_eq!(
        (workers[0]["worker_id"].as_str(), workers[0]["jobs"].as_i64(), workers[0]["queues"].as_i64()),
        (Some("worker-a"), Some(1), Some(1))
    );
    let answer = ui.get("/api/cron").await.json();
    assert_eq!(answer["source"], "given", "no worker runs a crontab: the one given is shown");
    let cron = &answer["items"];
    let names: Vec<&str> =
        cron.as_array().unwrap().iter().map(|c| c["identifier"].as_str().unwrap()).collect();
    assert_eq!(names, ["nightly", "poll", "gone"]);
    assert!(cron[0]["last_execution"].is_string() && cron[1]["last_execution"].is_null());
    assert_eq!(cron[1]["next_runs"].as_array().map(Vec::len), Some(3));
    assert_eq!(cron[2]["next_runs"], json!([]));
    for path in ["/queues", "/workers", "/cron"] {
        let page = ui.get(path).await;
        assert_eq!(page.status, 200, "{path}");
    }
    assert!(ui.get("/workers").await.body.contains("worker-a"));
}

/// The Cron page of a dashboard given no crontab, as an operator reads it: `(source, the
/// identifiers listed with the workers running each)`.
async fn cron_seen(ui: &Dashboard) -> (Value, Vec<(String, Value)>) {
    let answer = ui.get("/api/cron").await.json();
    let items = answer["items"].as_array().expect("items").iter();
    let items = items.map(|c| (c["identifier"].as_str().unwrap().to_owned(), c["workers"].clone())).collect();
    (answer["source"].clone(), items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cron_page_shows_the_crontab_of_the_running_workers() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    db.client()
        .await
        .execute(
            "insert into graphile_worker._private_known_crontabs (identifier, known_since, last_execution) values ('nightly', now(), now() - interval '1 day'), ('retired', now(), null)",
            &[],
        )
        .await
        .unwrap();
    // As the README runs it: the worker is given the crontab, the dashboard is not.
    let ui = Dashboard::start(utils.clone(), Options::default()).await;
    let (source, items) = cron_seen(&ui).await;
    assert_eq!(source, "none");
    assert_eq!(items, [("nightly".to_owned(), json!([])), ("retired".to_owned(), json!([]))]);
    assert!(ui.get("/cron").await.body.contains("No running worker has a crontab"));

    let options = db
        .worker_options()
        .define_raw_job("nightly_task", |_, _| async { Ok(()) })
        .define_raw_job("poll", |_, _| async { Ok(()) })
        .cron("0 3 * * * nightly_task ?id=nightly\n*/5 * * * * poll ?max=3\n");
    let worker = Running::listening(&db.runtime, options).await;
    let id = worker.worker_id().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    let (source, items) = loop {
        let seen = cron_seen(&ui).await;
        if seen.0 == "workers" || Instant::now() > deadline {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(source, "workers", "the worker's crontab is found without --crontab");
    assert_eq!(
        items,
        [
            ("nightly".to_owned(), json!([id])),
            ("poll".to_owned(), json!([id])),
            ("retired".to_owned(), json!([]))
        ]
    );
    let answer = ui.get("/api/cron").await.json();
    assert_eq!(answer["items"][1]["spec"], "*/5 * * * * poll ?max=3");
    assert!(answer["items"][0]["last_execution"].is_string(), "the record of the item is joined");
    assert_eq!(answer["items"][1]["next_runs"].as_array().map(Vec::len), Some(3));
    let page = ui.get("/cron").await.body;
    assert!(page.contains("The crontab of the running workers") && page.contains("nightly_task"), "{page}");
    assert!(page.contains(&id), "the page names the worker running each item");
    let workers = ui.get("/api/workers").await.json();
    assert_eq!(workers[0]["lease"]["cron_items"], 2, "{workers}");

    // Stopped, the worker renews its lease no more: within the lease, its crontab is gone.
    worker.stop(Duration::from_secs(10)).await;
    let lease = formica::LEASE.to_std().unwrap();
    let deadline = Instant::now() + lease + Duration::from_secs(3);
    let (source, items) = loop {
        let seen = cron_seen(&ui).await;
        if seen.0 != "workers" || Instant::now() > deadline {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(source, "none", "a stopped worker's crontab is not shown");
    // The items stay listed as the database knows them (the worker registered poll).
    assert_eq!(
        items.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(),
        ["nightly", "poll", "retired"]
    );
    let answer = ui.get("/api/cron").await.json();
    assert!(answer["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["spec"].is_null() && c["workers"] == json!([])));
}

#[tokio::test]
async fn a_token_is_required_on_every_request_when_set() {
    let f = fixture().await;
    let token = "s3cret-token";
    let ui =
        Dashboard::start(f.utils.clone(), Options { token: Some(token.into()), ..Default::default() }).await;
    for path in ["/", "/api/overview", "/api/jobs", "/assets/app.js"] {
        assert_eq!(ui.get(path).await.status, 401, "{path}");
    }
    let bearer = format!("Bearer {token}");
    assert_eq!(ui.request("GET", "/api/jobs", &[("authorization", &bearer)], None).await.status, 200);
    assert_eq!(ui.request("GET", "/api/jobs", &[("authorization", "Bearer wrong")], None).await.status, 401);
    // Visiting with ?token= sets the cookie and drops the token from the address.
    let visit = ui.get(&format!("/jobs?token={token}")).await;
    assert_eq!(visit.status, 303);
    assert_eq!(visit.header("location"), Some("/jobs"));
    let cookie = visit.header("set-cookie").expect("a cookie").split(';').next().unwrap().to_owned();
    assert!(visit.header("set-cookie").unwrap().contains("HttpOnly"));
    assert_eq!(ui.request("GET", "/jobs", &[("cookie", &cookie)], None).await.status, 200);
    assert_eq!(ui.get("/jobs?token=wrong").await.status, 401);
    // With a token, any host name is fine (the token is what protects).
    assert_eq!(
        ui.request("GET", "/api/jobs", &[("cookie", &cookie), ("host", "queue.example:8080")], None)
            .await
            .status,
        200
    );
    // An action needs the token too.
    let path = format!("/api/jobs/{}/remove", f.ready);
    assert_eq!(ui.action(&path, json!({})).await.status, 401);
    let r = ui.request("POST", &path, &[("x-formica-ui", "1"), ("cookie", &cookie)], Some(json!({}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
}

#[tokio::test]
async fn read_only_refuses_every_action_and_shows_no_button() {
    let f = fixture().await;
    let ui = Dashboard::start(f.utils.clone(), Options { read_only: true, ..Default::default() }).await;
    for action in ["run_now", "remove", "fail"] {
        let r = ui.action(&format!("/api/jobs/{}/{action}", f.failed), json!({})).await;
        assert_eq!(r.status, 403, "{action}");
        assert!(r.json()["error"].as_str().unwrap().contains("read-only"));
    }
    assert_eq!(ui.action("/api/workers/unlock", json!({ "worker_id": "worker-a" })).await.status, 403);
    assert_eq!(f.db.count("select count(*) from graphile_worker._private_jobs").await, 5);
    assert_eq!(
        f.db.count("select count(*) from graphile_worker._private_jobs where locked_by = 'worker-a'").await,
        1
    );
    let page = ui.get(&format!("/jobs/{}", f.failed)).await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains("data-action") && page.body.contains("read-only"));
}

#[tokio::test]
async fn cross_site_requests_are_refused() {
    let f = fixture().await;
    let ui = Dashboard::start(f.utils.clone(), Options::default()).await;
    let path = format!("/api/jobs/{}/remove", f.ready);
    let host = ui.addr.to_string();
    let origin = format!("http://{host}");
    let refused: [&[(&str, &str)]; 4] = [
        // A plain form post from another site cannot add the header.
        &[],
        &[("x-formica-ui", "1"), ("origin", "http://evil.example")],
        &[("x-formica-ui", "1"), ("sec-fetch-site", "cross-site")],
        // DNS rebinding: the browser names the attacker's host.
        &[("x-formica-ui", "1"), ("host", "evil.example"), ("origin", "http://evil.example")],
    ];
    for headers in refused {
        let r = ui.request("POST", &path, headers, Some(json!({}))).await;
        assert_eq!(r.status, 403, "{headers:?}: {}", r.body);
    }
    assert_eq!(ui.request("GET", "/api/jobs", &[("host", "evil.example")], None).await.status, 403);
    assert_eq!(f.db.count("select count(*) from graphile_worker._private_jobs").await, 5, "nothing removed");
    let same = [("x-formica-ui", "1"), ("origin", origin.as_str()), ("sec-fetch-site", "same-origin")];
    assert_eq!(ui.request("POST", &path, &same, Some(json!({}))).await.status, 200);
    assert_eq!(ui.get(&path).await.status, 405, "actions are POST only");
}

#[tokio::test]
async fn values_are_escaped_in_every_page() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let evil = "<script>window.pwned=1</script>";
    let id = add(
        &utils,
        evil,
        json!({ "html": evil }),
        JobSpec { queue_name: Some(evil.into()), job_key: Some(evil.into()), ..Default::default() },
    )
    .await;
    db.client()
        .await
        .execute(
            "update graphile_worker._private_jobs set last_error = $2, attempts = 1 where id = $1",
            &[&id, &evil],
        )
        .await
        .unwrap();
    let ui = Dashboard::start(utils, Options::default()).await;
    for path in [
        "/".to_owned(),
        "/jobs".to_owned(),
        format!("/jobs/{id}"),
        "/queues".to_owned(),
        "/jobs?task=%3Cscript%3E".to_owned(),
    ] {
        let page = ui.get(&path).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(!page.body.contains("<script>window"), "{path} has raw markup: {}", page.body);
        let policy = page.header("content-security-policy").unwrap_or_default();
        assert!(policy.contains("default-src 'self'") && policy.contains("frame-ancestors 'none'"), "{path}");
        assert!(page.body.contains("&lt;script&gt;") || path.contains("task="), "{path}");
    }
}

#[tokio::test]
async fn rows_that_cannot_be_read_are_named_and_the_rest_shown_in_every_view() {
    let db = TestDb::migrated().await;
    let [good, bad_payload, bad_run_at] = formica_tests::spoiled::good_and_undecodable_jobs(&db).await;
    let ui = Dashboard::start(db.utils(), Options::default()).await;

    for sort in ["newest", "oldest", "next"] {
        let r = ui.get(&format!("/api/jobs?sort={sort}")).await;
        assert_eq!(r.status, 200, "{sort}: {}", r.body);
        let page = r.json();
        assert_eq!(ids(&page), [good], "{sort}");
        let mut bad: Vec<(i64, String)> = page["undecodable"]
            .as_array()
            .expect("undecodable rows")
            .iter()
            .map(|u| (u["id"].as_i64().unwrap(), u["undecodable"].as_str().unwrap().to_owned()))
            .collect();
        bad.sort();
        assert_eq!(bad.len(), 2, "{page}");
        assert_eq!(bad[0].0, bad_payload);
        assert!(bad[0].1.starts_with("column payload: number out of range"), "{bad:?}");
        assert_eq!(bad[1].0, bad_run_at);
        assert!(bad[1].1.starts_with("column run_at: "), "{bad:?}");
    }
    let page = ui.get("/jobs").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(&format!(r#"<a href="/jobs/{good}">"#)), "the good job is listed");
    assert!(
        page.body.contains(&format!("job {bad_payload}: column payload: number out of range")),
        "{}",
        page.body
    );
    assert!(page.body.contains(&format!("job {bad_run_at}: column run_at: ")), "{}", page.body);

    let overview = ui.get("/api/overview").await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert_eq!(overview.json()["totals"]["ready"], 3);
    let unreadable = overview.json()["unreadable"].to_string();
    assert!(unreadable.contains("run_at"), "{unreadable}");
    let home = ui.get("/").await;
    assert_eq!(home.status, 200, "{}", home.body);
    assert!(home.body.contains(r#"id="total-ready">3<"#) && home.body.contains("run_at"), "{}", home.body);

    let one = ui.get(&format!("/api/jobs/{bad_payload}")).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert_eq!(one.json()["id"], bad_payload);
    assert!(one.json()["undecodable"].as_str().unwrap().starts_with("column payload"), "{}", one.body);
    let one = ui.get(&format!("/jobs/{bad_run_at}")).await;
    assert_eq!(one.status, 200, "{}", one.body);
    assert!(one.body.contains(&format!("job {bad_run_at}: column run_at")), "{}", one.body);
    assert_eq!(ui.get(&format!("/api/jobs/{good}")).await.json()["id"], good);
}

#[tokio::test]
async fn unlocking_a_worker_with_a_live_lease_is_refused_unless_forced() {
    use formica_tests::spoiled::{lease, lock};
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let alive = add(&utils, "t", json!({}), JobSpec::default()).await;
    let old = add(&utils, "t", json!({}), JobSpec::default()).await;
    lease(&db, "alive", 60).await;
    lock(&db, alive, "alive").await;
    lock(&db, old, "graphile").await;
    let ui = Dashboard::start(utils, Options::default()).await;
    let locked = "select count(*) from graphile_worker._private_jobs where locked_by is not null";

    let workers = ui.get("/api/workers").await.json();
    assert!(workers[0]["alive_until"].is_string() && workers[1]["alive_until"].is_null(), "{workers}");
    let page = ui.get("/workers").await.body;
    assert!(!page.contains("even if alive"), "the page never offers to unlock a live worker: {page}");
    assert_eq!(page.matches(">Unlock</button>").count(), 1, "offered for the graphile worker only: {page}");

    let r = ui.action("/api/workers/unlock", json!({ "worker_id": "alive" })).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let error = r.json()["error"].as_str().unwrap().to_owned();
    assert!(error.contains("\"alive\" is alive until") && error.contains("twice"), "{error}");
    assert_eq!(db.count(locked).await, 2, "nothing unlocked");

    let r = ui.action("/api/workers/unlock", json!({ "worker_id": "graphile" })).await;
    assert_eq!(r.status, 200, "no lease: unlocked as before: {}", r.body);
    let r = ui.action("/api/workers/unlock", json!({ "worker_id": "alive", "even_if_alive": true })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(db.count(locked).await, 0);
}

/// A worker that stopped cleanly shows as stopped, holding nothing, with nothing to unlock;
/// one that died (its lease lapsed, its job still held) as lapsed, with Unlock; a live one
/// with no Unlock at all (its jobs, unlocked, would run twice). `formica status` reads the
/// same rows (`cli/tests/workers.rs`).
#[tokio::test]
async fn the_workers_page_tells_a_stopped_worker_from_a_dead_one_and_a_live_one() {
    use formica_tests::spoiled::{lease, lock};
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let stopping = Running::spawn(&db.runtime, db.worker_options().init().await.expect("init"));
    let stopped = stopping.worker_id().to_owned();
    let ui = Dashboard::start(utils.clone(), Options::default()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ui.get("/workers").await.body.contains(&stopped) {
        assert!(Instant::now() < deadline, "the worker's lease within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stopping.stop(Duration::from_secs(10)).await;
    let (dead_job, live_job) = (
        add(&utils, "t", json!({}), JobSpec::default()).await,
        add(&utils, "t", json!({}), JobSpec::default()).await,
    );
    lease(&db, "dead", -1).await;
    lock(&db, dead_job, "dead").await;
    lease(&db, "live", 60).await;
    lock(&db, live_job, "live").await;

    let workers = ui.get("/api/workers").await.json();
    let seen = |id: &str| workers.as_array().unwrap().iter().find(|w| w["worker_id"] == id).cloned().unwrap();
    let (stopped_seen, dead_seen) = (seen(&stopped), seen("dead"));
    assert!(stopped_seen["lease"]["stopped_at"].is_string(), "{stopped_seen}");
    assert_eq!(stopped_seen["lease"]["lapsed"], false, "stopped, not lapsed: {stopped_seen}");
    assert_eq!((stopped_seen["jobs"].as_i64(), stopped_seen["queues"].as_i64()), (Some(0), Some(0)));
    assert_eq!(dead_seen["lease"]["lapsed"], true, "{dead_seen}");
    assert!(dead_seen["lease"]["stopped_at"].is_null(), "{dead_seen}");

    let page = ui.get("/workers").await.body;
    let row = |id: &str| {
        let start = page.find(&format!("<td>{id}</td>")).unwrap_or_else(|| panic!("{id}'s row: {page}"));
        page[start..].split("</tr>").next().unwrap().to_owned()
    };
    let (stopped_row, dead_row, live_row) = (row(&stopped), row("dead"), row("live"));
    assert!(stopped_row.contains("stopped at") && !stopped_row.contains("lapsed"), "{stopped_row}");
    assert!(!stopped_row.contains("<button"), "nothing to unlock: {stopped_row}");
    assert!(dead_row.contains("<b>lapsed</b>") && dead_row.contains(">Unlock</button>"), "{dead_row}");
    assert!(live_row.contains("alive until") && !live_row.contains("<button"), "{live_row}");
}

#[test]
fn binding_beyond_loopback_needs_a_token_or_read_only() {
    let outside: std::net::SocketAddr = "0.0.0.0:8080".parse().unwrap();
    let local: std::net::SocketAddr = "127.0.0.1:8080".parse().unwrap();
    assert!(formica_ui::check_bind(&local, &Options::default()).is_ok());
    let refused = formica_ui::check_bind(&outside, &Options::default()).unwrap_err();
    assert!(refused.contains("--token"), "{refused}");
    assert!(
        formica_ui::check_bind(&outside, &Options { token: Some("t".into()), ..Default::default() }).is_ok()
    );
    assert!(formica_ui::check_bind(&outside, &Options { read_only: true, ..Default::default() }).is_ok());
}

/// Not a test: the jobs page's response time at 1,000,000 jobs, printed. Run with
/// `scripts/with-postgres cargo test -p formica-tests --test it ui:: -- --ignored --nocapture`.
#[tokio::test]
#[ignore]
async fn ui_jobs_page_at_a_million_jobs() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    // 1,000,000 jobs over 10 tasks, 2% in 2 named queues: 1% failed and waiting to retry,
    // 0.1% out of attempts, a tenth scheduled later, a seventh keyed; the rest ready. Added
    // over a day: about 12 jobs share each run_at.
    client
        .batch_execute(
            "insert into graphile_worker._private_tasks (identifier) select 'task_' || i from generate_series(0, 9) i;
             insert into graphile_worker._private_job_queues (queue_name) values ('q_a'), ('q_b');
             insert into graphile_worker._private_jobs (task_id, job_queue_id, payload, run_at, attempts, max_attempts, last_error, key)
             select (select min(id) from graphile_worker._private_tasks) + i % 10,
                    case when i % 50 = 0 then (select min(id) from graphile_worker._private_job_queues) + (i / 50) % 2 end,
                    json_build_object('i', i),
                    now() - (i % 86400) * interval '1 second' + case when i % 10 = 3 or i % 100 = 1 then interval '2 days' else interval '0' end,
                    case when i % 1000 = 7 then 25 when i % 100 = 1 then 3 else 0 end,
                    25,
                    case when i % 100 = 1 or i % 1000 = 7 then 'Error: connection refused at step ' || i end,
                    case when i % 7 = 0 then 'key-' || i end
             from generate_series(1, 1000000) i;
             analyze graphile_worker._private_jobs;",
        )
        .await
        .expect("insert a million jobs");
    // A page from the middle of the workers' order.
    let middle = client
        .query_one(
            "select id, priority, run_at from graphile_worker._private_jobs where is_available order by priority, run_at, id offset 400000 limit 1",
            &[],
        )
        .await
        .unwrap();
    let (id, priority, run_at): (i64, i16, chrono::DateTime<Utc>) =
        (middle.get(0), middle.get(1), middle.get(2));
    let deep =
        format!("/api/jobs?sort=next&after={id}_{priority}_{}", run_at.to_rfc3339().replace('+', "%2B"));
    let ui = Dashboard::start(db.utils(), Options::default()).await;
    let cases = [
        "/api/jobs",
        "/api/jobs?after=500000",
        "/api/jobs?sort=oldest",
        "/api/jobs?sort=next",
        &deep,
        "/api/jobs?state=ready",
        "/api/jobs?state=failed",
        "/api/jobs?state=permanently_failed",
        "/api/jobs?task=task_3",
        "/api/jobs?queue=q_b",
        "/api/jobs?key=key-700000",
        "/api/jobs?error=step%2099",
        "/jobs",
        "/jobs?state=failed",
        "/api/overview",
    ];
    for path in cases {
        let mut times = Vec::new();
        let mut count = 0;
        for _ in 0..5 {
            let start = std::time::Instant::now();
            let r = ui.get(path).await;
            times.push(start.elapsed());
            assert_eq!(r.status, 200, "{path}: {}", r.body);
            count = if path.starts_with("/api/jobs") { ids(&r.json()).len() } else { 0 };
        }
        times.sort();
        println!(
            "{path:<40} median {:>8.1} ms  (best {:.1} ms, {count} jobs)",
            times[2].as_secs_f64() * 1e3,
            times[0].as_secs_f64() * 1e3
        );
    }
}
