//! What a running job reports beside its outcome: its progress and its logs (records
//! migration 15).

/// The tables of the jobs' progress and logs, and their pruner (records migration 15).
pub const TABLES: &str = include_str!("../records/000018.sql");
/// `$1` job ids, `$2` fractions, `$3` values as JSON text: the latest progress of each,
/// written in one statement, notified on [`PROGRESSED`].
pub const WRITE_PROGRESS: &str = include_str!("../queries/reports/progress.sql");
/// `$1` job id: its progress (`fraction`, `value` as text, `updated_at`), if it reported any.
pub const READ_PROGRESS: &str =
    "select fraction, value::text, updated_at from :RECORDS.job_progress where job_id = $1::bigint";
/// The channel a progress write notifies (payload: the job ids, comma-separated).
pub const PROGRESSED: &str = "formica:progress";
/// `$1` job ids, `$2` attempts, `$3` lines, `$4` times, `$5` levels, `$6` messages: log
/// lines, written in one statement.
pub const WRITE_LOGS: &str = include_str!("../queries/reports/logs.sql");
/// `$1` job id: its log lines (`attempt`, `line`, `at`, `level`, `message`), in order.
pub const READ_LOGS: &str = "select attempt, line, at, level, message from :RECORDS.job_logs \
    where job_id = $1::bigint order by attempt, line";
