//! Test harness for Formica's integration tests: every test gets a database of its own on
//! the server named by `DATABASE_URL` (set by `scripts/test`), so tests run in parallel
//! and never see each other's jobs.

pub mod certs;
pub mod cluster;
pub mod dashboard;
#[cfg(doctest)]
pub mod doctests;
pub mod node;
pub mod otlp;
pub mod pgbouncer;
pub mod proxy;
pub mod roles;
pub mod spoiled;
pub mod workflows;

/// The address a `formica` process started with `--metrics-addr HOST:0 --log-format json`
/// serves its metrics at, read from its log on `stderr` (the port is the system's choice);
/// the rest of the log is drained on a thread, or the process would block on a full pipe.
pub fn metrics_address(stderr: std::process::ChildStderr) -> String {
    use std::io::BufRead;
    let mut stderr = std::io::BufReader::new(stderr);
    let mut line = String::new();
    let address = loop {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "formica exited before serving metrics");
        let log: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if log["message"] == "serving metrics at /metrics" {
            break log["address"].as_str().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    address
}

use formica::{JobContext, Pool, Runtime, Task, TaskHandler, TaskResult, Worker, WorkerHandle, WorkerUtils};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// A database created for one test, and the runtime the test runs on.
pub struct TestDb {
    /// Its name.
    pub name: String,
    /// A connection string for it.
    pub url: String,
    /// The runtime connections are made with.
    pub runtime: Arc<dyn Runtime>,
}

fn server_url() -> String {
    std::env::var("DATABASE_URL").expect(
        "DATABASE_URL is not set: run the tests through scripts/test, which starts a PostgreSQL server",
    )
}

/// `url` with its database replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let mut config: tokio_postgres::Config =
        url.parse().expect("DATABASE_URL is not a valid connection string");
    config.dbname(db);
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(s) => s.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(|p| p.to_string()).collect();
    let mut s = format!("host={} dbname={db}", hosts.join(","));
    if !ports.is_empty() {
        s += &format!(" port={}", ports.join(","));
    }
    if let Some(user) = config.get_user() {
        s += &format!(" user={user}");
    }
    if let Some(pw) = config.get_password() {
        s += &format!(" password='{}'", String::from_utf8_lossy(pw).replace('\'', "\\'"));
    }
    s
}

/// Connect with tokio-postgres directly (for assertions that must not go through Formica).
pub async fn connect(runtime: &dyn Runtime, url: &str) -> Client {
    let settings = formica::ConnectionSettings::parse(url).expect("a valid connection string");
    formica::connect(runtime, &settings).await.expect("connect to the test server")
}

impl TestDb {
    /// A new, empty database, on tokio.
    pub async fn new() -> TestDb {
        TestDb::new_on(Arc::new(formica_tokio::TokioRuntime)).await
    }

    /// A new database with the schema installed in `graphile_worker`, on tokio.
    pub async fn migrated() -> TestDb {
        TestDb::migrated_on(Arc::new(formica_tokio::TokioRuntime)).await
    }

    /// A new database with the schema installed, on `runtime`.
    pub async fn migrated_on(runtime: Arc<dyn Runtime>) -> TestDb {
        let db = TestDb::new_on(runtime).await;
        db.utils().migrate().await.expect("migrate");
        db
    }

