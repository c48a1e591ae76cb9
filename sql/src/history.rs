//! Job history (the worker's option `history`): the table of finished jobs, the statements
//! that write it as they end jobs, and what reads and prunes it.

use crate::fill::{fill, FillError};

/// The history table, its waiters and its pruner (records migration 7).
pub const JOB_HISTORY: &str = include_str!("../records/000007.sql");
/// The trigger that tells the waiters of the jobs a history write ended (records migration 27).
pub const TELL_WAITERS: &str = include_str!("../records/000027.sql");
/// Records step 31: that trigger finds each waiter's job by its key, not by hashing the jobs.
pub const WAITERS_BY_KEY: &str = include_str!("../records/000031.sql");
/// The parts of `worker::COMPLETE_JOBS` that write history (`on`), with the outputs the
/// statement carries (`outputs`), or none.
pub(crate) fn complete_parts(on: bool, outputs: bool) -> Result<[(&'static str, String); 2], FillError> {
    if !on {
        return Ok([("HISTORY_COLUMNS", String::new()), ("HISTORY", String::new())]);
    }
    let [column, output, join] = match outputs {
        true => [", output", ", outputs.output::json", OUTPUTS],
        false => ["", "", ""],
    };
    let cte = fill(
        include_str!("../queries/history/complete.sql"),
        &[("OUTPUT_COLUMN", column), ("OUTPUT", output), ("OUTPUTS", join)],
    )?;
    Ok([("HISTORY_COLUMNS", COMPLETE_COLUMNS.to_owned()), ("HISTORY", cte)])
}
/// The join that gives each job a completion ends the output it carries for it (`$3` job
/// ids, `$4` their outputs as JSON text), for its history and workflow rows: in the
/// statement only where some job has one.
pub(crate) const OUTPUTS: &str =
    "left join unnest($3::bigint[], $4::text[]) as outputs (id, output) on outputs.id = completed.id";
/// The parts of `worker::FAIL_JOBS` that write history for the jobs it leaves out of
/// attempts (`on`), or none.
pub(crate) fn fail_parts(on: bool) -> [(&'static str, &'static str); 2] {
    parts(on, FAIL_COLUMNS, include_str!("../queries/history/fail.sql"))
}
/// The parts of `worker::RECOVER_LAPSED` or `worker::RESET_LOCKED` that write history for
/// the jobs whose lost attempt was their last (`on`), or none.
pub(crate) fn recover_parts(on: bool) -> [(&'static str, &'static str); 2] {
    parts(on, RECOVER_COLUMNS, include_str!("../queries/history/recover.sql"))
}
const COMPLETE_COLUMNS: &str = ", jobs.task_id, jobs.key, jobs.payload, jobs.attempts, \
    jobs.max_attempts, jobs.last_error, jobs.created_at, jobs.locked_at";
const FAIL_COLUMNS: &str = ", jobs.task_id, jobs.key, jobs.payload, jobs.attempts, \
    jobs.max_attempts, jobs.last_error, jobs.created_at, u.permanent";
const RECOVER_COLUMNS: &str = ", jobs.task_id, jobs.job_queue_id, jobs.key, jobs.payload, \
    jobs.attempts, jobs.max_attempts, jobs.last_error, jobs.created_at";
fn parts(on: bool, columns: &'static str, cte: &'static str) -> [(&'static str, &'static str); 2] {
    match on {
        true => [("HISTORY_COLUMNS", columns), ("HISTORY", cte)],
        false => [("HISTORY_COLUMNS", ""), ("HISTORY", "")],
    }
}
/// `$1` job id: its newest history row (the columns of `job_history`).
pub const OUTCOME: &str = include_str!("../queries/history/outcome.sql");
/// `$1` job id: whether its job is still to finish (its row exists, not out of
/// attempts), after waiting for any statement writing it to commit.
pub const PENDING: &str = include_str!("../queries/history/pending.sql");
/// `$1` as of (null: the database clock), `$2`..`$4` the retentions of completed, failed
/// and cancelled jobs (null: for ever), `$5` rows deleted at most, `$6` lock wait: one
/// pass of the pruner (`prune_pass`, records step 30): the jobs' reports past every
/// retention (`prune_job_reports`, records step 18), the finished workflows past their
/// state's retention (`prune_workflows`, records step 22), then the history's own pass
/// (`prune_history`, records step 7; step 32 attaches the days it makes, which locks out no
/// completion, and a day it drops locks the history against every completion until the
/// pass commits); `deleted` counts all three. The retentions are text,
/// so a worker can prepare the statement (PostgreSQL then types each parameter by its
/// first cast).
pub const PRUNE: &str = "select dropped, deleted from :RECORDS.prune_pass(coalesce($1::timestamptz, now()), \
    $2::text::interval, $3::text::interval, $4::text::interval, $5::int, $6::text)";
/// Records step 30: [`PRUNE`]'s function, the partitions' DDL last.
pub const PRUNE_PASS: &str = include_str!("../records/000030.sql");
/// Records step 32: the pruner attaches each new day's partition, which locks out no insert.
pub const ATTACHED_DAYS: &str = include_str!("../records/000032.sql");
/// History rows, newest first, by filters (see the file).
pub const LIST: &str = include_str!("../queries/history/list.sql");
/// Counts and wait times of the recent history, by time bucket (see the file).
pub const BUCKETS: &str = include_str!("../queries/history/buckets.sql");
/// The channel a history write notifies when a job someone waits for finished (payload:
/// the job ids, comma-separated).
pub const FINISHED: &str = "formica:finished";
