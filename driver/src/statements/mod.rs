//! The worker's statements: the one place where a `Statement` meets SQL.
//!
//! [`bind`] is pure: it turns a statement into its SQL, picked from the worker's [`Catalog`]
//! (every form rendered once), typed parameters and the kind of answer its rows make. It is
//! the only chooser of a statement's SQL: the `Executor` runs what `bind` gives on the pool,
//! and the differential tests run the very same binding inside their own transactions, so
//! "as the driver binds them" is one piece of code, not two that must agree.

mod catalog;
mod executor;
mod fetch;
mod forms;

pub use catalog::Catalog;
pub(crate) use executor::{answered, is_retryable, Executor};
pub(crate) use fetch::{partition_at, read_controls, stored, weights};

use crate::error::Error;
pub use crate::params::Param;
use crate::params::{param, typed};
use crate::rows::{decode_rows, Decoded};
use formica_core::cron::runner::{KnownCrontab, ScheduleRow};
use formica_core::worker::{Fenced, QueryResult, Retention, Statement, Timestamp};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

/// A function that gives the flags to refuse, evaluated before every fetch.
pub type FlagsFn = Arc<dyn Fn() -> BoxFuture<'static, Vec<String>> + Send + Sync>;

/// What the rows of a statement answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Jobs,
    KnownCrontabs,
    Cancels,
    Flow,
    Done,
    /// `(job id, holder)` rows of the jobs a write left out.
    Fenced,
    /// `(identifier, line)` rows of the runtime schedules.
    Schedules,
    /// The `(dropped, deleted)` row of a pruner's pass.
    Pruned,
    /// The jobs a resolver's pass settled (null: another pass was running, so none).
    Resolved,
    /// The index a reindexing pass rebuilt (null: none).
    Reindexed,
    /// The jobs an aging pass changed (null: another pass was running, so none).
    Aged,
}

/// A statement bound to its SQL and parameters.
pub struct Bound<'c> {
    /// The SQL, rendered for the catalog's schema.
    pub sql: &'c str,
    /// The parameters, in order.
    pub params: Vec<Param>,
    answer: Answer,
}

impl Bound<'_> {
    /// The parameters as tokio-postgres takes them for a prepared statement.
    pub fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params.iter().map(|(v, _)| v.as_ref() as &(dyn ToSql + Sync)).collect()
    }

    /// The parameters with their types, for an unprepared statement.
    pub fn typed(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        typed(&self.params)
    }

    /// The core's result, from the statement's rows.
    pub fn answer(&self, rows: &[Row]) -> Result<QueryResult, Error> {
        Ok(match self.answer {
            Answer::Jobs => {
                let Decoded { jobs, undecodable } = decode_rows(rows)?;
                QueryResult::Jobs { jobs, undecodable }
            }
            Answer::KnownCrontabs => QueryResult::KnownCrontabs(
                rows.iter()
                    .map(|r| {
                        Ok(KnownCrontab {
                            identifier: r.try_get(0)?,
                            known_since: r.try_get(1)?,
                            last_execution: r.try_get(2)?,
                        })
                    })
                    .collect::<Result<_, tokio_postgres::Error>>()?,
            ),
            Answer::Cancels => QueryResult::Cancels(
                rows.iter()
                    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                    .collect::<Result<_, tokio_postgres::Error>>()?,
            ),
            Answer::Schedules => QueryResult::Schedules(
                rows.iter()
                    .map(|r| Ok(ScheduleRow { identifier: r.try_get(0)?, line: r.try_get(1)? }))
                    .collect::<Result<_, tokio_postgres::Error>>()?,
            ),
            Answer::Flow => QueryResult::Flow(read_controls(rows)?),
            Answer::Pruned => {
                let row = rows.first().ok_or_else(|| Error::Row("prune_history returned no row".into()))?;
                QueryResult::Pruned { dropped: row.try_get(0)?, deleted: row.try_get(1)? }
            }
            Answer::Resolved => QueryResult::Resolved { settled: pass_count::<i64>(rows)? },
            Answer::Aged => QueryResult::Aged { raised: pass_count::<i32>(rows)? },
            Answer::Reindexed => QueryResult::Reindexed {
                index: rows.first().map(|row| row.try_get(0)).transpose()?.flatten(),
            },
            Answer::Done => QueryResult::Done,
            Answer::Fenced if rows.is_empty() => QueryResult::Done,
            Answer::Fenced => {
                let mut fenced = rows
                    .iter()
                    .map(|r| Ok(Fenced { job_id: r.try_get(0)?, holder: r.try_get(1)? }))
                    .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
                fenced.sort_by_key(|f| f.job_id);
                fenced.dedup_by_key(|f| f.job_id);
                QueryResult::Fenced(fenced)
            }
        })
    }
}

