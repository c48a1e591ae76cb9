//! The catalog: every SQL form a worker can send, made and rendered for its schema once, when
//! the worker is built, so that sending a statement only picks its form ([`super::bind`]).

use super::fetch::Fetches;
use super::forms::Endings;
use formica_sql::{self as sql, FillError};

/// Every SQL form a worker of one schema and set of options sends, rendered.
pub struct Catalog {
    pub(super) fetches: Fetches,
    pub(super) endings: Endings,
    /// The statements that begin a fetch's transaction: alone, and in its turn (`Executor::others_alive` chooses).
    fetch_begin: [String; 2],
    /// The statements that begin the transaction of a completion or a failure.
    pub(crate) ending_begin: String,
    pub(super) return_jobs: String,
    pub(super) return_unknown: String,
    pub(super) heartbeat: String,
    pub(super) read_flow: String,
    pub(super) read_cancels: String,
    pub(super) read_schedules: String,
    pub(super) register_crontabs: String,
    pub(super) schedule_crontabs: String,
    pub(super) snooze_jobs: String,
    pub(super) prune_history: String,
    pub(super) resolve_workflows: String,
    pub(super) age_priorities: String,
    /// What an upkeep pass (a vacuum, a rebuild) bound as a statement runs: nothing (the loop
    /// carries passes out); for a rebuild, its answer "nothing rebuilt".
    pub(super) upkeep_nothing: String,
    end_lease: String,
    record_runs: String,
    /// Durable jobs' statements, sent only by handlers that record steps or complete in their
    /// transaction (`crate::durable`).
    pub(crate) step_read: String,
    pub(crate) step_record: String,
    pub(crate) steps_settled: String,
}

impl Catalog {
    /// The forms a worker of `schema` sends, writing the job history if `history` (with each
    /// job's trace context when the `traces` feature is on). An error is a template of
    /// `formica_sql` that does not fit its parts: a bug, found by any test that builds one.
    pub fn new(schema: &str, history: bool) -> Result<Catalog, FillError> {
        let render = |template: &str| sql::render(template, schema);
        Ok(Catalog {
            fetches: Fetches::new(schema)?,
            endings: Endings::new(schema, history)?,
            fetch_begin: [
                render(&sql::worker::fetch_begin(schema, false)?),
                render(&sql::worker::fetch_begin(schema, true)?),
            ],
            ending_begin: render(sql::worker::ENDING_BEGIN),
            return_jobs: render(sql::worker::RETURN_JOBS),
            return_unknown: render(sql::worker::RETURN_UNKNOWN),
            heartbeat: render(sql::worker::HEARTBEAT),
            read_flow: render(sql::flow::READ_FLOW),
            read_cancels: render(sql::worker::READ_CANCELS),
            read_schedules: render(sql::schedules::READ),
            register_crontabs: render(sql::worker::REGISTER_CRONTABS),
            schedule_crontabs: render(sql::worker::SCHEDULE_CRONTABS),
            snooze_jobs: render(sql::worker::SNOOZE_JOBS),
            prune_history: render(sql::history::PRUNE),
            resolve_workflows: render(sql::workflows::RESOLVE),
            age_priorities: render(sql::aging::PASS),
            upkeep_nothing: "select null::text as index".to_owned(),
            end_lease: render(sql::worker::END_LEASE),
            record_runs: render(sql::worker::RECORD_RUNS),
            step_read: render(sql::durable::STEP_READ),
            step_record: render(sql::durable::STEP_RECORD),
            steps_settled: render(sql::durable::steps_settled(history)),
        })
    }

    /// Whether the completions and failures write the job history (and a completion takes
    /// the outputs of its jobs).
    pub fn history(&self) -> bool {
        self.endings.history
    }

    /// What begins a fetch's transaction, taking a turn with the other workers' fetches if
    /// `in_turn` (`sql/queries/worker/fetch_begin.sql`, `fetch_turn.sql`).
    pub(crate) fn fetch_begin(&self, in_turn: bool) -> &str {
        &self.fetch_begin[usize::from(in_turn)]
    }

    /// `$1` worker, which stopped: its lease lapses now (`end_lease.sql`).
    pub(crate) fn end_lease(&self) -> &str {
        &self.end_lease
    }

    /// `$1` worker runs the crontab `$2` and the tasks `$3`, accepts the flags `$4` and
    /// refuses `$5` (`record_runs.sql`).
    pub(crate) fn record_runs(&self) -> &str {
        &self.record_runs
    }
}
