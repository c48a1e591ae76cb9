//! Test harness for Formica's integration tests: every test gets a database of its own on
//! the server named by `DATABASE_URL` (set by `scripts/test`), so tests run in parallel
//! and never see each other's jobs.

use formica_tokio::{Pool, WorkerUtils};
use std::sync::atomic::{AtomicU32, Ordering};
use tokio_postgres::Client;

/// A database created for one test.
pub struct TestDb {
    /// Its name.
    pub name: String,
    /// A connection string for it.
    pub url: String,
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
pub async fn connect(url: &str) -> Client {
    let config: tokio_postgres::Config = url.parse().expect("a valid connection string");
    formica_tokio::db::connect(&formica_tokio::TokioRuntime, &config)
        .await
        .expect("connect to the test server")
}

impl TestDb {
    /// A new, empty database.
    pub async fn new() -> TestDb {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "formica_test_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            chrono::Utc::now().timestamp_micros()
        );
        let admin = connect(&server_url()).await;
        admin.batch_execute(&format!("create database {name}")).await.expect("create test database");
        let url = with_database(&server_url(), &name);
        TestDb { name, url }
    }

    /// A new database with the schema installed in `graphile_worker`.
    pub async fn migrated() -> TestDb {
        let db = TestDb::new().await;
        db.utils().migrate().await.expect("migrate");
        db
    }

    /// A Formica pool on this database.
    pub fn pool(&self) -> Pool {
        formica_tokio::pool(&self.url, 4).expect("pool")
    }

    /// Utilities on the `graphile_worker` schema.
    pub fn utils(&self) -> WorkerUtils {
        self.utils_for("graphile_worker")
    }

    /// Utilities on `schema`.
    pub fn utils_for(&self, schema: &str) -> WorkerUtils {
        WorkerUtils::new(self.pool(), schema)
    }

    /// A plain client on this database.
    pub async fn client(&self) -> Client {
        connect(&self.url).await
    }
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
    let config: tokio_postgres::Config = url.parse().expect("a valid connection string");
    let (client, mut connection) =
        formica_tokio::db::connect_raw(&formica_tokio::TokioRuntime, &config).await.expect("connect");
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
