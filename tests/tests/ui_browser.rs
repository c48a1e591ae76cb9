//! The dashboard in a real browser: headless Chromium driven through chromedriver
//! (WebDriver), both from Debian (`apt-get install chromium chromium-driver`, done by
//! `.ci/run`). Without them the test fails: it never skips.
//!
//! It loads the overview, filters to failed jobs, opens one, reads its whole error,
//! presses "Run now", confirms, and sees the job run; a payload and an error holding
//! markup stay text. Bulk actions confirm a dry run's count; a job added from the jobs page
//! is confirmed naming its task, and a payload that is not JSON is refused, named. With auto-refresh ticked, a new job appears without a page load. It saves screenshots of the overview and of the job page to
//! `target/ui-screenshots/`. The history page lists finished jobs by the same filters as the
//! jobs page, charts the last hour and day, and opens a finished job's runs. A health check
//! that is wrong shows as a banner on every page, and a job's page says why it is not running.

use chrono::{Duration as ChronoDuration, Utc};
use fantoccini::{Client, ClientBuilder, Locator};
use formica::{JobSpec, RescheduleJobOptions};
use formica_tests::dashboard::Dashboard;
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// chromedriver on a free loopback port, stopped when dropped.
struct Driver {
    url: String,
    _process: tokio::process::Child,
}

impl Driver {
    async fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut process = tokio::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start chromedriver ({e}): install Debian's chromium and chromium-driver packages"
                )
            });
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            if let Some(status) = process.try_wait().unwrap() {
                panic!("chromedriver exited at start: {status}");
            }
            assert!(Instant::now() < deadline, "chromedriver did not listen within 20 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Driver { url: format!("http://127.0.0.1:{port}"), _process: process }
    }

    async fn browser(&self) -> Client {
        let mut options = json!({
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000"]
        });
        if std::path::Path::new("/usr/bin/chromium").exists() {
            options["binary"] = json!("/usr/bin/chromium");
        }
        let mut caps = serde_json::Map::new();
        caps.insert("goog:chromeOptions".into(), options);
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("chromedriver could not start Chromium: {e}"))
    }
}

fn screenshots() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("create target/ui-screenshots");
    dir
}

