//! The dashboard's Flow page (docs/guide/flow-control.md, docs/guide/fairness.md,
//! docs/guide/bounded-queues.md, docs/guide/priority-aging.md): pausing, resuming, capping,
//! making fair, bounding, aging and lifting go through `WorkerUtils`, and the page shows each
//! control in force with its reason, author and time, and the ready jobs it holds back (why
//! they wait).

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica::controls::{Control, ControlKind, Partition, Pause};
use formica::JobSpec;
use formica_tests::dashboard::Dashboard;
use formica_tests::TestDb;
use formica_ui::Options;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_page_pauses_caps_and_shows_why_jobs_wait() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    for n in 0..3 {
        utils.add_raw_job("send_email", json!({ "n": n }), JobSpec::default()).await.unwrap();
    }
    let ui = Dashboard::start(utils.clone(), Options::default()).await;
    let r = ui
        .action(
            "/api/flow/pause",
            json!({ "scope": "task", "name": "send_email", "reason": "provider down" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let paused = utils.paused().await.unwrap();
    assert_eq!(
        (paused[0].pause(), paused[0].paused_by.as_str()),
        (Some(Pause::task("send_email")), "dashboard")
    );
    let r = ui
        .action(
            "/api/flow/cap",
            json!({ "task": "import", "max": 2, "per": "field", "argument": "customer" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let cap = Control::cap("import", 2).per(Partition::Field("customer".into()));
    assert_eq!(utils.controls().await.unwrap()[0].control, cap);

    let page = ui.get("/flow").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("paused: task:send_email"), "{}", page.body);
    assert!(page.body.contains("provider down") && page.body.contains("dashboard"));
    assert!(page.body.contains("<td>3</td>"), "the 3 ready jobs it holds back: {}", page.body);
    assert!(page.body.contains("capped: import at most 2 running per field customer"), "{}", page.body);

    // A bad value is the request's fault, named, not a database error.
    for (body, expected) in [
        (json!({ "task": " ", "max": 1 }), r#"a cap needs a task identifier, not \"\""#),
        (json!({ "task": "x", "max": 0 }), r#"max 0: the cap of \"x\" takes 1 to"#),
        (json!({ "task": "x", "max": 1, "per": "field" }), "per field needs its payload field"),
    ] {
        let r = ui.action("/api/flow/cap", body).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body.contains(expected) && !r.body.contains("database error"), "{}", r.body);
    }
    let r = ui.action("/api/flow/pause", json!({ "scope": "task", "name": " " })).await;
    assert_eq!(r.status, 400, "a pause names what it pauses: {}", r.body);
    let r = ui.action("/api/flow/resume", json!({ "scope": "task", "name": "send_email" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(utils.paused().await.unwrap().is_empty());
    let r = ui.action("/api/flow/resume", json!({ "scope": "task", "name": "send_email" })).await;
    assert_eq!(r.status, 409, "resuming what is not paused: {}", r.body);
    let r = ui.action("/api/flow/uncap", json!({ "task": "import" })).await;
    assert_eq!(r.status, 409, "the whole task is not capped, only per customer: {}", r.body);
    let r = ui
        .action("/api/flow/uncap", json!({ "task": "import", "per": "field", "argument": "customer" }))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(utils.controls().await.unwrap().is_empty());

    let read_only = Dashboard::start(utils.clone(), Options { read_only: true, ..Default::default() }).await;
    let r = read_only.action("/api/flow/pause", json!({ "scope": "all" })).await;
    assert_eq!(r.status, 403, "a read-only dashboard refuses to pause: {}", r.body);
    assert!(utils.paused().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_page_rate_limits_and_says_why_jobs_wait() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    for n in 0..2 {
        utils.add_raw_job("send_email", json!({ "n": n }), JobSpec::default()).await.unwrap();
    }
    let ui = Dashboard::start(utils.clone(), Options::default()).await;
    let r =
        ui.action("/api/flow/limit", json!({ "task": "send_email", "max": 100, "period_ms": 60_000 })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let limit = Control::rate_limit("send_email", 100, 60_000);
    let limits = utils.controls().await.unwrap();
    assert_eq!((&limits[0].control, limits[0].set_by.as_str()), (&limit, "dashboard"));
    let page = ui.get("/flow").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("rate limited: send_email 100/min"), "{}", page.body);
    assert!(page.body.contains("<td>2</td>"), "the 2 ready jobs it may hold back: {}", page.body);
    let r =
        ui.action("/api/flow/limit", json!({ "task": "x", "max": 1, "period_ms": 1, "per": "nope" })).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = ui.action("/api/flow/limit", json!({ "task": "x", "max": 1, "period_ms": 0 })).await;
    assert_eq!(r.status, 400, "a bad value is the request's fault: {}", r.body);
    assert!(r.body.contains(r#"period_ms 0: the rate limit of \"x\" takes 1 to"#), "{}", r.body);
    assert_eq!(utils.controls().await.unwrap().len(), 1, "nothing more was stored");
    let r = ui.action("/api/flow/unlimit", json!({ "task": "send_email" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(utils.controls().await.unwrap().iter().all(|c| c.control.kind() != ControlKind::RateLimit));
    let r = ui.action("/api/flow/unlimit", json!({ "task": "send_email" })).await;
    assert_eq!(r.status, 409, "lifting what is not limited: {}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_page_sets_shows_and_lifts_an_aging() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    for n in 0..3 {
        utils.add_raw_job("report", json!({ "n": n }), JobSpec::default()).await.unwrap();
    }
    let ui = Dashboard::start(utils.clone(), Options::default()).await;
    let body = json!({ "task": "report", "every_ms": 60_000, "step": 2, "best": -10 });
    let r = ui.action("/api/flow/age", body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let agings = utils.agings().await.unwrap();
    let aging = formica::Aging::new("report", chrono::Duration::minutes(1), 2, -10);
    assert_eq!((&agings[0].aging, agings[0].set_by.as_str()), (&aging, "dashboard"));
    let page = ui.get("/flow").await;
    assert!(page.body.contains("report -2/1min to -10"), "{}", page.body);
    assert!(page.body.contains("<td>3</td>"), "its 3 ready jobs: {}", page.body);
    let r = ui.action("/api/flow/age", json!({ "task": "x", "every_ms": 1_000, "step": 0, "best": 0 })).await;
    assert_eq!(r.status, 400, "a bad value is the request's fault: {}", r.body);
    assert!(r.body.contains("step 0"), "{}", r.body);
    let r = ui.action("/api/flow/unage", json!({ "task": "report" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(utils.agings().await.unwrap().is_empty());
    let r = ui.action("/api/flow/unage", json!({ "task": "report" })).await;
    assert_eq!(r.status, 409, "lifting what is not aged: {}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_page_bounds_a_task_and_an_add_over_it_is_a_conflict() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let ui = Dashboard::start(utils.clone(), Options::default()).await;
    let bound = json!({ "task": "import", "max": 1, "wait_ms": 0, "per": "field", "argument": "customer" });
    let r = ui.action("/api/flow/bound", bound).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("import waiting<=1 per field customer"), "{}", r.body);
    let set = utils.controls().await.unwrap();
    let want = Control::bound("import", 1, 0).per(Partition::Field("customer".into()));
    assert_eq!((&set[0].control, set[0].set_by.as_str()), (&want, "dashboard"));
    let page = ui.get("/flow").await;
    assert!(
        page.body.contains("bounded (adds refused over it): import waiting&lt;=1 per field customer"),
        "{}",
        page.body
    );
    assert!(page.body.contains(r#"id="bound""#), "the form to set a bound: {}", page.body);
    utils.add_raw_job("import", json!({ "customer": "c1" }), JobSpec::default()).await.unwrap();
    let r = ui.action("/api/jobs", json!({ "task": "import", "payload": r#"{"customer": "c1"}"# })).await;
    assert_eq!(r.status, 409, "an add over the bound: {}", r.body);
    assert!(r.body.contains("queue full"), "{}", r.body);
    let r = ui.action("/api/flow/unbound", json!({ "task": "import" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(utils.controls().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_page_makes_a_task_fair_and_lifts_one_of_its_several_controls() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let ui = Dashboard::start(utils.clone(), Options::default()).await;
    let body =
        json!({ "task": "import", "per": "field", "argument": "customer", "weights": "acme=3, beta=2" });
    let r = ui.action("/api/flow/fair", body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = ui.action("/api/flow/cap", json!({ "task": "import", "max": 20 })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = ui
        .action(
            "/api/flow/cap",
            json!({ "task": "import", "max": 1, "per": "field", "argument": "customer" }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let fair =
        Control::fair("import", Partition::Field("customer".into())).weighted("acme", 3).weighted("beta", 2);
    let controls: Vec<Control> = utils.controls().await.unwrap().into_iter().map(|c| c.control).collect();
    assert_eq!(controls.len(), 3, "{controls:?}");
    assert!(controls.contains(&fair), "{controls:?}");
    let page = ui.get("/flow").await;
    assert!(page.body.contains("fair: import fair per field customer (acme×3, beta×2)"), "{}", page.body);
    assert!(
        page.body.contains("capped: import at most 20 running<")
            && page.body.contains("at most 1 running per field customer")
    );
    for (body, expected) in [
        (
            json!({ "task": "x", "per": "field", "argument": "c", "weights": "acme" }),
            "weight \\\"acme\\\": tenant=n",
        ),
        (json!({ "task": "x", "per": "field", "argument": "c", "weights": "acme=0" }), "weight 0 of tenant"),
        (json!({ "task": "x", "per": "", "argument": "" }), "needs a partition"),
    ] {
        let r = ui.action("/api/flow/fair", body).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body.contains(expected), "{expected}: {}", r.body);
    }
    // The whole task's cap lifted, the one per customer and fairness stay.
    let r = ui.action("/api/flow/uncap", json!({ "task": "import" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let left: Vec<ControlKind> = utils.controls().await.unwrap().iter().map(|c| c.control.kind()).collect();
    assert_eq!(left, vec![ControlKind::Cap, ControlKind::Fair]);
    let r = ui.action("/api/flow/unfair", json!({ "task": "import" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(utils.controls().await.unwrap().len(), 1);
}
