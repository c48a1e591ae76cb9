//! Workflows: jobs that wait for other jobs of their set (docs/guide/workflows.md).

use crate::fill::{fill, FillError};

/// The workflows, their jobs and dependencies, and their states (records migration 11).
pub const TABLES: &str = include_str!("../records/000011.sql");
/// Cheaper settling and releasing, and finished workflows' removal (records migration 22).
pub const SETTLING: &str = include_str!("../records/000022.sql");
/// What workflow jobs wait for besides their dependencies: signals and timers (records step 23).
pub const WAITS: &str = include_str!("../records/000023.sql");
/// Fan-out at runtime (jobs a running job adds to its workflow) and sub-workflows (a job
/// that is a whole workflow) (records migration 24).
pub const FAN_OUT: &str = include_str!("../records/000024.sql");
/// The settling's calls of the signal, timer and sub-workflow functions made only when a job
/// at hand has one (records migration 28).
pub const GUARDED_CALLS: &str = include_str!("../records/000028.sql");
/// Records step 33: the settling's update heap-only, the released jobs with a
/// graphile_worker job kept in a table of their own for the resolver.
pub const SETTLED_IN_PLACE: &str = include_str!("../records/000033.sql");
/// The part of `worker::COMPLETE_JOBS` that settles the workflow jobs it completes, storing
/// the outputs the statement carries (`outputs`, see `history::OUTPUTS`: joined once, where
/// a subquery a row would unnest them a row, n^2 for a statement of n jobs).
pub(crate) fn complete_part(outputs: bool) -> Result<String, FillError> {
    let [output, join] = match outputs {
        true => [", output = outputs.output::json", crate::history::OUTPUTS],
        false => ["", ""],
    };
    fill(
        include_str!("../queries/workflows/complete.sql"),
        &[("WORKFLOW_OUTPUT", output), ("WORKFLOW_OUTPUTS", join)],
    )
}
/// The parts of `worker::FAIL_JOBS` that settle the workflow jobs it fails (`on`), or none.
pub(crate) fn fail_parts(on: bool) -> [(&'static str, &'static str); 2] {
    match on {
        true => [
            (
                "WORKFLOW_COLUMNS",
                ", jobs.attempts >= jobs.max_attempts as exhausted, jobs.last_error as error",
            ),
            ("WORKFLOW", include_str!("../queries/workflows/fail.sql")),
        ],
        false => [("WORKFLOW_COLUMNS", ""), ("WORKFLOW", "")],
    }
}
/// `$1` name, `$2` the jobs (JSON, see `add_workflow` in the migration): rows of the
/// workflow's id, and each job released's name and job id.
pub const ADD: &str = include_str!("../queries/workflows/add.sql");
/// `$1` workflow, `$2` reason: marks it cancelled; row: the job ids of its released jobs
/// (none if there is no such workflow).
pub const CANCEL: &str = include_str!("../queries/workflows/cancel.sql");
/// `$1` workflow, `$2` reason: its waiting jobs cancelled, in id order; row: how many.
pub const CANCEL_WAITING: &str = include_str!("../queries/workflows/cancel_waiting.sql");
/// `$1` workflow: the job ids of its released jobs.
pub const RELEASED: &str = include_str!("../queries/workflows/released.sql");
/// `$1` workflow: see `retry_workflow` in the migration.
pub const RETRY: &str = include_str!("../queries/workflows/retry.sql");
/// `$1` workflow, `$2` force: see `delete_workflow` in records migration 22. Row: 'missing',
/// 'unfinished' (refused) or 'deleted', and its jobs waiting and released then.
pub const DELETE: &str = include_str!("../queries/workflows/delete.sql");
/// One resolver pass: the jobs settled (null: another pass was running).
pub const RESOLVE: &str = include_str!("../queries/workflows/resolve.sql");
/// `$1` workflow, `$2` signal, `$3` payload (JSON or null): see `signal_workflow` in records
/// step 23; row: the outcome, the names of the jobs that got it and of those released.
pub const SIGNAL: &str = include_str!("../queries/workflows/signal.sql");
/// `$1` the adder's graphile_worker job id, `$2` the jobs (JSON, as `ADD` takes them): see
/// `add_workflow_jobs` in records migration 24.
pub const ADD_JOBS: &str = include_str!("../queries/workflows/add_jobs.sql");
/// `$1` workflows: the sub-workflows their released sub-workflow jobs are waiting for.
pub const SUBWORKFLOWS: &str = include_str!("../queries/workflows/subworkflows.sql");
/// `$1` workflows: settle the sub-workflow jobs of those that have ended (see
/// `finish_subworkflows` in records migration 24).
pub const FINISH: &str = include_str!("../queries/workflows/finish.sql");
