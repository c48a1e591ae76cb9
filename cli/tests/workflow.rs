//! `formica workflows` and `formica workflow show|cancel|retry|delete|signal`: a diamond's
//! workflow is listed with its state and counts, shown job by job with what each depends on,
//! retried after a job fails for good, and cancelled; mistakes are refused; deleting an
//! unfinished one is refused unless forced; a signal is sent (then again, for nobody, to no
//! workflow) and what a job waits for is shown.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use serde_json::{json, Value};

use crate::common;

/// The state of each job of `shown` (`formica workflow show --json`), by name.
fn states(shown: &Value) -> Vec<(String, String)> {
    let jobs = shown["jobs"].as_array().unwrap();
    jobs.iter().map(|j| (j["name"].as_str().unwrap().into(), j["state"].as_str().unwrap().into())).collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_are_listed_shown_retried_and_cancelled_from_the_command_line() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let (id, a) = formica_tests::workflows::diamond(&utils).await;
    let id_text = id.to_string();

    let listed = common::json(&db.url, &["workflows"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let w = &listed[0];
    assert_eq!((&w["id"], &w["name"], &w["state"]), (&json!(id), &json!("diamond"), &json!("running")));
    assert_eq!((&w["total"], &w["released"], &w["waiting"]), (&json!(4), &json!(1), &json!(3)));
    assert_eq!(common::json(&db.url, &["workflows", "--state", "completed"]), json!([]));
    let table = common::ok(&db.url, &["workflows"]);
    assert!(table.starts_with("id  name") && table.contains("diamond  running"), "{table}");

    let shown = common::json(&db.url, &["workflow", "show", &id_text]);
    assert_eq!(
        states(&shown),
        pairs(&[("A", "released"), ("B", "waiting"), ("C", "waiting"), ("D", "waiting")])
    );
    assert_eq!(shown["jobs"][0]["job_id"], json!(a));
    assert_eq!(shown["jobs"][0]["job_state"], "ready");
    assert_eq!(shown["jobs"][3]["depends_on"], json!(["B", "C"]));
    assert_eq!(shown["jobs"][1]["task"], "step_B");

    utils.complete_jobs(&[a]).await.unwrap();
    utils.resolve_workflows().await.unwrap();
    let b = utils.workflow(id).await.unwrap().unwrap().jobs[1].job_id.unwrap();
    utils.permanently_fail_jobs(&[b], Some("no ink")).await.unwrap();
    utils.resolve_workflows().await.unwrap();
    let shown = common::json(&db.url, &["workflow", "show", &id_text]);
    assert_eq!(
        states(&shown),
        pairs(&[("A", "completed"), ("B", "failed"), ("C", "released"), ("D", "cancelled")])
    );
    assert_eq!(
        (&shown["jobs"][1]["last_error"], &shown["jobs"][1]["attempts"]),
        (&json!("no ink"), &json!(25))
    );
    let text = common::ok(&db.url, &["workflow", "show", &id_text]);
    assert!(text.contains("state      running") && text.contains("no ink"), "{text}");
    assert!(text.contains("B, C"), "D's dependencies: {text}");

    let retried = common::json(&db.url, &["workflow", "retry", &id_text]);
    assert_eq!(retried, json!({ "id": id, "rerun": ["B"], "waiting": ["D"] }));
    let shown = common::json(&db.url, &["workflow", "show", &id_text]);
    assert_eq!(states(&shown)[1..], pairs(&[("B", "released"), ("C", "released"), ("D", "waiting")]));

    let cancelled = common::json(&db.url, &["workflow", "cancel", &id_text, "--reason", "wrong order"]);
    assert_eq!((&cancelled["waiting"], cancelled["failed"].as_array().unwrap().len()), (&json!(1), 2));
    let listed = common::json(&db.url, &["workflows", "--state", "cancelled"]);
    assert_eq!((&listed[0]["id"], &listed[0]["cancel_reason"]), (&json!(id), &json!("wrong order")));
    let again = common::formica(&db.url, &["workflow", "retry", &id_text]);
    assert!(!again.status.success(), "a cancelled workflow is not retried");

    let missing = common::formica(&db.url, &["workflow", "show", "999999"]);
    assert!(
        !missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("no workflow 999999")
    );
    let wrong = common::formica(&db.url, &["workflows", "--state", "sideways"]);
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(!wrong.status.success() && stderr.contains("running, completed, failed, cancelled"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_delete_refuses_an_unfinished_workflow_unless_forced() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let (id, _) = formica_tests::workflows::diamond(&utils).await;
    let id_text = id.to_string();
    let refused = common::formica(&db.url, &["workflow", "delete", &id_text]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("is not finished (3 jobs waiting, 1 released)"),
        "{stderr}"
    );
    assert_eq!(common::json(&db.url, &["workflows"]).as_array().unwrap().len(), 1, "nothing deleted");
    let forced = common::json(&db.url, &["workflow", "delete", &id_text, "--force"]);
    assert_eq!(
        forced,
        json!({ "id": id, "deleted": true, "waiting": 3, "released": 1, "failed_parent": null })
    );
    assert_eq!(common::json(&db.url, &["workflows"]), json!([]));
    let missing = common::formica(&db.url, &["workflow", "delete", &id_text]);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && stderr.contains(&format!("no workflow has id {id}")), "{stderr}");

    // A sub-workflow its job waits for: refused, naming the job; forced, that job fails.
    let inner =
        formica_tokio::Workflow::new("inner").job(formica_tokio::WorkflowJob::raw("x", "t", json!({})));
    let outer = formica_tokio::Workflow::new("outer").job(formica_tokio::WorkflowJob::workflow("sub", inner));
    let outer = utils.add_workflow(&outer).await.unwrap().id;
    let seen = utils.workflow(outer).await.unwrap().unwrap();
    let Some(formica_tokio::inspect::WaitingFor::Workflow { id: inner }) = seen.jobs[0].waits_for.first()
    else {
        panic!("{seen:?}")
    };
    let inner = inner.to_string();
    let refused = common::formica(&db.url, &["workflow", "delete", &inner]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let said = format!("workflow {inner} is the sub-workflow of job \"sub\" of workflow {outer}");
    assert!(!refused.status.success() && stderr.contains(&said), "{stderr}");
    let forced = common::json(&db.url, &["workflow", "delete", &inner, "--force"]);
    assert_eq!(forced["failed_parent"], json!({ "workflow": outer, "job": "sub" }), "{forced}");
    let shown = common::json(&db.url, &["workflow", "show", &outer.to_string()]);
    assert_eq!(shown["state"], "failed", "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_is_sent_from_the_command_line_and_every_answer_is_said() {
    let db = TestDb::migrated().await;
    let workflow = formica_tokio::Workflow::new("approval")
        .job(formica_tokio::WorkflowJob::raw("draft", "t", json!({})))
        .job(
            formica_tokio::WorkflowJob::raw("publish", "t", json!({}))
                .depends_on(["draft"])
                .wait_for_signal(formica_tokio::SignalWait::new("approved")),
        );
    let id = db.utils().add_workflow(&workflow).await.unwrap().id.to_string();
    let text = common::ok(&db.url, &["workflow", "show", &id]);
    assert!(text.contains(r#"jobs draft; signal "approved""#), "{text}");
    let sent =
        common::json(&db.url, &["workflow", "signal", &id, "approved", "--payload", r#"{"by": "ann"}"#]);
    assert_eq!(
        sent,
        json!({ "id": id.parse::<i64>().unwrap(), "signal": "approved", "received": ["publish"], "released": [] })
    );
    let shown = common::json(&db.url, &["workflow", "show", &id]);
    assert_eq!(
        shown["jobs"][1]["waits_for"],
        json!([{ "kind": "jobs", "names": ["draft"] }]),
        "it got its signal"
    );
    for (args, said) in [
        (vec!["approved"], "already got it"),
        (vec!["nobody"], "no job of workflow"),
        (vec!["approved", "--payload", "{nope"], "--payload is not JSON"),
    ] {
        let out = common::formica(&db.url, &[&["workflow", "signal", id.as_str()][..], &args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(said), "{args:?}: {stderr}");
    }
    let gone = common::formica(&db.url, &["workflow", "signal", "999999", "approved"]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("no workflow 999999"));
}