    /// A new, empty database, on `runtime`.
    pub async fn new_on(runtime: Arc<dyn Runtime>) -> TestDb {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "formica_test_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            chrono::Utc::now().timestamp_micros()
        );
        let admin = connect(runtime.as_ref(), &server_url()).await;
        admin.batch_execute(&format!("create database {name}")).await.expect("create test database");
        let url = with_database(&server_url(), &name);
        TestDb { name, url, runtime }
    }

    /// A Formica pool on this database.
    pub fn pool(&self) -> Pool {
        Pool::from_url(self.runtime.clone(), &self.url, 4).expect("pool")
    }

    /// Utilities on the `graphile_worker` schema.
    pub fn utils(&self) -> WorkerUtils {
        self.utils_for("graphile_worker")
    }

    /// Utilities on `schema`.
    pub fn utils_for(&self, schema: &str) -> WorkerUtils {
        WorkerUtils::new(self.pool(), schema)
    }

    /// This database's URL for `role`, whose password is `pw`.
    pub fn url_as(&self, role: &str) -> String {
        let others =
            self.url.split_whitespace().filter(|kv| !kv.starts_with("user=") && !kv.starts_with("password="));
        format!("{} user={role} password=pw", others.collect::<Vec<_>>().join(" "))
    }

    /// A plain client on this database.
    pub async fn client(&self) -> Client {
        connect(self.runtime.as_ref(), &self.url).await
    }

    /// Worker options on this database and runtime, polling rarely (LISTEN does the work).
    pub fn worker_options(&self) -> formica::WorkerOptions {
        formica::WorkerOptions::with_runtime(self.runtime.clone()).database_url(&self.url).max_pool_size(4)
    }

    /// One number from `sql`.
    pub async fn count(&self, sql: &str) -> i64 {
        self.client().await.query_one(sql, &[]).await.unwrap_or_else(|e| panic!("{sql}: {e:?}")).get(0)
    }

    /// From now on, count the statements that insert into `table` (not the rows: one
    /// statement may insert many); [`Self::inserting_statements`] reads the count.
    pub async fn count_inserting_statements(&self, table: &str) {
        let sql = format!(
            "create table if not exists public.inserting_statements (on_table text);
            create or replace function public.count_inserting_statement() returns trigger language plpgsql
              as $$ begin insert into public.inserting_statements values (tg_table_name); return null; end $$;
            create trigger count_inserting_statements after insert on {table}
              for each statement execute function public.count_inserting_statement();"
        );
        self.client().await.batch_execute(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }

    /// The statements counted since [`Self::count_inserting_statements`] that inserted into
    /// the table named `name` (unqualified).
    pub async fn inserting_statements(&self, name: &str) -> i64 {
        self.count(&format!("select count(*) from public.inserting_statements where on_table = '{name}'"))
            .await
    }

    /// Migrate Formica's records (after a test undid some of their steps), and check that
    /// every step is then recorded, once, and that migrating again changes nothing.
    pub async fn migrate_records_to_the_last_step(&self) {
        let steps =
            "select coalesce(array_agg(id order by id), '{}') from formica_graphile_worker.migrations";
        let every: Vec<i32> = formica_sql::RECORDS_STEPS.iter().map(|step| step.id).collect();
        let client = self.client().await;
        for _ in 0..2 {
            self.utils().migrate().await.unwrap_or_else(|e| panic!("migrate: {e}"));
            let applied: Vec<i32> =
                client.query_one(steps, &[]).await.unwrap_or_else(|e| panic!("{e:?}")).get(0);
            assert_eq!(applied, every, "every records step, once");
        }
    }

    /// Wait until `sql` returns `want` (checking every 20 ms), or panic after `within`.
    pub async fn wait_for_count(&self, sql: &str, want: i64, within: Duration) {
        let client = self.client().await;
        let deadline = Instant::now() + within;
        loop {
            let n: i64 = client.query_one(sql, &[]).await.expect(sql).get(0);
            if n == want {
                return;
            }
            assert!(Instant::now() < deadline, "{sql} gave {n}, expected {want} within {within:?}");
            sleep(self.runtime.as_ref(), Duration::from_millis(20)).await;
        }
    }
}

/// A job of `task` with the payload `{"n": n}` and no other setting.
pub fn numbered_job(task: &str, n: i64) -> formica::RawJob {
    formica::RawJob {
        identifier: task.into(),
        payload: serde_json::json!({ "n": n }),
        spec: formica::JobSpec::default(),
    }
}

/// Sleep on `runtime`.
pub async fn sleep(runtime: &dyn Runtime, duration: Duration) {
    runtime.sleep_until(Instant::now() + duration).await
}

/// `future`'s output, or `None` if it takes longer than `within`.
pub async fn timeout<T>(
    runtime: &dyn Runtime,
    within: Duration,
    future: impl Future<Output = T>,
) -> Option<T> {
    futures::pin_mut!(future);
    match futures::future::select(future, runtime.sleep_until(Instant::now() + within)).await {
        futures::future::Either::Left((value, _)) => Some(value),
        futures::future::Either::Right(_) => None,
    }
}

/// Wait until `done()` holds (checking every 10 ms), or panic with `what` after `within`.
pub async fn wait_until(runtime: &dyn Runtime, within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        sleep(runtime, Duration::from_millis(10)).await;
    }
}

