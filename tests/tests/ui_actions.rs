//! The dashboard that acts, against a real database: the roles of its tokens (a viewer
//! refused on every acting route, an operator on the admin's), adding a job (each field, and
//! a payload that is not JSON named), and running a cron item or a runtime schedule now.

use formica::WorkerUtils;
use formica_tests::dashboard::{Dashboard, Reply};
use formica_tests::TestDb;
use formica_ui::{Options, Role};
use serde_json::{json, Value};

const ADMIN: &str = "admin-token";
const OPERATOR: &str = "operator-token";
const VIEWER: &str = "viewer-token";

async fn dashboard(utils: &WorkerUtils) -> Dashboard {
    let tokens = vec![(Role::Operator, OPERATOR.to_owned()), (Role::Viewer, VIEWER.to_owned())];
    let crontab =
        formica::cron::parse("0 3 * * * nightly_task ?id=nightly&queue=night&priority=3 {\"full\": true}\n")
            .expect("a crontab");
    let options = Options { token: Some(ADMIN.into()), tokens, crontab: Some(crontab), ..Default::default() };
    Dashboard::start(utils.clone(), options).await
}

async fn act(ui: &Dashboard, token: &str, path: &str, body: Value) -> Reply {
    let bearer = format!("Bearer {token}");
    ui.request("POST", path, &[("x-formica-ui", "1"), ("authorization", &bearer)], Some(body)).await
}

/// Every acting route, with a body it takes, and the least role it needs.
fn routes(job: i64) -> Vec<(String, Value, Role)> {
    let operator = [
        ("/api/jobs".to_owned(), json!({ "task": "added" })),
        (format!("/api/jobs/{job}/run_now"), json!({})),
        (format!("/api/jobs/{job}/reschedule"), json!({ "priority": 5 })),
        (format!("/api/jobs/{job}/fail"), json!({})),
        (format!("/api/jobs/{job}/cancel"), json!({})),
        (format!("/api/jobs/{job}/remove"), json!({})),
        ("/api/jobs/bulk".to_owned(), json!({ "action": "retry", "filter": { "ids": [job] } })),
        ("/api/cron/nightly/run_now".to_owned(), json!({})),
        ("/api/flow/pause".to_owned(), json!({ "scope": "task", "name": "t" })),
        ("/api/flow/resume".to_owned(), json!({ "scope": "task", "name": "t" })),
        ("/api/workflows/1/cancel".to_owned(), json!({})),
        ("/api/workflows/1/retry".to_owned(), json!({})),
        ("/api/workflows/1/signal".to_owned(), json!({ "name": "go" })),
    ];
    let admin = [
        ("/api/workers/unlock".to_owned(), json!({ "worker_id": "gone" })),
        ("/api/flow/cap".to_owned(), json!({ "task": "t", "max": 1 })),
        ("/api/flow/uncap".to_owned(), json!({ "task": "t" })),
        ("/api/flow/limit".to_owned(), json!({ "task": "t", "max": 1, "period_ms": 1000 })),
        ("/api/flow/unlimit".to_owned(), json!({ "task": "t" })),
        ("/api/flow/fair".to_owned(), json!({ "task": "t", "per": "field", "argument": "customer" })),
        ("/api/flow/unfair".to_owned(), json!({ "task": "t" })),
        ("/api/schedules".to_owned(), json!({ "line": "@every 1h hourly" })),
        ("/api/schedules/hourly/remove".to_owned(), json!({})),
    ];
    let operator = operator.into_iter().map(|(path, body)| (path, body, Role::Operator));
    operator.chain(admin.into_iter().map(|(path, body)| (path, body, Role::Admin))).collect()
}

