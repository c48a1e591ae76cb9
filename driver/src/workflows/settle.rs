//! The settling form of the statements that end workflow jobs: the core marks a completion
//! or failure that ends a job a workflow released (`settles_workflow_jobs`); every other
//! statement stays plain, so a worker that runs no workflow sends exactly the statements it
//! sent before workflows existed.

use formica_core::protocol::Statement;
use std::sync::LazyLock;

/// The settling form of `statement` (`history`: of its history form), if it settles
/// workflow jobs.
pub(crate) fn settling(statement: &Statement, history: bool) -> Option<&'static str> {
    static COMPLETE: LazyLock<String> =
        LazyLock::new(|| formica_sql::workflows::settling(formica_sql::worker::COMPLETE_JOBS));
    static FAIL: LazyLock<String> =
        LazyLock::new(|| formica_sql::workflows::settling(formica_sql::worker::FAIL_JOBS));
    static COMPLETE_HISTORY: LazyLock<String> = LazyLock::new(|| formica_sql::history::complete(&COMPLETE));
    static FAIL_HISTORY: LazyLock<String> = LazyLock::new(|| formica_sql::history::fail(&FAIL));
    let template: &'static str = match (statement, history) {
        (Statement::CompleteJobs { settles_workflow_jobs: true, .. }, false) => &COMPLETE,
        (Statement::CompleteJobs { settles_workflow_jobs: true, .. }, true) => &COMPLETE_HISTORY,
        (Statement::FailJobs { settles_workflow_jobs: true, .. }, false) => &FAIL,
        (Statement::FailJobs { settles_workflow_jobs: true, .. }, true) => &FAIL_HISTORY,
        _ => return None,
    };
    Some(template)
}
