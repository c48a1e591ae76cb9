//! Read-only statements that show the queue and workflows (`formica::inspect`, behind the CLI,
//! the dashboard and `list_jobs`): none locks a row, or waits for or holds up a worker.

/// Counts per task, queue and state, with the oldest ready job and the failures of the
/// last hour (uses `:JOB_STATE`).
pub const COUNTS: &str = include_str!("../queries/inspect/counts.sql");
/// Every worker with a lease (live or lapsed) or holding locks.
pub const WORKERS: &str = include_str!("../queries/inspect/workers.sql");
/// Whether worker `$1`'s lease holds (`/readyz`).
pub const LEASE_HOLDS: &str = include_str!("../queries/inspect/lease_holds.sql");
/// The crontab of each live worker that runs one.
pub const LIVE_CRONTABS: &str = include_str!("../queries/inspect/live_crontabs.sql");
/// `list_jobs`: `$1` task, `$2` queue, `$3` failed only, `$4` locked only, `$5` limit, `$6`
/// state (uses `:JOB_STATE`); `_private_jobs` columns, `task_identifier`, `queue_name`.
pub const LIST_JOBS: &str = include_str!("../queries/inspect/list_jobs.sql");
/// The newest migration applied.
pub const SCHEMA_VERSION: &str = include_str!("../queries/inspect/schema_version.sql");
/// Jobs matching filters, before its [`JOBS_ORDER`] part (uses `:JOB_STATE`).
pub const JOBS: &str = include_str!("../queries/inspect/jobs.sql");
/// The orders of [`JOBS`]: name, and the part appended to it. The cursor is the last row
/// of the previous page: `$7` its id, and for `next` `$8` its run_at and `$9` its
/// priority. `next` is the workers' order (priority, then run_at) over the jobs that
/// will run (not running, attempts left): it walks the fetch's own partial index.
pub const JOBS_ORDER: [(&str, &str); 3] = [
    ("newest", "and ($7::bigint is null or jobs.id < $7::bigint) order by jobs.id desc limit $6"),
    ("oldest", "and ($7::bigint is null or jobs.id > $7::bigint) order by jobs.id limit $6"),
    (
        "next",
        // "After the cursor" as the index's range (priority, run_at) >= the cursor's,
        // less the ties already shown: a three-column row comparison instead is
        // estimated to match one row, and PostgreSQL then sorts the whole table.
        "and jobs.is_available = true \
         and ($7::bigint is null or ((jobs.priority, jobs.run_at) >= ($9::smallint, $8::timestamptz) \
           and not (jobs.priority = $9::smallint and jobs.run_at = $8::timestamptz and jobs.id <= $7::bigint))) \
         order by jobs.priority, jobs.run_at, jobs.id limit $6",
    ),
];
/// One job, with its queue's lock (uses `:JOB_STATE`).
pub const JOB: &str = include_str!("../queries/inspect/job.sql");
/// Named queues and their lock holders.
pub const QUEUES: &str = include_str!("../queries/inspect/queues.sql");
/// Cron items seen and their last execution.
pub const CRONTABS: &str = include_str!("../queries/inspect/crontabs.sql");
/// Rows ever deleted from the jobs table; `$1` the schema name (unquoted).
pub const DELETED_JOBS: &str = include_str!("../queries/inspect/deleted_jobs.sql");
pub mod why;
pub mod workflows;
