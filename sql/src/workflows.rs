//! Workflows: jobs that wait for other jobs of their set (docs/guide/workflows.md).

/// The workflows, their jobs and dependencies, and their states (records migration 11).
pub const TABLES: &str = include_str!("../records/000011.sql");
/// `worker::COMPLETE_JOBS` or `worker::FAIL_JOBS` (before history's form is made of it)
/// settling the workflow jobs among the jobs it ends: for statements that end some (a
/// job released by a workflow carries the flag `formica:workflow`), so the others stay plain.
pub fn settling(plain: &str) -> String {
    let (columns, cte) = match plain.contains("with completed as") {
        true => ("", include_str!("../queries/workflows/complete.sql")),
        false => (
            ", jobs.attempts >= jobs.max_attempts as exhausted, jobs.last_error as error",
            include_str!("../queries/workflows/fail.sql"),
        ),
    };
    plain.replace("/*:WORKFLOW_COLUMNS*/", columns).replace("/*:WORKFLOW*/", cte)
}
/// Where `worker::COMPLETE_JOBS` sets a completed workflow job's columns: history's
/// form stores the output there too.
pub(crate) const OUTPUT_MARK: &str = "/*:WORKFLOW_OUTPUT*/";
pub(crate) const OUTPUT: &str = ", output = (select outputs.output::json \
    from unnest($3::bigint[], $4::text[]) as outputs (id, output) where outputs.id = completed.id)";
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
