//! The fetch keeping within rate limits: its form and its parameters (the limits are set
//! through `controls.rs`). A worker whose tasks include a limited one fetches with it: it
//! logs each lock as a start and locks no more than the period has left.

use crate::params::{param, Param};
use formica_core::flow::{Control, ControlLimit};
use formica_sql as sql;
use tokio_postgres::types::Type;

/// The fetch keeping within rate limits (and caps) ([`formica_sql::flow::GET_JOBS_LIMITED`]),
/// with each job's trace context when traces are on.
pub(crate) fn get_jobs_limited() -> &'static str {
    #[cfg(feature = "traces")]
    {
        static TRACED: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| sql::traces::fetch(sql::flow::GET_JOBS_LIMITED));
        &TRACED
    }
    #[cfg(not(feature = "traces"))]
    sql::flow::GET_JOBS_LIMITED
}

/// The parameters `$12` to `$16` of the limited fetch: the limits, column by column (`$8`
/// to `$11` are the caps).
pub(crate) fn limit_params(limits: Vec<Control>) -> [Param; 5] {
    let int = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let max: Vec<i32> = limits.iter().map(|l| int(l.max())).collect();
    let period_ms = |l: &Control| match l.limit {
        ControlLimit::Starts { period_ms, .. } => period_ms,
        ControlLimit::Running { .. } => u32::MAX,
    };
    let period: Vec<i32> = limits.iter().map(|l| int(period_ms(l))).collect();
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
