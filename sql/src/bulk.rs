//! Bulk actions on the jobs a filter picks (`formica::bulk`): one [`MATCHING`] for
//! every action, its dry run and each batch of its real run, with the action's own
//! condition and change filled in.

use crate::fill::{fill, FillError};

/// The jobs a filter picks, in id order, a batch at a time (uses `:JOB_STATE`, and
/// the marker `ELIGIBLE` for the action's condition).
pub const MATCHING: &str = include_str!("../queries/bulk/matching.sql");
/// How many jobs `MATCHING` picks (the dry run).
pub const COUNT: &str = include_str!("../queries/bulk/count.sql");
/// One batch: `MATCHING` locked, then `CHANGE`d.
pub const BATCH: &str = include_str!("../queries/bulk/batch.sql");
/// The newest job's id, where the walk ends.
pub const LAST_ID: &str = include_str!("../queries/bulk/last_id.sql");

/// What one action picks (`eligible`, an SQL condition on `jobs`) and does to the ids of
/// a batch (`change`, a `select` over `batch` returning the ids changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    /// The condition a job must meet besides the filter.
    pub eligible: &'static str,
    /// The change.
    pub change: &'static str,
}

/// Run again now with a fresh set of attempts: jobs that have failed.
pub const RETRY: Action =
    Action { eligible: "jobs.last_error is not null", change: include_str!("../queries/bulk/retry.sql") };
/// New run_at, priority, attempts or max_attempts: any job no worker holds.
pub const RESCHEDULE: Action =
    Action { eligible: "true", change: include_str!("../queries/bulk/reschedule.sql") };
/// Fail for good as cancelled: jobs that would still run.
pub const CANCEL: Action = Action {
    eligible: "jobs.attempts < jobs.max_attempts",
    change: include_str!("../queries/bulk/cancel.sql"),
};
/// Delete: any job no worker holds.
pub const DELETE: Action = Action { eligible: "true", change: include_str!("../queries/bulk/delete.sql") };

/// The dry run of `action`: how many jobs it would change.
pub fn count(action: Action) -> Result<String, FillError> {
    fill(COUNT, &[("MATCHING", &matching(action)?)])
}

/// One batch of `action`.
pub fn batch(action: Action) -> Result<String, FillError> {
    fill(BATCH, &[("MATCHING", &matching(action)?), ("CHANGE", action.change)])
}

fn matching(action: Action) -> Result<String, FillError> {
    fill(MATCHING, &[("ELIGIBLE", action.eligible)])
}
