//! The dashboard's Workflows pages (docs/guide/dashboard.md): a diamond's jobs drawn as a
//! graph, each node with its job's state and an arrow from each job to its dependents;
//! Cancel and Retry go through `WorkerUtils`, and a read-only dashboard refuses them.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica::{WorkerUtils, Workflow, WorkflowJob};
use formica_tests::dashboard::Dashboard;
use formica_tests::TestDb;
use formica_ui::Options;
use serde_json::json;

/// The graph's node of `job` says `state` (its class and its label).
fn node<'a>(page: &'a str, job: &str) -> &'a str {
    let start = page.find(&format!(r#"data-job="{job}""#)).unwrap_or_else(|| panic!("no node {job}: {page}"));
    let end = start + page[start..].find("</g>").unwrap();
    &page[page[..start].rfind("<g ").unwrap()..end]
}

fn assert_node(page: &str, job: &str, state: &str) {
    let node = node(page, job);
    assert!(node.contains(&format!("node wf-{state}")), "{job} should be {state}: {node}");
}

/// The id of the job the dashboard should link node `name` of `workflow` to.
async fn job_id(utils: &WorkerUtils, workflow: i64, name: &str) -> i64 {
    let detail = utils.workflow(workflow).await.unwrap().unwrap();
    detail.jobs.iter().find(|j| j.name == name).unwrap().job_id.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workflow_page_draws_a_diamond_with_its_states_and_operates_it() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let (id, a) = formica_tests::workflows::diamond(&utils).await;
    let ui = Dashboard::start(utils.clone(), Options::default()).await;

    let list = ui.get("/workflows").await;
    assert_eq!(list.status, 200);
    assert!(list.body.contains(&format!(r#"<a href="/workflows/{id}">{id}</a>"#)), "{}", list.body);
    assert!(list.body.contains("wf-running") && list.body.contains("<td>4</td>"), "{}", list.body);
    assert!(ui.get("/").await.body.contains(r#"<a href="/workflows">Workflows</a>"#), "the nav links it");

    let page = ui.get(&format!("/workflows/{id}")).await;
    assert_eq!(page.status, 200);
    for (from, to) in [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")] {
        assert!(page.body.contains(&format!(r#"data-from="{from}" data-to="{to}""#)), "{from} → {to}");
    }
    assert_eq!(page.body.matches(r#"class="edge""#).count(), 4, "no other edge: {}", page.body);
    assert_node(&page.body, "A", "released");
    assert!(node(&page.body, "A").contains("released (ready)"), "{}", node(&page.body, "A"));
    for waiting in ["B", "C", "D"] {
        assert_node(&page.body, waiting, "waiting");
    }
    assert!(page.body.contains(&format!(r#"<a href="/jobs/{a}"><g class="node wf-released" data-job="A">"#)));
    assert!(!page.body.contains("Retry failed jobs"), "nothing failed yet");

    // A completes (as graphile-worker's workers complete: its row goes), B fails for good:
    // D, which would need B, is cancelled; C runs on.
    utils.complete_jobs(&[a]).await.unwrap();
    utils.resolve_workflows().await.unwrap();
    let b = job_id(&utils, id, "B").await;
    utils.permanently_fail_jobs(&[b], Some("no ink")).await.unwrap();
    utils.resolve_workflows().await.unwrap();
    let page = ui.get(&format!("/workflows/{id}")).await;
    assert_node(&page.body, "A", "completed");
    assert_node(&page.body, "B", "failed");
    assert_node(&page.body, "C", "released");
    assert_node(&page.body, "D", "cancelled");
    assert!(node(&page.body, "B").contains("no ink"), "the node's title has the error");
    assert!(page.body.contains("Retry failed jobs") && page.body.contains("Cancel workflow"));

    let read_only = Dashboard::start(utils.clone(), Options { read_only: true, ..Default::default() }).await;
    let shown = read_only.get(&format!("/workflows/{id}")).await;
    assert!(!shown.body.contains("Retry failed jobs") && !shown.body.contains("Cancel workflow"));
    for action in ["retry", "cancel"] {
        let r = read_only.action(&format!("/api/workflows/{id}/{action}"), json!({})).await;
        assert_eq!(r.status, 403, "a read-only dashboard refuses to {action}: {}", r.body);
    }
    assert_eq!(utils.workflow(id).await.unwrap().unwrap().summary.failed, 1, "nothing changed");

    let r = ui.action(&format!("/api/workflows/{id}/retry"), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!((&r.json()["rerun"], &r.json()["waiting"]), (&json!(["B"]), &json!(["D"])));
    let page = ui.get(&format!("/workflows/{id}")).await;
    assert_node(&page.body, "B", "released");
    assert_node(&page.body, "D", "waiting");

    let r = ui.action(&format!("/api/workflows/{id}/cancel"), json!({ "reason": "wrong order" })).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let detail = utils.workflow(id).await.unwrap().unwrap();
    assert_eq!(detail.summary.state, "cancelled");
    assert_eq!(detail.summary.cancel_reason.as_deref(), Some("wrong order"));
    let page = ui.get(&format!("/workflows/{id}")).await;
    assert!(page.body.contains("wrong order") && page.body.contains("wf-cancelled"), "{}", page.body);
    assert!(!page.body.contains("Cancel workflow"), "a cancelled workflow has nothing to cancel");
    let r = ui.action(&format!("/api/workflows/{id}/retry"), json!({})).await;
    assert_eq!(r.status, 409, "a cancelled workflow is not retried: {}", r.body);
    let r = ui.action("/api/workflows/999999/cancel", json!({})).await;
    assert_eq!(r.status, 404, "{}", r.body);

    let cancelled = ui.get("/workflows?state=cancelled").await;
    assert!(cancelled.body.contains(&format!(r#"href="/workflows/{id}""#)), "{}", cancelled.body);
    let running = ui.get("/api/workflows?state=running").await;
    assert_eq!(running.json(), json!([]), "the filter leaves it out");
    assert_eq!(ui.get("/api/workflows?state=sideways").await.status, 400, "an unknown state is refused");
    assert_eq!(ui.get("/workflows/999999").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_from_the_database_are_escaped_on_the_workflow_pages() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let evil = r#"<script>alert("x")</script>"#;
    let workflow = Workflow::new(evil)
        .job(WorkflowJob::raw(evil, evil, json!({})))
        .job(WorkflowJob::raw("after", "t", json!({})).depends_on([evil]));
    let id = utils.add_workflow(&workflow).await.unwrap().id;
    let ui = Dashboard::start(utils, Options::default()).await;
    for path in ["/workflows".to_owned(), format!("/workflows/{id}")] {
        let page = ui.get(&path).await;
        assert_eq!(page.status, 200);
        assert!(!page.body.contains("<script>alert"), "{path}: {}", page.body);
        assert!(
            page.body.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"),
            "{path}: {}",
            page.body
        );
    }
}
