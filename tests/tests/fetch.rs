//! The worker's fetch (`sql/queries/worker/get_jobs.sql`) on a table shaped as production
//! tables are: many priorities, and jobs scheduled for later beside those due. The
//! differential test checks it against the model on small random tables; this one checks
//! the order and the bound on a wide one, in both of the statement's shapes: one scan of
//! the index, and the walk over the priorities present that follows a slow short fetch.

use chrono::{Duration, Utc};
use formica::statements::{bind, Catalog};
use formica_core::job::Job;
use formica_core::worker::FetchRequest;
use formica_core::worker::{QueryResult, Statement};
use formica_sql as sql;
use formica_tests::TestDb;

const PRIORITIES: i16 = 40;

#[tokio::test]
async fn the_fetch_takes_due_jobs_in_priority_order_across_many_priorities_and_none_due_later() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    // Per priority, two jobs due (at distinct times) and three scheduled for tomorrow, added
    // in an order unlike the fetch's.
    client
        .batch_execute(&format!(
            "select graphile_worker.add_job('t', json_build_object('p', p, 'i', i), priority => p,
               run_at => now() - interval '1 hour' + (i * {PRIORITIES} - p) * interval '1 second'
                 + case when i >= 2 then interval '1 day' else interval '0' end)
             from generate_series({lo}, {hi}) as p, generate_series(4, 0, -1) as i",
            lo = -PRIORITIES / 2,
            hi = PRIORITIES / 2 - 1,
        ))
        .await
        .unwrap();
    let due: Vec<(i16, i64)> = client
        .query(
            "select priority::smallint, id from graphile_worker._private_jobs
             where run_at <= now() order by priority, run_at, id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(due.len(), 2 * PRIORITIES as usize);
    // Within the first 32 priorities, across the 32nd, and more than are due; both shapes.
    for (limit, walk_priorities) in [3, 2 * 33 + 1, 1000].into_iter().flat_map(|l| [(l, false), (l, true)]) {
        let mut client = db.client().await;
        let tx = client.transaction().await.unwrap();
        let jobs = fetch(&tx, limit, walk_priorities).await;
        let fetched: Vec<(i16, i64)> = jobs.iter().map(|j| (j.priority, j.id)).collect();
        let expected = &due[..limit.min(due.len())];
        assert_eq!(fetched, expected, "limit {limit}, walking the priorities: {walk_priorities}");
        tx.rollback().await.unwrap();
    }
}

/// The rows the worker's fetch (by worker `w`, of task `t`) locks in `tx`, in one of its
/// two shapes.
async fn fetch(tx: &tokio_postgres::Transaction<'_>, limit: usize, walk_priorities: bool) -> Vec<Job> {
    let catalog = Catalog::new("graphile_worker", false).unwrap();
    let bound =
        bind(&catalog, get_jobs(limit, Some(Utc::now() + Duration::seconds(1)), walk_priorities), &[]);
    let rows = tx.query(bound.sql, &bound.values()).await.unwrap();
    let QueryResult::Jobs { jobs, .. } = bound.answer(&rows).unwrap() else { panic!("not jobs") };
    jobs
}

/// The worker's fetch by worker `w` of task `t`, due by `now` (`None`: the database clock).
fn get_jobs(limit: usize, now: Option<chrono::DateTime<Utc>>, walk_priorities: bool) -> Statement {
    Statement::GetJobs(FetchRequest {
        worker_id: "w".into(),
        task_identifiers: vec!["t".into()],
        forbidden_flags: vec![],
        accepted_flags: vec![],
        limit,
        now,
        excluded_queues: vec![],
        caps: vec![],
        limits: vec![],
        fair: vec![],
        walk_priorities,
    })
}

