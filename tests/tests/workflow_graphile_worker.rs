//! Workflows whose jobs the real graphile-worker 0.18.0 (Node) runs. Ignored by default: run
//! through `scripts/compat-graphile-worker`, which installs it from npm and sets
//! `FORMICA_GRAPHILE_WORKER`.
//!
//! graphile-worker knows nothing of workflows: it runs what is in its jobs table and deletes
//! a job it completed. A Formica worker beside it (running none of these tasks) runs the
//! resolver every `workflow_resolve_every` (2 s by default), which settles the jobs whose
//! rows are gone and releases their dependents into graphile-worker's table, where its
//! LISTEN hears them at once.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use chrono::{DateTime, Utc};
use formica::{Runtime, Workflow, WorkflowJob};
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How late past the resolver's interval a release may be here: a pass's own time, Node's
/// completion, and a loaded machine.
const SLACK: Duration = Duration::from_millis(1000);

const FAN: usize = 10;

fn step(name: &str, ms: u64, depends_on: &[&str]) -> WorkflowJob {
    WorkflowJob::raw(name, "step", json!({ "name": name, "ms": ms })).depends_on(depends_on.iter().copied())
}

/// What each job waits for, by name.
fn workflows() -> Vec<(Workflow, BTreeMap<String, Vec<String>>)> {
    let diamond = [("A", vec![]), ("B", vec!["A"]), ("C", vec!["A"]), ("D", vec!["B", "C"])];
    let mut workflow = Workflow::new("diamond");
    for (name, on) in &diamond {
        workflow = workflow.job(step(name, 300, on));
    }
    let diamond_dependencies =
        diamond.iter().map(|(n, on)| (n.to_string(), on.iter().map(|s| s.to_string()).collect())).collect();

    let middles: Vec<String> = (0..FAN).map(|i| format!("P{i}")).collect();
    let mut fan = Workflow::new("fan").job(step("S", 100, &[]));
    let mut fan_dependencies = BTreeMap::from([("S".to_owned(), vec![])]);
    for p in &middles {
        fan = fan.job(step(p, 100 + 50 * fan_dependencies.len() as u64, &["S"]));
        fan_dependencies.insert(p.clone(), vec!["S".to_owned()]);
    }
    fan = fan.job(step("F", 100, &middles.iter().map(String::as_str).collect::<Vec<_>>()));
    fan_dependencies.insert("F".to_owned(), middles);
    vec![(workflow, diamond_dependencies), (fan, fan_dependencies)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs graphile-worker from npm: scripts/compat-graphile-worker"]
async fn graphile_worker_runs_a_workflow_s_jobs_each_released_within_the_resolver_s_interval() {
    let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "create table runs (name text, job_id bigint, event text, at timestamptz not null default clock_timestamp())",
        )
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("formica-workflow-node-{}", db.name));
    std::fs::create_dir_all(dir.join("tasks")).unwrap();
    std::fs::write(
        dir.join("tasks/step.js"),
        "module.exports = async (payload, helpers) => {\n\
           const record = (event) => helpers.query(\n\
             'insert into runs (name, job_id, event) values ($1, $2, $3)', [payload.name, helpers.job.id, event]);\n\
           await record('start');\n\
           await new Promise((resolve) => setTimeout(resolve, payload.ms));\n\
           await record('end');\n\
         };\n",
    )
    .unwrap();

    // The resolver's worker: it runs no `step` job itself.
    let options = db.worker_options().define_raw_job("elsewhere", |_, _| Box::pin(async { Ok(()) }));
    let formica = Running::listening(&rt, options).await;
    let node = formica_tests::node::worker(&db, &dir, &["-j", "4"]);
    let utils = db.utils();
    let mut dependencies = BTreeMap::new();
    let mut ids = Vec::new();
    for (workflow, on) in workflows() {
        let added = utils.add_workflow(&workflow).await.unwrap();
        ids.push(added.id);
        dependencies.insert(added.id, on);
    }

    // Until both complete: every job in graphile-worker's table is a released one, and no
    // waiting job has a graphile-worker job.
    let unreleased_seen = "select (select count(*) from graphile_worker._private_jobs as live \
           where not exists (select from formica_graphile_worker.workflow_jobs as jobs \
             where jobs.job_id = live.id and jobs.state = 'released')) \
         + (select count(*) from formica_graphile_worker.workflow_jobs as jobs \
             join graphile_worker._private_jobs as live on live.id = jobs.job_id \
             where jobs.state = 'waiting')";
    let completed = "select count(*) from formica_graphile_worker.workflow_states where state = 'completed'";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut looks = 0;
    while db.count(completed).await < 2 {
        assert!(std::time::Instant::now() < deadline, "both workflows completed within a minute");
        assert_eq!(db.count(unreleased_seen).await, 0, "graphile-worker's table holds only released jobs");
        looks += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(node);
    formica.stop(Duration::from_secs(10)).await;

    // Each job ran once, on graphile-worker (a Formica worker writes history; none here),
    // as the job it was released as, after what it waits for ended; and it was released
    // within the interval of the last of those ending.
    let every = formica::DEFAULT_RESOLVE_EVERY;
    let mut latest = Duration::ZERO;
    for (workflow, on) in &dependencies {
        let rows = client
            .query(
                "select jobs.name, jobs.job_id, jobs.released_at, \
                   array_agg(runs.job_id order by runs.at), array_agg(runs.event order by runs.at), \
                   array_agg(runs.at order by runs.at) \
                 from formica_graphile_worker.workflow_jobs as jobs \
                 left join runs on runs.name = jobs.name \
                 where jobs.workflow_id = $1 group by jobs.id",
                &[workflow],
            )
            .await
            .unwrap();
        let mut ended = BTreeMap::new();
        let mut released = BTreeMap::new();
        let mut started = BTreeMap::new();
        for row in &rows {
            let name: String = row.get(0);
            let (job_id, at): (i64, DateTime<Utc>) = (row.get(1), row.get(2));
            let (run_ids, events, times): (Vec<i64>, Vec<String>, Vec<DateTime<Utc>>) =
                (row.get(3), row.get(4), row.get(5));
            assert_eq!(events, ["start", "end"], "{name} ran once");
            assert!(run_ids.iter().all(|&id| id == job_id), "{name} ran as the job released: {run_ids:?}");
            assert!(times[0] >= at, "{name} started after its release");
            released.insert(name.clone(), at);
            started.insert(name.clone(), times[0]);
            ended.insert(name, times[1]);
        }
        for (job, waits_for) in on {
            let Some(last) = waits_for.iter().map(|d| ended[d]).max() else { continue };
            for dependency in waits_for {
                assert!(ended[dependency] < started[job], "{job} started after {dependency} ended");
            }
            let delay = (released[job] - last).to_std().expect("released after the last ended");
            assert!(delay <= every + SLACK, "{job} released {delay:?} after the last it waits for ended");
            latest = latest.max(delay);
        }
    }
    eprintln!(
        "the slowest release: {latest:?} after the last dependency ended ({looks} looks at the tables)"
    );
    assert_eq!(db.count("select count(*) from formica_graphile_worker.job_history").await, 0);
    assert_eq!(db.count("select count(*) from graphile_worker._private_jobs").await, 0);
    let _ = std::fs::remove_dir_all(dir);
}
