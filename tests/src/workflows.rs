//! Workflows the tests of several crates add.

use formica::{WorkerUtils, Workflow, WorkflowJob};
use serde_json::json;

/// Adds the diamond A → B, A → C, B and C → D (task `step_<name>`, empty payloads); its id
/// and A's job id, the one job released.
pub async fn diamond(utils: &WorkerUtils) -> (i64, i64) {
    let job = |name: &str, after: &[&str]| {
        WorkflowJob::raw(name, format!("step_{name}"), json!({})).depends_on(after.iter().copied())
    };
    let workflow = Workflow::new("diamond")
        .job(job("A", &[]))
        .job(job("B", &["A"]))
        .job(job("C", &["A"]))
        .job(job("D", &["B", "C"]));
    let added = utils.add_workflow(&workflow).await.expect("add the diamond");
    assert_eq!(added.released.len(), 1, "{:?}", added.released);
    (added.id, added.released[0].1)
}
