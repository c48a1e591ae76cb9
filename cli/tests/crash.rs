//! A `formica` worker process killed with SIGKILL (or paused with SIGSTOP) while it runs
//! jobs.
//!
//! What the worker held stays locked until its lease lapses: no other worker runs those
//! jobs (nor the rest of their named queues) meanwhile. Then a live worker's recovery sweep
//! frees them and another worker runs them again, queues in order, within
//! `LEASE + SUSPICION_GRACE + 8/3 RECOVERY_PERIOD` plus a poll, without anyone acting;
//! `formica unlock --even-if-alive <worker id>` does it at once (a plain `unlock` is
//! refused while the lease runs). A worker that was only paused and comes back cannot
//! disturb the new run: its late writes name it as the locker, and it no longer is. The
//! task programs of a killed worker die with it: they do not go on running jobs that are
//! now unlocked.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_tests::TestDb;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn worker(db: &TestDb, tasks: &Path) -> Worker {
    common::worker(&db.url, tasks, &["-j", "4", "--poll-interval", "200"])
}

/// A worker whose log (stdout and stderr) goes to the file `log`.
fn worker_logging_to(db: &TestDb, tasks: &Path, log: &Path) -> Worker {
    let file = std::fs::File::create(log).unwrap();
    let mut command = common::worker_command(&db.url, tasks, &["-j", "4", "--poll-interval", "200"]);
    command.stdout(file.try_clone().unwrap()).stderr(file);
    Worker(command.spawn().expect("start formica"))
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// Processes whose command line mentions `needle`.
fn processes_running(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(format!("{}: {cmdline}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}

async fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

use crate::common;
use common::{write_task, Worker};

fn formica(db: &TestDb, args: &[&str]) -> String {
    common::ok(&db.url, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_s_jobs_stay_locked_until_unlocked_then_run_again_elsewhere() {
    let db = TestDb::migrated().await;
    let root: PathBuf = std::env::temp_dir().join(format!("formica-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (first, second) = (root.join("first"), root.join("second"));
    // The first worker's task starts, then takes 3 s; the second's is quick. Both log the
    // job id (and attempt) to a file beside them.
    write_task(
        &first,
        "slow.sh",
        "#!/bin/sh\nd=$(dirname \"$0\")\necho \"$GRAPHILE_WORKER_JOB_ID\" >> \"$d/started\"\nsleep 3\n\
         echo \"$GRAPHILE_WORKER_JOB_ID\" >> \"$d/finished\"\n",
    );
    write_task(
        &second,
        "slow.sh",
        "#!/bin/sh\necho \"$GRAPHILE_WORKER_JOB_ID $GRAPHILE_WORKER_JOB_ATTEMPTS\" >> \"$(dirname \"$0\")/ran\"\n",
    );
    let utils = db.utils();
    let spec = |queue: Option<&str>| {
        let b = formica_tokio::JobSpec::builder();
        match queue {
            Some(q) => b.queue_name(q).build(),
            None => b.build(),
        }
    };
    let mut ids = Vec::new();
    for queue in [Some("q"), Some("q"), None, None] {
        ids.push(utils.add_raw_job("slow", serde_json::json!({}), spec(queue)).await.unwrap().id);
    }
    let (q1, q2) = (ids[0], ids[1]);

    let mut a = worker(&db, &first);
    wait_until(Duration::from_secs(15), "three tasks started (one per queue slot)", || {
        lines(&first.join("started")).len() == 3
    })
    .await;
    let holders: Vec<String> = db
        .client()
        .await
        .query(
            "select distinct locked_by from graphile_worker._private_jobs where locked_by is not null",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(holders.len(), 1, "{holders:?}");
    let dead = holders[0].clone();
    assert!(Command::new("kill").args(["-KILL", &a.0.id().to_string()]).status().unwrap().success());
    a.0.wait().unwrap();

    // Its task programs died with it (they would have slept 3 s more).
    wait_until(Duration::from_secs(1), "the killed worker's task programs exited", || {
        processes_running(first.to_str().unwrap()).is_empty()
    })
    .await;

    let locked = "select count(*) from graphile_worker._private_jobs where locked_by is not null";
    assert_eq!(db.count(locked).await, 3, "the dead worker's jobs stay locked");
    assert_eq!(
        db.count("select count(*) from graphile_worker._private_job_queues where locked_by is not null")
            .await,
        1,
        "and its queue"
    );
    let status = formica(&db, &["status", "--json"]);
    assert!(status.contains(&dead), "status names the worker holding locks: {status}");

    // A new worker leaves locked jobs alone, and the rest of the locked queue too.
    let mut b = worker(&db, &second);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        lines(&second.join("ran")),
        Vec::<String>::new(),
        "nothing runs while the dead worker holds it"
    );

    let held =
        |table: &str| format!("select count(*) from graphile_worker.{table} where locked_by = '{dead}'");
    let (jobs, queues) =
        (db.count(&held("_private_jobs")).await, db.count(&held("_private_job_queues")).await);
    assert!(jobs > 0 && queues > 0, "the dead worker holds jobs ({jobs}) and a queue ({queues})");
    // Its lease still says it is alive: a plain unlock is refused; knowing it is dead,
    // the operator says so.
    let refused = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "unlock", &dead, "nobody"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("is alive until"), "{stderr}");
    assert_eq!(db.count(&held("_private_jobs")).await, jobs, "nothing unlocked");
    let unlocked = formica(&db, &["unlock", &dead, "nobody", "--even-if-alive", "--json"]);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&unlocked).unwrap(),
        serde_json::json!({ "unlocked": [
            { "worker": dead, "jobs": jobs, "queues": queues },
            { "worker": "nobody", "jobs": 0, "queues": 0 },
        ] }),
        "unlock says what each worker held"
    );
    wait_until(Duration::from_secs(15), "every job ran on the second worker", || {
        lines(&second.join("ran")).len() == 4
    })
    .await;
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    assert_eq!(
        db.count("select count(*) from graphile_worker._private_job_queues where locked_by is not null")
            .await,
        0,
        "the queue is free"
    );
    let ran = lines(&second.join("ran"));
    let attempt = |id: i64| {
        ran.iter()
            .find_map(|l| l.strip_prefix(&format!("{id} ")))
            .unwrap_or_else(|| panic!("job {id} ran on the second worker: {ran:?}"))
            .to_owned()
    };
    for &id in &ids {
        // The crashed attempt counts; the job that never started is on its first.
        assert_eq!(attempt(id), if id == q2 { "1" } else { "2" }, "job {id}");
    }
    let position = |id: i64| ran.iter().position(|l| l.starts_with(&format!("{id} "))).unwrap();
    assert!(position(q1) < position(q2), "the queue kept its order: {ran:?}");

    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!first.join("finished").exists(), "no task of the killed worker finished after it died");
    assert!(Command::new("kill").args(["-TERM", &b.0.id().to_string()]).status().unwrap().success());
    assert!(b.0.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&root);
}

/// Whether process `pid` is running (a zombie, dead and waiting to be reaped, is not).
fn alive(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// A task program starts a child of its own and waits for it; the worker is then stopped
/// by force (two SIGTERMs: the job is aborted) or killed (SIGKILL). Either way the program
/// and its child are gone soon after: nothing of the job goes on running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_program_and_its_children_die_on_abort_and_when_the_worker_is_killed() {
    let db = TestDb::migrated().await;
    let root: PathBuf = std::env::temp_dir().join(format!("formica-groups-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    write_task(
        &root,
        "spawner.sh",
        "#!/bin/sh\nsleep 300 &\necho \"$$ $!\" > \"$(dirname \"$0\")/pids-$GRAPHILE_WORKER_JOB_ID\"\nwait\n",
    );
    for signals in [&["-TERM", "-TERM"][..], &["-KILL"][..]] {
        let job = db.utils().add_raw_job("spawner", serde_json::json!({}), Default::default()).await.unwrap();
        let pids_file = root.join(format!("pids-{}", job.id));
        let mut w = worker(&db, &root);
        wait_until(Duration::from_secs(15), "the program started its child", || lines(&pids_file).len() == 1)
            .await;
        let pids: Vec<String> = lines(&pids_file)[0].split(' ').map(str::to_owned).collect();
        assert!(pids.iter().all(|p| alive(p)), "{pids:?} run");
        for signal in signals {
            assert!(Command::new("kill").args([*signal, &w.0.id().to_string()]).status().unwrap().success());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        w.0.wait().unwrap();
        wait_until(Duration::from_secs(5), &format!("after kill {signals:?}, {pids:?} are gone"), || {
            !pids.iter().any(|p| alive(p))
        })
        .await;
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// The longest a dead worker's jobs wait before another worker runs them: its lease, the
/// longest gap between recovery sweeps (the one that suspects it), the grace, another gap
/// (the one that frees it), then a poll interval (200 ms here; the sweep also wakes
/// listening workers), plus slack for a loaded machine.
fn recovery_bound() -> Duration {
    let lease = (formica_tokio::LEASE + formica_tokio::SUSPICION_GRACE).to_std().unwrap();
    let sweeps = formica_tokio::RECOVERY_PERIOD.to_std().unwrap() * 8 / 3;
    lease + sweeps + Duration::from_millis(200) + Duration::from_secs(5)
}

fn holders(rows: Vec<formica_tokio::tokio_postgres::Row>) -> Vec<Option<String>> {
    rows.iter().map(|r| r.get(0)).collect()
}

/// Without anyone acting, a SIGKILLed worker's jobs and named queue are taken back once
/// its lease lapses and the grace passes, and run on another worker within
/// `LEASE + SUSPICION_GRACE + 8/3 RECOVERY_PERIOD` (plus a poll). The crashed attempts
/// count, and the named queue keeps its order: the freed job runs before those queued
/// after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_s_jobs_run_again_elsewhere_automatically_within_the_lease_bound() {
    let db = TestDb::migrated().await;
    let root: PathBuf = std::env::temp_dir().join(format!("formica-recovery-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (first, second) = (root.join("first"), root.join("second"));
    write_task(
        &first,
        "long.sh",
        "#!/bin/sh\necho \"$GRAPHILE_WORKER_JOB_ID\" >> \"$(dirname \"$0\")/started\"\nsleep 300\n",
    );
    write_task(
        &second,
        "long.sh",
        "#!/bin/sh\necho \"$GRAPHILE_WORKER_JOB_ID $GRAPHILE_WORKER_JOB_ATTEMPTS\" >> \"$(dirname \"$0\")/ran\"\n",
    );
    let utils = db.utils();
    let mut ids = Vec::new();
    for queue in [Some("q"), Some("q"), Some("q"), None] {
        let spec = match queue {
            Some(q) => formica_tokio::JobSpec::builder().queue_name(q).build(),
            None => formica_tokio::JobSpec::builder().build(),
        };
        ids.push(utils.add_raw_job("long", serde_json::json!({}), spec).await.unwrap().id);
    }
    let mut a = worker(&db, &first);
    wait_until(Duration::from_secs(15), "two tasks started (one per queue slot)", || {
        lines(&first.join("started")).len() == 2
    })
    .await;
    let mut b = worker(&db, &second);
    assert!(Command::new("kill").args(["-KILL", &a.0.id().to_string()]).status().unwrap().success());
    let killed = Instant::now();
    a.0.wait().unwrap();

    wait_until(recovery_bound(), "the dead worker's jobs ran on the second worker", || {
        !lines(&second.join("ran")).is_empty()
    })
    .await;
    let first_rerun = killed.elapsed();
    wait_until(Duration::from_secs(10), "every job ran on the second worker", || {
        lines(&second.join("ran")).len() == 4
    })
    .await;
    eprintln!("SIGKILL to the first job running again: {first_rerun:?} (bound {:?})", recovery_bound());
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    let client = db.client().await;
    let queue_holders =
        client.query("select locked_by from graphile_worker._private_job_queues", &[]).await.unwrap();
    assert_eq!(holders(queue_holders), vec![None], "the queue is free");
    let ran = lines(&second.join("ran"));
    for (&id, attempt) in ids.iter().zip(["2", "1", "1", "2"]) {
        assert!(ran.contains(&format!("{id} {attempt}")), "job {id} on attempt {attempt}: {ran:?}");
    }
    let queue_order: Vec<i64> = ran
        .iter()
        .filter_map(|line| line.split(' ').next()?.parse().ok())
        .filter(|id| ids[..3].contains(id))
        .collect();
    assert_eq!(queue_order, ids[..3], "q ran in order, its freed job first");
    assert!(Command::new("kill").args(["-TERM", &b.0.id().to_string()]).status().unwrap().success());
    assert!(b.0.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&root);
}

/// A worker paused past its lease (SIGSTOP) loses its job to another worker; when it comes
/// back (SIGCONT) and reports the job done, the write is fenced off by `locked_by`: the new
/// run's job and queue lock are untouched, and the job leaves only when the new run ends.
/// The paused worker logs its outcome as fenced off, naming the new holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_s_late_completion_leaves_the_new_run_alone() {
    let db = TestDb::migrated().await;
    let root: PathBuf = std::env::temp_dir().join(format!("formica-fence-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (first, second) = (root.join("first"), root.join("second"));
    // The first run ends (successfully) while its worker is stopped; the second run takes
    // a while, so that the first worker's late completion arrives during it.
    write_task(
        &first,
        "job.sh",
        "#!/bin/sh\nd=$(dirname \"$0\")\necho started >> \"$d/log\"\nsleep 2\necho finished >> \"$d/log\"\n",
    );
    write_task(
        &second,
        "job.sh",
        "#!/bin/sh\nd=$(dirname \"$0\")\necho started >> \"$d/log\"\nsleep 10\necho finished >> \"$d/log\"\n",
    );
    let spec = formica_tokio::JobSpec::builder().queue_name("q").build();
    let job = db.utils().add_raw_job("job", serde_json::json!({}), spec).await.unwrap().id;
    std::fs::create_dir_all(&root).unwrap();
    let a_log = root.join("a.log");
    let mut a = worker_logging_to(&db, &first, &a_log);
    wait_until(Duration::from_secs(15), "the first run started", || lines(&first.join("log")).len() == 1)
        .await;
    let client = db.client().await;
    let job_holder = "select locked_by from graphile_worker._private_jobs";
    let queue_holder = "select locked_by from graphile_worker._private_job_queues";
    let first_id = holders(client.query(job_holder, &[]).await.unwrap());
    let pid = a.0.id().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());

    let mut b = worker(&db, &second);
    wait_until(recovery_bound(), "the second worker took the job", || lines(&second.join("log")).len() == 1)
        .await;
    let second_id = holders(client.query(job_holder, &[]).await.unwrap());
    assert_ne!(second_id, first_id);
    assert!(lines(&first.join("log")).contains(&"finished".to_owned()), "the first run ended meanwhile");
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    // The first worker writes its completion (at once, and its lease is renewed).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(lines(&second.join("log")).len() == 1, "the second run is still running");
    assert_eq!(
        holders(client.query(job_holder, &[]).await.unwrap()),
        second_id,
        "job {job} kept its new run"
    );
    assert_eq!(holders(client.query(queue_holder, &[]).await.unwrap()), second_id, "and its queue lock");
    let new_holder = second_id[0].clone().expect("held");
    let fenced: Vec<String> =
        lines(&a_log).into_iter().filter(|l| l.contains("outcome not written")).collect();
    assert!(
        fenced.len() == 1 && fenced[0].contains(&format!("job_id={job}")) && fenced[0].contains(&new_holder),
        "the first worker logs its outcome as fenced off by {new_holder}: {:?}",
        lines(&a_log)
    );

    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(15)).await;
    assert_eq!(lines(&second.join("log")), ["started", "finished"], "it left when the new run ended");
    assert_eq!(holders(client.query(queue_holder, &[]).await.unwrap()), vec![None]);
    for w in [&mut a, &mut b] {
        assert!(Command::new("kill").args(["-TERM", &w.0.id().to_string()]).status().unwrap().success());
        assert!(w.0.wait().unwrap().success());
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// `formica cancel`: a waiting job fails for good at once with the reason; a running one's
/// worker aborts its program and fails it for good the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn formica_cancel_fails_a_waiting_job_and_aborts_a_running_one() {
    let db = TestDb::migrated().await;
    let root: PathBuf = std::env::temp_dir().join(format!("formica-cancel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    write_task(
        &root,
        "long.sh",
        "#!/bin/sh\necho \"$GRAPHILE_WORKER_JOB_ID\" >> \"$(dirname \"$0\")/started\"\nsleep 300\n",
    );
    let utils = db.utils();
    let waiting = utils.add_raw_job("other", serde_json::json!({}), Default::default()).await.unwrap().id;
    let out = formica(&db, &["cancel", &waiting.to_string(), "--reason", "not needed", "--json"]);
    assert!(out.contains(&format!("\"failed\":[{waiting}]")), "{out}");

    let running = utils.add_raw_job("long", serde_json::json!({}), Default::default()).await.unwrap().id;
    let mut w = worker(&db, &root);
    wait_until(Duration::from_secs(15), "the task started", || lines(&root.join("started")).len() == 1).await;
    // The worker's listener is up by now (it is connected before the first fetch answers).
    let out = formica(&db, &["cancel", &running.to_string(), "--json"]);
    assert!(out.contains(&format!("\"recorded\":[{{\"id\":{running},\"leased\":true,")), "{out}");
    let failed = "select count(*) from graphile_worker.jobs where attempts = max_attempts \
                  and last_error like 'cancelled: %' and locked_by is null";
    db.wait_for_count(failed, 2, Duration::from_secs(10)).await;
    wait_until(Duration::from_secs(5), "the program was killed", || {
        processes_running(root.join("long.sh").to_str().unwrap()).is_empty()
    })
    .await;
    assert!(Command::new("kill").args(["-TERM", &w.0.id().to_string()]).status().unwrap().success());
    assert!(w.0.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&root);
}

/// A job on its last attempt (max_attempts 1) whose worker is SIGKILLed mid-run: the live
/// worker's recovery frees it out of attempts, and the lost attempt leaves the trace of a
/// failure: `last_error` names the attempt and the dead worker, its history row says it
/// failed, and it is among the failed jobs that `formica jobs --failed` lists and
/// `formica retry --state permanently_failed` (and `--all`) picks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_last_attempt_dies_with_its_worker_fails_for_good_with_a_trace() {
    let db = TestDb::migrated().await;
    let root: PathBuf = std::env::temp_dir().join(format!("formica-lost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    write_task(
        &root,
        "long.sh",
        "#!/bin/sh\necho \"$GRAPHILE_WORKER_JOB_ID\" >> \"$(dirname \"$0\")/started\"\nsleep 300\n",
    );
    let spec = formica_tokio::JobSpec::builder().max_attempts(1).build();
    let job = db.utils().add_raw_job("long", serde_json::json!({}), spec).await.unwrap().id;
    let mut a = worker(&db, &root);
    wait_until(Duration::from_secs(15), "the task started", || lines(&root.join("started")).len() == 1).await;
    let client = db.client().await;
    let dead: String = client
        .query_one("select locked_by from graphile_worker._private_jobs where id = $1", &[&job])
        .await
        .unwrap()
        .get(0);
    assert!(Command::new("kill").args(["-KILL", &a.0.id().to_string()]).status().unwrap().success());
    a.0.wait().unwrap();
    // Another worker, whose task would record a run: there must be none.
    let second = root.join("second");
    write_task(&second, "long.sh", "#!/bin/sh\necho ran >> \"$(dirname \"$0\")/ran\"\n");
    let mut b = worker(&db, &second);
    let freed =
        format!("select count(*) from graphile_worker._private_jobs where id = {job} and locked_at is null");
    db.wait_for_count(&freed, 1, recovery_bound()).await;

    let row = client
        .query_one(
            "select attempts, max_attempts, last_error from graphile_worker._private_jobs where id = $1",
            &[&job],
        )
        .await
        .unwrap();
    let (attempts, max_attempts, last_error): (i16, i16, Option<String>) =
        (row.get(0), row.get(1), row.get(2));
    assert_eq!((attempts, max_attempts), (1, 1), "the lost attempt counts");
    assert_eq!(last_error, Some(formica_core::worker::lapsed_error(&dead, 1)));
    let history = client
        .query(
            "select outcome, worker_id, attempts, last_error, started_at is not null \
             from formica_graphile_worker.job_history where job_id = $1",
            &[&job],
        )
        .await
        .unwrap();
    assert_eq!(history.len(), 1, "one history row");
    let (outcome, worker_id, attempts, error, started): (String, Option<String>, i16, Option<String>, bool) =
        (history[0].get(0), history[0].get(1), history[0].get(2), history[0].get(3), history[0].get(4));
    assert_eq!(
        (outcome.as_str(), worker_id.as_deref(), attempts, started),
        ("failed", Some(dead.as_str()), 1, true)
    );
    assert_eq!(error, last_error);

    let failed: serde_json::Value =
        serde_json::from_str(&formica(&db, &["jobs", "--failed", "--json"])).unwrap();
    let listed: Vec<i64> = failed.as_array().unwrap().iter().map(|j| j["id"].as_i64().unwrap()).collect();
    assert_eq!(listed, vec![job], "formica jobs --failed lists it");
    for filter in [&["--state", "permanently_failed"][..], &["--all"][..]] {
        let args = [&["retry"][..], filter, &["--dry-run", "--json"][..]].concat();
        let counted: serde_json::Value = serde_json::from_str(&formica(&db, &args)).unwrap();
        assert_eq!(counted["jobs"], 1, "formica {args:?} counts it: {counted}");
    }
    assert!(lines(&second.join("ran")).is_empty(), "out of attempts, it did not run again");
    assert!(Command::new("kill").args(["-TERM", &b.0.id().to_string()]).status().unwrap().success());
    assert!(b.0.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(&root);
}
