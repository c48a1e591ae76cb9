//! The events that tell what a statement is about to do: a fetch, the stale-lock sweep, a
//! cron minute, jobs given back. The machine emits them as it sends the statement, so each
//! is in the trace right before its [`Effect::Query`](crate::protocol::Effect::Query); how
//! long the statement took is the driver's to measure (it holds the clock that matters).

use crate::protocol::FetchRequest;
use crate::protocol::{Event, Statement};

/// The event announcing `statement`, if it is one an operator watches.
pub(crate) fn sending(statement: &Statement) -> Option<Event> {
    match statement {
        Statement::GetJobs(FetchRequest { limit, .. }) => Some(Event::FetchStart { limit: *limit }),
        Statement::ResetLocked { locked_before } => Some(Event::LockSweep { locked_before: *locked_before }),
        Statement::ScheduleCron(batch) => {
            Some(Event::CronSchedule { at: batch.at, backfilled: batch.backfilled, jobs: batch.jobs.len() })
        }
        Statement::ReturnJobs { ids, .. } => Some(Event::JobsGivenBack { count: ids.len() }),
        Statement::CompleteJobs { .. }
        | Statement::FailJobs { .. }
        | Statement::RegisterCrontabs { .. }
        | Statement::Heartbeat { .. }
        | Statement::RecoverLapsed { .. }
        | Statement::ReturnUnknown { .. }
        | Statement::ReadCancels { .. }
        | Statement::SnoozeJobs { .. }
        | Statement::ReadSchedules
        | Statement::ReadFlow
        | Statement::PruneHistory { .. }
        | Statement::ResolveWorkflows
        | Statement::ReindexBloated
        | Statement::VacuumJobs
        | Statement::AgePriorities { .. } => None,
    }
}
