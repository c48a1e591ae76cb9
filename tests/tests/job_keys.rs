//! The job-key algorithm of `add_job`/`add_jobs`, exercised through plain SQL as any client
//! (a trigger, graphile-worker, Formica) would call it, case by case.

use formica_core::worker::FetchRequest;
use formica_tests::{listen, TestDb};
use futures::channel::mpsc::UnboundedReceiver;
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use tokio_postgres::{Client, Row};

/// A new migrated database, and a client on it.
struct Jobs {
    db: TestDb,
    client: Client,
}

impl Jobs {
    async fn new() -> Jobs {
        let db = TestDb::migrated().await;
        let client = db.client().await;
        Jobs { db, client }
    }

    /// `select * from graphile_worker.add_job(<args>)`.
    async fn add(&self, args: &str) -> Row {
        self.client
            .query_one(&format!("select * from graphile_worker.add_job({args})"), &[])
            .await
            .unwrap_or_else(|e| panic!("add_job({args}): {e:?}"))
    }

    async fn try_add(&self, args: &str) -> Result<Row, tokio_postgres::Error> {
        self.client.query_one(&format!("select * from graphile_worker.add_job({args})"), &[]).await
    }

    async fn all(&self) -> Vec<Row> {
        self.client
            .query("select j.*, j.payload::text as payload_text from graphile_worker._private_jobs j order by id", &[])
            .await
            .expect("read jobs")
    }

