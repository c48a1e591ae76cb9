//! What every part of a running worker reaches.

use crate::extensions::Extensions;
use crate::log::Hook;
use crate::metrics::Metrics;
use crate::statements::Executor;
use crate::task::Handlers;
use crate::utils::WorkerUtils;
use std::sync::Arc;
use std::time::Duration;

/// What every spawned piece of the loop shares.
pub(super) struct Shared {
    pub(super) utils: WorkerUtils,
    pub(super) executor: Executor,
    pub(super) handlers: Handlers,
    pub(super) extensions: Arc<Extensions>,
    pub(super) hooks: Vec<Hook>,
    pub(super) metrics: Metrics,
    pub(super) queue_depth_interval: Duration,
    /// What the health metrics and the reindexing chore judge by.
    pub(super) health_thresholds: crate::inspect::Thresholds,
    pub(super) worker_id: Arc<str>,
    /// The progress its tasks report, on its way to the database.
    pub(super) progress: Arc<crate::reports::latest::ProgressWriter>,
    /// Its jobs' logs on their way to the database, if it keeps them.
    pub(super) logs: Option<Arc<crate::reports::logs::LogWriter>>,
}
