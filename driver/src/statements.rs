//! Running the core's statements: binding parameters, choosing prepared or unnamed
//! statements, and turning rows into the core's results. The one place where a
//! `Statement` meets SQL.

use crate::db::PooledClient;
use crate::error::Error;
use crate::rows::jobs_from_rows;
use crate::worker::Shared;
use formica_core::cron::runner::KnownCrontab;
use formica_core::worker::{DbError, QueryResult, Statement};
use formica_sql as sql;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

/// Whether statements are prepared (named, cached per connection) or sent unnamed each time
/// (one round trip as well, and safe behind pgBouncer in transaction mode).
pub(crate) struct Prepared {
    enabled: bool,
}

impl Prepared {
    pub(crate) fn new(enabled: bool) -> Self {
        Prepared { enabled }
    }
}

type Param<'a> = (&'a (dyn ToSql + Sync), Type);

async fn query(
    client: &mut PooledClient,
    prepared: &Prepared,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Vec<Row>, Error> {
    if prepared.enabled {
        let statement = client.prepared(sql).await?;
        let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(v, _)| *v).collect();
        Ok(client.query(&statement, &values).await?)
    } else {
        Ok(client.query_typed(sql, params).await?)
    }
}

/// Run `statement` and describe how it went, failures included, as the core expects.
pub(crate) async fn execute(shared: &Shared, statement: Statement) -> QueryResult {
    match run(shared, statement).await {
        Ok(result) => result,
        Err(e) => QueryResult::Err(DbError { retryable: is_retryable(&e), message: e.to_string() }),
    }
}

/// Failures worth trying again: lost connections, serialization failures, deadlocks, a
/// server starting up or shutting down. A statement the server rejects as wrong is not.
fn is_retryable(e: &Error) -> bool {
    match e {
        Error::Db(db) => match db.code() {
            None => true,
            Some(code) => {
                let code = code.code();
                code.starts_with("08")
                    || code.starts_with("57P")
                    || code == "40001"
                    || code == "40P01"
                    || code == "53300"
            }
        },
        // A pool exhausted by clients held elsewhere frees up when they are released.
        Error::Connect { .. } | Error::PoolExhausted(_) => true,
        _ => false,
    }
}

async fn run(shared: &Shared, statement: Statement) -> Result<QueryResult, Error> {
    let schema = shared.utils.schema();
    let mut client = shared.utils.pool().get().await?;
    let prepared = &shared.prepared;
    match statement {
        Statement::RegisterTasks { identifiers } => {
            let sql = sql::render(sql::worker::REGISTER_TASKS, schema);
            let rows = query(&mut client, prepared, &sql, &[(&identifiers, Type::TEXT_ARRAY)]).await?;
            let tasks = rows
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<Result<_, tokio_postgres::Error>>()?;
            Ok(QueryResult::Tasks(tasks))
        }
        Statement::GetJobs { worker_id, task_ids, forbidden_flags, limit, now } => {
            let flags = match &shared.flags_fn {
                Some(f) => f().await,
                None => forbidden_flags,
            };
            let limit = i32::try_from(limit).unwrap_or(i32::MAX);
            let sql = sql::render(sql::worker::GET_JOBS, schema);
            let rows = query(
                &mut client,
                prepared,
                &sql,
                &[
                    (&worker_id, Type::TEXT),
                    (&task_ids, Type::INT4_ARRAY),
                    (&flags, Type::TEXT_ARRAY),
                    (&now, Type::TIMESTAMPTZ),
                    (&limit, Type::INT4),
                ],
            )
            .await?;
            Ok(QueryResult::Jobs(jobs_from_rows(&rows)?))
        }
        Statement::CompleteJobs { worker_id, ids } => {
            let sql = sql::render(sql::worker::COMPLETE_JOBS, schema);
            query(&mut client, prepared, &sql, &[(&worker_id, Type::TEXT), (&ids, Type::INT8_ARRAY)]).await?;
            Ok(QueryResult::Done)
        }
        Statement::FailJobs { worker_id, failures } => {
            let ids: Vec<i64> = failures.iter().map(|f| f.job_id).collect();
            let messages: Vec<&str> = failures.iter().map(|f| f.message.as_str()).collect();
            let run_ats: Vec<Option<chrono::DateTime<chrono::Utc>>> =
                failures.iter().map(|f| f.run_at).collect();
            let sql = sql::render(sql::worker::FAIL_JOBS, schema);
            query(
                &mut client,
                prepared,
                &sql,
                &[
                    (&worker_id, Type::TEXT),
                    (&ids, Type::INT8_ARRAY),
                    (&messages, Type::TEXT_ARRAY),
                    (&run_ats, Type::TIMESTAMPTZ_ARRAY),
                ],
            )
            .await?;
            Ok(QueryResult::Done)
        }
        Statement::ReturnJobs { worker_id, ids } => {
            let sql = sql::render(sql::worker::RETURN_JOBS, schema);
            query(&mut client, prepared, &sql, &[(&worker_id, Type::TEXT), (&ids, Type::INT8_ARRAY)]).await?;
            Ok(QueryResult::Done)
        }
        Statement::ResetLocked { locked_before } => {
            let sql = sql::render(sql::worker::RESET_LOCKED, schema);
            query(&mut client, prepared, &sql, &[(&locked_before, Type::TIMESTAMPTZ)]).await?;
            Ok(QueryResult::Done)
        }
        Statement::RegisterCrontabs { identifiers, known_since } => {
            let sql = sql::render(sql::worker::REGISTER_CRONTABS, schema);
            let params: [Param; 2] = [(&identifiers, Type::TEXT_ARRAY), (&known_since, Type::TIMESTAMPTZ)];
            let rows = query(&mut client, prepared, &sql, &params).await?;
            let known = rows
                .iter()
                .map(|r| {
                    Ok(KnownCrontab {
                        identifier: r.try_get(0)?,
                        known_since: r.try_get(1)?,
                        last_execution: r.try_get(2)?,
                    })
                })
                .collect::<Result<_, tokio_postgres::Error>>()?;
            Ok(QueryResult::KnownCrontabs(known))
        }
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
            let jobs = serde_json::Value::Array(jobs);
            let sql = sql::render(sql::worker::SCHEDULE_CRONTABS, schema);
            query(&mut client, prepared, &sql, &[(&jobs, Type::JSON), (&batch.at, Type::TIMESTAMPTZ)])
                .await?;
            Ok(QueryResult::Done)
        }
    }
}
