//! Durable jobs: the table of finished steps, and the statements that read, record and settle
//! them (a job's completion in its handler's transaction reuses `worker::complete_jobs`).

/// The steps' table, and the history's column that keeps them (records step 16).
pub const JOB_STEPS: &str = include_str!("../records/000016.sql");
/// `$1` job id, `$2` step name: the step's recorded output, as JSON text (no row: not finished).
pub const STEP_READ: &str = include_str!("../queries/durable/step_read.sql");
/// `$1` job id, `$2` step name, `$3` output (JSON text), `$4` worker: record a finished step
/// while the worker holds the job. One row: whether it was recorded, and the job's holder.
pub const STEP_RECORD: &str = include_str!("../queries/durable/step_record.sql");

/// `$1` job id, completing in its transaction: what becomes of its steps, moved into its
/// history row with `history` on, else removed.
pub fn steps_settled(history: bool) -> &'static str {
    match history {
        true => include_str!("../queries/durable/steps_kept.sql"),
        false => include_str!("../queries/durable/steps_removed.sql"),
    }
}