async fn text(browser: &Client, css: &str) -> String {
    browser.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operate_a_failed_job_in_a_browser() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let later = Some(Utc::now() + ChronoDuration::hours(2));
    for n in 0..3 {
        let spec =
            JobSpec { run_at: later, queue_name: (n == 0).then(|| "invoices".into()), ..Default::default() };
        utils.add_raw_job("send_email", json!({ "n": n }), spec).await.unwrap();
    }
    let gave_up = utils.add_raw_job("build_report", json!({}), JobSpec::default()).await.unwrap();
    utils.permanently_fail_jobs(&[gave_up.id], Some("report template missing")).await.unwrap();
    let markup = "<script>window.pwned = 1</script>";
    let spec = JobSpec { run_at: later, ..Default::default() };
    let xss = utils.add_raw_job("render", json!({ "title": markup }), spec).await.unwrap();
    db.client()
        .await
        .execute(
            "update graphile_worker._private_jobs set attempts = 1, last_error = $2 where id = $1",
            &[&xss.id, &format!("bad template: <img src=x onerror=\"window.pwned = 2\"> {markup}")],
        )
        .await
        .unwrap();

    // The flaky task fails with a long, many-lined error until allowed to succeed.
    let error = format!(
        "Error: exit status 1\n{}stderr ends with: disk quota exceeded on /var/spool/formica",
        (1..=40).map(|i| format!("  at step {i}: copying chunk {i} of 40\n")).collect::<String>()
    );
    let allowed = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicUsize::new(0));
    let (allow, count, message) = (allowed.clone(), runs.clone(), error.clone());
    let worker = db
        .worker_options()
        .poll_interval(Duration::from_millis(200))
        .define_raw_job("flaky", move |_, _| {
            let (ok, message) = (allow.load(Ordering::SeqCst), message.clone());
            count.fetch_add(1, Ordering::SeqCst);
            async move {
                if ok {
                    Ok(())
                } else {
                    Err(message.into())
                }
            }
        })
        .init()
        .await
        .unwrap();
    let running = Running::spawn(&db.runtime, worker);
    let flaky = utils.add_raw_job("flaky", json!({ "order": 42 }), JobSpec::default()).await.unwrap();
    let failed_once = format!(
        "select count(*) from graphile_worker._private_jobs where id = {} and attempts = 1 and locked_at is null and last_error is not null",
        flaky.id
    );
    db.wait_for_count(&failed_once, 1, Duration::from_secs(20)).await;
    // As a long backoff would: the retry is an hour away.
    let in_an_hour =
        RescheduleJobOptions { run_at: Some(Utc::now() + ChronoDuration::hours(1)), ..Default::default() };
    utils.reschedule_jobs(&[flaky.id], &in_an_hour).await.unwrap();

    let ui = Dashboard::start(utils.clone(), formica_ui::Options::default()).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let dir = screenshots();

    // The overview counts the failed job.
    browser.goto(&ui.url("/")).await.unwrap();
    assert_eq!(text(&browser, "#total-failed").await, "2", "the flaky job and the one with markup");
    assert_eq!(text(&browser, "#total-permanently_failed").await, "1");
    std::fs::write(dir.join("overview.png"), browser.screenshot().await.unwrap()).unwrap();

    // Filter the jobs to failed ones through the form, and open the one listed.
    browser.goto(&ui.url("/jobs")).await.unwrap();
    let form = browser.form(Locator::Css("form.filters")).await.unwrap();
    form.set_by_name("state", "failed").await.unwrap();
    form.submit().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !browser.current_url().await.unwrap().as_str().contains("state=failed") {
        assert!(Instant::now() < deadline, "the filter form did not load the filtered list");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = browser.find_all(Locator::Css("tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 2, "the flaky job and the one with markup in its error");
    browser.find(Locator::LinkText(&flaky.id.to_string())).await.unwrap().click().await.unwrap();

    // The whole error, every line of it.
    let shown = text(&browser, "#last-error").await;
    assert_eq!(shown.trim_end(), error.trim_end());
    assert_eq!(text(&browser, "#state").await, "failed");
    std::fs::write(dir.join("job.png"), browser.screenshot().await.unwrap()).unwrap();

    // Run now, confirmed: the worker runs it and it is gone.
    allowed.store(true, Ordering::SeqCst);
    let runs_before = runs.load(Ordering::SeqCst);
    mark_page(&browser).await;
    browser.find(Locator::Css("button[data-action$='/run_now']")).await.unwrap().click().await.unwrap();
    browser.accept_alert().await.unwrap();
    // The page reloads itself once the action is answered: let it, or the refresh below
    // races that navigation.
    assert!(reloaded(&browser, Duration::from_secs(10)).await, "the page reloads after the action");
    let gone = format!("select count(*) from graphile_worker._private_jobs where id = {}", flaky.id);
    db.wait_for_count(&gone, 0, Duration::from_secs(20)).await;
    assert_eq!(runs.load(Ordering::SeqCst), runs_before + 1, "run once, by the button");
    // Gone from the queue, the job's page shows its finished run from the history.
    browser.refresh().await.unwrap();
    let page = text(&browser, "main").await;
    assert!(page.contains(&format!("Job {} is no longer in the queue", flaky.id)), "{page}");
    assert_eq!(text(&browser, "#outcome").await, "completed");

    // Markup in a payload or an error is shown as text and never runs.
    browser.goto(&ui.url(&format!("/jobs/{}", xss.id))).await.unwrap();
    assert!(text(&browser, "#payload").await.contains(markup));
    assert!(text(&browser, "#last-error").await.contains("<img src=x onerror="));
    let pwned = browser.execute("return window.pwned === undefined", vec![]).await.unwrap();
    assert_eq!(pwned, json!(true), "a value ran as script");

    browser.close().await.unwrap();
    running.stop(Duration::from_secs(10)).await;
    for name in ["overview.png", "job.png"] {
        let size = std::fs::metadata(dir.join(name)).unwrap().len();
        assert!(size > 1000, "{name} is a picture ({size} bytes)");
    }
}

/// The jobs page's bulk actions in a browser: "all matching this filter" confirms with the
/// count of a dry run and redrives exactly those jobs failed for good; ticked rows are acted
/// on alone. Then a job added from the page's form, confirmed naming its task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_actions_confirm_the_count_then_act_on_it() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let mut invoices = Vec::new();
    for n in 0..5 {
        invoices.push(utils.add_raw_job("invoice", json!({ "n": n }), JobSpec::default()).await.unwrap().id);
    }
    let emails = [
        utils.add_raw_job("email", json!({}), JobSpec::default()).await.unwrap().id,
        utils.add_raw_job("email", json!({}), JobSpec::default()).await.unwrap().id,
    ];
    utils.permanently_fail_jobs(&invoices, Some("smtp down")).await.unwrap();
    utils.permanently_fail_jobs(&emails, Some("smtp down")).await.unwrap();
    let ui = Dashboard::start(utils.clone(), formica_ui::Options::default()).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;

    browser.goto(&ui.url("/jobs?task=invoice&state=permanently_failed")).await.unwrap();
    let all = "button[data-bulk='retry'][data-filter]";
    mark_page(&browser).await;
    browser.find(Locator::Css(all)).await.unwrap().click().await.unwrap();
    let asked = confirmation(&browser).await;
    assert_eq!(asked, "Redrive 5 jobs matching this filter? Jobs a worker is running are left alone.");
    browser.accept_alert().await.unwrap();
    // The page reloads after acting: going on before it has would race the reload.
    assert!(reloaded(&browser, Duration::from_secs(10)).await, "the page reloads after acting");
    let retried =
        "select count(*) from graphile_worker.jobs where task_identifier = 'invoice' and attempts = 0";
    db.wait_for_count(retried, 5, Duration::from_secs(10)).await;

    // Tick one email and delete it: the other stays.
    browser.goto(&ui.url("/jobs?task=email")).await.unwrap();
    let picked = "button[data-bulk='delete'][data-picked]";
    browser.find(Locator::Css(picked)).await.unwrap().click().await.unwrap();
    let told = "document.getElementById('message').textContent === 'Tick the jobs to act on first.'";
    assert!(wait_for(&browser, told, Duration::from_secs(5)).await, "nothing ticked: said, nothing asked");
    click_when_there(&browser, &format!("input.pick[value='{}']", emails[0]), Duration::from_secs(5)).await;
    mark_page(&browser).await;
    browser
        .find(Locator::Css("button[data-bulk='delete'][data-picked]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let asked = confirmation(&browser).await;
    assert_eq!(asked, "Delete 1 ticked jobs? Jobs a worker is running are left alone.");
    browser.accept_alert().await.unwrap();
    assert!(reloaded(&browser, Duration::from_secs(10)).await, "the page reloads after acting");
    let left = format!("select count(*) from graphile_worker._private_jobs where id = {}", emails[0]);
    db.wait_for_count(&left, 0, Duration::from_secs(10)).await;
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 6);

    // Add a job: its confirmation names the task; a payload that is not JSON is refused,
    // named on the page, and nothing is added; corrected, the job is added.
    browser.find(Locator::Css("details > summary")).await.unwrap().click().await.unwrap();
    let field = |name: &'static str| format!("#add-job [name='{name}']");
    browser.find(Locator::Css(&field("task"))).await.unwrap().send_keys("mailer").await.unwrap();
    let payload = browser.find(Locator::Css(&field("payload"))).await.unwrap();
    payload.send_keys("{to: 1}").await.unwrap();
    let add = "button[data-action='/api/jobs']";
    browser.find(Locator::Css(add)).await.unwrap().click().await.unwrap();
    assert_eq!(confirmation(&browser).await, "Add a job of task mailer? It runs from run_at (now if empty).");
    browser.accept_alert().await.unwrap();
    let refused = "document.getElementById('message').textContent.startsWith('the payload is not JSON')";
    assert!(wait_for(&browser, refused, Duration::from_secs(5)).await, "the bad payload is named");
    let mailers = "select count(*) from graphile_worker.jobs where task_identifier = 'mailer'";
    assert_eq!(db.count(mailers).await, 0);
    payload.clear().await.unwrap();
    payload.send_keys(r#"{"to": 1}"#).await.unwrap();
    browser.find(Locator::Css(add)).await.unwrap().click().await.unwrap();
    confirmation(&browser).await;
    browser.accept_alert().await.unwrap();
    db.wait_for_count(mailers, 1, Duration::from_secs(10)).await;
    browser.close().await.unwrap();
}

/// The text of the confirmation the page asks, within 10 s.
async fn confirmation(browser: &Client) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match browser.get_alert_text().await {
            Ok(text) => return text,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("no confirmation: {e}"),
        }
    }
}

/// Polls `script` (a JavaScript expression) until it is true, within `within`.
/// Click the element `css` finds, trying again while it is not there (the rows may be
/// redrawn in place, as the page's auto-refresh does) for up to `within`.
async fn click_when_there(browser: &Client, css: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let clicked = match browser.find(Locator::Css(css)).await {
            Ok(element) => element.click().await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match clicked {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => panic!("could not click {css}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Marks the page loaded now, so that [`reloaded`] can tell when another load replaced it.
async fn mark_page(browser: &Client) {
    browser.execute("window.formicaMarked = true", vec![]).await.unwrap();
}

/// Whether the page marked by [`mark_page`] was replaced by a fully loaded one within
/// `within` (a script run while the page changes may fail: that is "not yet").
async fn reloaded(browser: &Client, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let script = "return !window.formicaMarked && document.readyState === 'complete'";
    while Instant::now() < deadline {
        if let Ok(done) = browser.execute(script, vec![]).await {
            if done == json!(true) {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn wait_for(browser: &Client, script: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        let done = browser.execute(&format!("return Boolean({script})"), vec![]).await.unwrap();
        if done == json!(true) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_refresh_shows_new_jobs_without_a_page_load() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    utils.add_raw_job("first_task", json!({}), JobSpec::default()).await.unwrap();
    // Read-only: looking is all it does, and refreshing is looking.
    let options = formica_ui::Options { read_only: true, ..Default::default() };
    let ui = Dashboard::start(utils.clone(), options).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let main_has = |task: &str| format!("document.querySelector('main').textContent.includes('{task}')");

    browser.goto(&ui.url("/jobs")).await.unwrap();
    let toggle = browser.find(Locator::Css("#auto-refresh")).await.unwrap();
    assert_eq!(toggle.prop("checked").await.unwrap().as_deref(), Some("false"), "off until asked");
    toggle.click().await.unwrap();
    browser.execute("window.__marker = 1", vec![]).await.unwrap();
    utils.add_raw_job("second_task", json!({}), JobSpec::default()).await.unwrap();
    assert!(wait_for(&browser, &main_has("second_task"), Duration::from_secs(10)).await, "refreshed");
    let marker = browser.execute("return window.__marker", vec![]).await.unwrap();
    assert_eq!(marker, json!(1), "the page was not loaded again");
    assert_eq!(browser.find_all(Locator::Css("main")).await.unwrap().len(), 1);

    // While a filter field has focus, the page waits: a person's typing is never lost.
    browser.find(Locator::Css("input[name=task]")).await.unwrap().click().await.unwrap();
    utils.add_raw_job("third_task", json!({}), JobSpec::default()).await.unwrap();
    assert!(!wait_for(&browser, &main_has("third_task"), Duration::from_secs(5)).await, "waited");
    let focused = browser.execute("return document.activeElement.name", vec![]).await.unwrap();
    assert_eq!(focused, json!("task"), "the field keeps its focus");
    browser.execute("document.activeElement.blur()", vec![]).await.unwrap();
    assert!(wait_for(&browser, &main_has("third_task"), Duration::from_secs(10)).await, "then refreshed");
    assert_eq!(browser.execute("return window.__marker", vec![]).await.unwrap(), json!(1));

    // The choice is remembered on the next page, which refreshes too.
    browser.goto(&ui.url("/")).await.unwrap();
    let toggle = browser.find(Locator::Css("#auto-refresh")).await.unwrap();
    assert_eq!(toggle.prop("checked").await.unwrap().as_deref(), Some("true"), "remembered");
    browser.execute("window.__marker = 2", vec![]).await.unwrap();
    utils.add_raw_job("fourth_task", json!({}), JobSpec::default()).await.unwrap();
    assert!(
        wait_for(
            &browser,
            "document.getElementById('total-ready').textContent === '4'",
            Duration::from_secs(10)
        )
        .await
    );
    assert_eq!(browser.execute("return window.__marker", vec![]).await.unwrap(), json!(2));

    // Off, the page stays as it was.
    browser.find(Locator::Css("#auto-refresh")).await.unwrap().click().await.unwrap();
    utils.add_raw_job("fifth_task", json!({}), JobSpec::default()).await.unwrap();
    assert!(
        !wait_for(
            &browser,
            "document.getElementById('total-ready').textContent === '5'",
            Duration::from_secs(5)
        )
        .await
    );
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_page_lists_filters_and_charts_finished_jobs() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let once = JobSpec { max_attempts: Some(1), ..Default::default() };
    for n in 0..7 {
        utils.add_raw_job("invoice", json!({ "n": n, "fail": n >= 5 }), once.clone()).await.unwrap();
    }
    let worker = db.worker_options().define_raw_job("invoice", |_, payload| async move {
        match payload["fail"].as_bool() {
            Some(true) => Err(format!("no customer <b>{}</b>", payload["n"]).into()),
            _ => Ok(()),
        }
    });
    let running = Running::listening(&db.runtime, worker).await;
    db.wait_for_count("select count(*) from formica_graphile_worker.job_history", 7, Duration::from_secs(20))
        .await;
    running.stop(Duration::from_secs(10)).await;

    let ui = Dashboard::start(utils.clone(), formica_ui::Options::default()).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;

    // The overview counts the last hour from the history.
    browser.goto(&ui.url("/")).await.unwrap();
    let hour = text(&browser, "#history-hour").await;
    assert!(hour.contains("5 completed, 2 failed, 0 cancelled"), "{hour}");

    // Every finished job listed, and charted: 5 completed and 2 failed, in bars.
    browser.goto(&ui.url("/history")).await.unwrap();
    assert_eq!(browser.find_all(Locator::Css("tbody tr")).await.unwrap().len(), 7);
    for chart in ["#chart-hour", "#chart-day"] {
        assert_eq!(text(&browser, &format!("{chart} .completed-count")).await, "5");
        assert_eq!(text(&browser, &format!("{chart} .failed-count")).await, "2");
        let bars = browser.find_all(Locator::Css(&format!("{chart} svg rect.failed"))).await.unwrap();
        assert!(!bars.is_empty(), "{chart} draws the failures");
    }
    std::fs::write(screenshots().join("history.png"), browser.screenshot().await.unwrap()).unwrap();

    // Filtered to failures through the form, as the jobs page is.
    let form = browser.form(Locator::Css("form.filters")).await.unwrap();
    form.set_by_name("outcome", "failed").await.unwrap();
    form.submit().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !browser.current_url().await.unwrap().as_str().contains("outcome=failed") {
        assert!(Instant::now() < deadline, "the filter form did not load the filtered list");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = browser.find_all(Locator::Css("tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 2);
    // A failure's runs: its error as text, markup and all.
    rows[0].find(Locator::Css("a")).await.unwrap().click().await.unwrap();
    assert_eq!(text(&browser, "#outcome").await, "failed");
    assert!(text(&browser, "main").await.contains("no customer <b>"), "markup stays text");
    browser.close().await.unwrap();
}

/// While a health check is wrong, every page opens with a banner naming it: here the
/// jobs table's main index dropped (schema drift), on the overview and the jobs page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_banner_on_every_page_names_the_health_check_that_is_wrong() {
    let db = TestDb::migrated().await;
    db.client().await.batch_execute("drop index graphile_worker.jobs_main_index").await.unwrap();
    let ui = Dashboard::start(db.utils(), formica_ui::Options::default()).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    for path in ["/", "/jobs"] {
        browser.goto(&ui.url(path)).await.unwrap();
        let banner = text(&browser, "#health").await;
        assert!(banner.contains("Queue health: critical"), "{path}: {banner}");
        assert!(banner.contains("schema (critical): missing index jobs_main_index"), "{path}: {banner}");
    }
    browser.close().await.unwrap();
}

/// A job's page says why it is not running: here its task paused, and no worker running
/// it, each with its evidence, as the browser shows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_s_page_says_why_it_is_not_running() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let job = utils.add_raw_job("send_email", json!({}), JobSpec::default()).await.unwrap();
    utils
        .pause(&formica::controls::Pause::task("send_email"), Some("provider down"), Some("alice"))
        .await
        .unwrap();
    let ui = Dashboard::start(utils, formica_ui::Options::default()).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    browser.goto(&ui.url(&format!("/jobs/{}", job.id))).await.unwrap();
    let why = text(&browser, "#why").await;
    assert!(
        why.contains(r#"task "send_email" is paused by alice"#) && why.contains("provider down"),
        "{why}"
    );
    assert!(text(&browser, "#why li.no_worker").await.contains("send_email"), "{why}");
    browser.close().await.unwrap();
}

/// The guide's screenshots (`docs/ui-*.png`, shown by docs/guide/dashboard.md), of a demo
/// queue: jobs in every state, a paused queue holding ready jobs, a capped task, a failed
/// job with a long error, a day of history, a live worker running a job, one that stopped
/// and one that died holding a job. `scripts/ui-screenshots` runs it, writing into `docs/`
/// (`FORMICA_SCREENSHOTS`; else `target/ui-screenshots/`); each picture stays under 200 KB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes the guide's screenshots: scripts/ui-screenshots"]
async fn regenerate_the_guide_s_screenshots() {
    use formica::controls::{Control, Pause};
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    // A day of history: a few jobs finished each hour, more in the last one, some failed.
    client
        .batch_execute(
            "insert into formica_graphile_worker.job_history (job_id, task_identifier, queue_name, payload, attempts, max_attempts, outcome, last_error, added_at, started_at, finished_at)
             select 100000 + n, (array['send_email', 'build_report', 'import_orders'])[1 + n % 3], null, '{}',
               1 + (n % 5 = 0)::int, 25, case when n % 13 = 0 then 'failed' else 'completed' end,
               case when n % 13 = 0 then 'Error: upstream answered 503' end,
               at - (0.2 + random() * 2) * interval '1 second', at, at
             from generate_series(1, 600) as n,
               lateral (select now() - case when n <= 180 then random() * 3600 else random() ^ 2 * 86000 end
                 * interval '1 second' as at) as t
             order by at",
        )
        .await
        .unwrap();
    // The stopped worker: a real one, stopped cleanly.
    let stopping = Running::spawn(&db.runtime, db.worker_options().init().await.unwrap());
    db.wait_for_count("select count(*) from formica_graphile_worker.leases", 1, Duration::from_secs(10))
        .await;
    stopping.stop(Duration::from_secs(10)).await;

    let later = Some(Utc::now() + ChronoDuration::minutes(40));
    for n in 0..4 {
        let spec = JobSpec { queue_name: Some("outbox".into()), ..Default::default() };
        utils.add_raw_job("send_email", json!({ "to": format!("user{n}@example.com") }), spec).await.unwrap();
    }
    for n in 0..3 {
        let spec = JobSpec { run_at: later, ..Default::default() };
        utils.add_raw_job("build_report", json!({ "month": n + 1 }), spec).await.unwrap();
    }
    let spec = JobSpec { job_key: Some("orders-2026-12-05".into()), ..Default::default() };
    let failed =
        utils.add_raw_job("import_orders", json!({ "day": "2026-12-05", "shop": 42 }), spec).await.unwrap();
    let error = "Error: import of shop 42 failed: the payments API answered 429 Too Many Requests after 3 retries (retry-after: 120 s); 1,204 of 5,310 orders imported, resuming from order 1,205 on the next attempt\n    at fetchPage (import_orders.rs:88)\n    at importDay (import_orders.rs:41)\nCaused by: rate limit of 100 requests a minute exceeded for API key …f3a9";
    client
        .execute(
            "update graphile_worker._private_jobs set attempts = 3, last_error = $2, run_at = now() + interval '8 minutes', created_at = now() - interval '26 minutes', updated_at = now() - interval '2 minutes' where id = $1",
            &[&failed.id, &error],
        )
        .await
        .unwrap();
    let gave_up =
        utils.add_raw_job("build_report", json!({ "month": 11 }), JobSpec::default()).await.unwrap();
    utils.permanently_fail_jobs(&[gave_up.id], Some("Error: template monthly.html missing")).await.unwrap();
    // The dead worker: its lease lapsed with a job held.
    let held = utils
        .add_raw_job("import_orders", json!({ "day": "2026-12-04", "shop": 7 }), JobSpec::default())
        .await
        .unwrap();
    formica_tests::spoiled::lease(&db, "formica-7f3c2a91d04e5b68", -20).await;
    formica_tests::spoiled::lock(&db, held.id, "formica-7f3c2a91d04e5b68").await;
    client
        .execute(
            "update formica_graphile_worker.leases set host = 'worker-2', pid = 4121, version = '0.1.0', started_at = now() - interval '3 hours', heartbeat_at = now() - interval '30 seconds' where worker_id = 'formica-7f3c2a91d04e5b68'",
            &[],
        )
        .await
        .unwrap();
    utils.pause(&Pause::queue("outbox"), Some("SMTP provider down"), Some("ops")).await.unwrap();
    utils.set_control(&Control::cap("import_orders", 1), Some("ops")).await.unwrap();
    // A ready import waits for the cap: the dead worker holds the one import it allows.
    utils
        .add_raw_job("import_orders", json!({ "day": "2026-12-06", "shop": 9 }), JobSpec::default())
        .await
        .unwrap();

    // The live worker, running a video until the end.
    let release = Arc::new(AtomicBool::new(false));
    let go = release.clone();
    let options = db.worker_options().define_raw_job("encode_video", move |ctx: formica::JobContext, _| {
        let (go, rt) = (go.clone(), ctx.utils().pool().runtime().clone());
        Box::pin(async move {
            while !go.load(Ordering::SeqCst) {
                formica_tests::sleep(rt.as_ref(), Duration::from_millis(50)).await;
            }
            Ok(())
        })
    });
    let running = Running::listening(&db.runtime, options).await;
    utils.add_raw_job("encode_video", json!({ "video": 981 }), JobSpec::default()).await.unwrap();
    db.wait_for_count(
        "select count(*) from graphile_worker.jobs where task_identifier = 'encode_video' and locked_at is not null",
        1,
        Duration::from_secs(10),
    )
    .await;

    let ui = Dashboard::start(utils.clone(), formica_ui::Options::default()).await;
    // The overview counts completions since its first sample: a few, seconds after it.
    for n in 0..6 {
        let done =
            utils.add_raw_job("send_receipt", json!({ "order": n }), JobSpec::default()).await.unwrap();
        utils.complete_jobs(&[done.id]).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let driver = Driver::start().await;
    let browser = driver.browser().await;
    let dir = std::env::var_os("FORMICA_SCREENSHOTS").map(PathBuf::from).unwrap_or_else(screenshots);
    let pages = [
        ("ui-overview.png", "/".to_owned()),
        ("ui-job.png", format!("/jobs/{}", failed.id)),
        ("ui-jobs.png", "/jobs".to_owned()),
        ("ui-flow.png", "/flow".to_owned()),
        ("ui-history.png", "/history".to_owned()),
        ("ui-workers.png", "/workers".to_owned()),
    ];
    for (name, path) in pages {
        browser.goto(&ui.url(&path)).await.unwrap();
        let png = browser.screenshot().await.unwrap();
        assert!(png.len() < 200_000, "{name}: {} bytes", png.len());
        std::fs::write(dir.join(name), png).unwrap();
    }
    browser.close().await.unwrap();
    release.store(true, Ordering::SeqCst);
    running.stop(Duration::from_secs(10)).await;
}
