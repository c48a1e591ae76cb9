//! The worker's fetch: its forms (plain, walking the priorities present, leaving paused named
//! queues out, and the controlled fetch for tasks capped or rate limited), the parameters the
//! controls add, and the controls a worker's read of them answers.

use crate::params::{param, Param};
use formica_core::flow::{Cap, Controls, Limit, Partition, Pause, Scope};
use formica_sql::worker::{self as sql, Fetch};
use formica_sql::FillError;
use tokio_postgres::types::Type;

/// Every form of the fetch, rendered for one schema, with each job's trace context when the
/// `traces` feature is on.
pub(super) struct Fetches {
    /// The plain fetch, by [`Fetches::plain`]'s index: walking or not, leaving queues out or not.
    plain: [String; 4],
    /// The fetch of a worker some of whose tasks are capped or rate limited: one form for
    /// both (`lock_jobs_limited`, records migrations 10 and 14).
    pub(super) controlled: String,
}

impl Fetches {
    pub(super) fn new(schema: &str) -> Result<Self, FillError> {
        let traced = cfg!(feature = "traces");
        let form = |i: usize| {
            let form = Fetch { walk: i & 1 != 0, excluding_queues: i & 2 != 0, traced };
            Ok::<_, FillError>(formica_sql::render(&sql::get_jobs(form)?, schema))
        };
        Ok(Fetches {
            plain: [form(0)?, form(1)?, form(2)?, form(3)?],
            controlled: formica_sql::render(&sql::get_jobs_controlled(traced)?, schema),
        })
    }

    /// The plain fetch, walking the priorities present if `walk`, leaving out the named
    /// queues of its parameter `$7` if `excluding_queues`.
    pub(super) fn plain(&self, walk: bool, excluding_queues: bool) -> &str {
        &self.plain[usize::from(walk) | usize::from(excluding_queues) << 1]
    }
}

/// The controls a worker's read answered (`sql/queries/worker/read_flow.sql`'s rows). A
/// scope or partition this Formica does not know (written by a newer one) is skipped
/// rather than failing every read.
pub(crate) fn read_controls(rows: &[tokio_postgres::Row]) -> Result<Controls, tokio_postgres::Error> {
    let mut controls = Controls::default();
    for row in rows {
        let (kind, name): (String, String) = (row.try_get(0)?, row.try_get(2)?);
        if kind == "pause" {
            let scope: String = row.try_get(1)?;
            if let Some(scope) = Scope::parse(&scope) {
                controls.pauses.push(Pause { scope, name });
            }
            continue;
        }
        let max_running: i32 = row.try_get(3)?;
        let max_running = u32::try_from(max_running).unwrap_or(1);
        let partition = match (row.try_get::<_, Option<String>>(4)?, row.try_get::<_, Option<String>>(5)?) {
            (Some(kind), Some(argument)) => match Partition::parse(&kind, argument) {
                Some(partition) => Some(partition),
                None => continue,
            },
            _ => None,
        };
        if kind == "limit" {
            let period_ms: i32 = row.try_get(6)?;
            let period_ms = u32::try_from(period_ms).unwrap_or(1);
            controls.limits.push(Limit { task: name, max_starts: max_running, period_ms, partition });
            continue;
        }
        controls.caps.push(Cap { task: name, max_running, partition });
    }
    Ok(controls)
}

/// The parameters `$8` to `$11` of the capped fetch: the caps, column by column.
pub(crate) fn cap_params(caps: Vec<Cap>) -> [Param; 4] {
    let max: Vec<i32> = caps.iter().map(|c| i32::try_from(c.max_running).unwrap_or(i32::MAX)).collect();
    let kinds: Vec<Option<&str>> = caps.iter().map(|c| c.partition.as_ref().map(Partition::kind)).collect();
    let kinds: Vec<Option<String>> = kinds.into_iter().map(|k| k.map(str::to_owned)).collect();
    let args: Vec<Option<String>> =
        caps.iter().map(|c| c.partition.as_ref().map(|p| p.argument().to_owned())).collect();
    let tasks: Vec<String> = caps.into_iter().map(|c| c.task).collect();
    [
        param(tasks, Type::TEXT_ARRAY),
        param(max, Type::INT4_ARRAY),
        param(kinds, Type::TEXT_ARRAY),
        param(args, Type::TEXT_ARRAY),
    ]
}

/// The parameters `$12` to `$16` of the limited fetch: the limits, column by column (`$8`
/// to `$11` are the caps).
pub(crate) fn limit_params(limits: Vec<Limit>) -> [Param; 5] {
    let int = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let max: Vec<i32> = limits.iter().map(|l| int(l.max_starts)).collect();
    let period: Vec<i32> = limits.iter().map(|l| int(l.period_ms)).collect();
    let kinds: Vec<Option<String>> =
        limits.iter().map(|l| l.partition.as_ref().map(|p| p.kind().to_owned())).collect();
    let args: Vec<Option<String>> =
        limits.iter().map(|l| l.partition.as_ref().map(|p| p.argument().to_owned())).collect();
    let tasks: Vec<String> = limits.into_iter().map(|l| l.task).collect();
    [
        param(tasks, Type::TEXT_ARRAY),
        param(max, Type::INT4_ARRAY),
        param(period, Type::INT4_ARRAY),
        param(kinds, Type::TEXT_ARRAY),
        param(args, Type::TEXT_ARRAY),
    ]
}
