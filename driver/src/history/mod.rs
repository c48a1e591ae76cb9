//! Job history (docs/guide/history.md): each job that ends for good, with how, when and
//! what its handler returned, kept in Formica's schema for a retention per outcome.
//!
//! The row is written by the very statement that completes or fails the job
//! (`formica_sql::history`), so there is never one without the other. With the option off the
//! worker sends exactly the statements it sends without this feature. Outputs travel beside
//! the core, as trace contexts do: the handler leaves its job's output here (`Outputs`), and
//! the completion that carries the job's id takes it (the core decides nothing on them).

mod outcome;
mod output;
mod prune;
mod read;
mod wait;

pub use outcome::{FinalState, JobOutcome};
pub(crate) use output::settle;
pub use output::OutputTaskHandler;
pub use prune::Pruned;
pub(crate) use prune::MIN_PRUNE_EVERY;
pub use read::{HistoryBucket, HistoryFilter};

use crate::params::{param, Param};
use formica_core::worker::Statement;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;
use tokio_postgres::types::Type;

/// How long each outcome is kept (`None`: for ever) and how often the pruner looks. Days are
/// dropped whole: a row goes between its retention and a day after (see the guide).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Completed jobs (default 7 days).
    pub completed: Option<Duration>,
    /// Jobs that failed for good: out of attempts, or did not stop (default 30 days).
    pub failed: Option<Duration>,
    /// Cancelled jobs (default 30 days).
    pub cancelled: Option<Duration>,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl Default for Retention {
    fn default() -> Self {
        Retention { completed: Some(7 * DAY), failed: Some(30 * DAY), cancelled: Some(30 * DAY) }
    }
}

/// The history option of a worker: on by default, with [`Retention::default`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryOptions {
    /// Whether this worker writes history.
    pub enabled: bool,
    /// What its pruner keeps.
    pub retention: Retention,
    /// How often its pruner runs (default an hour, at least a second; less up to a quarter,
    /// jittered; the first pass within a second of start).
    pub prune_every: Duration,
}

impl Default for HistoryOptions {
    fn default() -> Self {
        HistoryOptions {
            enabled: true,
            retention: Retention::default(),
            prune_every: Duration::from_secs(3600),
        }
    }
}

impl HistoryOptions {
    /// History off: the worker writes none and runs no pruner.
    pub fn off() -> Self {
        HistoryOptions { enabled: false, ..Self::default() }
    }
}

/// The outputs handlers returned, by job, until the completion that records them lands.
#[derive(Default)]
pub(crate) struct Outputs(Mutex<HashMap<i64, String>>);

/// More outputs than a worker holds jobs: the ones of completions never written (a shutdown
/// that gave up on its writes) are forgotten all at once.
const MAX_OUTPUTS: usize = 1 << 16;

/// The history form of a completion or failure: its statement, extra parameters, and the
/// jobs whose outputs it carries (forgotten once it ran).
pub(crate) struct HistoryBinding {
    pub(crate) template: &'static str,
    pub(crate) params: Vec<Param>,
    pub(crate) carried: Vec<i64>,
}

impl Outputs {
    pub(crate) fn keep(&self, job_id: i64, output: String) {
        let mut outputs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if outputs.len() >= MAX_OUTPUTS {
            outputs.clear();
        }
        outputs.insert(job_id, output);
    }

    pub(crate) fn forget(&self, ids: &[i64]) {
        let mut outputs = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            outputs.remove(id);
        }
    }

    /// How `statement` writes history, if it ends jobs (a worker's own, or, freeing them, a dead
    /// worker's: so a job is recorded if the worker that ends it writes history).
    pub(crate) fn bind(&self, statement: &Statement) -> Option<HistoryBinding> {
        static COMPLETE: LazyLock<String> =
            LazyLock::new(|| formica_sql::history::complete(formica_sql::worker::COMPLETE_JOBS));
        static FAIL: LazyLock<String> =
            LazyLock::new(|| formica_sql::history::fail(formica_sql::worker::FAIL_JOBS));
        static RECOVER: LazyLock<String> =
            LazyLock::new(|| formica_sql::history::recover(formica_sql::worker::RECOVER_LAPSED));
        static RESET: LazyLock<String> =
            LazyLock::new(|| formica_sql::history::recover(formica_sql::worker::RESET_LOCKED));
        match statement {
            Statement::CompleteJobs { ids, .. } => {
                let outputs = self.0.lock().unwrap_or_else(|e| e.into_inner());
                let (carried, values): (Vec<i64>, Vec<String>) =
                    ids.iter().filter_map(|id| Some((*id, outputs.get(id)?.clone()))).unzip();
                let params = vec![param(carried.clone(), Type::INT8_ARRAY), param(values, Type::TEXT_ARRAY)];
                Some(HistoryBinding { template: &COMPLETE, params, carried })
            }
            Statement::FailJobs { .. } => {
                Some(HistoryBinding { template: &FAIL, params: Vec::new(), carried: Vec::new() })
            }
            // A job whose lost attempt (its worker died) was its last ends there: the worker
            // that frees it writes its row, as it would for a failure of its own.
            Statement::RecoverLapsed { .. } => {
                Some(HistoryBinding { template: &RECOVER, params: Vec::new(), carried: Vec::new() })
            }
            Statement::ResetLocked { .. } => {
                Some(HistoryBinding { template: &RESET, params: Vec::new(), carried: Vec::new() })
            }
            _ => None,
        }
    }
}

/// The outputs of a worker writing history, none for one that does not.
pub(crate) fn outputs(options: &HistoryOptions) -> Option<Arc<Outputs>> {
    options.enabled.then(Arc::default)
}

/// Refuse to start a worker writing history that its role cannot write: every completion
/// would fail. Says how to grant it or turn history off.
pub(crate) async fn check_writable(
    utils: &crate::WorkerUtils,
    options: &HistoryOptions,
) -> Result<(), crate::Error> {
    if !options.enabled {
        return Ok(());
    }
    let table = formica_sql::render(":RECORDS.job_history", utils.schema());
    let client = utils.pool().get().await?;
    let sql = "select coalesce(has_table_privilege(to_regclass($1::text), 'insert'), false)";
    let writable: bool = client.query_typed(sql, &[(&table, Type::TEXT)]).await?[0].try_get(0)?;
    match writable {
        true => Ok(()),
        false => Err(crate::Error::HistoryNotWritable { table }),
    }
}

/// A history read refused for want of select: say what to grant (the dashboard's role is
/// the usual one to lack it, docs/guide/deploying.md).
pub(crate) fn read_refused(schema: &str) -> impl FnOnce(tokio_postgres::Error) -> crate::Error + '_ {
    move |e| {
        crate::Error::or_denied(e, || {
            let table = formica_sql::render(":RECORDS.job_history", schema);
            format!("grant select on {table} to this role to read the history")
        })
    }
}