/// The count a chore's pass answers in its one row (null, or no row: another pass was
/// running, so none).
fn pass_count<'a, N>(rows: &'a [Row]) -> Result<u64, Error>
where
    N: tokio_postgres::types::FromSql<'a> + TryInto<u64>,
{
    let n: Option<N> = rows.first().map(|row| row.try_get(0)).transpose()?.flatten();
    Ok(n.and_then(|n| n.try_into().ok()).unwrap_or(0))
}

/// Run a worker's `statement` once, unnamed, on `pool` in `schema`: one called by hand
/// (`WorkerUtils::prune_history`, `resolve_workflows`), bound as a worker binds it.
pub(crate) async fn run_by_hand(
    pool: &crate::db::Pool,
    schema: &str,
    statement: Statement,
) -> Result<QueryResult, Error> {
    let catalog = Catalog::new(schema, false)?;
    let bound = bind(&catalog, statement, &[]);
    let client = pool.get().await?;
    bound.answer(&client.query_typed(bound.sql, &bound.typed()).await?)
}

/// The parameters of a pass of the history pruner as of `at` (`None`: the database clock).
fn prune_params(retention: &Retention, at: Option<Timestamp>) -> Vec<Param> {
    // Rows deleted at most from a default partition each pass and outcome (the rows of days
    // that had no partition yet: few, unless the pruner did not run for days).
    const BATCH: i32 = 10_000;
    // The longest a pass's DDL waits for its lock: completions queue behind it meanwhile.
    const LOCK_WAIT: &str = "100ms";
    let interval = |d: Option<chrono::Duration>| d.map(|d| format!("{} milliseconds", d.num_milliseconds()));
    vec![
        param(at, Type::TIMESTAMPTZ),
        param(interval(retention.completed), Type::TEXT),
        param(interval(retention.failed), Type::TEXT),
        param(interval(retention.cancelled), Type::TEXT),
        param(BATCH, Type::INT4),
        param(LOCK_WAIT, Type::TEXT),
    ]
}

