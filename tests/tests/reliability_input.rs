//! Bad input on a real PostgreSQL: each case gives a clear error naming the problem, and
//! the jobs already in the queue are neither lost nor changed (every test compares a
//! snapshot of them before and after).

use formica::{Error, Event, JobKeyMode, JobSpec, RawJob, Runtime};
use formica_tests::proxy::Proxy;
use formica_tests::{timeout, wait_until, Running, TestDb, Typed};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Every column of every job, as text, in id order.
async fn snapshot(db: &TestDb) -> Vec<String> {
    db.client()
        .await
        .query("select row_to_json(j)::text from graphile_worker._private_jobs j order by id", &[])
        .await
        .expect("read the jobs")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A few jobs of a task no worker here runs, of every shape: the bystanders.
async fn bystanders(db: &TestDb) -> Vec<String> {
    let utils = db.utils();
    let at = chrono::Utc::now() + chrono::Duration::hours(1);
    utils.add_raw_job("bystander", json!({"a": 1}), JobSpec::default()).await.unwrap();
    utils
        .add_raw_job(
            "bystander",
            json!([1, 2, 3]),
            JobSpec::builder().queue_name("q").job_key("k").priority(3).flags(["f"]).run_at(at).build(),
        )
        .await
        .unwrap();
    utils.add_raw_job("bystander", json!("text"), JobSpec::builder().max_attempts(2).build()).await.unwrap();
    let snap = snapshot(db).await;
    assert_eq!(snap.len(), 3);
    snap
}

fn rt() -> Arc<dyn Runtime> {
    Arc::new(formica_tokio::TokioRuntime)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_that_are_not_objects_reach_raw_tasks_verbatim_and_fail_typed_tasks_clearly() {
    let db = TestDb::migrated().await;
    let before = bystanders(&db).await;
    let utils = db.utils();
    let payloads = [json!([1, "two", null]), json!("a string"), json!(42), Value::Null, json!(true)];
    let mut typed = Vec::new();
    for p in &payloads {
        utils.add_raw_job("raw", p.clone(), JobSpec::builder().priority(-1).build()).await.unwrap();
        typed.push(utils.add_raw_job("typed", p.clone(), JobSpec::default()).await.unwrap().id);
    }
    let seen: Arc<Mutex<Vec<Value>>> = Default::default();
    let got = seen.clone();
    let worker = db
        .worker_options()
        .concurrency(1)
        .define_raw_job("raw", move |_, payload| {
            got.lock().unwrap().push(payload);
            async { Ok(()) }
        })
        .define_job::<Typed>()
        .init()
        .await
        .unwrap();
    timeout(rt().as_ref(), Duration::from_secs(20), worker.run_once()).await.expect("returns").expect("ok");
    // A JSON null is stored as given (only a missing payload becomes `{}`).
    assert_eq!(*seen.lock().unwrap(), payloads.to_vec(), "raw tasks get the payload as it was added");
    let client = db.client().await;
    for id in typed {
        let row = client
            .query_one("select attempts, last_error from graphile_worker._private_jobs where id = $1", &[&id])
            .await
            .unwrap();
        let error: String = row.get(1);
        assert_eq!(row.get::<_, i16>(0), 1);
        assert!(error.contains("payload does not match task \"typed\""), "{error}");
    }
    assert_eq!(snapshot(&db).await[..3], before[..], "the bystanders are untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10_mib_payload_is_stored_and_delivered_intact() {
    let db = TestDb::migrated().await;
    let before = bystanders(&db).await;
    let blob: String = (0..10 * 1024 * 1024).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let payload = json!({ "blob": blob, "tail": [1, 2, 3] });
    let job = db.utils().add_raw_job("big", payload.clone(), JobSpec::default()).await.unwrap();
    assert_eq!(job.payload, payload);
    let seen: Arc<Mutex<Option<Value>>> = Default::default();
    let got = seen.clone();
    let worker = db
        .worker_options()
        .define_raw_job("big", move |_, payload| {
            *got.lock().unwrap() = Some(payload);
            async { Ok(()) }
        })
        .init()
        .await
        .unwrap();
    timeout(rt().as_ref(), Duration::from_secs(30), worker.run_once()).await.expect("returns").expect("ok");
    assert!(seen.lock().unwrap().as_ref() == Some(&payload), "the task got the 10 MiB payload intact");
    assert_eq!(snapshot(&db).await, before, "the big job completed; the others are untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_keys_at_their_limits_work_and_over_them_are_refused_naming_the_field() {
    let db = TestDb::migrated().await;
    let before = bystanders(&db).await;
    let utils = db.utils();
    let (id128, queue128, key512) = ("i".repeat(128), "q".repeat(128), "k".repeat(512));

    // At the limits: added, and run by a worker that registers the 128-character task.
    let spec = JobSpec::builder().queue_name(queue128.clone()).job_key(key512.clone()).build();
    let edge = utils.add_raw_job(&id128, json!({}), spec).await.expect("at the limits");
    assert_eq!((edge.task_identifier.len(), edge.key.as_deref().map(str::len)), (128, Some(512)));
    let ran = Arc::new(Mutex::new(0));
    let count = ran.clone();
    let worker = db
        .worker_options()
        .define_raw_job(&id128, move |_, _| {
            *count.lock().unwrap() += 1;
            async { Ok(()) }
        })
        .init()
        .await
        .unwrap();
    timeout(rt().as_ref(), Duration::from_secs(20), worker.run_once()).await.expect("returns").expect("ok");
    assert_eq!(*ran.lock().unwrap(), 1);

    // Over them: refused before the database is asked, with the code and the length.
    let over: [(&str, JobSpec, &str); 5] = [
        (&"i".repeat(129), JobSpec::default(), "GWBID: task identifier must be 1 to 128 characters, got 129"),
        ("", JobSpec::default(), "GWBID"),
        (
            "t",
            JobSpec::builder().queue_name("q".repeat(129)).build(),
            "GWBQN: queue name must be at most 128 characters, got 129",
        ),
        (
            "t",
            JobSpec::builder().job_key("k".repeat(513)).build(),
            "GWBJK: job key must be 1 to 512 characters, got 513",
        ),
        ("t", JobSpec::builder().job_key("").build(), "GWBJK"),
    ];
    for (identifier, spec, expected) in &over {
        let err = utils.add_raw_job(identifier, json!({}), spec.clone()).await.expect_err(expected);
        assert!(matches!(err, Error::Spec(_)), "{err:?}");
        assert!(err.to_string().contains(expected), "{err}");
    }
    // One bad job refuses the whole batch: nothing of it is added.
    let mut batch: Vec<RawJob> = (0..3)
        .map(|n| RawJob { identifier: "t".into(), payload: json!({ "n": n }), spec: JobSpec::default() })
        .collect();
    batch[1].spec = JobSpec::builder().queue_name("q".repeat(200)).build();
    let err = utils.add_raw_jobs(&batch).await.expect_err("a bad job in the batch");
    assert!(err.to_string().contains("GWBQN"), "{err}");

    // Through SQL, around the Rust checks: the schema refuses them too, naming the column.
    let client = db.client().await;
    let sql_cases = [
        (format!("select graphile_worker.add_job('{}')", "i".repeat(129)), "identifier"),
        (format!("select graphile_worker.add_job('t', queue_name := '{}')", "q".repeat(129)), "queue_name"),
        (format!("select graphile_worker.add_job('t', job_key := '{}')", "k".repeat(513)), "key"),
    ];
    for (sql, column) in &sql_cases {
        let err = client.batch_execute(sql).await.expect_err("refused by the schema");
        let db_err = err.as_db_error().expect("a database error");
        println!("{column}: {} {}", db_err.code().code(), db_err.message());
        assert!(
            db_err.message().contains(column) || db_err.constraint().is_some_and(|c| c.contains(column)),
            "{column}: {db_err:?}"
        );
    }
    assert_eq!(snapshot(&db).await, before, "nothing added, nothing changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_job_key_mode_is_refused_with_gwbkm() {
    let db = TestDb::migrated().await;
    let before = bystanders(&db).await;
    let err = "merge".parse::<JobKeyMode>().expect_err("unknown mode");
    assert!(err.to_string().contains("GWBKM") && err.to_string().contains("merge"), "{err}");
    let err = db
        .client()
        .await
        .batch_execute("select graphile_worker.add_job('t', job_key := 'k', job_key_mode := 'merge')")
        .await
        .expect_err("refused");
    let db_err = err.as_db_error().expect("database error");
    assert_eq!(db_err.code().code(), "GWBKM");
    assert!(db_err.message().contains("Invalid job_key_mode"), "{}", db_err.message());
    // The key of an existing job is not touched by the refused call.
    let err = db
        .client()
        .await
        .batch_execute("select graphile_worker.add_job('bystander', job_key := 'k', job_key_mode := 'merge')")
        .await
        .expect_err("refused");
    assert_eq!(err.code().map(|c| c.code()), Some("GWBKM"));
    assert_eq!(snapshot(&db).await, before);
}

/// What `f` ended with, and how long it took.
async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let start = Instant::now();
    let out = f.await;
    (out, start.elapsed())
}

/// The error of `WorkerOptions::init` on `url`, within 10 s.
async fn init_error(url: &str) -> (String, Duration) {
    let (result, took) = timed(timeout(
        rt().as_ref(),
        Duration::from_secs(10),
        formica_tokio::WorkerOptions::default()
            .database_url(url)
            .define_raw_job("t", |_, _| async { Ok(()) })
            .init(),
    ))
    .await;
    match result.expect("init gave up within 10 s instead of hanging") {
        Ok(_) => panic!("init on {url:?} succeeded"),
        Err(e) => (e.to_string(), took),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_strings_that_point_nowhere_fail_fast_with_a_clear_error() {
    let db = TestDb::migrated().await;
    let before = bystanders(&db).await;
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (proxy, _) = Proxy::in_front_of(&db.url);
    proxy.hang_new_connections(true);
    let silent = format!("host=127.0.0.1 port={} user=postgres dbname=postgres", proxy.addr().port());
    let cases: Vec<(String, Vec<String>)> = vec![
        ("postgres://localhost:notaport/db".into(), vec!["invalid connection settings".into()]),
        ("host=".into(), vec!["invalid connection settings".into()]),
        (
            format!("host=127.0.0.1 port={closed_port} user=postgres"),
            vec![format!("could not connect to PostgreSQL at 127.0.0.1:{closed_port}"), "refused".into()],
        ),
        (
            "host=/nonexistent/formica port=5432".into(),
            vec!["/nonexistent/formica/.s.PGSQL.5432".into(), "No such file".into()],
        ),
        (
            db.url.replace(&format!("dbname={}", db.name), "dbname=formica_no_such_db"),
            vec!["database \"formica_no_such_db\" does not exist".into()],
        ),
        // A server that accepts and never answers: the connect timeout...
        (format!("{silent} connect_timeout=1"), vec!["no answer within 1s (connect_timeout)".into()]),
        // ... or, first, the response timeout.
        (format!("{silent} tcp_user_timeout=1"), vec!["no response from PostgreSQL for 1s".into()]),
    ];
    for (url, expected) in &cases {
        let (message, took) = init_error(url).await;
        println!("{url:?} -> after {took:?}: {message}");
        for e in expected {
            assert!(message.contains(e.as_str()), "{url:?}: {message:?} should say {e:?}");
        }
        assert!(took < Duration::from_secs(5), "{url:?} took {took:?}");
        // The utilities fail the same way.
        if let Ok(pool) = formica_tokio::pool(url, 1) {
            let err = formica::WorkerUtils::new(pool, "graphile_worker").migrate().await.expect_err("fails");
            assert!(err.to_string().contains(expected[0].as_str()), "{err}");
        }
    }
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_migrated_schema_gives_errors_naming_what_is_missing() {
    // The ledger lost its rows: the install is attempted, refused, and rolled back whole.
    let db = TestDb::migrated().await;
    let before = bystanders(&db).await;
    db.client().await.batch_execute("delete from graphile_worker.migrations").await.unwrap();
    let err = db.utils().migrate().await.expect_err("an installed schema without a ledger");
    let message = err.to_string();
    println!("ledger emptied: {message}");
    assert!(message.contains("graphile_worker") && message.contains("already exists"), "{message}");
    assert_eq!(snapshot(&db).await, before);

    // A table is gone: adding says which, and a worker reports it on every attempt.
    let db = TestDb::migrated().await;
    let before = bystanders(&db).await;
    db.client().await.batch_execute("drop table graphile_worker._private_job_queues cascade").await.unwrap();
    let after_drop = snapshot(&db).await;
    let err = db.utils().add_raw_job("t", json!({}), JobSpec::builder().queue_name("q2").build()).await;
    let message = err.expect_err("no queues table").to_string();
    assert!(message.contains("_private_job_queues") && message.contains("does not exist"), "{message}");
    let errors: Arc<Mutex<Vec<String>>> = Default::default();
    let seen = errors.clone();
    let worker = db
        .worker_options()
        .poll_interval(Duration::from_millis(100))
        .define_raw_job("bystander", |_, _| async { Ok(()) })
        .on_event(move |e| {
            if let Event::DatabaseError { error, .. } = e {
                seen.lock().unwrap().push(error.clone());
            }
        })
        .init()
        .await
        .expect("the ledger says the schema is current");
    let running = Running::spawn(&rt(), worker);
    wait_until(rt().as_ref(), Duration::from_secs(10), "the worker reported the missing table", || {
        errors.lock().unwrap().len() >= 2
    })
    .await;
    running.stop(Duration::from_secs(10)).await;
    let first = errors.lock().unwrap()[0].clone();
    assert!(first.contains("_private_job_queues") && first.contains("does not exist"), "{first}");
    // `run_once` does not wait forever for a table that will not come back: it says why.
    let once = db.worker_options().define_raw_job("bystander", |_, _| async { Ok(()) }).init().await.unwrap();
    let error = timeout(rt().as_ref(), Duration::from_secs(10), once.run_once())
        .await
        .expect("run_once returns")
        .expect_err("and fails");
    assert!(error.to_string().contains("_private_job_queues"), "{error}");
    // Dropping the table took its foreign key with it, and nothing else changed since.
    assert_eq!(before.len(), after_drop.len());
    assert_eq!(snapshot(&db).await, after_drop, "the worker changed no job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_owned_by_another_role_is_refused_naming_the_permission() {
    let db = TestDb::new().await;
    let (owner, user) = (format!("{}_owner", db.name), format!("{}_user", db.name));
    let admin = db.client().await;
    admin
        .batch_execute(&format!(
            "create role {owner} login; create role {user} login; grant create on database {} to {owner};",
            db.name
        ))
        .await
        .unwrap();
    let as_role = |role: &str| format!("{} user={role}", db.url.split(" user=").next().unwrap());
    // The owner installs the schema and adds a job.
    let owner_utils =
        formica::WorkerUtils::new(formica_tokio::pool(&as_role(&owner), 2).unwrap(), "graphile_worker");
    owner_utils.migrate().await.expect("the owner migrates");
    owner_utils
        .add_raw_job("bystander", json!({"keep": true}), JobSpec::builder().queue_name("q").build())
        .await
        .unwrap();
    let before = snapshot(&db).await;

    let user_url = as_role(&user);
    let user_utils = formica::WorkerUtils::new(formica_tokio::pool(&user_url, 2).unwrap(), "graphile_worker");
    let expected = "permission denied for schema graphile_worker";
    let migrate = user_utils.migrate().await.expect_err("no rights").to_string();
    println!("migrate: {migrate}");
    assert!(migrate.contains(expected) && migrate.contains("42501"), "{migrate}");
    let add =
        user_utils.add_raw_job("t", json!({}), JobSpec::default()).await.expect_err("no rights").to_string();
    assert!(add.contains(expected), "{add}");
    let (init, _) = init_error(&user_url).await;
    assert!(init.contains(expected), "{init}");
    assert_eq!(snapshot(&db).await, before, "the owner's job is untouched");

    drop((owner_utils, user_utils));
    let _ = admin
        .batch_execute(&format!("drop schema graphile_worker cascade; drop owned by {owner}, {user};"))
        .await;
    let server = formica_tests::connect(
        rt().as_ref(),
        &db.url.replace(&format!("dbname={}", db.name), "dbname=postgres"),
    )
    .await;
    let _ = server.batch_execute(&format!("revoke all on database {} from {owner}", db.name)).await;
    let _ = server.batch_execute(&format!("drop role if exists {owner}; drop role if exists {user};")).await;
}

/// Each concern has its own error, and the cause stays reachable through `source()`.
#[tokio::test]
async fn crontab_and_payload_errors_name_their_concern_and_keep_their_source() {
    let db = TestDb::migrated().await;
    let Err(e) = db.worker_options().with_cron("not a crontab line").init().await else {
        panic!("a bad crontab is refused")
    };
    assert!(matches!(e, formica::Error::Crontab { .. }), "{e:?}");
    assert!(e.to_string().starts_with("crontab text: "), "{e}");
    assert!(std::error::Error::source(&e).is_some());
    let missing = std::path::PathBuf::from("/nonexistent/crontab");
    let Err(e) = db.worker_options().with_cron(missing).init().await else {
        panic!("a missing crontab is refused")
    };
    assert!(e.to_string().starts_with("crontab file /nonexistent/crontab: "), "{e}");
    let source = std::error::Error::source(&e).expect("the I/O error");
    assert!(source.downcast_ref::<std::io::Error>().is_some());
}
