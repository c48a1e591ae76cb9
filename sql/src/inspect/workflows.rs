//! Read-only statements that show workflows (`formica::inspect`'s workflows).

/// Workflows with their states and job counts, newest first: `$1` state, `$2` name, `$3`
/// limit.
pub const LIST: &str = include_str!("../../queries/inspect/workflows.sql");
/// One workflow as [`LIST`] gives it: `$1` its id.
pub const ONE: &str = include_str!("../../queries/inspect/workflow.sql");
/// The jobs of workflow `$1`, with their dependencies' names and their graphile_worker job
/// while it exists (uses `:JOB_STATE`).
pub const JOBS: &str = include_str!("../../queries/inspect/workflow_jobs.sql");