/// The SQL of `statement` as `catalog`'s worker sends it, and its parameters (their order is
/// each file's header). `outputs` are the outputs that the handlers of a completion's jobs
/// returned, by job, which it stores in the history (none without history, nor for other
/// statements).
pub fn bind<'c>(catalog: &'c Catalog, statement: Statement, outputs: &[(i64, String)]) -> Bound<'c> {
    let (sql, params, answer): (&str, _, _) = match statement {
        Statement::GetJobs(request) => {
            let mut params = vec![
                param(request.worker_id, Type::TEXT),
                param(request.task_identifiers, Type::TEXT_ARRAY),
                param(request.forbidden_flags, Type::TEXT_ARRAY),
                param(request.now, Type::TIMESTAMPTZ),
                param(i32::try_from(request.limit).unwrap_or(i32::MAX), Type::INT4),
                param(request.accepted_flags, Type::TEXT_ARRAY),
            ];
            // Nothing paused or controlled: the plain fetch, without more parameters.
            let controlled =
                !request.caps.is_empty() || !request.limits.is_empty() || !request.fair.is_empty();
            let excluding = !request.excluded_queues.is_empty();
            if controlled || excluding {
                params.push(param(request.excluded_queues, Type::TEXT_ARRAY));
            }
            let sql = match controlled {
                true => {
                    params.extend(fetch::control_params(request.caps, request.limits, request.fair));
                    catalog.fetches.controlled.as_str()
                }
                false => catalog.fetches.plain(request.walk_priorities, excluding),
            };
            (sql, params, Answer::Jobs)
        }
        Statement::CompleteJobs { worker_id, ids, settles_workflow_jobs } => {
            let mut params = vec![param(worker_id, Type::TEXT), param(ids, Type::INT8_ARRAY)];
            // Without outputs, the form that joins none.
            let carries = catalog.history() && !outputs.is_empty();
            if carries {
                let (carried, values): (Vec<i64>, Vec<String>) = outputs.iter().cloned().unzip();
                params.extend([param(carried, Type::INT8_ARRAY), param(values, Type::TEXT_ARRAY)]);
            }
            (catalog.endings.complete(settles_workflow_jobs, carries), params, Answer::Fenced)
        }
        Statement::FailJobs { worker_id, failures, settles_workflow_jobs } => {
            let ids: Vec<i64> = failures.iter().map(|f| f.job_id).collect();
            let run_ats: Vec<_> = failures.iter().map(|f| f.run_at).collect();
            let permanent: Vec<bool> = failures.iter().map(|f| f.permanent).collect();
            let payloads: Vec<Option<String>> =
                failures.iter().map(|f| f.payload.as_ref().map(|p| p.to_string())).collect();
            let delays: Vec<Option<i64>> =
                failures.iter().map(|f| f.delay.map(|d| d.num_microseconds().unwrap_or(i64::MAX))).collect();
            let messages: Vec<String> = failures.into_iter().map(|f| f.message).collect();
            let params = vec![
                param(worker_id, Type::TEXT),
                param(ids, Type::INT8_ARRAY),
                param(messages, Type::TEXT_ARRAY),
                param(run_ats, Type::TIMESTAMPTZ_ARRAY),
                param(permanent, Type::BOOL_ARRAY),
                param(payloads, Type::TEXT_ARRAY),
                param(delays, Type::INT8_ARRAY),
            ];
            (catalog.endings.fail(settles_workflow_jobs), params, Answer::Fenced)
        }
        Statement::ReturnJobs { worker_id, ids } => (
            &catalog.return_jobs,
            vec![param(worker_id, Type::TEXT), param(ids, Type::INT8_ARRAY)],
            Answer::Done,
        ),
        Statement::ReturnUnknown { worker_id, known } => (
            &catalog.return_unknown,
            vec![param(worker_id, Type::TEXT), param(known, Type::INT8_ARRAY)],
            Answer::Done,
        ),
        Statement::ResetLocked { locked_before } => {
            (&catalog.endings.reset_locked, vec![param(locked_before, Type::TIMESTAMPTZ)], Answer::Done)
        }
        Statement::Heartbeat { worker_id, lease } => {
            // The process's identity comes from the driver: the core knows only the worker id.
            let me = crate::identity::process_identity();
            let params = vec![
                param(worker_id, Type::TEXT),
                param(lease.num_milliseconds(), Type::INT8),
                param(me.host.clone(), Type::TEXT),
                param(me.pid, Type::INT4),
                param(me.version.to_owned(), Type::TEXT),
            ];
            (&catalog.heartbeat, params, Answer::Done)
        }
        Statement::RecoverLapsed { grace } => {
            (&catalog.endings.recover_lapsed, vec![param(grace.num_milliseconds(), Type::INT8)], Answer::Done)
        }
        Statement::ReadFlow => (&catalog.read_flow, vec![], Answer::Flow),
        Statement::ReadCancels { worker_id } => {
            (&catalog.read_cancels, vec![param(worker_id, Type::TEXT)], Answer::Cancels)
        }
        Statement::ReadSchedules => (&catalog.read_schedules, vec![], Answer::Schedules),
        Statement::PruneHistory { retention, at } => {
            (&catalog.prune_history, prune_params(&retention, at), Answer::Pruned)
        }
        Statement::ResolveWorkflows => (&catalog.resolve_workflows, vec![], Answer::Resolved),
        // A pass is carried out by the worker's loop (`WorkerUtils::reindex_bloated`: a
        // concurrent rebuild cannot run inside one statement's transaction); bound, it
        // rebuilds nothing, as a pass that finds no bloated index answers.
        Statement::ReindexBloated => (&catalog.upkeep_nothing, vec![], Answer::Reindexed),
        // Carried out by the loop too (`WorkerUtils::vacuum_jobs`: a vacuum cannot run in a
        // transaction); bound, it vacuums nothing.
        Statement::VacuumJobs => (&catalog.upkeep_nothing, vec![], Answer::Done),
        Statement::AgePriorities { batch } => {
            let batch = i32::try_from(batch).unwrap_or(i32::MAX);
            (&catalog.age_priorities, vec![param(batch, Type::INT4)], Answer::Aged)
        }
        Statement::RegisterCrontabs { identifiers, known_since } => (
            &catalog.register_crontabs,
            vec![param(identifiers, Type::TEXT_ARRAY), param(known_since, Type::TIMESTAMPTZ)],
            Answer::KnownCrontabs,
        ),
        Statement::ScheduleCron(batch) => {
            let jobs: Vec<serde_json::Value> = batch
                .jobs
                .iter()
                .map(|job| {
                    serde_json::json!({
                        "identifier": job.identifier,
                        "task": job.task,
                        "payload": job.payload,
                        "queue_name": job.spec.queue_name,
                        "max_attempts": job.spec.max_attempts,
                        "priority": job.spec.priority,
                        "job_key": job.spec.job_key,
                        "job_key_mode": job.spec.job_key_mode.map(|m| m.as_str()),
                    })
                })
                .collect();
            let params =
                vec![param(serde_json::Value::Array(jobs), Type::JSON), param(batch.at, Type::TIMESTAMPTZ)];
            (&catalog.schedule_crontabs, params, Answer::Done)
        }
        Statement::SnoozeJobs { worker_id, snoozes } => {
            let ids: Vec<i64> = snoozes.iter().map(|s| s.job_id).collect();
            let delays: Vec<i64> =
                snoozes.iter().map(|s| s.delay.num_microseconds().unwrap_or(i64::MAX)).collect();
            let run_ats: Vec<_> = snoozes.iter().map(|s| s.run_at).collect();
            let params = vec![
                param(worker_id, Type::TEXT),
                param(ids, Type::INT8_ARRAY),
                param(delays, Type::INT8_ARRAY),
                param(run_ats, Type::TIMESTAMPTZ_ARRAY),
            ];
            (&catalog.snooze_jobs, params, Answer::Fenced)
        }
    };
    Bound { sql, params, answer }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completion_joins_outputs_only_when_it_carries_some() {
        let complete = || Statement::CompleteJobs {
            worker_id: "w".into(),
            ids: vec![1, 2],
            settles_workflow_jobs: true,
        };
        let outputs = [(2, "{\"n\": 1}".to_owned())];
        for history in [false, true] {
            let catalog = Catalog::new("graphile_worker", history).unwrap();
            let plain = bind(&catalog, complete(), &[]);
            assert_eq!(plain.params.len(), 2);
            assert!(!plain.sql.contains("unnest($3"), "{}", plain.sql);
            let carrying = bind(&catalog, complete(), &outputs);
            // Without history nothing stores outputs (the worker then collects none).
            assert_eq!(carrying.params.len(), if history { 4 } else { 2 });
            assert_eq!(carrying.sql.contains("unnest($3::bigint[], $4::text[])"), history);
            assert_eq!(carrying.sql.contains("output = outputs.output::json"), history);
        }
    }
}
