//! The workflows' SQL (records migrations 11, 22, 23 and 24) against their one Rust statement,
//! `formica_core::workflow::Progress`: random DAGs with random policies and callbacks, and
//! random sequences of settlements applied to real PostgreSQL (by the worker's own completion
//! and failure statements, several jobs in one statement at times, by the resolver after a
//! raw delete or a permanent failure, by `cancel_workflow` and `retry_workflow`) and to the
//! model; signals sent (to jobs waiting for them or not, twice) and timed out (rules 8 and 9,
//! records step 23). After each step every job has the same state in both, each waiting job
//! the same count and the same timeout running, each callback released got the model's
//! counts, each job waiting for a signal got it in its payload, and each timer delayed its
//! job's run_at.
//!
//! Some jobs are sub-workflows (rule 11: each started is compared as a workflow of its own,
//! and its end settles its job in the model as in PostgreSQL), and running jobs add jobs to
//! their workflow now and then (rule 10: through `add_workflow_jobs`, at times the same jobs
//! twice, as a retried adder would, or from a job already settled, which is refused; records
//! step 24). Now and then a running sub-workflow is deleted alone: refused, then forced,
//! which fails its job in PostgreSQL as `settle(job, Failed)` does in the model (records
//! step 24).

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::statements::{bind, Catalog};
use formica::BatchReport;
use formica::{
    Callback, OnDependencyFailure, OnSignalTimeout, SignalSent, SignalWait, Workflow, WorkflowJob,
};
use formica_core::worker::{Failure, Statement};
use formica_core::workflow::{Change, Graph, JobState, Node, Outcome, Progress, Signalled};
use formica_tests::TestDb;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
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

