//! Prepared statements that the server refuses although the statement is right, and the
//! worker's way around each (the driver's `db/named.rs`):
//!
//! - through a real pgBouncer in transaction mode (see `formica_tests::pgbouncer`), server
//!   sessions are shared between clients, so a statement prepared on one is missing on the
//!   next (`prepared statement "s3" does not exist`) or collides with another process's of
//!   the same name (`... already exists`): the driver notices, warns once, and sends
//!   unnamed statements from then on; no job runs twice;
//! - a column added to `_private_jobs` makes cached plans fail (`cached plan must not change
//!   result type`): they are prepared again and the statement sent once more.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::Runtime;
use formica_tests::pgbouncer::PgBouncer;
use formica_tests::{numbered_job, sleep, TestDb};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Set in the second process: where it works.
const CHILD_BOUNCER_URL: &str = "FORMICA_TEST_PGBOUNCER_URL";
const CHILD_DIRECT_URL: &str = "FORMICA_TEST_DIRECT_URL";

/// What the warning says (a stable part of it).
const FALLBACK_WARNING: &str = "falling back to unnamed statements";

/// The log lines of this process, captured from `tracing`.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn install() -> Captured {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_env_filter("formica=warn")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// How many jobs the two workers share.
const JOBS: i64 = 200;

/// Run a worker with prepared statements on through `bouncer_url` until every one of the
/// `JOBS` jobs ran and none is left (for 1 s); each run takes 20 ms and inserts its job's `n`
/// and this process's id into `ran` over `direct_url` (not through pgBouncer).
async fn work_until_drained(rt: &Arc<dyn Runtime>, bouncer_url: &str, direct_url: &str) {
    let recorder = Arc::new(formica_tests::connect(rt.as_ref(), direct_url).await);
    let task_rt = rt.clone();
    let options: formica::WorkerOptions = formica::WorkerOptions::with_runtime(rt.clone())
        .database_url(bouncer_url)
        .prepared_statements(true)
        .max_pool_size(4)
        .concurrency(4)
        .poll_interval(Duration::from_millis(100))
        .define_raw_job("count", move |_, payload| {
            let (recorder, rt) = (recorder.clone(), task_rt.clone());
            async move {
                sleep(rt.as_ref(), Duration::from_millis(20)).await;
                let n = i32::try_from(payload["n"].as_i64().unwrap()).unwrap();
                let process = i32::try_from(std::process::id()).unwrap();
                recorder.execute("insert into ran (n, process) values ($1, $2)", &[&n, &process]).await?;
                formica::TaskResult::Ok(())
            }
        });
    let running = formica_tests::Running::spawn(rt, options.init().await.expect("init"));
    let watcher = formica_tests::connect(rt.as_ref(), direct_url).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done_since = None;
    loop {
        let sql = "select (select count(*) from graphile_worker.jobs), (select count(distinct n) from ran)";
        let row = watcher.query_one(sql, &[]).await.unwrap();
        let (left, ran): (i64, i64) = (row.get(0), row.get(1));
        match (left == 0 && ran == JOBS, done_since) {
            (true, None) => done_since = Some(Instant::now()),
            (true, Some(since)) if since.elapsed() > Duration::from_secs(1) => break,
            (true, Some(_)) => {}
            (false, _) => done_since = None,
        }
        assert!(Instant::now() < deadline, "{left} jobs left, {ran} of {JOBS} ran, after 2 minutes");
        sleep(rt.as_ref(), Duration::from_millis(100)).await;
    }
    running.stop(Duration::from_secs(20)).await;
}

/// The second worker process of `two_processes_through_pgbouncer_run_every_job_once`; does
/// nothing unless started by it.
#[test]
#[ignore = "started by two_processes_through_pgbouncer_run_every_job_once"]
fn second_worker_process() {
    let (Ok(bouncer_url), Ok(direct_url)) =
        (std::env::var(CHILD_BOUNCER_URL), std::env::var(CHILD_DIRECT_URL))
    else {
        return;
    };
    let captured = Captured::install();
    let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(work_until_drained(&rt, &bouncer_url, &direct_url));
    print!("{}", captured.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_through_pgbouncer_run_every_job_once() {
    let captured = Captured::install();
    let bouncer = PgBouncer::start();
    let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let db = TestDb::migrated().await;
    db.client().await.batch_execute("create table ran (n int not null, process int not null)").await.unwrap();
    let bouncer_url = bouncer.url(&db.name);
    // The same program in a second process: its statements are named s0, s1, ... as ours.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "prepared_statements::second_worker_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_BOUNCER_URL, &bouncer_url)
        .env(CHILD_DIRECT_URL, &db.url)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the second worker process");
    let jobs: Vec<formica::RawJob> = (0..JOBS).map(|n| numbered_job("count", n)).collect();
    db.utils().add_raw_jobs(&jobs).await.unwrap();
    work_until_drained(&rt, &bouncer_url, &db.url).await;
    let child = child.wait_with_output().unwrap();
    assert!(child.status.success(), "the second worker process failed");
    let child_log = String::from_utf8_lossy(&child.stdout);

    let processes = db.count("select count(distinct process) from ran").await;
    assert_eq!(processes, 2, "both workers ran jobs");
    let rows =
        db.client().await.query("select n, count(*) from ran group by n order by n", &[]).await.unwrap();
    let twice: Vec<(i32, i64)> =
        rows.iter().map(|r| (r.get(0), r.get(1))).filter(|&(_, runs)| runs != 1).collect();
    assert_eq!(twice, vec![], "(job, runs) of jobs not run exactly once");
    assert_eq!(rows.len() as i64, JOBS, "every job ran");
    let ours = captured.text();
    assert!(
        ours.contains(FALLBACK_WARNING) || child_log.contains(FALLBACK_WARNING),
        "a worker warned that it falls back; logs:\n{ours}\n--- second process:\n{child_log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_column_added_to_the_jobs_table_does_not_stop_a_running_worker() {
    let rt: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
    let db = TestDb::migrated().await;
    let ran = Arc::new(Mutex::new(Vec::new()));
    let seen = ran.clone();
    let options = db
        .worker_options()
        .prepared_statements(true)
        .poll_interval(Duration::from_millis(100))
        .define_raw_job("count", move |_, payload| {
            seen.lock().unwrap().push(payload["n"].as_i64().unwrap());
            async { formica::TaskResult::Ok(()) }
        });
    let running = formica_tests::Running::listening(&rt, options).await;
    // Every statement the worker runs is prepared on its connections by now.
    db.utils().add_raw_jobs(&[numbered_job("count", -1)]).await.unwrap();
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
    let admin = db.client().await;
    admin.batch_execute("alter table graphile_worker._private_jobs add column extra int").await.unwrap();
    let jobs: Vec<formica::RawJob> = (0..50).map(|n| numbered_job("count", n)).collect();
    db.utils().add_raw_jobs(&jobs).await.unwrap();
    db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(20)).await;
    running.stop(Duration::from_secs(10)).await;
    admin.batch_execute("alter table graphile_worker._private_jobs drop column extra").await.unwrap();
    let mut ran = ran.lock().unwrap().clone();
    ran.sort_unstable();
    assert_eq!(ran, (-1..50).collect::<Vec<_>>(), "every job ran once");
}
