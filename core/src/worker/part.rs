//! [`Part`]: which part of the worker a query in flight belongs to, which answers fit it,
//! and how its statement is named in errors.

use crate::protocol::QueryResult;

/// Which part a query in flight belongs to (the parts keep what it carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Fetch,
    Write,
    Sweep,
    Cron,
    Recovery,
    /// Giving back what a fetch whose answer was lost locked.
    Reclaim,
    /// Reading this worker's cancel requests.
    Cancels,
    /// Reading the flow controls.
    Flow,
    /// A pass of the history pruner.
    Prune,
    /// A pass of the workflows' resolver.
    Resolve,
    /// A pass of the reindexing chore.
    Reindex,
    /// A pass of the aging chore.
    Age,
    /// A vacuum of the jobs table.
    Vacuum,
}

impl Part {
    /// Whether `result` can answer a statement of this part (an error answers any).
    pub fn fits(self, result: &QueryResult) -> bool {
        matches!(
            (result, self),
            (QueryResult::Err(_), _)
                | (QueryResult::Jobs { .. }, Part::Fetch)
                | (QueryResult::KnownCrontabs(_), Part::Cron)
                | (
                    QueryResult::Done,
                    Part::Write | Part::Sweep | Part::Cron | Part::Recovery | Part::Reclaim | Part::Vacuum
                )
                | (QueryResult::Fenced(_), Part::Write)
                | (QueryResult::Cancels(_), Part::Cancels)
                | (QueryResult::Schedules(_), Part::Cron)
                | (QueryResult::Flow(_), Part::Flow)
                | (QueryResult::Pruned { .. }, Part::Prune)
                | (QueryResult::Resolved { .. }, Part::Resolve)
                | (QueryResult::Reindexed { .. }, Part::Reindex)
                | (QueryResult::Aged { .. }, Part::Age)
        )
    }

    /// What its statement does, for errors (writes name themselves).
    pub fn statement(self) -> &'static str {
        match self {
            Part::Fetch => "fetch jobs",
            Part::Sweep => "reset stale locks",
            Part::Cron => "schedule cron jobs",
            Part::Recovery => "recover jobs of dead workers",
            Part::Write => "write outcomes",
            Part::Reclaim => "give back jobs a lost fetch locked",
            Part::Cancels => "read cancel requests",
            Part::Flow => "read the flow controls",
            Part::Prune => "prune the job history",
            Part::Resolve => "resolve workflows",
            Part::Reindex => "rebuild a bloated index",
            Part::Age => "age the priorities of waiting jobs",
            Part::Vacuum => "vacuum the jobs table",
        }
    }
}