    async fn exec(&self, sql: &str) {
        self.client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    /// The one row of `sql`.
    async fn row(&self, sql: &str) -> Row {
        self.client.query_one(sql, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"))
    }
}

fn payload(row: &Row) -> Value {
    row.get("payload")
}

/// The payload of the next notification (within 5 s; panics with `what` if none comes).
async fn next_note(notes: &mut UnboundedReceiver<String>, what: &str) -> String {
    tokio::time::timeout(Duration::from_secs(5), notes.next()).await.expect(what).expect("listening")
}

/// The next notification's payload, as JSON.
async fn next_json_note(notes: &mut UnboundedReceiver<String>, what: &str) -> Value {
    serde_json::from_str(&next_note(notes, what).await).expect("a JSON payload")
}

#[tokio::test]
async fn replace_overwrites_a_pending_job_including_run_at() {
    let jobs = Jobs::new().await;
    let first = jobs
        .add("'a', '{\"v\":1}', 'q1', now() + interval '1 hour', 5, job_key => 'k', priority => 3, flags => array['f1']")
        .await;
    let second = jobs
        .add("'b', '{\"v\":2}', 'q2', now() + interval '2 hours', 7, job_key => 'k', priority => 4")
        .await;
    assert_eq!(first.get::<_, i64>("id"), second.get::<_, i64>("id"), "same row");
    let all = jobs.all().await;
    assert_eq!(all.len(), 1);
    let row = &all[0];
    assert_eq!(payload(row), json!({"v": 2}));
    assert_eq!(row.get::<_, i32>("revision"), 1);
    assert_eq!(row.get::<_, i16>("max_attempts"), 7);
    assert_eq!(row.get::<_, i16>("priority"), 4);
    assert_eq!(row.get::<_, Option<Value>>("flags"), None, "flags replaced too");
    let later: bool = jobs
        .row("select run_at > now() + interval '90 minutes' from graphile_worker._private_jobs")
        .await
        .get(0);
    assert!(later, "run_at replaced");
    let r = jobs.row("select task_identifier, queue_name from graphile_worker.jobs").await;
    let names: (String, String) = (r.get(0), r.get(1));
    assert_eq!(names, ("b".into(), "q2".into()), "task and queue replaced");
}

#[tokio::test]
async fn preserve_run_at_keeps_run_at_only_while_unattempted() {
    let jobs = Jobs::new().await;
    jobs.add("'t', '{\"v\":1}', run_at => '2030-01-01Z', job_key => 'k'").await;
    let kept = jobs
        .add("'t', '{\"v\":2}', run_at => '2040-01-01Z', job_key => 'k', job_key_mode => 'preserve_run_at'")
        .await;
    assert_eq!(payload(&kept), json!({"v": 2}));
    let run_at: String =
        jobs.row("select run_at::date::text from graphile_worker._private_jobs").await.get(0);
    assert_eq!(run_at, "2030-01-01");

    // After a failed attempt the replacement's run_at wins and the attempt record resets.
    jobs.exec("update graphile_worker._private_jobs set attempts = 2, last_error = 'boom'").await;
    let replaced = jobs
        .add("'t', '{\"v\":3}', run_at => '2040-01-01Z', job_key => 'k', job_key_mode => 'preserve_run_at'")
        .await;
    assert_eq!(replaced.get::<_, i16>("attempts"), 0);
    assert_eq!(replaced.get::<_, Option<String>>("last_error"), None);
    let run_at: String =
        jobs.row("select run_at::date::text from graphile_worker._private_jobs").await.get(0);
    assert_eq!(run_at, "2040-01-01");
}

#[tokio::test]
async fn unsafe_dedupe_leaves_the_existing_job_alone_and_notifies_only_inserts() {
    let jobs = Jobs::new().await;
    let (_listener, mut notes) = listen(&jobs.db.url, "jobs:insert").await;
    let first = jobs.add("'t', '{\"v\":1}', job_key => 'k', job_key_mode => 'unsafe_dedupe'").await;
    assert_eq!(first.get::<_, i32>("revision"), 0);
    let note = next_json_note(&mut notes, "a notification").await;
    assert_eq!(note["count"], json!(1));
    assert!(note["r"].is_number(), "{note}");

    let again = jobs.add("'other', '{\"v\":2}', 'q', job_key => 'k', job_key_mode => 'unsafe_dedupe'").await;
    assert_eq!(again.get::<_, i64>("id"), first.get::<_, i64>("id"));
    assert_eq!(again.get::<_, i32>("revision"), 1);
    assert_eq!(payload(&again), json!({"v": 1}), "payload untouched");
    assert_eq!(again.get::<_, Option<i32>>("job_queue_id"), None, "queue untouched");

    // Even a locked or failed job is kept as it is.
    jobs.exec("update graphile_worker._private_jobs set locked_at = now(), locked_by = 'w', attempts = 1")
        .await;
    let locked = jobs.add("'t', '{\"v\":3}', job_key => 'k', job_key_mode => 'unsafe_dedupe'").await;
    assert_eq!(locked.get::<_, i64>("id"), first.get::<_, i64>("id"));
    assert_eq!(jobs.all().await.len(), 1);
    // Only the first call inserted: exactly one notification arrived.
    jobs.exec("notify \"jobs:insert\", 'marker'").await;
    let next = next_note(&mut notes, "marker").await;
    assert_eq!(next, "marker", "no notification for the deduplicated adds");
}

#[tokio::test]
async fn a_locked_job_gives_up_its_key_to_a_new_job() {
    let jobs = Jobs::new().await;
    let old = jobs.add("'t', '{\"v\":1}', job_key => 'k', max_attempts => 5").await;
    jobs.exec("update graphile_worker._private_jobs set locked_at = now(), locked_by = 'w', attempts = 1")
        .await;
    let new = jobs.add("'t', '{\"v\":2}', job_key => 'k'").await;
    assert_ne!(new.get::<_, i64>("id"), old.get::<_, i64>("id"));
    let all = jobs.all().await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].get::<_, Option<String>>("key"), None, "old job detached");
    assert_eq!(all[0].get::<_, i16>("attempts"), 5, "old job will not be retried");
    assert_eq!(
        all[0].get::<_, Option<String>>("locked_by").as_deref(),
        Some("w"),
        "still held by its worker"
    );
    assert_eq!(all[1].get::<_, Option<String>>("key").as_deref(), Some("k"));
    assert_eq!(payload(&all[1]), json!({"v": 2}));
}

#[tokio::test]
async fn a_permanently_failed_job_gives_up_its_key_to_a_new_job() {
    let jobs = Jobs::new().await;
    jobs.add("'t', '{\"v\":1}', job_key => 'k', max_attempts => 3").await;
    jobs.exec("update graphile_worker._private_jobs set attempts = 3, last_error = 'dead'").await;
    for mode in ["replace", "preserve_run_at"] {
        jobs.add(&format!("'t', '{{\"mode\":\"{mode}\"}}', job_key => 'k', job_key_mode => '{mode}'")).await;
    }
    let all = jobs.all().await;
    assert_eq!(all.len(), 2, "the failed job was detached once, then the new one replaced");
    assert_eq!(all[0].get::<_, Option<String>>("key"), None);
    assert_eq!(all[0].get::<_, Option<String>>("last_error").as_deref(), Some("dead"));
    assert_eq!(payload(&all[1]), json!({"mode": "preserve_run_at"}));
    assert_eq!(all[1].get::<_, i32>("revision"), 1);
}

