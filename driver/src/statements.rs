//! Running the core's statements: the one place where a `Statement` meets SQL.
//!
//! [`bind`] is pure: it turns a statement into its SQL template, typed parameters and the
//! kind of answer its rows make. The `Executor` runs what `bind` gives on the pool, and
//! the differential test runs the very same binding inside its own transaction, so "as the
//! driver binds them" is one piece of code, not two that must agree.

use crate::db::Pool;
use crate::error::Error;
pub use crate::params::Param;
use crate::params::{param, typed};
use crate::rows::{decode_rows, Decoded};
use formica_core::cron::runner::{KnownCrontab, ScheduleRow};
use formica_core::worker::{DbError, Fenced, QueryResult, Retention, Statement, Timestamp};
use formica_sql as sql;
use futures::future::BoxFuture;
use std::sync::atomic::{AtomicBool, Ordering};
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
}

/// A statement bound to its SQL and parameters.
pub struct Bound {
    /// The SQL, with the `:SCHEMA` placeholder (see [`sql::render`]).
    pub template: &'static str,
    /// The parameters, in order.
    pub params: Vec<Param>,
    answer: Answer,
}

impl Bound {
    /// The parameters as tokio-postgres takes them for a prepared statement.
    pub fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params.iter().map(|(v, _)| v.as_ref() as &(dyn ToSql + Sync)).collect()
    }

    /// The parameters with their types, for an unprepared statement.
    pub fn typed(&self) -> Vec<(&(dyn ToSql + Sync), Type)> {
        typed(&self.params)
    }

    /// Run it once on `pool`, in `schema`, unnamed: a worker's statement called by hand
    /// (`WorkerUtils::prune_history`, `resolve_workflows`).
    pub(crate) async fn run_unnamed(self, pool: &Pool, schema: &str) -> Result<QueryResult, Error> {
        let client = pool.get().await?;
        self.answer(&client.query_typed(&sql::render(self.template, schema), &self.typed()).await?)
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
            Answer::Flow => QueryResult::Flow(crate::flow::read_controls(rows)?),
            Answer::Pruned => {
                let row = rows.first().ok_or_else(|| Error::Row("prune_history returned no row".into()))?;
                QueryResult::Pruned { dropped: row.try_get(0)?, deleted: row.try_get(1)? }
            }
            Answer::Resolved => {
                let settled: Option<i64> = rows.first().map(|row| row.try_get(0)).transpose()?.flatten();
                QueryResult::Resolved { settled: settled.map_or(0, |n| u64::try_from(n).unwrap_or(0)) }
            }
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

/// The SQL and parameters of `statement` (the parameter order is each file's header).
pub fn bind(statement: Statement) -> Bound {
    let (template, params, answer) = match statement {
        Statement::GetJobs {
            worker_id,
            task_identifiers,
            forbidden_flags,
            accepted_flags,
            limit,
            now,
            excluded_queues,
            caps,
            limits,
            walk_priorities,
        } => {
            let mut params = vec![
                param(worker_id, Type::TEXT),
                param(task_identifiers, Type::TEXT_ARRAY),
                param(forbidden_flags, Type::TEXT_ARRAY),
                param(now, Type::TIMESTAMPTZ),
                param(i32::try_from(limit).unwrap_or(i32::MAX), Type::INT4),
                param(accepted_flags, Type::TEXT_ARRAY),
            ];
            // Nothing paused, capped or limited: the plain fetch, without more parameters.
            let template = if !limits.is_empty() {
                params.push(param(excluded_queues, Type::TEXT_ARRAY));
                params.extend(crate::flow::cap_params(caps));
                params.extend(crate::rate_limit::limit_params(limits));
                crate::rate_limit::get_jobs_limited()
            } else if !caps.is_empty() {
                params.push(param(excluded_queues, Type::TEXT_ARRAY));
                params.extend(crate::flow::cap_params(caps));
                crate::flow::get_jobs_capped()
            } else if excluded_queues.is_empty() {
                crate::traces::get_jobs(walk_priorities)
            } else {
                params.push(param(excluded_queues, Type::TEXT_ARRAY));
                crate::flow::get_jobs_excluding_queues(walk_priorities)
            };
            (template, params, Answer::Jobs)
        }
        Statement::CompleteJobs { worker_id, ids, .. } => (
            sql::worker::COMPLETE_JOBS,
            vec![param(worker_id, Type::TEXT), param(ids, Type::INT8_ARRAY)],
            Answer::Fenced,
        ),
        Statement::FailJobs { worker_id, failures, .. } => {
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
            (sql::worker::FAIL_JOBS, params, Answer::Fenced)
        }
        Statement::ReturnJobs { worker_id, ids } => (
            sql::worker::RETURN_JOBS,
            vec![param(worker_id, Type::TEXT), param(ids, Type::INT8_ARRAY)],
            Answer::Done,
        ),
        Statement::ReturnUnknown { worker_id, known } => (
            sql::worker::RETURN_UNKNOWN,
            vec![param(worker_id, Type::TEXT), param(known, Type::INT8_ARRAY)],
            Answer::Done,
        ),
        Statement::ResetLocked { locked_before } => {
            (sql::worker::RESET_LOCKED, vec![param(locked_before, Type::TIMESTAMPTZ)], Answer::Done)
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
            (sql::worker::HEARTBEAT, params, Answer::Done)
        }
        Statement::RecoverLapsed { grace } => {
            (sql::worker::RECOVER_LAPSED, vec![param(grace.num_milliseconds(), Type::INT8)], Answer::Done)
        }
        Statement::ReadFlow => (sql::flow::READ_FLOW, vec![], Answer::Flow),
        Statement::ReadCancels { worker_id } => {
            (sql::worker::READ_CANCELS, vec![param(worker_id, Type::TEXT)], Answer::Cancels)
        }
        Statement::ReadSchedules => (sql::schedules::READ, vec![], Answer::Schedules),
        Statement::PruneHistory { retention, at } => {
            (sql::history::PRUNE, prune_params(&retention, at), Answer::Pruned)
        }
        Statement::ResolveWorkflows => (sql::workflows::RESOLVE, vec![], Answer::Resolved),
        Statement::RegisterCrontabs { identifiers, known_since } => (
            sql::worker::REGISTER_CRONTABS,
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
            (sql::worker::SCHEDULE_CRONTABS, params, Answer::Done)
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
            (sql::worker::SNOOZE_JOBS, params, Answer::Fenced)
        }
    };
    Bound { template, params, answer }
}

/// What running the worker's statements needs: the pool, the schema, whether statements
/// are prepared (named, cached per connection; unnamed after all once the pool finds a
/// pooler sharing server sessions, see `PooledClient::query_params`) or sent unnamed each
/// time (one round trip as well, and safe behind pgBouncer in transaction mode), and the
/// flags function; and the trace contexts of the jobs fetched, until they start.
pub(crate) struct Executor {
    pub(crate) pool: Pool,
    pub(crate) schema: String,
    pub(crate) prepared: bool,
    pub(crate) flags_fn: Option<FlagsFn>,
    pub(crate) parents: crate::traces::Parents,
    /// With history on: the outputs its completions carry.
    pub(crate) outputs: Option<Arc<crate::history::Outputs>>,
    /// Fetches take turns with the other Formica workers' (see [`FetchTurns`]).
    pub(crate) turns: FetchTurns,
}

/// How a fetch's transaction begins (`sql/queries/worker/fetch_begin.sql`: the plan settings
/// that keep a fetch fast when a burst of jobs follows a quiet spell), and whether it waits
/// its turn: while another Formica worker is alive (the lease's keeper learns it with each
/// heartbeat, the listener as soon as one starts), fetches begin in one of two turns the
/// workers share, so that they do not lock each other's jobs (`fetch_turn.sql`). With 8
/// worker processes on the bench's 2 cores, PostgreSQL's CPU a job fell from 27-33 to 18 us
/// and the rate from 25,000-40,000 to 55,000-58,000 jobs/s (docs/performance.md, "fetches
/// take turns").
pub(crate) struct FetchTurns {
    /// The statements beginning a fetch's transaction: alone, and in its turn.
    pub(crate) alone: String,
    pub(crate) in_turn: String,
    /// Set by the lease's keeper: another Formica worker is alive.
    pub(crate) others_alive: Arc<AtomicBool>,
}

impl FetchTurns {
    pub(crate) fn new(schema: &str) -> Self {
        FetchTurns {
            alone: sql::worker::fetch_begin(schema, false),
            in_turn: sql::worker::fetch_begin(schema, true),
            others_alive: Arc::default(),
        }
    }

    fn begin(&self) -> &str {
        if self.others_alive.load(Ordering::Relaxed) {
            &self.in_turn
        } else {
            &self.alone
        }
    }
}

impl Executor {
    /// Run `statement` and describe how it went, failures included, as the core expects.
    pub(crate) async fn execute(&self, statement: Statement) -> QueryResult {
        match self.run(statement).await {
            Ok(result) => result,
            Err(e) => QueryResult::Err(DbError { retryable: is_retryable(&e), message: e.to_string() }),
        }
    }

    async fn run(&self, mut statement: Statement) -> Result<QueryResult, Error> {
        if let (Statement::GetJobs { forbidden_flags, .. }, Some(flags_fn)) = (&mut statement, &self.flags_fn)
        {
            *forbidden_flags = flags_fn().await;
        }
        let fetch = matches!(statement, Statement::GetJobs { .. });
        // With history on, a completion or failure writes it too (see crate::history).
        let mut history = self.outputs.as_ref().and_then(|outputs| outputs.bind(&statement));
        let settling = crate::workflows::settling(&statement, history.is_some());
        let mut bound = bind(statement);
        if let Some(history) = &mut history {
            bound.template = history.template;
            bound.params.append(&mut history.params);
        }
        if let Some(template) = settling {
            bound.template = template;
        }
        let sql = sql::render(bound.template, &self.schema);
        let mut client = self.pool.get().await?;
        let begin = fetch.then(|| self.turns.begin());
        let rows = client.query_params(&sql, &bound.params, self.prepared, begin).await?;
        if let (Some(outputs), Some(history)) = (&self.outputs, history) {
            outputs.forget(&history.carried);
        }
        if fetch {
            self.parents.remember(&rows);
        }
        bound.answer(&rows)
    }
}

/// Failures worth trying again: lost or hung connections, serialization failures,
/// deadlocks, a statement cancelled or timed out, a lock not granted in time, a server
/// starting up or shutting down, short of resources (connections, memory, disk), or read-only
/// (a failover not finished), or a named statement a pooler refused. A statement the server
/// rejects as wrong is not: the core then isolates the job it is about instead of retrying
/// it forever; so a success refused only for a while must not land there, or the job would
/// run again.
pub(crate) fn is_retryable(e: &Error) -> bool {
    // A pool exhausted by clients held elsewhere frees up when they are released.
    let Error::Db(db) = e else {
        return matches!(e, Error::Connect { .. } | Error::TimedOut(_) | Error::PoolExhausted(_));
    };
    // A named statement a pooler refused did not run, and the pool sends it unnamed next.
    if crate::db::refused_by_pooler(db) {
        return true;
    }
    db.code().is_none_or(|code| {
        let code = code.code();
        code.starts_with("08")
            || code.starts_with("57P")
            || code == "57014"
            || code == "40001"
            || code == "40P01"
            || code == "55P03"
            || code == "25006"
            || code.starts_with("53")
    })
}