/// A fetch reads which named queues are free without locking them, then locks only the
/// queues of the jobs it chose, skipping one another fetch is locking (a queue runs one job
/// at a time): it leaves that queue's jobs as they are and takes the others'. The test
/// holds queue `busy`'s row as a fetch does between choosing and marking it.
#[tokio::test]
async fn a_fetch_leaves_the_jobs_of_a_queue_another_fetch_is_taking() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "select graphile_worker.add_job('t', '{}', queue_name => q, run_at => now() - i * interval '1 minute')
             from unnest(array['busy', 'busy', 'free', null]) with ordinality as jobs(q, i)",
        )
        .await
        .unwrap();
    let mut holder = db.client().await;
    let holding = holder.transaction().await.unwrap();
    holding
        .execute(
            "select 1 from graphile_worker._private_job_queues where queue_name = 'busy' for update",
            &[],
        )
        .await
        .unwrap();
    let queue_of = |job: &Job| job.queue_name.clone();
    for walk_priorities in [false, true] {
        let mut client = db.client().await;
        let tx = client.transaction().await.unwrap();
        let taken: Vec<_> = fetch(&tx, 10, walk_priorities).await.iter().map(queue_of).collect();
        assert_eq!(taken, [None, Some("free".to_owned())], "walking the priorities: {walk_priorities}");
        let marked = "select queue_name from graphile_worker._private_job_queues where locked_by = 'w'";
        let marked: Vec<String> = tx.query(marked, &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(marked, ["free"]);
        tx.rollback().await.unwrap();
    }
    holding.rollback().await.unwrap();
    let mut client = db.client().await;
    let tx = client.transaction().await.unwrap();
    let taken: Vec<_> = fetch(&tx, 10, false).await.iter().map(queue_of).collect();
    assert_eq!(taken, [None, Some("free".to_owned()), Some("busy".to_owned())], "one job of each queue");
}

/// The advisory locks waited for in the test's own database (`pg_locks` shows every
/// database's, and the tests run side by side).
const OUR_WAITS: &str = "locktype = 'advisory' and not granted
    and database = (select oid from pg_database where datname = current_database())";

/// Both fetch turns of the schema, each held by a transaction of the test's own (turn 0,
/// then turn 1), idle for as long as the test takes.
async fn hold_both_turns(db: &TestDb) -> Vec<tokio_postgres::Client> {
    let mut turns = Vec::new();
    for _ in 0..2 {
        let client = db.client().await;
        client.batch_execute(&sql::worker::fetch_begin("graphile_worker", true).unwrap()).await.unwrap();
        client.batch_execute("set local idle_in_transaction_session_timeout = 0").await.unwrap();
        turns.push(client);
    }
    turns
}

/// While another Formica worker is alive (its lease says so), a worker's fetch waits for one
/// of the two turns the workers of its schema share (`fetch_turn.sql`); alone, it takes
/// none. The test holds both turns from two transactions of its own.
#[tokio::test]
async fn a_fetch_waits_its_turn_only_while_another_formica_worker_is_alive() {
    use formica_tests::{wait_until, Running};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let db = TestDb::migrated().await;
    let rt = db.runtime.clone();
    let mut turns = hold_both_turns(&db).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let options = db.worker_options().define_raw_job("t", move |_, _| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Ok(()) }
    });
    let running = Running::listening(&rt, options).await;
    let (utils, client) = (db.utils(), db.client().await);
    let within = std::time::Duration::from_secs(10);
    utils.add_raw_job("t", serde_json::json!({}), Default::default()).await.unwrap();
    wait_until(rt.as_ref(), within, "alone, the job runs while both turns are held", || {
        ran.load(Ordering::SeqCst) == 1
    })
    .await;

    client
        .batch_execute(
            "insert into formica_graphile_worker.leases (worker_id, expires_at)
             values ('another', now() + interval '1 hour')",
        )
        .await
        .unwrap();
    // The next heartbeat (within 3 s) tells the worker; its next fetch then waits its turn.
    let waiting = format!("select count(*) from pg_locks where {OUR_WAITS}");
    let mut job = 1;
    while db.count(&waiting).await == 0 {
        assert!(job < 20, "no fetch waited for a turn");
        utils.add_raw_job("t", serde_json::json!({}), Default::default()).await.unwrap();
        job += 1;
        formica_tests::sleep(rt.as_ref(), std::time::Duration::from_millis(500)).await;
    }
    // The fetch waiting may be one that finds nothing (the one after a job ran): a job added
    // now waits with it, as a worker has one fetch out at a time.
    utils.add_raw_job("t", serde_json::json!({}), Default::default()).await.unwrap();
    job += 1;
    formica_tests::sleep(rt.as_ref(), std::time::Duration::from_millis(500)).await;
    let before = ran.load(Ordering::SeqCst);
    assert!(before < job, "a job waits with the fetch: {before} of {job} ran");
    // A waiting fetch waits for one turn drawn at random (objid: the turn of a two-key lock).
    let awaited = format!("select objid::integer from pg_locks where {OUR_WAITS}");
    let turn: i32 = client.query_one(&awaited, &[]).await.unwrap().get(0);
    turns.swap_remove(turn as usize).batch_execute("commit").await.unwrap();
    wait_until(rt.as_ref(), within, "given a turn, the fetch takes the jobs waiting", || {
        ran.load(Ordering::SeqCst) == job
    })
    .await;
    running.stop(within).await;
}

