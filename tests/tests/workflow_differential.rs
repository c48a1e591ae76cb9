//! The workflows' SQL (records migration 11) against their one Rust statement,
//! `formica_core::workflow::Progress`: random DAGs with random policies and callbacks, and
//! random sequences of settlements applied to real PostgreSQL (by the worker's own completion
//! and failure statements, several jobs in one statement at times, by the resolver after a
//! raw delete or a permanent failure, by `cancel_workflow` and `retry_workflow`) and to the
//! model. After each step every job has the same state in both, each waiting job the same
//! count, and each callback released got the model's counts.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::BatchReport;
use formica::{Callback, OnDependencyFailure, Workflow, WorkflowJob};
use formica_core::workflow::{Change, Graph, JobState, Outcome, Progress};
use formica_tests::TestDb;
use serde_json::{json, Value};
use tokio_postgres::Client;

/// A small deterministic generator (xorshift): a failing case is replayed by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A random DAG of 2 to 12 jobs: each may depend on jobs before it.
fn random_workflow(rng: &mut Rng) -> Workflow {
    let n = 2 + rng.below(11);
    let mut workflow = Workflow::new("random");
    for i in 0..n {
        let mut depends_on = Vec::new();
        for j in 0..i {
            if rng.chance(35) {
                depends_on.push(format!("j{j}"));
            }
        }
        // Jobs alike but for their names: each released job must get its own row.
        let mut job = WorkflowJob::raw(format!("j{i}"), "t", json!({ "name": format!("j{i}") }))
            .depends_on(depends_on.clone());
        if rng.chance(30) {
            job = job.on_dependency_failure(OnDependencyFailure::Release);
        }
        if !depends_on.is_empty() && rng.chance(25) {
            job = job.callback(if rng.chance(50) { Callback::AllFinished } else { Callback::FirstFailure });
        }
        workflow = workflow.job(job);
    }
    workflow
}

/// Each job's (id, state, pending, job_id) in PostgreSQL, in the order added.
async fn rows(client: &Client, workflow: i64) -> Vec<(i64, JobState, i32, Option<i64>)> {
    let sql = "select id, state, pending, job_id from formica_graphile_worker.workflow_jobs \
        where workflow_id = $1 order by id";
    let rows = client.query(sql, &[&workflow]).await.unwrap();
    rows.iter()
        .map(|r| (r.get(0), JobState::parse(r.get::<_, &str>(1)).unwrap(), r.get(2), r.get(3)))
        .collect()
}

/// The same state for every job, the same count for each waiting one; each released job's
/// graphile_worker row is its own.
async fn compare(client: &Client, workflow: i64, progress: &Progress, seed: u64, step: &str) {
    let rows = rows(client, workflow).await;
    for (i, (_, state, pending, job_id)) in rows.iter().enumerate() {
        assert_eq!(*state, progress.state(i), "seed {seed}, after {step}: job j{i}");
        if *state == JobState::Waiting {
            assert_eq!(*pending as usize, progress.pending(i), "seed {seed}, after {step}: j{i}'s count");
        }
        if *state == JobState::Released {
            let sql = "select payload::jsonb ->> 'name' from graphile_worker._private_jobs where id = $1";
            let name: Option<String> = client.query_opt(sql, &[job_id]).await.unwrap().map(|r| r.get(0));
            assert_eq!(name, Some(format!("j{i}")), "seed {seed}, after {step}: j{i}'s job");
        }
    }
}

/// Settle the graphile_worker jobs `ids` with `outcome` through the worker's own statement,
/// as a worker holding them would (history's form, writing an output, now and then).
async fn settle_by_worker(client: &Client, ids: &[i64], outcome: Outcome, with_history: bool) {
    let lock = "update graphile_worker._private_jobs set locked_by = 'w', locked_at = now(), \
        attempts = attempts + 1 where id = any($1)";
    client.execute(lock, &[&ids]).await.unwrap();
    let render = |sql: &str| formica_sql::render(sql, "graphile_worker");
    // The settling forms, which the driver sends for jobs a workflow released.
    let complete = formica_sql::workflows::settling(formica_sql::worker::COMPLETE_JOBS);
    let fail = formica_sql::workflows::settling(formica_sql::worker::FAIL_JOBS);
    if outcome == Outcome::Completed {
        if with_history {
            let outputs: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            let sql = render(&formica_sql::history::complete(&complete));
            client.execute(&sql, &[&"w", &ids, &ids, &outputs]).await.unwrap();
        } else {
            client.execute(&render(&complete), &[&"w", &ids]).await.unwrap();
        }
        return;
    }
    let message = if outcome == Outcome::Cancelled { "cancelled: by the test" } else { "boom" };
    let n = ids.len();
    let sql = if with_history { render(&formica_sql::history::fail(&fail)) } else { render(&fail) };
    let (messages, run_ats, permanent) =
        (vec![message; n], vec![None::<chrono::DateTime<chrono::Utc>>; n], vec![true; n]);
    let (payloads, delays) = (vec![None::<String>; n], vec![None::<i64>; n]);
    client.execute(&sql, &[&"w", &ids, &messages, &run_ats, &permanent, &payloads, &delays]).await.unwrap();
}