/// A worker running in the background (`Worker::run` spawned on its runtime).
pub struct Running {
    runtime: Arc<dyn Runtime>,
    worker_id: String,
    handle: WorkerHandle,
    done: futures::channel::oneshot::Receiver<Result<(), formica::Error>>,
}

impl Running {
    /// Build the worker of `options`, start it on `runtime`, and return once its LISTEN
    /// connection is up (within 10 s), so that a job added now is announced to it.
    pub async fn listening(runtime: &Arc<dyn Runtime>, options: formica::WorkerOptions) -> Running {
        let (up_tx, up_rx) = futures::channel::oneshot::channel();
        let up_tx = std::sync::Mutex::new(Some(up_tx));
        let worker = options
            .on_event(move |e| {
                if matches!(e, formica::Event::ListenerUp) {
                    if let Some(tx) = up_tx.lock().unwrap_or_else(|e| e.into_inner()).take() {
                        let _ = tx.send(());
                    }
                }
            })
            .init()
            .await
            .expect("init");
        let running = Running::spawn(runtime, worker);
        timeout(runtime.as_ref(), Duration::from_secs(10), up_rx)
            .await
            .expect("listener up")
            .expect("listener up");
        running
    }

    /// Start `worker.run()` on `runtime`.
    pub fn spawn(runtime: &Arc<dyn Runtime>, worker: Worker) -> Running {
        let (tx, done) = futures::channel::oneshot::channel();
        let worker_id = worker.worker_id().to_owned();
        let handle = worker.handle();
        runtime.spawn(Box::pin(async move {
            let _ = tx.send(worker.run().await);
        }));
        Running { runtime: runtime.clone(), worker_id, handle, done }
    }

    /// The worker's id.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// A handle to stop it from anywhere.
    pub fn handle(&self) -> WorkerHandle {
        self.handle.clone()
    }

    /// Stop the worker gracefully; panics unless its `run()` returns `Ok` within `within`.
    pub async fn stop(self, within: Duration) {
        self.handle.stop();
        timeout(self.runtime.as_ref(), within, self.done)
            .await
            .expect("the worker stops")
            .expect("the worker's task ended without a result")
            .expect("the worker's run() is ok");
    }
}

/// A typed task, `typed` with a payload `{"n": <integer>}`, that inserts `n` and its job's
/// id into the table `ran (n int, job_id bigint)`, which the test creates.
#[derive(Serialize, Deserialize)]
pub struct Typed {
    /// The number it inserts.
    pub n: i64,
}

impl Task for Typed {
    const IDENTIFIER: &'static str = "typed";
}

impl TaskHandler for Typed {
    async fn run(self, ctx: JobContext) -> TaskResult {
        let client = ctx.client().await?;
        client
            .execute("insert into ran (n, job_id) values ($1, $2)", &[&(self.n as i32), &ctx.job().id])
            .await?;
        Ok(())
    }
}

/// Define each `async fn name(runtime: Arc<dyn Runtime>)` test once and run it on both
/// adapters: `tokio_runtime::name` and `async_std_runtime::name` (the latter with no tokio
/// runtime anywhere).
#[macro_export]
macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod tokio_runtime {
            $(
                #[test]
                fn $name() {
                    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio");
                    rt.block_on(super::$name(std::sync::Arc::new(formica_tokio::TokioRuntime)));
                }
            )*
        }
        mod async_std_runtime {
            $(
                #[test]
                fn $name() {
                    async_std::task::block_on(super::$name(std::sync::Arc::new(formica_async_std::AsyncStdRuntime)));
                }
            )*
        }
    };
}

