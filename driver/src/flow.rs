//! Flow control on the worker's side: the controls its read answered, and the fetch forms
//! and parameters that keep to them (the admin API is in `controls.rs`).

use crate::params::param;
use formica_core::flow::{Control, ControlLimit, Controls, Partition, Pause, Scope, UnknownPartition};
use formica_sql as sql;
use tokio_postgres::types::Type;

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
        let max = stored(row.try_get(3)?);
        let limit = match kind.as_str() {
            "limit" => ControlLimit::Starts { max, period_ms: stored(row.try_get(6)?) },
            _ => ControlLimit::Running { max },
        };
        controls.controls.push(Control { task: name, partition, limit });
    }
    Ok(controls)
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

/// The fetch leaving out the named queues of its parameter `$7`: see
/// [`formica_sql::flow::excluding_queues`].
pub(crate) fn get_jobs_excluding_queues(walk: bool) -> &'static str {
    static FORMS: std::sync::LazyLock<[String; 2]> = std::sync::LazyLock::new(|| {
        [false, true].map(|walk| sql::flow::excluding_queues(crate::traces::get_jobs(walk)))
    });
    &FORMS[usize::from(walk)]
}

/// The fetch keeping within caps ([`formica_sql::flow::GET_JOBS_CAPPED`]), with each job's
/// trace context when traces are on.
pub(crate) fn get_jobs_capped() -> &'static str {
    #[cfg(feature = "traces")]
    {
        static TRACED: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| sql::traces::fetch(sql::flow::GET_JOBS_CAPPED));
        &TRACED
    }
    #[cfg(not(feature = "traces"))]
    sql::flow::GET_JOBS_CAPPED
}

/// The parameters `$8` to `$11` of the capped fetch: the caps, column by column.
pub(crate) fn cap_params(caps: Vec<Control>) -> [crate::params::Param; 4] {
    let max: Vec<i32> = caps.iter().map(|c| i32::try_from(c.max()).unwrap_or(i32::MAX)).collect();
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
