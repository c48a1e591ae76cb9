//! The worker's fetch: its forms (plain, walking the priorities present, leaving paused named
//! queues out, and the controlled fetch for tasks capped, rate limited or fair), the
//! parameters the controls add, and the controls a worker's read of them answers.

use crate::params::{param, Param};
use formica_core::flow::{
    Control, ControlKind, ControlLimit, Controls, Partition, Pause, Scope, UnknownPartition,
};
use formica_sql::worker::{self as sql, Fetch};
use formica_sql::FillError;
use std::collections::BTreeMap;
use tokio_postgres::types::Type;

/// Every form of the fetch, rendered for one schema, with each job's trace context when the
/// `traces` feature is on.
pub(super) struct Fetches {
    /// The plain fetch, by [`Fetches::plain`]'s index: walking or not, leaving queues out or not.
    plain: [String; 4],
    /// The fetch of a worker some of whose tasks are controlled: one form for every kind
    /// (`lock_jobs_controlled`, records migration 26).
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
        let Ok(partition) = partition_at(row, 4)? else { continue };
        let limit = match kind.as_str() {
            "limit" => {
                ControlLimit::Starts { max: stored(row.try_get(3)?), period_ms: stored(row.try_get(6)?) }
            }
            "cap" => ControlLimit::Running { max: stored(row.try_get(3)?) },
            "fair" => match weights(row.try_get(7)?) {
                Some(weights) => ControlLimit::Fair { weights },
                None => continue,
            },
            _ => continue,
        };
        controls.controls.push(Control { task: name, partition, limit });
    }
    Ok(controls)
}

/// Fairness' weights as stored (a JSON object of tenant to weight): `None` if they are not
/// (a shape a newer Formica wrote), so the control is skipped rather than misread.
pub(crate) fn weights(text: Option<String>) -> Option<BTreeMap<String, u32>> {
    serde_json::from_str(text.as_deref().unwrap_or("{}")).ok()
}

/// A count as stored (a positive `int4`, by the table's check), as the core counts it.
pub(crate) fn stored(count: i32) -> u32 {
    u32::try_from(count).unwrap_or(1)
}

/// The partition in columns `at` (its kind) and `at + 1` (its argument) of `row`: none if
/// either is null.
pub(crate) fn partition_at(
    row: &tokio_postgres::Row,
    at: usize,
) -> Result<Result<Option<Partition>, UnknownPartition>, tokio_postgres::Error> {
    Ok(match (row.try_get::<_, Option<String>>(at)?, row.try_get::<_, Option<String>>(at + 1)?) {
        (Some(kind), Some(argument)) => Partition::parse(&kind, argument).map(Some),
        _ => Ok(None),
    })
}

/// The parameters `$8` to `$20` of the controlled fetch, column by column: the caps' task,
/// most running, partition kind and argument (`$8` to `$11`), the rate limits' task, most
/// starts, period in milliseconds, partition kind and argument (`$12` to `$16`), then the
/// fairness' task, partition kind and argument, and weights as JSON (`$17` to `$20`).
pub(crate) fn control_params(caps: Vec<Control>, limits: Vec<Control>, fair: Vec<Control>) -> Vec<Param> {
    let mut params = columns(caps, ControlKind::Cap);
    params.extend(columns(limits, ControlKind::RateLimit));
    params.extend(columns(fair, ControlKind::Fair));
    params
}

/// The columns of the controls of `kind`: task, most (not for fairness), period (rate
/// limits only), partition kind and argument, weights (fairness only).
fn columns(controls: Vec<Control>, kind: ControlKind) -> Vec<Param> {
    let int = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let max: Vec<i32> = controls.iter().map(|c| int(c.max())).collect();
    let period: Vec<i32> = controls
        .iter()
        .map(|c| match c.limit {
            ControlLimit::Starts { period_ms, .. } => int(period_ms),
            ControlLimit::Running { .. } | ControlLimit::Fair { .. } | ControlLimit::Waiting { .. } => {
                i32::MAX
            }
        })
        .collect();
    let weights: Vec<String> = controls
        .iter()
        .map(|c| match &c.limit {
            ControlLimit::Fair { weights } => serde_json::to_string(weights).unwrap_or_else(|_| "{}".into()),
            ControlLimit::Running { .. } | ControlLimit::Starts { .. } | ControlLimit::Waiting { .. } => {
                "{}".into()
            }
        })
        .collect();
    let kinds: Vec<Option<String>> =
        controls.iter().map(|c| c.partition.as_ref().map(|p| p.kind().to_owned())).collect();
    let args: Vec<Option<String>> =
        controls.iter().map(|c| c.partition.as_ref().map(|p| p.argument().to_owned())).collect();
    let tasks: Vec<String> = controls.into_iter().map(|c| c.task).collect();
    let mut params = vec![param(tasks, Type::TEXT_ARRAY)];
    if kind != ControlKind::Fair {
        params.push(param(max, Type::INT4_ARRAY));
    }
    if kind == ControlKind::RateLimit {
        params.push(param(period, Type::INT4_ARRAY));
    }
    params.extend([param(kinds, Type::TEXT_ARRAY), param(args, Type::TEXT_ARRAY)]);
    if kind == ControlKind::Fair {
        params.push(param(weights, Type::TEXT_ARRAY));
    }
    params
}