/// The structure of `schema` as sorted lines of facts: relations, columns (types,
/// defaults, generated expressions, identity), constraints, indexes, the view's query,
/// composite types, functions (arguments with defaults, result, language, volatility,
/// strictness, security) and triggers. Function bodies are left out. The schema's name is
/// replaced by `<S>` so schemas of different names compare equal.
pub async fn schema_facts(client: &Client, schema: &str) -> Vec<String> {
    const FACTS: &str = r#"
      select format('relation %s kind=%s rls=%s', c.relname, c.relkind, c.relrowsecurity)
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1 and c.relkind in ('r', 'v', 'S', 'c', 'i')
    union all
      select format('column %s.%s #%s %s notnull=%s default=%s generated=%s identity=%s',
        c.relname, a.attname, a.attnum, format_type(a.atttypid, a.atttypmod), a.attnotnull,
        pg_get_expr(d.adbin, d.adrelid), a.attgenerated, a.attidentity)
      from pg_attribute a
      join pg_class c on c.oid = a.attrelid
      join pg_namespace n on n.oid = c.relnamespace
      left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
      where n.nspname = $1 and a.attnum > 0 and not a.attisdropped and c.relkind in ('r', 'v', 'c')
    union all
      select format('constraint %s on %s type=%s %s', con.conname, c.relname, con.contype, pg_get_constraintdef(con.oid))
      from pg_constraint con join pg_class c on c.oid = con.conrelid join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1
    union all
      select format('index %s', pg_get_indexdef(i.indexrelid))
      from pg_index i join pg_class c on c.oid = i.indexrelid join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1
    union all
      select format('sequence %s type=%s owned_by=%s', s.relname, format_type(seq.seqtypid, null),
        (select t.relname || '.' || a.attname from pg_depend d
           join pg_class t on t.oid = d.refobjid
           join pg_attribute a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
         where d.objid = s.oid and d.deptype in ('a', 'i')))
      from pg_class s join pg_sequence seq on seq.seqrelid = s.oid join pg_namespace n on n.oid = s.relnamespace
      where n.nspname = $1
    union all
      select format('view %s %s', c.relname, regexp_replace(pg_get_viewdef(c.oid), '\s+', ' ', 'g'))
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1 and c.relkind = 'v'
    union all
      select format('function %s(%s) returns %s lang=%s volatile=%s strict=%s secdef=%s setof=%s',
        p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), l.lanname,
        p.provolatile, p.proisstrict, p.prosecdef, p.proretset)
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace join pg_language l on l.oid = p.prolang
      where n.nspname = $1
    union all
      select format('trigger %s on %s', t.tgname, c.relname)
      from pg_trigger t join pg_class c on c.oid = t.tgrelid join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1 and not t.tgisinternal
    union all
      select format('type %s', c.relname)
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where n.nspname = $1 and c.relkind = 'c'
    "#;
    let rows = client.query(FACTS, &[&schema]).await.expect("read the catalog");
    let quoted = format!("\"{schema}\"");
    let mut facts: Vec<String> = rows
        .iter()
        .map(|r| {
            r.get::<_, String>(0)
                .replace(&format!("{quoted}."), "<S>.")
                .replace(&format!("{schema}."), "<S>.")
        })
        .collect();
    facts.sort();
    facts
}

/// The structure graphile-worker 0.18 leaves (the committed `pg_dump` fixture, loaded into
/// a database of its own), as [`schema_facts`].
pub async fn reference_facts() -> Vec<String> {
    let db = TestDb::new().await;
    let client = db.client().await;
    client
        .batch_execute(include_str!("../fixtures/graphile_worker_schema.sql"))
        .await
        .expect("load the reference schema fixture");
    schema_facts(&client, "graphile_worker").await
}

/// The ledger of `schema`: (id, breaking) in order.
pub async fn ledger(client: &Client, schema: &str) -> Vec<(i32, bool)> {
    client
        .query(&format!("select id, breaking from \"{schema}\".migrations order by id"), &[])
        .await
        .expect("read the ledger")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The ledger graphile-worker 0.18 writes.
pub fn expected_ledger() -> Vec<(i32, bool)> {
    (1..=20).map(|id| (id, [1, 3, 11, 13, 14, 16, 19].contains(&id))).collect()
}

/// A connection listening on `channel`, and the payloads of its notifications as they come.
pub async fn listen(url: &str, channel: &str) -> (Client, futures::channel::mpsc::UnboundedReceiver<String>) {
    use futures::StreamExt;
    let settings = formica::ConnectionSettings::parse(url).expect("a valid connection string");
    let (client, mut connection) =
        formica::connect_raw(&formica_tokio::TokioRuntime, &settings).await.expect("connect");
    let (tx, rx) = futures::channel::mpsc::unbounded();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.unbounded_send(n.payload().to_owned());
            }
        }
    });
    client.batch_execute(&format!("listen \"{channel}\"")).await.expect("listen");
    (client, rx)
}
