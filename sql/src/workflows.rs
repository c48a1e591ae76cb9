//! Workflows: jobs that wait for other jobs of their set (docs/guide/workflows.md).

use crate::fill::{fill, FillError};

/// The workflows, their jobs and dependencies, and their states (records migration 11).
pub const TABLES: &str = include_str!("../records/000011.sql");
/// Fan-out at runtime (jobs a running job adds to its workflow) and sub-workflows (a job
/// that is a whole workflow) (records migration 20).
pub const FAN_OUT: &str = include_str!("../records/000020.sql");
/// The part of `worker::COMPLETE_JOBS` that settles the workflow jobs it completes; with
/// history, storing each one's output too (history's `$3` and `$4`).
pub(crate) fn complete_part(history: bool) -> Result<String, FillError> {
    const OUTPUT: &str = ", output = (select outputs.output::json \
        from unnest($3::bigint[], $4::text[]) as outputs (id, output) where outputs.id = completed.id)";
    let output = if history { OUTPUT } else { "" };
    fill(include_str!("../queries/workflows/complete.sql"), &[("WORKFLOW_OUTPUT", output)])
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
/// One resolver pass: the jobs settled (null: another pass was running).
pub const RESOLVE: &str = include_str!("../queries/workflows/resolve.sql");
/// `$1` the adder's graphile_worker job id, `$2` the jobs (JSON, as `ADD` takes them): see
/// `add_workflow_jobs` in records migration 20.
pub const ADD_JOBS: &str = include_str!("../queries/workflows/add_jobs.sql");
/// `$1` workflows: the sub-workflows their released sub-workflow jobs are waiting for.
pub const SUBWORKFLOWS: &str = include_str!("../queries/workflows/subworkflows.sql");
/// `$1` workflows: settle the sub-workflow jobs of those that have ended (see
/// `finish_subworkflows` in records migration 20).
pub const FINISH: &str = include_str!("../queries/workflows/finish.sql");
