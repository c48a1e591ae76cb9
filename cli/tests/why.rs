//! `formica why <job>` (docs/guide/why.md): for a job due later in a paused queue with no
//! worker, the JSON names each reason with its evidence and the text says it a line each; a
//! workflow's waiting job is named WORKFLOW/NAME, and one that is a whole workflow names it; a
//! job that never existed, and a reference that names none, are refused naming what was given.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use formica_tokio::chrono::{Duration, Utc};
use formica_tokio::controls::Pause;
use formica_tokio::{JobSpec, Workflow, WorkflowJob};
use serde_json::{json, Value};

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn why_names_each_reason_in_json_and_in_text() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let spec = JobSpec {
        run_at: Some(Utc::now() + Duration::hours(2)),
        queue_name: Some("mail".into()),
        ..JobSpec::default()
    };
    let job = utils.add_raw_job("send_email", json!({}), spec).await.unwrap();
    utils.pause(&Pause::task("send_email"), Some("provider down"), Some("alice")).await.unwrap();
    let id = job.id.to_string();

    let out = common::formica(&db.url, &["--json", "why", &id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&answer["job_id"], &answer["state"]), (&json!(job.id), &json!("scheduled")));
    let reasons = answer["reasons"].as_array().unwrap();
    let names: Vec<&str> = reasons.iter().map(|r| r["reason"].as_str().unwrap()).collect();
    assert_eq!(names, ["not_due", "paused", "no_worker"], "{answer}");
    assert_eq!((&reasons[1]["by"], &reasons[1]["why"]), (&json!("alice"), &json!("provider down")));
    assert_eq!(reasons[2]["live_workers"], 0);

    let out = common::formica(&db.url, &["why", &id]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.starts_with(&format!("job {id} (task send_email, queue mail): scheduled\n")),
        "{text}"
    );
    assert!(text.contains("- not_due: it is not due until "), "{text}");
    assert!(text.contains(r#"- paused: task "send_email" is paused by alice"#), "{text}");
    assert!(text.contains("- no_worker: no live Formica worker runs task \"send_email\""), "{text}");

    let workflow = Workflow::new("w")
        .job(WorkflowJob::raw("a", "step", json!({})))
        .job(WorkflowJob::raw("b", "step", json!({})).depends_on(["a"]));
    let added = utils.add_workflow(&workflow).await.unwrap();
    let out = common::formica(&db.url, &["why", &format!("{}/b", added.id)]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "- dependencies: it waits for the jobs of workflow {} it depends on: a (job ",
            added.id
        )),
        "{text}"
    );

    let inner = Workflow::new("inner").job(WorkflowJob::raw("x", "step", json!({})));
    let outer = utils.add_workflow(&Workflow::new("outer").job(WorkflowJob::workflow("sub", inner))).await;
    let outer = outer.unwrap().id;
    let out = common::formica(&db.url, &["why", &format!("{outer}/sub")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("job \"sub\" of workflow {outer} (task formica:subworkflow): released\n")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "- subworkflow: it is a whole workflow in workflow {outer}: it waits for its sub-workflow "
        )) && text.contains(r#"("inner"), 1 of whose 1 jobs are not settled yet"#),
        "{text}"
    );

    let missing = common::formica(&db.url, &["why", &(job.id + 1000).to_string()]);
    let error = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && error.contains(&format!("no job {}", job.id + 1000)), "{error}");
    let malformed = common::formica(&db.url, &["why", "seven"]);
    let error = String::from_utf8_lossy(&malformed.stderr);
    assert!(!malformed.status.success() && error.contains(r#""seven" names no job"#), "{error}");
}
