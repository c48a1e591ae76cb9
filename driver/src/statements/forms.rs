//! The forms of the statements that end jobs: a completion or failure writes the job history
//! with history on (as does a recovery, for the jobs whose lost attempt was their last), and
//! settles the workflow jobs among its jobs when the core marks it so
//! (`settles_workflow_jobs`). Every other statement stays plain, so a worker that runs no
//! workflow, or writes no history, sends exactly the statements it sent without them.

use formica_sql::worker::{self as sql, Ending};
use formica_sql::FillError;

/// The ending forms of one worker, rendered: whether they write history is the worker's
/// option; whether they settle workflow jobs, each statement's.
pub(super) struct Endings {
    pub(super) history: bool,
    /// Completions, plain and settling workflow jobs, each without and with outputs to store;
    /// failures, plain and settling.
    complete: [[String; 2]; 2],
    fail: [String; 2],
    pub(super) recover_lapsed: String,
    pub(super) reset_locked: String,
}

impl Endings {
    pub(super) fn new(schema: &str, history: bool) -> Result<Self, FillError> {
        let render = |sql: String| formica_sql::render(&sql, schema);
        let ending = |settling, outputs| Ending { history, settling, outputs };
        let complete = |settling| -> Result<_, FillError> {
            Ok([
                render(sql::complete_jobs(ending(settling, false))?),
                render(sql::complete_jobs(ending(settling, true))?),
            ])
        };
        Ok(Endings {
            history,
            complete: [complete(false)?, complete(true)?],
            fail: [
                render(sql::fail_jobs(ending(false, false))?),
                render(sql::fail_jobs(ending(true, false))?),
            ],
            recover_lapsed: render(sql::recover_lapsed(history)?),
            reset_locked: render(sql::reset_locked(history)?),
        })
    }

    /// The completion, settling workflow jobs if `settling`, storing the outputs it carries
    /// if `outputs` (history's `$3` and `$4`; without history both forms are the same).
    pub(super) fn complete(&self, settling: bool, outputs: bool) -> &str {
        &self.complete[usize::from(settling)][usize::from(outputs)]
    }

    /// The failure, settling workflow jobs if `settling`.
    pub(super) fn fail(&self, settling: bool) -> &str {
        &self.fail[usize::from(settling)]
    }
}