/// A worker alone learns that another started at once, not at its next heartbeat: the new
/// worker's first heartbeat tells the listening workers (`heartbeat.sql`), so a fleet
/// started together takes turns from its first fetch. The test holds both turns, starts the
/// second worker just after the first one's heartbeat, and sees both fetches wait well
/// before the first one's next heartbeat (3 s later).
#[tokio::test]
async fn a_worker_alone_takes_turns_as_soon_as_another_starts() {
    use formica_tests::{sleep, Running};
    use std::time::{Duration, Instant};
    let db = TestDb::migrated().await;
    let rt = db.runtime.clone();
    let turns = hold_both_turns(&db).await;
    let options = || db.worker_options().define_raw_job("t", |_, _| async { Ok(()) });
    let first = Running::listening(&rt, options()).await;
    let (utils, client) = (db.utils(), db.client().await);
    let beat = format!(
        "select heartbeat_at::text from formica_graphile_worker.leases where worker_id = '{}'",
        first.worker_id()
    );
    let heartbeat =
        || async { client.query_opt(&beat, &[]).await.unwrap().map(|row| row.get::<_, String>(0)) };
    let mut last = heartbeat().await;
    while last.is_none() {
        sleep(rt.as_ref(), Duration::from_millis(10)).await;
        last = heartbeat().await;
    }
    // Just after the first worker's heartbeat (which found it alone), the second starts.
    while heartbeat().await == last {
        sleep(rt.as_ref(), Duration::from_millis(10)).await;
    }
    let beaten = Instant::now();
    let second = Running::listening(&rt, options()).await;
    for _ in 0..2 {
        utils.add_raw_job("t", serde_json::json!({}), Default::default()).await.unwrap();
    }
    let waiting = format!("select count(*) from pg_locks where {OUR_WAITS}");
    while db.count(&waiting).await < 2 {
        let waited = beaten.elapsed();
        assert!(waited < Duration::from_millis(2500), "both fetches wait their turn within {waited:?}");
        sleep(rt.as_ref(), Duration::from_millis(10)).await;
    }
    for turn in turns {
        turn.batch_execute("commit").await.unwrap();
    }
    let left = "select count(*) from graphile_worker._private_jobs";
    while db.count(left).await > 0 {
        assert!(beaten.elapsed() < Duration::from_secs(10), "the jobs run once the turns are free");
        sleep(rt.as_ref(), Duration::from_millis(10)).await;
    }
    second.stop(Duration::from_secs(10)).await;
    first.stop(Duration::from_secs(10)).await;
}

/// A fetch's plan suits a table of any size (`fetch_begin.sql`, which begins every fetch's
/// transaction): after a quiet spell of fetches on a small table, a burst of jobs is read
/// through graphile-worker's main index, not scanned and sorted whole. Left to itself,
/// PostgreSQL may cache a generic plan after five fetches (as it did in the benchmark of
/// `fetch_begin.sql`); made on the small table, that plan scans the whole table once it is
/// large (the control: a session whose fetches begin by choosing the generic plan). The
/// burst is added in the transaction that explains the fetch, so that no analyze of the
/// table by autovacuum in between can change either plan.
#[tokio::test]
async fn a_fetch_reads_the_index_when_a_burst_of_jobs_follows_a_quiet_spell() {
    let db = TestDb::migrated().await;
    let catalog = Catalog::new("graphile_worker", false).unwrap();
    let fetch = bind(&catalog, get_jobs(10, None, false), &[]).sql.to_owned();
    let execute = "execute get_jobs('w', array['t'], array[]::text[], null, 10, array[]::text[])";
    let settings = sql::worker::fetch_begin("graphile_worker", false).unwrap();
    let generic = "begin; set local plan_cache_mode = force_generic_plan";
    for (begin, seq_scan) in [(settings.as_str(), false), (generic, true)] {
        let client = db.client().await;
        client
            .batch_execute(&format!(
                "prepare get_jobs(text, text[], text[], timestamptz, int, text[]) as {fetch}"
            ))
            .await
            .unwrap();
        for _ in 0..8 {
            client.batch_execute(begin).await.unwrap();
            client.batch_execute("select graphile_worker.add_job('t', '{}')").await.unwrap();
            assert_eq!(client.query(execute, &[]).await.unwrap().len(), 1);
            client.batch_execute("commit").await.unwrap();
        }
        client.batch_execute(begin).await.unwrap();
        client
            .batch_execute(
                "select graphile_worker.add_jobs(array(select json_populate_record(null::graphile_worker.job_spec,
                   '{\"identifier\": \"t\"}') from generate_series(1, 20000)))",
            )
            .await
            .unwrap();
        let plan: Vec<String> = client
            .query(&format!("explain (costs off) {execute}"), &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        let plan = plan.join("\n");
        assert_eq!(plan.contains("Seq Scan on _private_jobs"), seq_scan, "begun with {begin:?}:\n{plan}");
        assert_eq!(plan.contains("Index Scan using jobs_main_index"), !seq_scan, "{plan}");
        let fetched = client.query(execute, &[]).await.unwrap();
        assert_eq!(fetched.len(), 10, "begun with {begin:?}");
        client.batch_execute("rollback").await.unwrap();
    }
}

