//! Workflows under crashes: 4 `formica` worker processes run diamonds (A → B, C → D) and a
//! 200-wide fan-out/fan-in (S → P0..P199 → F) while workers are SIGKILLed at random and
//! started again, and the worker running a D and the F is killed mid-run. Every job
//! completes, each exactly once, and no job starts before all it depends on completed.
//!
//! How a completed run is told from a killed one: each run of the task program appends
//! `start` and `end` lines (workflow job, graphile_worker job id, attempt, the worker's pid)
//! to one file, whose order is the order of the events. The run that completed is the one
//! whose attempt the job's history row records (a Formica worker writes the completion and
//! the history row in one statement); any other run of the job must have been on a worker
//! that was SIGKILLed: at-least-once, as a killed worker's jobs run again once its lease
//! lapses.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{worker, write_task, Worker};
use formica_tests::TestDb;
use formica_tokio::{Workflow, WorkflowJob};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The task: records its start and end, and sleeps `sleep` seconds between them.
const STEP: &str = "#!/bin/sh\n\
    input=$(cat)\n\
    name=$(echo \"$input\" | sed -n 's/.*\"name\":\"\\([^\"]*\\)\".*/\\1/p')\n\
    pause=$(echo \"$input\" | sed -n 's/.*\"sleep\":\"\\([^\"]*\\)\".*/\\1/p')\n\
    run=\"$name $GRAPHILE_WORKER_JOB_ID $GRAPHILE_WORKER_JOB_ATTEMPTS $PPID\"\n\
    log=\"$(dirname \"$0\")/../runs\"\n\
    echo \"start $run\" >> \"$log\"\n\
    sleep \"$pause\"\n\
    echo \"end $run\" >> \"$log\"\n";

const DIAMONDS: usize = 4;
const FAN: usize = 200;
/// The random kills, besides the two aimed at a D and at the F.
const RANDOM_KILLS: usize = 5;

/// One line of the runs file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Event {
    end: bool,
    job: String,
    job_id: i64,
    attempt: i16,
    pid: u32,
}

fn events(root: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(root.join("runs")).unwrap_or_default();
    text.lines()
        .filter(|line| line.ends_with(|c: char| c.is_ascii_digit())) // a line being written
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 5, "a run line: {line:?}");
            Event {
                end: f[0] == "end",
                job: f[1].to_owned(),
                job_id: f[2].parse().unwrap(),
                attempt: f[3].parse().unwrap(),
                pid: f[4].parse().unwrap(),
            }
        })
        .collect()
}

/// xorshift64*: the kills' times and victims, from a seed the test prints.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

fn job(name: &str, sleep: &str, depends_on: &[&str]) -> WorkflowJob {
    let payload = json!({ "name": name, "sleep": sleep });
    WorkflowJob::raw(name, "step", payload).depends_on(depends_on.iter().copied())
}

/// Workflows' names are unique here: the diamonds' jobs are `A`..`D` of each.
fn diamond(n: usize) -> Workflow {
    let named = |job_name: &str| format!("{job_name}{n}");
    let (a, b, c, d) = (named("A"), named("B"), named("C"), named("D"));
    Workflow::new(format!("diamond {n}"))
        .job(job(&a, "0.5", &[]))
        .job(job(&b, "1", &[&a]))
        .job(job(&c, "0.3", &[&a]))
        .job(job(&d, "3", &[&b, &c]))
}

fn fan() -> Workflow {
    let middles: Vec<String> = (0..FAN).map(|i| format!("P{i}")).collect();
    let mut workflow = Workflow::new("fan").job(job("S", "0.2", &[]));
    for p in &middles {
        workflow = workflow.job(job(p, "0.2", &["S"]));
    }
    let all: Vec<&str> = middles.iter().map(String::as_str).collect();
    workflow.job(job("F", "3", &all))
}

