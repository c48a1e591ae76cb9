//! graphile-worker's schema and ledger as Formica migrates them, and the statements the
//! migrator runs (Formica's own records schema has its steps in `records`).
//!
//! The ledger in `migrations` holds ids 1 to 20 with the same `breaking` flags as
//! graphile-worker 0.18, so a database migrated by either is accepted by the other. A
//! fresh database gets the final schema in one step ([`INSTALL`], recorded as ids 1 to
//! 20); a database that graphile-worker migrated to 16 or later gets the missing
//! [`STEPS`]. Older ones must first be brought to 16 by graphile-worker itself.

/// The newest migration id Formica knows.
pub const LATEST: i32 = 20;
/// The oldest ledger state Formica upgrades from (graphile-worker's `_private_*` tables).
pub const OLDEST_UPGRADABLE: i32 = 16;
/// Migration ids that graphile-worker marks as breaking: a worker that knows fewer
/// refuses a database that has one of these.
pub const BREAKING: [i32; 7] = [1, 3, 11, 13, 14, 16, 19];

const ADD_JOBS_FN: &str = include_str!("../functions/add_jobs.sql");
const ADD_JOB_FN: &str = include_str!("../functions/add_job.sql");
const REMOVE_JOB_FN: &str = include_str!("../functions/remove_job.sql");
const ADMIN_FNS: &str = include_str!("../functions/admin.sql");

/// The whole schema, tables to functions, for a database that has none: recorded as
/// migrations 1 to [`LATEST`].
pub const INSTALL: &[&str] = &[
    include_str!("../migrations/schema.sql"),
    include_str!("../migrations/000017.sql"),
    ADD_JOBS_FN,
    ADD_JOB_FN,
    REMOVE_JOB_FN,
    ADMIN_FNS,
];

/// One upgrade step of the ledger.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// The ledger id it records.
    pub id: i32,
    /// Its SQL, in order, each with the schema placeholder.
    pub sql: &'static [&'static str],
}

impl Step {
    /// Whether graphile-worker counts this id as breaking.
    pub fn breaking(&self) -> bool {
        BREAKING.contains(&self.id)
    }
}

/// The steps after [`OLDEST_UPGRADABLE`], in order. Functions are written once, in their
/// final form, and (re)created by each step that changed them upstream.
pub const STEPS: &[Step] = &[
    Step { id: 17, sql: &[include_str!("../migrations/000017.sql")] },
    Step { id: 18, sql: &[include_str!("../migrations/000018.sql"), ADD_JOBS_FN, ADD_JOB_FN, REMOVE_JOB_FN] },
    Step { id: 19, sql: &[include_str!("../migrations/000019.sql")] },
    Step { id: 20, sql: &[include_str!("../migrations/000020.sql"), ADD_JOBS_FN, ADD_JOB_FN] },
];

/// Server version and the ledger's newest and newest breaking ids.
pub const PROBE: &str = include_str!("../queries/migration_probe.sql");
/// Creates the schema and an empty ledger if missing.
pub const BOOTSTRAP: &str = include_str!("../queries/migration_bootstrap.sql");
/// Records ledger rows (the concurrency guard; run first in the migration's transaction).
pub const RECORD: &str = include_str!("../queries/migration_record.sql");
/// Announces applied migrations on `worker:migrate`.
pub const NOTIFY: &str = include_str!("../queries/migration_notify.sql");
/// Marks breaking ids in a ledger written before the column existed; `$1` the ids.
pub const MARK_BREAKING: &str = "update :SCHEMA.migrations set breaking = true where id = any($1::int[])";
/// Creates the records schema and its empty ledger if missing.
pub const RECORDS_BOOTSTRAP: &str = include_str!("../queries/records_bootstrap.sql");
/// The records' migration ids applied.
pub const RECORDS_APPLIED: &str = include_str!("../queries/records_applied.sql");
/// Records one records migration (the concurrency guard, as `RECORD`).
pub const RECORDS_RECORD: &str = include_str!("../queries/records_record.sql");