#[tokio::test]
async fn array_payloads_merge_only_when_both_are_arrays() {
    let jobs = Jobs::new().await;
    jobs.add("'t', '[1, {\"a\": 1}]', job_key => 'k'").await;
    let merged = jobs.add("'t', '[2]', job_key => 'k'").await;
    assert_eq!(payload(&merged), json!([1, {"a": 1}, 2]));
    let object = jobs.add("'t', '{\"o\": true}', job_key => 'k'").await;
    assert_eq!(payload(&object), json!({"o": true}), "an object replaces an array");
    let array = jobs.add("'t', '[3]', job_key => 'k'").await;
    assert_eq!(payload(&array), json!([3]), "an array replaces an object");
    let omitted = jobs.add("'t', job_key => 'k'").await;
    assert_eq!(payload(&omitted), json!({}), "an omitted payload is {{}} and replaces");
}

#[tokio::test]
async fn job_key_mode_is_checked_only_with_a_key() {
    let jobs = Jobs::new().await;
    let err = jobs.try_add("'t', job_key => 'k', job_key_mode => 'merge'").await.expect_err("invalid mode");
    assert_eq!(err.code().map(|c| c.code()), Some("GWBKM"));
    assert!(jobs.all().await.is_empty());
    jobs.add("'t', job_key_mode => 'merge'").await;
    assert_eq!(jobs.all().await.len(), 1, "an invalid mode without a key is accepted, as in graphile-worker");
}

#[tokio::test]
async fn limits_are_enforced_by_the_schema() {
    let jobs = Jobs::new().await;
    let cases = [
        (format!("'{}'", "t".repeat(129)), "tasks_identifier_check"),
        (format!("'t', queue_name => '{}'", "q".repeat(129)), "job_queues_queue_name_check"),
        (format!("'t', job_key => '{}'", "k".repeat(513)), "jobs_key_check"),
        ("'t', job_key => ''".to_owned(), "jobs_key_check"),
        ("'t', max_attempts => 0".to_owned(), "jobs_max_attempts_check"),
    ];
    for (args, constraint) in cases {
        let err = jobs.try_add(&args).await.expect_err(constraint);
        let db_err = err.as_db_error().expect("a database error");
        assert_eq!(db_err.code().code(), "23514", "{args}");
        assert_eq!(db_err.constraint(), Some(constraint));
    }
    let err = jobs.try_add("'t', priority => 40000").await.expect_err("smallint");
    assert_eq!(err.code().map(|c| c.code()), Some("22003"));
    jobs.add(&format!(
        "'{}', queue_name => '{}', job_key => '{}'",
        "t".repeat(128),
        "q".repeat(128),
        "k".repeat(512)
    ))
    .await;
    assert_eq!(jobs.all().await.len(), 1, "values at the limits are accepted");
}

#[tokio::test]
async fn add_jobs_handles_keys_in_one_batch_and_notifies_the_count() {
    let jobs = Jobs::new().await;
    let (_listener, mut notes) = listen(&jobs.db.url, "jobs:insert").await;
    jobs.add("'t', '{\"old\":1}', job_key => 'a'").await;
    next_note(&mut notes, "first notification").await;
    let rows = jobs
        .client
        .query(
            "select * from graphile_worker.add_jobs(array[
               ('t', '{\"new\":1}', null, null, null, 'a', null, null)::graphile_worker.job_spec,
               ('t', '{\"new\":2}', 'q', null, null, 'b', null, array['x'])::graphile_worker.job_spec,
               ('u', null, null, null, null, null, null, null)::graphile_worker.job_spec])",
            &[],
        )
        .await
        .expect("add_jobs");
    assert_eq!(rows.len(), 3);
    let note = next_json_note(&mut notes, "batch notification").await;
    assert_eq!(note["count"], json!(3));
    let all = jobs.all().await;
    assert_eq!(all.len(), 3, "key 'a' was updated in place");
    assert_eq!(payload(&all[0]), json!({"new": 1}));
    assert_eq!(all[1].get::<_, Option<Value>>("flags"), Some(json!({"x": true})));

    let err = jobs
        .client
        .query(
            "select * from graphile_worker.add_jobs(array[
               ('t', null, null, null, null, 'dup', null, null)::graphile_worker.job_spec,
               ('t', null, null, null, null, 'dup', null, null)::graphile_worker.job_spec])",
            &[],
        )
        .await
        .expect_err("one key twice in a batch");
    assert_eq!(err.code().map(|c| c.code()), Some("21000"));
    let empty = jobs
        .client
        .query("select * from graphile_worker.add_jobs(array[]::graphile_worker.job_spec[])", &[])
        .await;
    assert_eq!(empty.expect("empty batch").len(), 0);
}

