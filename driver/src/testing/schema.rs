//! [`TestSchema`]: a schema of its own for each test, so tests share one database and run
//! in parallel without seeing each other's jobs.

use crate::db::Pool;
use crate::error::Error;
use crate::utils::WorkerUtils;
use crate::worker::WorkerOptions;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// Drops a test's job schema and Formica's records schema beside it.
const DROP: &str = "drop schema if exists :SCHEMA cascade; drop schema if exists :RECORDS cascade";

/// A job schema made for one test on the database of a pool, migrated, with Formica's
/// records schema (`formica_<name>`). [`TestSchema::remove`] drops both; dropping the value
/// unremoved drops them on a thread of their own, best effort (a test binary that exits
/// at once may leave the last ones: their names start with `test_`).
///
/// ```no_run
/// # async fn example(pool: formica::Pool) -> Result<(), formica::Error> {
/// use formica::testing::{assert_enqueued, Expected, TestSchema};
///
/// let schema = TestSchema::new(pool).await?;
/// schema.utils().add_raw_job("send_email", serde_json::json!({ "to": "ada" }), Default::default()).await?;
/// assert_enqueued(schema.utils(), &Expected::task("send_email")).await;
/// schema.remove().await
/// # }
/// ```
pub struct TestSchema {
    utils: WorkerUtils,
    removed: bool,
}

impl TestSchema {
    /// A new schema, with a name no other test of any process has, on the database `pool`
    /// connects to, migrated.
    pub async fn new(pool: Pool) -> Result<TestSchema, Error> {
        let schema = TestSchema { utils: WorkerUtils::new(pool, unique_name()), removed: false };
        schema.utils.migrate().await?;
        Ok(schema)
    }

    /// Its name.
    pub fn name(&self) -> &str {
        self.utils.schema()
    }

    /// Utilities on it: add jobs, list them, and what [`super::assert_enqueued`] reads.
    pub fn utils(&self) -> &WorkerUtils {
        &self.utils
    }

    /// Options for a worker on it, on the pool's database and runtime: define the handlers,
    /// then `init` and run it, or give the options to [`super::drain`].
    pub fn worker_options(&self) -> WorkerOptions {
        let source = self.utils.pool();
        // A pool of the worker's own: connections it opens from its threads may end with
        // them, and must not be left to the test's pool.
        let pool = Pool::new(source.runtime().clone(), source.settings().clone(), source.max_size());
        WorkerOptions::with_runtime(source.runtime().clone()).pool(pool).schema(self.name())
    }

    /// Drop the schema and its records schema.
    pub async fn remove(mut self) -> Result<(), Error> {
        let client = self.utils.pool().get().await?;
        client.batch_execute(&formica_sql::render(DROP, self.name())).await?;
        self.removed = true;
        Ok(())
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // The test's runtime may end with the test: a thread of its own, if the runtime
        // has one, which ends once the drop is done.
        let source = self.utils.pool();
        let Some(Ok(thread)) = source.runtime().dedicated("formica-test-schema") else { return };
        let pool = Pool::new(thread.clone(), source.settings().clone(), 1).idle_timeout(None);
        let sql = formica_sql::render(DROP, self.name());
        thread.spawn(Box::pin(async move {
            if let Ok(client) = pool.get().await {
                if let Err(e) = client.batch_execute(&sql).await {
                    tracing::warn!(error = %e, "dropping a test schema failed");
                }
            }
        }));
    }
}

/// `test_<hash>_<n>`: the hash of the process id and a random seed, and a counter, so
/// parallel tests of one process or many never meet.
fn unique_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("test_{:016x}_{}", hasher.finish(), COUNTER.fetch_add(1, Ordering::Relaxed))
}