/// Check the batch each callback released in `changes` got against the model's counts.
async fn check_batches(
    client: &Client,
    graph: &Graph,
    progress: &Progress,
    changes: &[Change],
    ids: &[(i64, JobState, i32, Option<i64>)],
    seed: u64,
) {
    for change in changes {
        let Change::Released(i) = *change else { continue };
        if graph.nodes()[i].callback.is_none() {
            continue;
        }
        let job_id = ids[i].3.expect("a released job has its job");
        let sql = "select payload::jsonb -> 'batch' from graphile_worker._private_jobs where id = $1";
        let batch: Value = client.query_one(sql, &[&job_id]).await.unwrap().get(0);
        let batch: BatchReport = serde_json::from_value(batch).unwrap();
        let want = progress.batch_counts(graph, i);
        assert_eq!(
            (batch.completed, batch.failed, batch.cancelled, batch.unfinished),
            (want.completed as i64, want.failed as i64, want.cancelled as i64, want.unfinished as i64),
            "seed {seed}: callback j{i}'s batch"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workflows_settle_in_postgresql_as_the_model_says() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    for seed in 1..=120u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let workflow = random_workflow(&mut rng);
        let graph = workflow.graph().unwrap();
        let added = utils.add_workflow(&workflow).await.unwrap();
        let (mut progress, released) = Progress::start(&graph);
        let names: Vec<&str> = added.released.iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<String> = released.iter().map(|&i| format!("j{i}")).collect();
        assert_eq!(names, want, "seed {seed}: released at add");
        compare(&client, added.id, &progress, seed, "add").await;
        for step in 0..40 {
            let now = rows(&client, added.id).await;
            let open: Vec<usize> =
                (0..graph.len()).filter(|&i| progress.state(i) == JobState::Released).collect();
            if open.is_empty() {
                if progress.is_cancelled() || !rng.chance(50) {
                    break;
                }
                let retried = utils.retry_workflow(added.id).await.unwrap();
                let (rerun, back) = progress.retry(&graph);
                let name = |list: Vec<usize>| list.into_iter().map(|i| format!("j{i}")).collect::<Vec<_>>();
                assert_eq!((retried.rerun, retried.waiting), (name(rerun), name(back)), "seed {seed}: retry");
                compare(&client, added.id, &progress, seed, &format!("step {step}: retry")).await;
                continue;
            }
            let mut changes = Vec::new();
            let what = rng.below(100);
            if what < 4 && !progress.is_cancelled() {
                utils.cancel_workflow(added.id, "by the test").await.unwrap();
                progress.cancel();
            } else if what < 14 {
                // graphile-worker's side: a row deleted or out of attempts, told by the resolver.
                let i = open[rng.below(open.len())];
                let job_id = now[i].3.unwrap();
                let outcome = if rng.chance(50) {
                    client
                        .execute("delete from graphile_worker._private_jobs where id = $1", &[&job_id])
                        .await
                        .unwrap();
                    Outcome::Completed
                } else {
                    utils.permanently_fail_jobs(&[job_id], Some("gave up")).await.unwrap();
                    Outcome::Failed
                };
                assert_eq!(utils.resolve_workflows().await.unwrap(), 1, "seed {seed}");
                changes.extend(progress.settle(&graph, i, outcome));
            } else {
                let outcome = match rng.below(10) {
                    0..=5 => Outcome::Completed,
                    6..=8 => Outcome::Failed,
                    _ => Outcome::Cancelled,
                };
                let mut chosen: Vec<usize> =
                    (0..1 + rng.below(3)).map(|_| open[rng.below(open.len())]).collect();
                chosen.sort_unstable();
                chosen.dedup();
                let ids: Vec<i64> = chosen.iter().map(|&i| now[i].3.unwrap()).collect();
                settle_by_worker(&client, &ids, outcome, rng.chance(50)).await;
                for &i in &chosen {
                    changes.extend(progress.settle(&graph, i, outcome));
                }
            }
            if progress.is_cancelled() {
                // Released jobs were cancelled as cancel_jobs does: the resolver tells.
                utils.resolve_workflows().await.unwrap();
                for i in 0..graph.len() {
                    if progress.state(i) == JobState::Released {
                        progress.settle(&graph, i, Outcome::Cancelled);
                    }
                }
            }
            let after = rows(&client, added.id).await;
            check_batches(&client, &graph, &progress, &changes, &after, seed).await;
            compare(&client, added.id, &progress, seed, &format!("step {step}")).await;
        }
    }
}