/// Jobs of one named queue sharing their `run_at` (as one `add_jobs` call adds them): the
/// head, fetched and given back, is the queue's head again at the next fetch of every shape
/// (plain, walking the priorities, capped, rate limited, fair), though giving it back moved its
/// row behind the others in graphile-worker's index (by priority and run_at only): ties go
/// by id. graphile-worker 0.18 runs it last.
#[tokio::test]
async fn a_queue_s_head_given_back_is_its_head_again_among_jobs_sharing_its_run_at() {
    use formica_core::flow::Control;
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "select graphile_worker.add_jobs(array(select ('t', json_build_object('n', n), 'q', now(),
               null, null, null, null)::graphile_worker.job_spec from generate_series(1, 5) as n))",
        )
        .await
        .unwrap();
    let catalog = Catalog::new("graphile_worker", false).unwrap();
    let run = |statement: Statement| {
        let (client, catalog) = (&client, &catalog);
        async move {
            let bound = bind(catalog, statement, &[]);
            let rows = client.query(bound.sql, &bound.values()).await.unwrap();
            bound.answer(&rows).unwrap()
        }
    };
    let head: i64 = client.query_one("select min(id) from graphile_worker.jobs", &[]).await.unwrap().get(0);
    let with_flow = |caps: Vec<Control>, limits: Vec<Control>| {
        let mut statement = get_jobs(10, None, false);
        if let Statement::GetJobs(FetchRequest { caps: c, limits: l, .. }) = &mut statement {
            (*c, *l) = (caps, limits);
        }
        statement
    };
    let shapes = [
        ("plain", get_jobs(10, None, false)),
        ("walking the priorities", get_jobs(10, None, true)),
        ("capped", with_flow(vec![Control::cap("t", 10)], vec![])),
        ("rate limited", with_flow(vec![], vec![Control::rate_limit("t", 1000, 1000)])),
        ("fair", {
            let mut fetch = get_jobs(10, None, false);
            if let Statement::GetJobs(FetchRequest { fair, .. }) = &mut fetch {
                *fair = vec![Control::fair("t", formica_core::flow::Partition::Field("n".into()))];
            }
            fetch
        }),
    ];
    for (shape, fetch) in [("plain", get_jobs(10, None, false))].into_iter().chain(shapes) {
        let QueryResult::Jobs { jobs, .. } = run(fetch).await else { panic!("not jobs") };
        let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, [head], "{shape}: the queue's head, once given back");
        run(Statement::ReturnJobs { worker_id: "w".into(), ids }).await;
    }
}

/// A Formica worker older than records migration 14, still running during a rollout, fetches
/// a capped task through `lock_jobs_capped`, now a call of the one controlled fetch function
/// (`lock_jobs_limited`): it keeps within the cap, counting what the newer workers hold.
#[tokio::test]
async fn an_older_worker_s_capped_fetch_keeps_within_the_cap() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "select graphile_worker.add_jobs(array(select ('t', json_build_object('n', n), null, null,
               null, null, null, null)::graphile_worker.job_spec from generate_series(1, 5) as n))",
        )
        .await
        .unwrap();
    let old = "select id from formica_graphile_worker.lock_jobs_capped('old', array['t'], '{}', null, 10,
        '{}', '{}', array['t'], array[3], array[null]::text[], array[null]::text[])";
    client
        .execute(
            "update graphile_worker._private_jobs set locked_by = 'new', locked_at = now() \
        where id = (select min(id) from graphile_worker._private_jobs)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(client.query(old, &[]).await.unwrap().len(), 2, "a cap of 3 with one job held elsewhere");
    assert_eq!(client.query(old, &[]).await.unwrap().len(), 0, "the cap is full");
    let locked: i64 = client
        .query_one("select count(*) from graphile_worker._private_jobs where locked_by = 'old'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(locked, 2);
}
