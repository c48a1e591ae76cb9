//! Workflows (docs/guide/workflows.md): sets of jobs added together, where a job waits for
//! others of its set, and batches whose callback job runs when they are done.
//!
//! A workflow is validated whole before anything is sent ([`formica_core::workflow::Graph`]
//! states the rules once), then added in one statement: the jobs with nothing to wait for
//! become ordinary `graphile_worker` jobs at once, the others wait in Formica's schema and
//! are added when what they wait for has settled, in the transaction that settles it (a
//! Formica worker's completion or failure, or the resolver's pass for jobs that
//! graphile-worker's workers ran).
//!
//! ```no_run
//! use formica::{Workflow, WorkflowJob};
//! # async fn add(utils: &formica::WorkerUtils) -> Result<(), formica::Error> {
//! let payload = serde_json::json!({});
//! let workflow = Workflow::new("report")
//!     .job(WorkflowJob::raw("fetch", "fetch_data", payload.clone()))
//!     .job(WorkflowJob::raw("render", "render_pdf", payload.clone()).depends_on(["fetch"]))
//!     .job(WorkflowJob::raw("mail", "send_mail", payload).depends_on(["render"]));
//! let added = utils.add_workflow(&workflow).await?;
//! assert_eq!(added.released.len(), 1); // "fetch"; the others wait
//! # Ok(()) }
//! ```

mod build;
mod ops;

pub use build::{AddedWorkflow, BatchReport, SignalReport, Workflow, WorkflowJob};
pub use formica_core::workflow::{Callback, OnDependencyFailure, OnSignalTimeout, SignalWait, WorkflowError};
pub(crate) use ops::MIN_RESOLVE_EVERY;
pub use ops::{CancelledWorkflow, DeletedWorkflow, RetriedWorkflow, SignalSent};

use std::time::Duration;

/// How often each worker runs the resolver, unless
/// [`WorkerOptions::workflow_resolve_every`](crate::WorkerOptions::workflow_resolve_every)
/// says otherwise: the longest a job that graphile-worker's workers completed holds up its
/// dependents.
pub const DEFAULT_RESOLVE_EVERY: Duration = Duration::from_secs(2);
