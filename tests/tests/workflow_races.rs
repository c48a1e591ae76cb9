//! Workflows' races on real PostgreSQL: the last two jobs of a batch end at the same moment
//! on two workers, round after round, and the batch's callback is released exactly once,
//! with the counts of what it waited for.
//!
//! How the moment is forced: two workers each run one job at a time and prefetch nothing,
//! and the two last jobs (released together) wait for each other on a barrier before they
//! return, so each is on its own worker and both completions (or failures) are written at
//! once; each worker writes them at once (no batching delay). Each settlement locks the
//! callback's row; the one that gets it second sees the first's work.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica::BatchReport;
use formica::{
    Callback, JobContext, JobSpec, OnDependencyFailure, OutputTaskHandler, Runtime, Task, Workflow,
    WorkflowJob,
};
use formica_tests::{Running, TestDb};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Barrier;

type Failure = Box<dyn std::error::Error + Send + Sync>;

/// A job done before the two last ones.
#[derive(Serialize, Deserialize)]
struct Early {}

impl Task for Early {
    const IDENTIFIER: &'static str = "early";
}

impl OutputTaskHandler for Early {
    type Output = String;
    async fn run(self, _: JobContext) -> Result<String, Failure> {
        Ok("early".into())
    }
}

/// One of the two last jobs: it waits for the other on the barrier, then both succeed or
/// both fail at once. The output names the worker.
#[derive(Serialize, Deserialize)]
struct Meet {
    name: String,
    fail: bool,
}

impl Task for Meet {
    const IDENTIFIER: &'static str = "meet";
}

impl OutputTaskHandler for Meet {
    type Output = String;
    async fn run(self, ctx: JobContext) -> Result<String, Failure> {
        let barrier = ctx.extension::<Arc<Barrier>>().expect("the barrier").clone();
        tokio::time::timeout(Duration::from_secs(20), barrier.wait())
            .await
            .map_err(|_| format!("{} never met the other job", self.name))?;
        if self.fail {
            return Err("failed together".into());
        }
        Ok(format!("{} on {}", self.name, ctx.worker_id()))
    }
}

/// The callback's payload: its round, and the batch's result.
#[derive(Debug, Deserialize)]
struct Called {
    round: usize,
    batch: BatchReport,
}

const ROUNDS: usize = 100;

fn round_of(round: usize) -> Workflow {
    let once = || JobSpec::builder().max_attempts(1).build();
    let meet = |name: &str, fail: bool, after: &[&str]| {
        WorkflowJob::new(name, &Meet { name: name.into(), fail })
            .unwrap()
            .spec(once())
            .depends_on(after.iter().copied())
            .on_dependency_failure(OnDependencyFailure::Release)
    };
    let callback = WorkflowJob::raw("called", "called", json!({ "round": round }));
    if round.is_multiple_of(2) {
        // All finished: an early job completes and another fails, then the last two complete.
        let jobs = vec![
            WorkflowJob::new("ok", &Early {}).unwrap(),
            WorkflowJob::raw("bad", "bad", json!({})).spec(once()),
            meet("x1", false, &["ok", "bad"]),
            meet("x2", false, &["ok", "bad"]),
        ];
        Workflow::batch(format!("round {round}"), jobs, callback, Callback::AllFinished)
    } else {
        // First failure: the last two fail at once; the callback is released by one of them.
        let jobs = vec![
            WorkflowJob::new("ok", &Early {}).unwrap(),
            meet("x1", true, &["ok"]),
            meet("x2", true, &["ok"]),
        ];
        Workflow::batch(format!("round {round}"), jobs, callback, Callback::FirstFailure)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_callback_fires_once_with_the_right_counts_when_its_last_two_jobs_end_at_once_on_two_workers()
{
    let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let db = TestDb::migrated().await;
    let barrier = Arc::new(Barrier::new(2));
    let called = Arc::new(Mutex::new(Vec::<Value>::new()));
    let mut workers = Vec::new();
    for _ in 0..2 {
        let called = called.clone();
        let options = db
            .worker_options()
            .concurrency(1)
            .local_queue_size(0)
            .complete_job_batch_delay(Duration::ZERO)
            .fail_job_batch_delay(Duration::ZERO)
            .poll_interval(Duration::from_millis(100))
            .add_extension(barrier.clone())
            .define_job_with_output::<Early>()
            .define_job_with_output::<Meet>()
            .define_raw_job("bad", |_, _| Box::pin(async { Err("bad".into()) }))
            .define_raw_job("called", move |_, payload| {
                called.lock().unwrap().push(payload);
                Box::pin(async { Ok(()) })
            });
        workers.push(Running::listening(&rt, options).await);
    }
    let utils = db.utils();
    let client = db.client().await;
    for round in 0..ROUNDS {
        let added = utils.add_workflow(&round_of(round)).await.unwrap();
        let settled = format!(
            "select count(*) from formica_graphile_worker.workflow_states where id = {} and state <> 'running'",
            added.id
        );
        db.wait_for_count(&settled, 1, Duration::from_secs(30)).await;
        // The two last jobs ran on two workers (the barrier made them end together).
        let rows = client
            .query(
                "select history.worker_id, history.outcome from formica_graphile_worker.workflow_jobs as jobs \
                 join formica_graphile_worker.job_history as history on history.job_id = jobs.job_id \
                 where jobs.workflow_id = $1 and jobs.name in ('x1', 'x2')",
                &[&added.id],
            )
            .await
            .unwrap();
        let ends: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(ends.len(), 2, "round {round}: each of the two ended once: {ends:?}");
        assert_ne!(ends[0].0, ends[1].0, "round {round}: on two workers");
    }
    // Every callback ran by now (the workflow is not running once its callback completed);
    // give a second callback time to show up, were there one.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let called: Vec<Called> =
        called.lock().unwrap().iter().map(|p| serde_json::from_value(p.clone()).unwrap()).collect();
    let mut by_round: BTreeMap<usize, Vec<&BatchReport>> = BTreeMap::new();
    for c in &called {
        by_round.entry(c.round).or_default().push(&c.batch);
    }
    assert_eq!(by_round.len(), ROUNDS, "every round's callback ran");
    for (round, batches) in by_round {
        assert_eq!(batches.len(), 1, "round {round}'s callback ran exactly once: {batches:?}");
        let batch = batches[0];
        let counts = (batch.completed, batch.failed, batch.cancelled, batch.unfinished);
        if round.is_multiple_of(2) {
            assert_eq!(counts, (3, 1, 0, 0), "round {round}: ok, x1 and x2 completed, bad failed: {batch:?}");
            assert_eq!(
                batch.outputs.keys().map(String::as_str).collect::<Vec<_>>(),
                ["ok", "x1", "x2"],
                "round {round}: the outputs of those with one"
            );
            assert_eq!(batch.outputs["ok"], json!("early"));
        } else {
            // Released by whichever failure took the callback's row first, before the other
            // committed: that one is still unfinished for it.
            assert_eq!(counts, (1, 1, 0, 1), "round {round}: at the first failure: {batch:?}");
            assert_eq!(batch.outputs, BTreeMap::from([("ok".to_owned(), json!("early"))]));
        }
    }
    assert_eq!(
        db.count("select count(*) from formica_graphile_worker.job_history where task_identifier = 'called'")
            .await,
        ROUNDS as i64,
        "one callback job a round"
    );
    let left = "select count(*) from graphile_worker.jobs where attempts < max_attempts";
    assert_eq!(db.count(left).await, 0, "nothing left to run (the jobs failed for good stay)");
    for worker in workers {
        worker.stop(Duration::from_secs(10)).await;
    }
}
