//! Read-only statements of the queue's health (`formica::inspect::health`, behind
//! `formica doctor`, the metrics and the dashboard's banner): catalog views and statistics
//! only, so each is cheap on a table of any size and locks nothing.

/// What holds back vacuum's horizon in this database, oldest first.
pub const HORIZON: &str = include_str!("../queries/health/horizon.sql");
/// The tables of schema `$1` and their indexes: sizes, rows, vacuums, packed estimates.
pub const TABLES: &str = include_str!("../queries/health/tables.sql");
/// The facts of schema `$1` compared with [`EXPECTED`].
pub const SCHEMA_FACTS: &str = include_str!("../queries/health/schema_facts.sql");
/// The schema pg_stat_statements is installed in, if it is.
pub const STAT_STATEMENTS: &str = include_str!("../queries/health/stat_statements.sql");
/// The fetches' totals in pg_stat_statements; `:STATEMENTS` is its view, put in by
/// [`fetch_cost`].
const FETCH_COST: &str = include_str!("../queries/health/fetch_cost.sql");
/// graphile-worker 0.18's schema as [`SCHEMA_FACTS`] reads it, one fact a line (the index
/// and function facts are those of the schema fixture of Formica's tests; the bodies'
/// digests those of the functions Formica's migrations install).
pub const EXPECTED: &str = include_str!("../health/graphile_worker_018.facts");

/// The fetches' totals in pg_stat_statements (`sql/queries/health/fetch_cost.sql`: `$1` the
/// quoted jobs table, `$2` the quoted `lock_jobs_controlled`), reading its view in the schema
/// `statements_schema`.
pub fn fetch_cost(statements_schema: &str) -> String {
    FETCH_COST
        .replace(":STATEMENTS", &format!("{}.pg_stat_statements", crate::quote_ident(statements_schema)))
}

/// The reindexing chore's per-schema session lock: `$1` true takes it (if free), false
/// gives it back; answers `held`.
pub const REINDEX_LOCK: &str = include_str!("../queries/health/reindex_lock.sql");
/// What a failed concurrent rebuild of index `$2` of schema `$1` left behind.
pub const REINDEX_LEFTOVERS: &str = include_str!("../queries/health/reindex_leftovers.sql");
/// Whether this session's role owns the jobs table of schema `$1`, as vacuuming it needs;
/// answers `owns`.
pub const OWNS_JOBS: &str = include_str!("../queries/health/owns_jobs.sql");