#[tokio::test]
async fn a_viewer_can_look_but_not_act_an_operator_cannot_change_how_the_queue_runs() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let job = utils.add_raw_job("t", json!({}), Default::default()).await.expect("a job").id;
    let ui = dashboard(&utils).await;
    let bearer = format!("Bearer {VIEWER}");
    for path in ["/", "/jobs", "/api/jobs", "/cron", "/flow", &format!("/jobs/{job}")] {
        let r = ui.request("GET", path, &[("authorization", &bearer)], None).await;
        assert_eq!(r.status, 200, "a viewer sees {path}: {}", r.body);
    }
    let seen = |token: &'static str| {
        let ui = &ui;
        async move {
            let bearer = format!("Bearer {token}");
            ui.request("GET", &format!("/jobs/{job}"), &[("authorization", &bearer)], None).await.body
        }
    };
    assert!(!seen(VIEWER).await.contains("data-action"), "a viewer's pages show no action");
    assert!(seen(VIEWER).await.contains(r#"<span class="badge">viewer</span>"#));
    assert!(seen(OPERATOR).await.contains(r#"data-action="/api/jobs/"#), "an operator's show the job's");
    let flow = |token: &'static str| {
        let ui = &ui;
        async move {
            let bearer = format!("Bearer {token}");
            ui.request("GET", "/flow", &[("authorization", &bearer)], None).await.body
        }
    };
    let operator_flow = flow(OPERATOR).await;
    assert!(operator_flow.contains("/api/flow/pause") && !operator_flow.contains("/api/flow/cap"));
    assert!(flow(ADMIN).await.contains("/api/flow/cap"), "an admin sees the cap's form");

    for (path, body, _) in routes(job) {
        let r = act(&ui, VIEWER, &path, body.clone()).await;
        assert_eq!(r.status, 403, "a viewer on {path}: {}", r.body);
        assert!(r.json()["error"].as_str().unwrap().contains("viewer"), "{}", r.body);
    }
    assert_eq!(
        db.count("select count(*) from graphile_worker._private_jobs").await,
        1,
        "a viewer changed nothing"
    );
    let held = "select count(*) from formica_graphile_worker.pauses";
    assert_eq!(db.count(held).await, 0);

    // The operator, then the admin, through every route: none is refused for its role.
    for (token, role) in [(OPERATOR, Role::Operator), (ADMIN, Role::Admin)] {
        for (path, body, needed) in routes(job) {
            let r = act(&ui, token, &path, body).await;
            if role >= needed {
                assert!(![401, 403].contains(&r.status), "{token} on {path}: {} {}", r.status, r.body);
            } else {
                assert_eq!(r.status, 403, "{token} on {path}: {}", r.body);
                assert!(r.json()["error"].as_str().unwrap().contains("needs admin"), "{}", r.body);
            }
        }
    }
    // What the operator did is done: its added job and its cron item's are there.
    let added =
        "select count(*) from graphile_worker.jobs where task_identifier in ('added', 'nightly_task')";
    assert_eq!(db.count(added).await, 4, "two added and two cron runs, by the operator and the admin");
    assert_eq!(db.count("select count(*) from formica_graphile_worker.caps").await, 0, "the admin uncapped");
}

#[tokio::test]
async fn a_job_is_added_with_each_field_and_a_bad_payload_is_named() {
    let db = TestDb::migrated().await;
    let ui = dashboard(&db.utils()).await;
    let body = json!({
        "task": "send_email",
        "payload": "{\"to\": \"a@example.com\"}",
        "queue": "mail",
        "run_at": "2030-01-31T09:30:00Z",
        "job_key": "welcome-a",
        "priority": -2,
        "max_attempts": 4,
    });
    let r = act(&ui, OPERATOR, "/api/jobs", body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let id = r.json()["job"]["id"].as_i64().expect("the job's id");
    let row = db
        .client()
        .await
        .query_one(
            "select tasks.identifier, jobs.payload::text, queues.queue_name, jobs.run_at = '2030-01-31T09:30:00Z', \
             jobs.key, jobs.priority, jobs.max_attempts from graphile_worker._private_jobs as jobs \
             join graphile_worker._private_tasks as tasks on tasks.id = jobs.task_id \
             left join graphile_worker._private_job_queues as queues on queues.id = jobs.job_queue_id where jobs.id = $1",
            &[&id],
        )
        .await
        .expect("the job is stored");
    let stored: (String, String, Option<String>, bool, Option<String>, i16, i16) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5), row.get(6));
    assert_eq!(
        stored,
        (
            "send_email".into(),
            r#"{"to":"a@example.com"}"#.into(),
            Some("mail".into()),
            true,
            Some("welcome-a".into()),
            -2,
            4
        )
    );

    for (body, named) in [
        (json!({ "task": "t", "payload": "{to: 1}" }), "the payload is not JSON"),
        (json!({ "task": "t", "run_at": "tomorrow" }), "run_at \"tomorrow\""),
        (json!({ "task": "  " }), "name the task"),
        (json!({ "task": "t", "max_attempts": 0 }), "max_attempts"),
    ] {
        let r = act(&ui, OPERATOR, "/api/jobs", body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        let error = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(error.contains(named), "{body}: {error}");
    }
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 1, "no bad job added");
    let page = ui.request("GET", "/jobs", &[("authorization", &format!("Bearer {OPERATOR}"))], None).await;
    assert!(page.body.contains(r#"id="add-job""#) && page.body.contains("Add a job of task {task}?"));
}

#[tokio::test]
async fn a_cron_item_and_a_runtime_schedule_run_now_with_their_payload_and_options() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    utils.put_schedule("@every 1h hourly ?max=2 {\"n\": 1}").await.expect("a schedule");
    let ui = dashboard(&utils).await;
    let r = act(&ui, OPERATOR, "/api/cron/nightly/run_now", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let job = &r.json()["job"];
    assert_eq!(
        (&job["task_identifier"], &job["queue_name"], &job["priority"], &job["payload"]["full"]),
        (&json!("nightly_task"), &json!("night"), &json!(3), &json!(true)),
        "{job}"
    );
    assert!(job["payload"]["_cron"]["ts"].is_string(), "as a slot would add it: {job}");
    let r = act(&ui, OPERATOR, "/api/cron/hourly/run_now", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let job = &r.json()["job"];
    assert_eq!(
        (&job["task_identifier"], &job["max_attempts"], &job["payload"]["n"]),
        (&json!("hourly"), &json!(2), &json!(1))
    );
    let r = act(&ui, OPERATOR, "/api/cron/nobody/run_now", json!({})).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 2);
    // The last slot of each is as it was: a run now is not a slot.
    assert_eq!(
        db.count(
            "select count(*) from graphile_worker._private_known_crontabs where last_execution is not null"
        )
        .await,
        0
    );
    let page = ui.request("GET", "/cron", &[("authorization", &format!("Bearer {OPERATOR}"))], None).await;
    assert!(
        page.body.contains("/api/cron/nightly/run_now") && page.body.contains("/api/cron/hourly/run_now")
    );
}

/// The stand-in replica is a second database on the same server with jobs of its own (a
/// streaming replica would be heavy for a test): what the pages show tells what they read.
#[tokio::test]
async fn the_pages_read_the_replica_and_actions_change_the_primary() {
    let primary = TestDb::migrated().await;
    let replica = TestDb::migrated().await;
    primary.utils().add_raw_job("on_primary", json!({}), Default::default()).await.unwrap();
    replica.utils().add_raw_job("on_replica", json!({}), Default::default()).await.unwrap();
    let options = Options { reads: Some(replica.utils()), ..Default::default() };
    let ui = Dashboard::start(primary.utils(), options).await;
    let listed = ui.get("/api/jobs").await.json();
    let tasks: Vec<&str> =
        listed["jobs"].as_array().unwrap().iter().map(|j| j["task_identifier"].as_str().unwrap()).collect();
    assert_eq!(tasks, ["on_replica"], "{listed}");
    let overview = ui.get("/api/overview").await.json();
    assert_eq!(overview["counts"][0]["task"], "on_replica", "{overview}");
    assert!(ui.get("/jobs").await.body.contains("on_replica"));
    let added = ui.action("/api/jobs", json!({ "task": "added" })).await;
    assert_eq!(added.status, 200, "{}", added.body);
    let count = "select count(*) from graphile_worker.jobs where task_identifier = 'added'";
    assert_eq!(
        (primary.count(count).await, replica.count(count).await),
        (1, 0),
        "the action changed the primary"
    );
}