#[tokio::test]
async fn task_and_queue_rows_are_created_once_without_burning_ids() {
    let jobs = Jobs::new().await;
    for _ in 0..5 {
        jobs.add("'t', queue_name => 'q'").await;
    }
    jobs.add("'t2', queue_name => 'q2'").await;
    let ids: Vec<(i32, i32)> = jobs
        .client
        .query(
            "select (select max(id) from graphile_worker._private_tasks), (select max(id) from graphile_worker._private_job_queues)",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(ids, vec![(2, 2)], "identity values are consumed only by real inserts");
}

#[tokio::test]
async fn remove_job_deletes_an_unlocked_job_and_detaches_a_locked_one() {
    let jobs = Jobs::new().await;
    let (_listener, mut notes) = listen(&jobs.db.url, "jobs:insert").await;
    jobs.add("'t', job_key => 'free'").await;
    jobs.add("'t', job_key => 'busy', max_attempts => 4").await;
    jobs.exec("update graphile_worker._private_jobs set locked_at = now(), locked_by = 'w', attempts = 1 where key = 'busy'").await;
    for _ in 0..2 {
        next_note(&mut notes, "insert notifications").await;
    }
    let removed = jobs.row("select * from graphile_worker.remove_job('free')").await;
    assert_eq!(removed.get::<_, Option<String>>("key").as_deref(), Some("free"));
    let note = next_json_note(&mut notes, "removal notification").await;
    assert_eq!(note["count"], json!(-1));

    let busy = jobs.row("select * from graphile_worker.remove_job('busy')").await;
    assert_eq!(busy.get::<_, Option<String>>("key"), None);
    assert_eq!(busy.get::<_, i16>("attempts"), 4);
    let all = jobs.all().await;
    assert_eq!(all.len(), 1, "the locked job stays until its worker finishes");
    assert_eq!(all[0].get::<_, Option<String>>("locked_by").as_deref(), Some("w"));

    let none = jobs.row("select (graphile_worker.remove_job('nothing')).id").await;
    assert_eq!(none.get::<_, Option<i64>>(0), None);
}

/// A worker gives back jobs it holds but will not run (prefetched, snoozed, or locked by a
/// fetch whose answer it lost), refunding the attempt. A job that add_job replaced or
/// remove_job removed while it was held keeps its attempts used up instead: given back, it
/// must not run beside the job that replaced it. Every other job gets its attempt back,
/// one on its last attempt too.
#[tokio::test]
async fn a_job_replaced_or_removed_while_held_is_not_revived_when_given_back() {
    use formica::statements::{bind, Catalog};
    use formica_core::worker::{Snooze, Statement};
    let jobs = Jobs::new().await;
    let catalog = Catalog::new("graphile_worker", false).unwrap();
    let run = |statement: Statement| {
        let bound = bind(&catalog, statement, &[]);
        let (sql, client) = (bound.sql.to_owned(), &jobs.client);
        async move { client.query(&sql, &bound.values()).await.expect("statement") }
    };
    for args in [
        "'t', job_key => 'replaced', max_attempts => 3",
        "'t', job_key => 'removed'",
        "'t', job_key => 'kept'",
    ] {
        jobs.add(args).await;
    }
    jobs.add("'t', max_attempts => 1").await;
    let fetched = run(Statement::GetJobs(FetchRequest {
        worker_id: "w".into(),
        task_identifiers: vec!["t".into()],
        forbidden_flags: vec![],
        accepted_flags: vec![],
        limit: 10,
        now: None,
        excluded_queues: vec![],
        caps: vec![],
        limits: vec![],
        fair: vec![],
        walk_priorities: false,
    }))
    .await;
    let ids: Vec<i64> = fetched.iter().map(|r| r.get("id")).collect();
    let [replaced, removed, kept, last_attempt] = ids[..] else { panic!("four jobs locked: {ids:?}") };
    let new = jobs.add("'t', job_key => 'replaced'").await.get::<_, i64>("id");
    jobs.row("select * from graphile_worker.remove_job('removed')").await;

    run(Statement::ReturnJobs { worker_id: "w".into(), ids: vec![replaced, kept] }).await;
    let snooze = Snooze { job_id: removed, delay: chrono::Duration::seconds(1), run_at: None };
    run(Statement::SnoozeJobs { worker_id: "w".into(), snoozes: vec![snooze] }).await;
    run(Statement::ReturnUnknown { worker_id: "w".into(), known: vec![] }).await;

    let rows = jobs.all().await;
    let state = |id: i64| {
        let row = rows.iter().find(|r| r.get::<_, i64>("id") == id).expect("the job is there");
        (row.get::<_, i16>("attempts"), row.get::<_, bool>("is_available"))
    };
    assert_eq!(state(replaced), (3, false), "replaced: its attempts stay used up");
    assert_eq!(state(removed), (25, false), "removed: its attempts stay used up");
    assert_eq!(state(kept), (0, true), "refunded");
    assert_eq!(state(last_attempt), (0, true), "refunded on its last attempt too");
    assert_eq!(state(new), (0, true), "the replacement runs");
    assert!(rows.iter().all(|r| r.get::<_, Option<String>>("locked_by").is_none()), "all given back");
}

/// Under `use_local_time` a fetch is dated by the worker's clock, which may be behind the
/// database's. Every fetch (plain, capped, rate limited) locks at the later of the two, so a
/// job updated by the database's clock just before its lock (here: added) does not look
/// "replaced while held", and is refunded when given back on its last attempt.
#[tokio::test]
async fn a_job_locked_by_a_worker_whose_clock_is_behind_is_refunded_when_given_back() {
    use formica::statements::{bind, Catalog};
    use formica_core::flow::Control;
    use formica_core::worker::Statement;
    let jobs = Jobs::new().await;
    let catalog = Catalog::new("graphile_worker", false).unwrap();
    let behind: chrono::DateTime<chrono::Utc> = jobs.row("select now() - interval '1 minute'").await.get(0);
    let (cap, limit) = (Control::cap("t", 10), Control::rate_limit("t", 10, 60_000));
    for (fetch, caps, limits) in
        [("plain", vec![], vec![]), ("capped", vec![cap], vec![]), ("limited", vec![], vec![limit])]
    {
        jobs.exec("delete from graphile_worker._private_jobs").await;
        jobs.add("'t', run_at => now() - interval '2 minutes', max_attempts => 1").await;
        let statement = Statement::GetJobs(FetchRequest {
            worker_id: "w".into(),
            task_identifiers: vec!["t".into()],
            forbidden_flags: vec![],
            accepted_flags: vec![],
            limit: 10,
            now: Some(behind),
            excluded_queues: vec![],
            caps,
            limits,
            fair: vec![],
            walk_priorities: false,
        });
        let bound = bind(&catalog, statement, &[]);
        let fetched = jobs.client.query(bound.sql, &bound.values()).await.expect("fetch");
        let id: i64 = fetched.first().unwrap_or_else(|| panic!("{fetch}: the job is locked")).get("id");
        let bound = bind(&catalog, Statement::ReturnJobs { worker_id: "w".into(), ids: vec![id] }, &[]);
        jobs.client.query(bound.sql, &bound.values()).await.expect("return");
        let row = jobs
            .row(&format!("select attempts, is_available from graphile_worker._private_jobs where id = {id}"))
            .await;
        let state = (row.get::<_, i16>("attempts"), row.get::<_, bool>("is_available"));
        assert_eq!(state, (0, true), "{fetch}: refunded on its last attempt");
    }
}