/// A random DAG of 2 to 12 jobs: each may depend on jobs before it; some (with `subs`) are
/// sub-workflows, each a random DAG of its own without them, kept in `subs` by index.
fn random_workflow(rng: &mut Rng, mut subs: Option<&mut BTreeMap<usize, Workflow>>) -> Workflow {
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
        let mut job = WorkflowJob::raw(format!("j{i}"), "t", json!({ "name": format!("j{i}") }));
        if let Some(subs) = subs.as_deref_mut() {
            if rng.chance(15) {
                let inner = random_workflow(rng, None);
                job = WorkflowJob::workflow(format!("j{i}"), inner.clone());
                subs.insert(i, inner);
            }
        }
        job = job.depends_on(depends_on.clone());
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
/// graphile_worker row is its own (a sub-workflow job has none).
async fn compare(client: &Client, flow: &Flow, seed: u64, step: &str) {
    let rows = rows(client, flow.id).await;
    assert_eq!(rows.len(), flow.graph.len(), "seed {seed}, after {step}: workflow {}'s jobs", flow.id);
    for (i, (_, state, pending, job_id)) in rows.iter().enumerate() {
        let name = &flow.graph.nodes()[i].name;
        assert_eq!(*state, flow.progress.state(i), "seed {seed}, after {step}: job {name} of {}", flow.id);
        if *state == JobState::Waiting {
            let want = flow.progress.pending(i);
            assert_eq!(*pending as usize, want, "seed {seed}, after {step}: {name}'s count");
        }
        if *state == JobState::Released && flow.subs.contains_key(&i) {
            assert_eq!(*job_id, None, "seed {seed}, after {step}: sub-workflow {name} has no job");
        } else if *state == JobState::Released {
            let sql = "select payload::jsonb ->> 'name' from graphile_worker._private_jobs where id = $1";
            let found: Option<String> = client.query_opt(sql, &[job_id]).await.unwrap().map(|r| r.get(0));
            assert_eq!(found.as_ref(), Some(name), "seed {seed}, after {step}: {name}'s job");
        }
    }
    // Records step 23: the timeouts running, the signals received and the timers applied.
    let sql = "select jobs.state, waits.signal_deadline is not null, live.payload::jsonb -> 'signal', \
        extract(epoch from live.run_at - jobs.released_at)::float8, waits.timed_out_at is not null \
        from formica_graphile_worker.workflow_jobs as jobs \
        left join formica_graphile_worker.workflow_waits as waits on waits.job = jobs.id \
        left join graphile_worker._private_jobs as live on live.id = jobs.job_id \
        where jobs.workflow_id = $1 order by jobs.id";
    let waits = client.query(sql, &[&flow.id]).await.unwrap();
    for (i, row) in waits.iter().enumerate() {
        let name = &flow.graph.nodes()[i].name;
        let wait = flow.graph.nodes()[i].signal.as_ref();
        let timed = wait.is_some_and(|s| s.timeout.is_some());
        if flow.progress.state(i) == JobState::Waiting {
            let armed: bool = row.get(1);
            assert_eq!(
                armed,
                timed && flow.progress.waits_for_signal_only(i),
                "seed {seed}, after {step}: {name}'s timeout"
            );
        }
        let Some(signal) =
            row.get::<_, Option<Value>>(2).filter(|_| flow.progress.state(i) == JobState::Released)
        else {
            continue;
        };
        let wait = wait.expect("only a job waiting for a signal gets one");
        assert_eq!(signal["name"], json!(wait.name), "seed {seed}, after {step}: {name}'s signal");
        let timed_out: bool = row.get(4);
        assert_eq!(signal["timed_out"], json!(timed_out), "seed {seed}, after {step}: {name}'s signal");
        if !timed_out {
            assert_eq!(
                signal["payload"],
                json!({ "to": wait.name }),
                "seed {seed}, after {step}: {name}'s payload"
            );
        }
    }
    for (i, row) in waits.iter().enumerate() {
        let name = &flow.graph.nodes()[i].name;
        let (Some(delay), Some(after)) = (flow.graph.nodes()[i].delay, row.get::<_, Option<f64>>(3)) else {
            continue;
        };
        // A job run again by a retry in place runs at once, as every rescheduled job.
        if flow.progress.state(i) == JobState::Released && !flow.rerun.contains(&i) {
            assert!(
                (after - delay.as_secs_f64()).abs() < 5.0,
                "seed {seed}, after {step}: {name} runs {after} s after its release"
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

/// Check the batch each callback released in `changes` (of `flow`) got against the model's
/// counts.
async fn check_batches(client: &Client, flow: &Flow, changes: &[Change], seed: u64) {
    let ids = rows(client, flow.id).await;
    for change in changes {
        let Change::Released(i) = *change else { continue };
        if flow.graph.nodes()[i].callback.is_none() || flow.subs.contains_key(&i) {
            continue;
        }
        let job_id = ids[i].3.expect("a released job has its job");
        let sql = "select payload::jsonb -> 'batch' from graphile_worker._private_jobs where id = $1";
        let batch: Value = client.query_one(sql, &[&job_id]).await.unwrap().get(0);
        let batch: BatchReport = serde_json::from_value(batch).unwrap();
        let want = flow.progress.batch_counts(&flow.graph, i);
        assert_eq!(
            (batch.completed, batch.failed, batch.cancelled, batch.unfinished),
            (want.completed as i64, want.failed as i64, want.cancelled as i64, want.unfinished as i64),
            "seed {seed}: callback {} of {}'s batch",
            flow.graph.nodes()[i].name,
            flow.id
        );
    }
}

/// One workflow as PostgreSQL and the model have it: the one added, or a sub-workflow one of
/// its jobs started (`parent`: the flow and job it settles).
struct Flow {
    id: i64,
    graph: Graph,
    progress: Progress,
    /// Its sub-workflow jobs' workflows, by job.
    subs: BTreeMap<usize, Workflow>,
    parent: Option<(usize, usize)>,
    /// Its jobs a retry ran again in place (run at once, not after their timer).
    rerun: BTreeSet<usize>,
    /// Deleted by force (records step 24), with the sub-workflows under it.
    deleted: bool,
}

/// The flows and what each step changed, compared with PostgreSQL after each step.
struct Flows {
    all: Vec<Flow>,
    /// What each step changed: (flow, change), checked for callbacks' batches.
    changes: Vec<(usize, Change)>,
}

impl Flows {
    /// Job `i` of flow `f` was released: a sub-workflow job started its workflow (a flow
    /// of its own now, whose roots are released).
    async fn released(&mut self, client: &Client, f: usize, i: usize) {
        let Some(inner) = self.all[f].subs.get(&i) else { return };
        let graph = inner.graph().unwrap();
        let sql = "select subworkflow_id from formica_graphile_worker.workflow_jobs where workflow_id = $1 order by id";
        let rows = client.query(sql, &[&self.all[f].id]).await.unwrap();
        let id: i64 = rows[i].get(0);
        let (progress, _) = Progress::start(&graph);
        self.all.push(Flow {
            id,
            graph,
            progress,
            subs: BTreeMap::new(),
            parent: Some((f, i)),
            rerun: BTreeSet::new(),
            deleted: false,
        });
    }

    /// Apply `changes` of flow `f`, and the ends they lead to (rule 11), transitively.
    async fn follow(&mut self, client: &Client, f: usize, changes: Vec<Change>) {
        let mut queue: Vec<(usize, Change)> = changes.into_iter().map(|c| (f, c)).collect();
        let mut ended = vec![f];
        while !queue.is_empty() || !ended.is_empty() {
            for (f, change) in std::mem::take(&mut queue) {
                if let Change::Released(i) = change {
                    Box::pin(self.released(client, f, i)).await;
                }
                self.changes.push((f, change));
            }
            for f in std::mem::take(&mut ended) {
                let Some((p, i)) = self.all[f].parent else { continue };
                // Only the latest workflow of a sub-workflow job (retried: started anew) settles it.
                if self.all.iter().rposition(|g| g.parent == Some((p, i))) != Some(f) {
                    continue;
                }
                let Some(outcome) = self.all[f].progress.end() else { continue };
                let parent = &mut self.all[p];
                if parent.progress.state(i) != JobState::Released {
                    continue;
                }
                let more = parent.progress.settle(&parent.graph, i, outcome);
                queue.extend(more.into_iter().map(|c| (p, c)));
                ended.push(p);
            }
        }
    }

    /// Settle job `i` of flow `f` in the model.
    async fn settle(&mut self, client: &Client, f: usize, i: usize, outcome: Outcome) {
        let flow = &mut self.all[f];
        let changes = flow.progress.settle(&flow.graph, i, outcome);
        self.follow(client, f, changes).await;
    }

    /// The released jobs that are jobs (not sub-workflows): (flow, job).
    fn open(&self) -> Vec<(usize, usize)> {
        let mut open = Vec::new();
        for (f, flow) in self.all.iter().enumerate().filter(|(_, flow)| !flow.deleted) {
            for i in 0..flow.graph.len() {
                if flow.progress.state(i) == JobState::Released && !flow.subs.contains_key(&i) {
                    open.push((f, i));
                }
            }
        }
        open
    }

    /// Whether a job of a flow not cancelled waits for a signal (a send may release it).
    fn signal_awaited(&self) -> bool {
        self.all.iter().any(|flow| {
            !flow.deleted
                && !flow.progress.is_cancelled()
                && (0..flow.graph.len()).any(|i| {
                    flow.progress.state(i) == JobState::Waiting && flow.graph.nodes()[i].signal.is_some()
                })
        })
    }

    /// The jobs waiting for their signal only whose timeout may pass: (flow, job).
    fn due(&self) -> Vec<(usize, usize)> {
        let mut due = Vec::new();
        for (f, flow) in self.all.iter().enumerate().filter(|(_, flow)| !flow.deleted) {
            for i in 0..flow.graph.len() {
                let timed = flow.graph.nodes()[i].signal.as_ref().is_some_and(|s| s.timeout.is_some());
                if timed && flow.progress.waits_for_signal_only(i) {
                    due.push((f, i));
                }
            }
        }
        due
    }

    /// Cancel flow `f` (cancel_workflow) and the sub-workflows its released jobs wait for,
    /// theirs too.
    fn cancel(&mut self, f: usize) {
        self.all[f].progress.cancel();
        for child in 0..self.all.len() {
            if let Some((p, i)) = self.all[child].parent {
                if p == f
                    && !self.all[child].deleted
                    && self.all[p].progress.state(i) == JobState::Released
                    && !self.all[child].progress.is_cancelled()
                {
                    self.cancel(child);
                }
            }
        }
    }

    /// The flows not deleted.
    fn live(&self) -> Vec<usize> {
        (0..self.all.len()).filter(|&f| !self.all[f].deleted).collect()
    }

    /// The running sub-workflows whose job waits for them: what `delete_workflow` refuses
    /// unless forced.
    fn held(&self) -> Vec<usize> {
        (1..self.all.len())
            .filter(|&f| {
                let Some((p, i)) = self.all[f].parent else { return false };
                !self.all[f].deleted
                    && self.all[p].progress.state(i) == JobState::Released
                    && self.all.iter().rposition(|g| g.parent == Some((p, i))) == Some(f)
            })
            .collect()
    }

    /// Flow `f` deleted by force (records step 24): it and the sub-workflows under it are
    /// gone, and the job holding it fails (rule 2 then applies as to any failure).
    async fn delete(&mut self, client: &Client, f: usize) {
        let mut gone = vec![f];
        while let Some(g) = gone.pop() {
            self.all[g].deleted = true;
            gone.extend((0..self.all.len()).filter(|&c| self.all[c].parent.is_some_and(|(p, _)| p == g)));
        }
        if let Some((p, i)) = self.all[f].parent {
            self.settle(client, p, i, Outcome::Failed).await;
        }
    }

    async fn compare(&self, client: &Client, seed: u64, step: &str) {
        for flow in self.all.iter().filter(|flow| !flow.deleted) {
            compare(client, flow, seed, step).await;
        }
        for f in (0..self.all.len()).filter(|&f| !self.all[f].deleted) {
            let changes: Vec<Change> =
                (self.changes.iter()).filter(|(g, _)| *g == f).map(|(_, c)| *c).collect();
            check_batches(client, &self.all[f], &changes, seed).await;
        }
    }
}

/// Random jobs for job `adder` to add: 1 to 4, each maybe depending on those before it, now
/// and then a callback; as the model takes them and as `add_workflow_jobs` does.
fn random_children(rng: &mut Rng, adder: &str) -> (Vec<Node>, Value) {
    let mut nodes = Vec::new();
    let mut spec = Vec::new();
    for k in 0..1 + rng.below(4) {
        let name = format!("c{}", rng.below(6));
        if nodes.iter().any(|n: &Node| n.name == name) {
            continue;
        }
        let depends_on: Vec<String> =
            nodes.iter().filter(|_| rng.chance(40)).map(|n: &Node| n.name.clone()).collect();
        let mut node = Node::new(name.clone(), depends_on.clone());
        let mut callback = Value::Null;
        if k > 0 && !depends_on.is_empty() && rng.chance(25) {
            node = node.callback(Callback::AllFinished);
            callback = json!("all_finished");
        }
        let mut signal = Value::Null;
        if callback.is_null() && rng.chance(15) {
            node = node.signal(SignalWait::new("s0"));
            signal = json!({ "name": "s0", "timeout": null, "on_timeout": "cancel" });
        }
        spec.push(json!({
            "name": name, "task_identifier": "t", "payload": { "name": format!("{adder}/{name}") },
            "callback": callback, "depends_on": depends_on, "signal": signal,
        }));
        nodes.push(node);
    }
    (nodes, Value::Array(spec))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_workflows_settle_in_postgresql_as_the_model_says() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    let add_jobs = formica_sql::render(formica_sql::workflows::ADD_JOBS, "graphile_worker");
    // What the seeds exercised: sub-workflows started and ended, adds, adds refused.
    let (mut started, mut ended, mut adds, mut refused, mut deletes) = (0, 0, 0, 0, 0);
    // How often a signal released a job, was a duplicate, and a timeout released or cancelled.
    let mut seen = [0usize; 4];
    for seed in 1..=120u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut subs = BTreeMap::new();
        let workflow = random_workflow(&mut rng, Some(&mut subs));
        let graph = workflow.graph().unwrap();
        let added = utils.add_workflow(&workflow).await.unwrap();
        let (progress, released) = Progress::start(&graph);
        let names: Vec<&str> = added.released.iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<String> =
            released.iter().filter(|i| !subs.contains_key(i)).map(|&i| format!("j{i}")).collect();
        assert_eq!(names, want, "seed {seed}: released at add");
        let root = Flow {
            id: added.id,
            graph,
            progress,
            subs,
            parent: None,
            rerun: BTreeSet::new(),
            deleted: false,
        };
        let mut flows = Flows { all: vec![root], changes: Vec::new() };
        flows.follow(&client, 0, released.into_iter().map(Change::Released).collect()).await;
        flows.compare(&client, seed, "add").await;
        for step in 0..40 {
            flows.changes.clear();
            let open = flows.open();
            if open.is_empty() && !flows.signal_awaited() {
                if flows.all[0].progress.is_cancelled() || !rng.chance(50) {
                    break;
                }
                let retried = utils.retry_workflow(added.id).await.unwrap();
                let root = &mut flows.all[0];
                let (rerun, back) = root.progress.retry(&root.graph);
                root.rerun.extend(rerun.iter().copied());
                let name = |list: &[usize]| {
                    list.iter().map(|&i| root.graph.nodes()[i].name.clone()).collect::<Vec<_>>()
                };
                assert_eq!(
                    (retried.rerun, retried.waiting),
                    (name(&rerun), name(&back)),
                    "seed {seed}: retry"
                );
                for i in rerun {
                    flows.released(&client, 0, i).await;
                }
                flows.compare(&client, seed, &format!("step {step}: retry")).await;
                continue;
            }
            let what = rng.below(100);
            let due = flows.due();
            let signal_step = what < 20 || open.is_empty();
            if what < 4 && !flows.all[0].progress.is_cancelled() {
                utils.cancel_workflow(added.id, "by the test").await.unwrap();
                flows.cancel(0);
                // A sub-workflow with no job released (all waiting for a signal) ends now.
                for f in (1..flows.all.len()).rev() {
                    flows.follow(&client, f, Vec::new()).await;
                }
            } else if (4..7).contains(&what) && !flows.held().is_empty() {
                // Records step 24: a sub-workflow its job waits for, deleted: refused, then
                // forced, which fails that job.
                let held = flows.held();
                let f = held[rng.below(held.len())];
                let (id, (p, i)) = (flows.all[f].id, flows.all[f].parent.unwrap());
                let refused = utils.delete_workflow(id, false).await.unwrap_err();
                assert!(matches!(refused, formica::Error::SubworkflowHeld { .. }), "seed {seed}: {refused}");
                let forced = utils.delete_workflow(id, true).await.unwrap();
                let name = flows.all[p].graph.nodes()[i].name.clone();
                assert_eq!(forced.failed_parent, Some((flows.all[p].id, name)), "seed {seed}: delete {id}");
                deletes += 1;
                flows.delete(&client, f).await;
            } else if signal_step && (what.is_multiple_of(2) || due.is_empty()) {
                // Records step 23: a signal, to jobs waiting for it or not, maybe again.
                let live = flows.live();
                let f = live[rng.below(live.len())];
                let name = SIGNALS[rng.below(SIGNALS.len())];
                let id = flows.all[f].id;
                let sent = utils.signal_workflow(id, name, Some(&json!({ "to": name }))).await.unwrap();
                let flow = &mut flows.all[f];
                let names = |list: &[usize]| {
                    list.iter().map(|&i| flow.graph.nodes()[i].name.clone()).collect::<Vec<_>>()
                };
                let (want, released) = match flow.progress.signal(&flow.graph, name) {
                    Signalled::Received { jobs, released } => {
                        seen[0] += released.len();
                        (SignalSent::Received { jobs: names(&jobs), released: names(&released) }, released)
                    }
                    Signalled::Duplicate => {
                        seen[1] += 1;
                        (SignalSent::Duplicate, Vec::new())
                    }
                    Signalled::NotWaiting => (SignalSent::NotWaiting, Vec::new()),
                };
                assert_eq!(sent, want, "seed {seed}, step {step}: signal {name} to {id}");
                flows.follow(&client, f, released.into_iter().map(Change::Released).collect()).await;
            } else if signal_step {
                // A timeout due: its deadline moved to the past, the resolver's pass tells.
                let (f, i) = due[rng.below(due.len())];
                let past = "update formica_graphile_worker.workflow_waits set signal_deadline = now() - interval '1 second' \
                    where job = $1";
                let job = rows(&client, flows.all[f].id).await[i].0;
                client.execute(past, &[&job]).await.unwrap();
                assert_eq!(utils.resolve_workflows().await.unwrap(), 1, "seed {seed}: {job} timed out");
                let flow = &mut flows.all[f];
                let timed_out = flow.progress.time_out(&flow.graph, i);
                seen[if timed_out.first() == Some(&Change::Released(i)) { 2 } else { 3 }] += 1;
                flows.follow(&client, f, timed_out).await;
            } else if what < 30 {
                // graphile-worker's side: a row deleted or out of attempts, told by the resolver.
                let (f, i) = open[rng.below(open.len())];
                let job_id = rows(&client, flows.all[f].id).await[i].3.unwrap();
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
                flows.settle(&client, f, i, outcome).await;
            } else if what < 40 {
                // A job adds jobs to its workflow: a running one (now and then the same jobs
                // twice, as a retried adder would), or one settled (refused).
                let (f, i) = if rng.chance(85) {
                    open[rng.below(open.len())]
                } else {
                    let live = flows.live();
                    let f = live[rng.below(live.len())];
                    (f, rng.below(flows.all[f].graph.len()))
                };
                let Some(job_id) = rows(&client, flows.all[f].id).await[i].3 else { continue };
                let adder = flows.all[f].graph.nodes()[i].name.clone();
                let (nodes, spec) = random_children(&mut rng, &adder);
                let times = if rng.chance(30) { 2 } else { 1 };
                for time in 0..times {
                    let answer = client.query(&add_jobs, &[&job_id, &spec]).await.unwrap();
                    let flow = &mut flows.all[f];
                    let model = flow.progress.add_jobs(&mut flow.graph, i, nodes.clone());
                    let found: bool = answer[0].get(0);
                    (adds, refused) = if found { (adds + 1, refused) } else { (adds, refused + 1) };
                    assert_eq!(found, model.is_ok(), "seed {seed}: {adder} adds (time {time}): {model:?}");
                    let released: Vec<String> = (answer.iter())
                        .filter(|r| {
                            r.get::<_, Option<bool>>(4) == Some(true) && r.get::<_, Option<i64>>(3).is_some()
                        })
                        .map(|r| r.get(2))
                        .collect();
                    let model = model.unwrap_or_default();
                    let want: Vec<String> =
                        model.iter().map(|&k| flow.graph.nodes()[k].name.clone()).collect();
                    assert_eq!(released, want, "seed {seed}: {adder} adds (time {time}): released");
                    flows.follow(&client, f, model.into_iter().map(Change::Released).collect()).await;
                }
            } else {
                let outcome = match rng.below(10) {
                    0..=5 => Outcome::Completed,
                    6..=8 => Outcome::Failed,
                    _ => Outcome::Cancelled,
                };
                let mut chosen: Vec<(usize, usize)> =
                    (0..1 + rng.below(3)).map(|_| open[rng.below(open.len())]).collect();
                chosen.sort_unstable();
                chosen.dedup();
                let mut ids = Vec::new();
                for &(f, i) in &chosen {
                    ids.push(rows(&client, flows.all[f].id).await[i].3.unwrap());
                }
                settle_by_worker(&client, &ids, outcome, rng.chance(50)).await;
                for &(f, i) in &chosen {
                    flows.settle(&client, f, i, outcome).await;
                }
            }
            if flows.all[0].progress.is_cancelled() {
                // Released jobs were cancelled as cancel_jobs does: the resolver tells.
                utils.resolve_workflows().await.unwrap();
                for (f, i) in flows.open() {
                    flows.settle(&client, f, i, Outcome::Cancelled).await;
                }
            }
            flows.compare(&client, seed, &format!("step {step}")).await;
        }
        started += flows.all.len() - 1;
        ended += flows.all.iter().skip(1).filter(|flow| flow.progress.end().is_some()).count();
    }
    assert!(
        started > 20 && ended > 10 && adds > 50 && refused > 2 && deletes > 2,
        "{started} {ended} {adds} {refused} {deletes}"
    );
    assert!(seen.iter().all(|&n| n >= 3), "the cases reached each kind of signal step: {seen:?}");
}