struct Fleet<'a> {
    db: &'a TestDb,
    tasks: &'a Path,
    workers: Vec<Worker>,
    killed: BTreeSet<u32>,
}

impl Fleet<'_> {
    fn start(&mut self) {
        self.workers.push(worker(&self.db.url, self.tasks, &["-j", "4", "--poll-interval", "200"]));
    }

    /// SIGKILL the worker at `index` and start another in its place.
    fn kill(&mut self, index: usize) {
        let mut victim = self.workers.swap_remove(index);
        let pid = victim.0.id();
        assert!(Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap().success());
        victim.0.wait().unwrap();
        self.killed.insert(pid);
        eprintln!("killed worker {pid}");
        self.start();
    }

    fn kill_pid(&mut self, pid: u32) {
        let index = self.workers.iter().position(|w| w.0.id() == pid).expect("a live worker ran it");
        self.kill(index);
    }

    fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.workers.iter().map(|w| w.0.id())
    }
}

/// The job's (first) run in progress, by a worker still alive, if there is one.
fn running(root: &Path, job: &str, live: &BTreeSet<u32>) -> Option<u32> {
    let events = events(root);
    let started = events.iter().rev().find(|e| e.job == job && !e.end && live.contains(&e.pid))?;
    let ended = events.iter().any(|e| e.end && e.job == job && e.attempt == started.attempt);
    (!ended).then_some(started.pid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diamonds_and_a_200_wide_fan_in_run_each_job_once_after_its_dependencies_through_sigkills() {
    let db = TestDb::migrated().await;
    let root = std::env::temp_dir().join(format!("formica-workflow-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let tasks = root.join("tasks");
    write_task(&tasks, "step.sh", STEP);
    let seed = std::env::var("FORMICA_CHAOS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    eprintln!("FORMICA_CHAOS_SEED={seed}");
    let mut rng = Rng(seed);

    let utils = db.utils();
    let mut workflows = Vec::new();
    for n in 0..DIAMONDS {
        workflows.push(utils.add_workflow(&diamond(n)).await.unwrap().id);
    }
    workflows.push(utils.add_workflow(&fan()).await.unwrap().id);

    let mut fleet = Fleet { db: &db, tasks: &tasks, workers: Vec::new(), killed: BTreeSet::new() };
    for _ in 0..4 {
        fleet.start();
    }
    // Random kills while the workflows run; then the worker of a D (the first seen running)
    // and of F, each killed mid-run.
    let started = Instant::now();
    let (mut random, mut aimed_d, mut aimed_f) = (0, None, false);
    let completed = "select count(*) from formica_graphile_worker.workflow_states where state = 'completed'";
    while random < RANDOM_KILLS || aimed_d.is_none() || !aimed_f {
        assert!(started.elapsed() < Duration::from_secs(240), "the kills were done within 4 minutes");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let live: BTreeSet<u32> = fleet.pids().collect();
        if aimed_d.is_none() {
            if let Some((d, pid)) =
                (0..DIAMONDS).find_map(|n| running(&root, &format!("D{n}"), &live).map(|pid| (n, pid)))
            {
                eprintln!("killing D{d}'s worker");
                fleet.kill_pid(pid);
                aimed_d = Some(d);
                continue;
            }
        }
        if !aimed_f {
            if let Some(pid) = running(&root, "F", &live) {
                eprintln!("killing F's worker");
                fleet.kill_pid(pid);
                aimed_f = true;
                continue;
            }
        }
        if random < RANDOM_KILLS && rng.below(15) == 0 {
            let index = rng.below(fleet.workers.len() as u64) as usize;
            fleet.kill(index);
            random += 1;
        }
        assert!(
            db.count(completed).await < workflows.len() as i64 || (aimed_d.is_some() && aimed_f),
            "every workflow completed before its D and F were killed mid-run"
        );
    }
    let last_kill = Instant::now();
    db.wait_for_count(completed, workflows.len() as i64, Duration::from_secs(150)).await;
    eprintln!(
        "{} workers killed; everything completed {:?} after the last kill, {:?} in all",
        fleet.killed.len(),
        last_kill.elapsed(),
        started.elapsed()
    );
    // A job only settles when its run's end is written; wait a moment for the last lines.
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;

    let client = db.client().await;
    let jobs: Vec<(String, i64, String)> = client
        .query("select name, job_id, state from formica_graphile_worker.workflow_jobs order by id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(jobs.len(), DIAMONDS * 4 + FAN + 2, "every job is there");
    // The attempt that completed each graphile_worker job, from history.
    let completed_attempt: BTreeMap<i64, Vec<i16>> = client
        .query(
            "select job_id, attempts from formica_graphile_worker.job_history where outcome = 'completed'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .fold(BTreeMap::new(), |mut m, r| {
            m.entry(r.get::<_, i64>(0)).or_insert_with(Vec::new).push(r.get(1));
            m
        });
    let events = events(&root);
    let spawned: BTreeSet<u32> = fleet.killed.iter().copied().chain(fleet.pids()).collect();
    let mut rerun = BTreeSet::new();
    for (name, job_id, state) in &jobs {
        assert_eq!(state, "completed", "{name}");
        let attempts = completed_attempt.get(job_id).cloned().unwrap_or_default();
        assert_eq!(attempts.len(), 1, "{name}'s job {job_id} completed once: {attempts:?}");
        let runs: Vec<&Event> = events.iter().filter(|e| e.job == *name).collect();
        assert!(
            runs.iter().all(|e| e.job_id == *job_id && spawned.contains(&e.pid)),
            "{name} was released once (one graphile_worker job) and ran on our workers: {runs:?}"
        );
        let completing = attempts[0];
        let (completed_runs, other_runs): (Vec<&Event>, Vec<&Event>) =
            runs.iter().filter(|e| !e.end).partition(|e| e.attempt == completing);
        assert_eq!(completed_runs.len(), 1, "{name} ran to completion exactly once: {runs:?}");
        assert!(
            runs.iter().any(|e| e.end && e.attempt == completing),
            "{name}'s completing run ended: {runs:?}"
        );
        for killed_run in other_runs {
            assert!(
                fleet.killed.contains(&killed_run.pid),
                "{name}'s run that did not complete was on a killed worker: {runs:?}"
            );
            rerun.insert(name.clone());
        }
    }
    // The order: each job's first start comes after every line of all it depends on.
    let position = |pred: &dyn Fn(&Event) -> bool| events.iter().position(pred);
    let last = |job: &str| events.iter().rposition(|e| e.job == job).unwrap();
    let mut dependencies: Vec<(String, Vec<String>)> = Vec::new();
    for n in 0..DIAMONDS {
        let named = |j: &str| format!("{j}{n}");
        dependencies.push((named("B"), vec![named("A")]));
        dependencies.push((named("C"), vec![named("A")]));
        dependencies.push((named("D"), vec![named("B"), named("C")]));
    }
    for i in 0..FAN {
        dependencies.push((format!("P{i}"), vec!["S".into()]));
    }
    dependencies.push(("F".into(), (0..FAN).map(|i| format!("P{i}")).collect()));
    for (job, on) in &dependencies {
        let first_start = position(&|e: &Event| e.job == *job && !e.end).unwrap();
        for dependency in on {
            assert!(
                last(dependency) < first_start,
                "{job} started (line {first_start}) after {dependency} ended for good (line {})",
                last(dependency)
            );
        }
    }
    let d = format!("D{}", aimed_d.unwrap());
    assert!(rerun.contains(&d) && rerun.contains("F"), "{d} and F were killed mid-run, then ran again");
    eprintln!("{} jobs ran again after a kill: {rerun:?}", rerun.len());
    drop(fleet);
    let _ = std::fs::remove_dir_all(&root);
}
