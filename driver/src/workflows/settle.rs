//! Which completions and failures settle workflow jobs: those that end a job a workflow
//! released (it carries the flag [`formica_sql::workflows::FLAG`], seen when it is fetched).
//! They take the statement's settling form; every other statement stays plain, so a worker
//! that runs no workflow sends exactly the statements it sent before workflows existed.

use formica_core::protocol::Statement;
use std::collections::HashSet;
use std::sync::{LazyLock, Mutex, PoisonError};

/// More than a worker holds: ids of jobs fetched and never ended by this worker (given back
/// on shutdown, recovered elsewhere) are forgotten all at once; a workflow job ended after
/// that is settled by the resolver's next pass instead.
const MAX_REMEMBERED: usize = 1 << 16;

/// The workflow jobs a worker fetched and has not ended yet.
#[derive(Default)]
pub(crate) struct FetchedWorkflowJobs(Mutex<HashSet<i64>>);

impl FetchedWorkflowJobs {
    /// The workflow jobs among the rows of a fetch.
    pub(crate) fn remember(&self, rows: &[tokio_postgres::Row]) {
        let mut fetched = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if fetched.len() > MAX_REMEMBERED {
            fetched.clear();
        }
        for row in rows {
            let flags = row.try_get::<_, Option<serde_json::Value>>("flags");
            if let (Ok(Some(flags)), Ok(id)) = (flags, row.try_get::<_, i64>("id")) {
                if flags.get(formica_sql::workflows::FLAG).is_some() {
                    fetched.insert(id);
                }
            }
        }
    }

    /// The settling form of `statement` (`history`: of its history form) if it ends a
    /// workflow job, with the jobs to forget once it ran.
    pub(crate) fn settling(&self, statement: &Statement, history: bool) -> Option<(&'static str, Vec<i64>)> {
        static COMPLETE: LazyLock<String> =
            LazyLock::new(|| formica_sql::workflows::settling(formica_sql::worker::COMPLETE_JOBS));
        static FAIL: LazyLock<String> =
            LazyLock::new(|| formica_sql::workflows::settling(formica_sql::worker::FAIL_JOBS));
        static COMPLETE_HISTORY: LazyLock<String> =
            LazyLock::new(|| formica_sql::history::complete(&COMPLETE));
        static FAIL_HISTORY: LazyLock<String> = LazyLock::new(|| formica_sql::history::fail(&FAIL));
        let (ids, template): (Vec<i64>, &'static str) = match (statement, history) {
            (Statement::CompleteJobs { ids, .. }, false) => (ids.clone(), &COMPLETE),
            (Statement::CompleteJobs { ids, .. }, true) => (ids.clone(), &COMPLETE_HISTORY),
            (Statement::FailJobs { failures, .. }, false) => {
                (failures.iter().map(|f| f.job_id).collect(), &FAIL)
            }
            (Statement::FailJobs { failures, .. }, true) => {
                (failures.iter().map(|f| f.job_id).collect(), &FAIL_HISTORY)
            }
            _ => return None,
        };
        let fetched = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        ids.iter().any(|id| fetched.contains(id)).then_some((template, ids))
    }

    /// Forget the jobs a statement ended.
    pub(crate) fn forget(&self, ids: &[i64]) {
        let mut fetched = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for id in ids {
            fetched.remove(id);
        }
    }
}
