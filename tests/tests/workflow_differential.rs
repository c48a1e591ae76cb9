//! The workflows' SQL (records migration 11) against their one Rust statement,
//! `formica_core::workflow::Progress`: random DAGs with random policies and callbacks, and
//! random sequences of settlements applied to real PostgreSQL (by the worker's own completion
//! and failure statements, several jobs in one statement at times, by the resolver after a
//! raw delete or a permanent failure, by `cancel_workflow` and `retry_workflow`) and to the
//! model; signals sent (to jobs waiting for them or not, twice) and timed out, records step 23).
//! After each step every job has the same state in both, each waiting job the same count
//! and the same timeout running, each callback released got the model's counts, each job
//! waiting for a signal got it in its payload, and each timer delayed its job's run_at.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::statements::{bind, Catalog};
use formica::BatchReport;
use formica::{
    Callback, OnDependencyFailure, OnSignalTimeout, SignalSent, SignalWait, Workflow, WorkflowJob,
};
use formica_core::worker::{Failure, Statement};
use formica_core::workflow::{Change, Graph, JobState, Outcome, Progress, Signalled};
use formica_tests::TestDb;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::LazyLock;
use std::time::Duration;
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

/// The signals jobs wait for (two), and one no job waits for.
const SIGNALS: [&str; 3] = ["s0", "s1", "nobody"];

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
        } else if rng.chance(25) {
            let mut wait = SignalWait::new(SIGNALS[rng.below(2)]);
            if rng.chance(60) {
                let on = if rng.chance(50) { OnSignalTimeout::Release } else { OnSignalTimeout::Cancel };
                wait = wait.timeout(Duration::from_secs(3600), on);
            }
            job = job.wait_for_signal(wait);
        }
        if rng.chance(20) {
            job = job.delay(Duration::from_secs(100 * (1 + rng.below(10) as u64)));
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
async fn compare(
    client: &Client,
    workflow: i64,
    (graph, progress, rerun): (&Graph, &Progress, &BTreeSet<usize>),
    seed: u64,
    step: &str,
) {
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
    // Records step 23: the timeouts running, the signals received and the timers applied.
    let sql = "select jobs.state, waits.signal_deadline is not null, live.payload::jsonb -> 'signal', \
        extract(epoch from live.run_at - jobs.released_at)::float8, waits.timed_out_at is not null \
        from formica_graphile_worker.workflow_jobs as jobs \
        left join formica_graphile_worker.workflow_waits as waits on waits.job = jobs.id \
        left join graphile_worker._private_jobs as live on live.id = jobs.job_id \
        where jobs.workflow_id = $1 order by jobs.id";
    let waits = client.query(sql, &[&workflow]).await.unwrap();
    for (i, row) in waits.iter().enumerate() {
        let wait = graph.nodes()[i].signal.as_ref();
        let timed = wait.is_some_and(|s| s.timeout.is_some());
        if progress.state(i) == JobState::Waiting {
            let armed: bool = row.get(1);
            assert_eq!(
                armed,
                timed && progress.waits_for_signal_only(i),
                "seed {seed}, after {step}: j{i}'s timeout"
            );
        }
        let Some(signal) = row.get::<_, Option<Value>>(2).filter(|_| progress.state(i) == JobState::Released)
        else {
            continue;
        };
        let wait = wait.expect("only a job waiting for a signal gets one");
        assert_eq!(signal["name"], json!(wait.name), "seed {seed}, after {step}: j{i}'s signal");
        let timed_out: bool = row.get(4);
        assert_eq!(signal["timed_out"], json!(timed_out), "seed {seed}, after {step}: j{i}'s signal");
        if !timed_out {
            assert_eq!(
                signal["payload"],
                json!({ "to": wait.name }),
                "seed {seed}, after {step}: j{i}'s payload"
            );
        }
    }
    for (i, row) in waits.iter().enumerate() {
        let (Some(delay), Some(after)) = (graph.nodes()[i].delay, row.get::<_, Option<f64>>(3)) else {
            continue;
        };
        // A job run again by a retry in place runs at once, as every rescheduled job.
        if progress.state(i) == JobState::Released && !rerun.contains(&i) {
            assert!(
                (after - delay.as_secs_f64()).abs() < 5.0,
                "seed {seed}, after {step}: j{i} runs {after} s after its release"
            );
        }
    }
}

/// Settle the graphile_worker jobs `ids` with `outcome` through the worker's own statement,
/// bound as the driver binds it for jobs a workflow released (the settling form), as a worker
/// holding them would (with history, writing an output, now and then).
async fn settle_by_worker(client: &Client, ids: &[i64], outcome: Outcome, with_history: bool) {
    static CATALOGS: LazyLock<[Catalog; 2]> = LazyLock::new(|| {
        [false, true].map(|history| Catalog::new("graphile_worker", history).expect("the worker's SQL"))
    });
    let lock = "update graphile_worker._private_jobs set locked_by = 'w', locked_at = now(), \
        attempts = attempts + 1 where id = any($1)";
    client.execute(lock, &[&ids]).await.unwrap();
    let (worker_id, ids) = ("w".to_owned(), ids.to_vec());
    let outputs: Vec<(i64, String)> = ids.iter().map(|id| (*id, id.to_string())).collect();
    let statement = match outcome {
        Outcome::Completed => Statement::CompleteJobs { worker_id, ids, settles_workflow_jobs: true },
        _ => {
            let message = if outcome == Outcome::Cancelled { "cancelled: by the test" } else { "boom" };
            let failures = (ids.iter())
                .map(|&job_id| Failure {
                    job_id,
                    message: message.to_owned(),
                    run_at: None,
                    permanent: true,
                    payload: None,
                    delay: None,
                })
                .collect();
            Statement::FailJobs { worker_id, failures, settles_workflow_jobs: true }
        }
    };
    let bound = bind(&CATALOGS[usize::from(with_history)], statement, &outputs);
    client.execute(bound.sql, &bound.values()).await.unwrap();
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
    // How often a signal released a job, was a duplicate, and a timeout released or cancelled.
    let mut seen = [0usize; 4];
    for seed in 1..=120u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let workflow = random_workflow(&mut rng);
        let graph = workflow.graph().unwrap();
        let added = utils.add_workflow(&workflow).await.unwrap();
        let (mut progress, released) = Progress::start(&graph);
        let names: Vec<&str> = added.released.iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<String> = released.iter().map(|&i| format!("j{i}")).collect();
        assert_eq!(names, want, "seed {seed}: released at add");
        compare(&client, added.id, (&graph, &progress, &BTreeSet::new()), seed, "add").await;
        let mut rerun_ever = BTreeSet::new();
        for step in 0..40 {
            let now = rows(&client, added.id).await;
            let open: Vec<usize> =
                (0..graph.len()).filter(|&i| progress.state(i) == JobState::Released).collect();
            let signal_awaited = !progress.is_cancelled()
                && (0..graph.len())
                    .any(|i| progress.state(i) == JobState::Waiting && graph.nodes()[i].signal.is_some());
            if open.is_empty() && !signal_awaited {
                if progress.is_cancelled() || !rng.chance(50) {
                    break;
                }
                let retried = utils.retry_workflow(added.id).await.unwrap();
                let (again, back) = progress.retry(&graph);
                rerun_ever.extend(again.iter().copied());
                let name = |list: Vec<usize>| list.into_iter().map(|i| format!("j{i}")).collect::<Vec<_>>();
                assert_eq!((retried.rerun, retried.waiting), (name(again), name(back)), "seed {seed}: retry");
                compare(
                    &client,
                    added.id,
                    (&graph, &progress, &rerun_ever),
                    seed,
                    &format!("step {step}: retry"),
                )
                .await;
                continue;
            }
            let mut changes = Vec::new();
            let what = rng.below(100);
            let due: Vec<usize> = (0..graph.len())
                .filter(|&i| {
                    progress.waits_for_signal_only(i)
                        && graph.nodes()[i].signal.as_ref().is_some_and(|s| s.timeout.is_some())
                })
                .collect();
            let signal_step = what < 20 || open.is_empty();
            if what < 4 && !progress.is_cancelled() {
                utils.cancel_workflow(added.id, "by the test").await.unwrap();
                progress.cancel();
            } else if signal_step && (what.is_multiple_of(2) || due.is_empty()) {
                // Records step 23: a signal, to jobs waiting for it or not, maybe again.
                let name = SIGNALS[rng.below(SIGNALS.len())];
                let sent = utils.signal_workflow(added.id, name, Some(&json!({ "to": name }))).await.unwrap();
                let names = |list: &[usize]| list.iter().map(|i| format!("j{i}")).collect::<Vec<_>>();
                let want = match progress.signal(&graph, name) {
                    Signalled::Received { jobs, released } => {
                        seen[0] += released.len();
                        changes.extend(released.iter().map(|&i| Change::Released(i)));
                        SignalSent::Received { jobs: names(&jobs), released: names(&released) }
                    }
                    Signalled::Duplicate => {
                        seen[1] += 1;
                        SignalSent::Duplicate
                    }
                    Signalled::NotWaiting => SignalSent::NotWaiting,
                };
                assert_eq!(sent, want, "seed {seed}, step {step}: signal {name}");
            } else if signal_step {
                // A timeout due: its deadline moved to the past, the resolver's pass tells.
                let i = due[rng.below(due.len())];
                let past = "update formica_graphile_worker.workflow_waits set signal_deadline = now() - interval '1 second' \
                    where job = $1";
                client.execute(past, &[&now[i].0]).await.unwrap();
                assert_eq!(utils.resolve_workflows().await.unwrap(), 1, "seed {seed}: j{i} timed out");
                let timed_out = progress.time_out(&graph, i);
                seen[if timed_out.first() == Some(&Change::Released(i)) { 2 } else { 3 }] += 1;
                changes.extend(timed_out);
            } else if what < 30 {
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
            compare(&client, added.id, (&graph, &progress, &rerun_ever), seed, &format!("step {step}")).await;
        }
    }
    assert!(seen.iter().all(|&n| n >= 3), "the cases reached each kind of signal step: {seen:?}");
}
