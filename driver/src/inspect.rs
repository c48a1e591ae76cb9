//! The queue as people and applications read it: counts, pages of jobs, one job, queues,
//! workers and cron items, read into typed, serializable values, and
//! [`WorkerUtils::list_jobs`]. The `formica` command and the dashboard (`formica-ui`) both
//! show these, so what one prints the other shows; every read of the queue is here.
//!
//! Every read is a plain `select` (the SQL is in `formica_sql::inspect`), in a
//! read-committed statement of its own or, for `list_jobs`, in an application's
//! transaction: no row lock is taken, so a worker is never waited for or held up.
//! Statements are sent unnamed with their parameter types, so they also run behind
//! pgBouncer in transaction mode. A row that does not have the shape its statement
//! promises is an [`Error::Row`] naming the column, never a panic.
//!
//! A job row that cannot be read (a payload number beyond `f64`, a `run_at` of
//! `-infinity`...) does not hide the others: listings read rows as the worker does
//! ([`decode_rows`]) and give such a row apart, as an [`Undecodable`] naming the job and
//! the column.

mod cron;
mod health;
mod lease;
mod query;
mod why;
mod workflows;

use crate::jobs::{JobFilter, Query, Session};
use crate::params::param;

use crate::rows::{decode_rows, row_error, Decoded};
use crate::utils::WorkerUtils;
use crate::Error;
use chrono::{DateTime, Utc};
pub use cron::{cron, CronItems, CronRow, CrontabSource, NEXT_RUNS};
use formica_core::job::Job;
pub use formica_core::protocol::Undecodable;
use formica_sql as sql;
/// The states a job is in, one at a time, in the order people read them (`jobs`' and the
/// bulk filters' `state`).
pub use formica_sql::JOB_STATES;
pub use health::{bloated_indexes, health, Check, Health, Severity, Thresholds, CHECKS};
pub use lease::{readiness, LeaseSeen, Liveness};
use query::{get, read};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use tokio_postgres::types::{Timestamp, ToSql, Type};
use tokio_postgres::Row;
pub use why::{Estimate, Holder, JobRef, Reason, Running, Slot, Why, AHEAD_BOUND, PACE_WINDOW};
pub use workflows::{
    WaitingFor, WorkflowDetail, WorkflowFilter, WorkflowJobSeen, WorkflowSummary, WORKFLOW_JOB_COLUMNS,
    WORKFLOW_JOB_STATES, WORKFLOW_STATES,
};

/// The jobs `filter` picks, oldest first, on any [`Session`]: a pooled client for
/// [`WorkerUtils::list_jobs`], an application's sqlx connection for `crate::sqlx`'s.
pub(crate) async fn list_jobs(
    schema: &str,
    mut session: impl Session,
    filter: &JobFilter,
) -> Result<Decoded, Error> {
    if let Some(state) = &filter.state {
        check_state(state)?;
    }
    let params = vec![
        param(filter.task.clone(), Type::TEXT),
        param(filter.queue.clone(), Type::TEXT),
        param(filter.failed, Type::BOOL),
        param(filter.locked, Type::BOOL),
        param(filter.limit, Type::INT8),
        param(filter.state.clone(), Type::TEXT),
    ];
    let sql = sql::render(sql::inspect::LIST_JOBS, schema);
    let query = Query { sql, params };
    decode_rows(&session.query(query).await?)
}

/// Refuse a state that is not one of [`JOB_STATES`], naming it.
pub(crate) fn check_state(state: &str) -> Result<(), Error> {
    if JOB_STATES.contains(&state) {
        return Ok(());
    }
    Err(Error::Filter(format!("unknown state {state:?}: expected one of {}", JOB_STATES.join(", "))))
}

impl WorkerUtils {
    /// Jobs matching `filter`, oldest first; rows that cannot be read are given apart.
    pub async fn list_jobs(&self, filter: &JobFilter) -> Result<Decoded, Error> {
        let client = self.pool().get().await?;
        list_jobs(self.schema(), &*client, filter).await
    }
}

/// A row that could not be read, for people: `job 42: column payload: number out of range`.
pub fn describe(row: &Undecodable) -> String {
    format!("job {}: {}", row.job_id, row.error)
}

/// A row that could not be read, as JSON: `{"id": 42, "undecodable": "column payload: ..."}`.
pub fn undecodable_json(row: &Undecodable) -> serde_json::Value {
    serde_json::json!({ "id": row.job_id, "undecodable": row.error })
}

fn serialize_undecodable<S: serde::Serializer>(rows: &[Undecodable], to: S) -> Result<S::Ok, S::Error> {
    to.collect_seq(rows.iter().map(undecodable_json))
}

fn zero_states() -> BTreeMap<String, i64> {
    sql::JOB_STATES.iter().map(|s| (s.to_string(), 0)).collect()
}

/// Job counts of one task in one queue (`None`: no named queue).
#[derive(Debug, Clone, Serialize)]
pub struct Counts {
    /// The task.
    pub task: String,
    /// The named queue, if any.
    pub queue: Option<String>,
    /// Jobs per state (every one of `formica_sql::JOB_STATES`, zeros included).
    pub states: BTreeMap<String, i64>,
}

/// The queue at a glance.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    /// Counts per task and queue, by task then queue (no queue first).
    pub counts: Vec<Counts>,
    /// Counts per state over every task and queue.
    pub totals: BTreeMap<String, i64>,
    /// The earliest `run_at` of a ready job.
    pub oldest_ready_at: Option<DateTime<Utc>>,
    /// How long that job has been ready, in seconds.
    pub oldest_ready_age_seconds: Option<i64>,
    /// Jobs whose latest failure was in the last hour.
    pub failed_last_hour: i64,
    /// What could not be read, for people: the oldest ready job's `run_at` of a task and
    /// queue (`-infinity`, say), left out of `oldest_ready_at`; the jobs list names the job.
    pub unreadable: Vec<String>,
}

/// Job counts per task, queue and state.
pub async fn overview(utils: &WorkerUtils) -> Result<Overview, Error> {
    let rows = read(utils, sql::inspect::COUNTS, &[]).await?;
    let mut totals = zero_states();
    let mut counts = Vec::new();
    let mut oldest_ready_at: Option<DateTime<Utc>> = None;
    let mut failed_last_hour = 0;
    let mut unreadable = Vec::new();
    for row in &rows {
        let mut states = zero_states();
        for state in sql::JOB_STATES {
            let n: i64 = get(row, state)?;
            states.insert(state.into(), n);
            *totals.entry(state.into()).or_default() += n;
        }
        let (task, queue): (String, Option<String>) = (get(row, "task_identifier")?, get(row, "queue_name")?);
        match get::<Option<DateTime<Utc>>>(row, "oldest_ready_at") {
            Ok(Some(at)) => oldest_ready_at = Some(oldest_ready_at.map_or(at, |o| o.min(at))),
            Ok(None) => {}
            Err(e) => unreadable.push(format!(
                "the oldest ready job of task {task:?}{}: {}",
                queue.as_ref().map(|q| format!(" in queue {q:?}")).unwrap_or_default(),
                row_error(e).replace("column oldest_ready_at", "run_at")
            )),
        }
        failed_last_hour += get::<i64>(row, "failed_last_hour")?;
        counts.push(Counts { task, queue, states });
    }
    Ok(Overview {
        counts,
        totals,
        oldest_ready_at,
        oldest_ready_age_seconds: oldest_ready_at
            .map(|at| (utils.pool().runtime().now() - at).num_seconds().max(0)),
        failed_last_hour,
        unreadable,
    })
}

/// The newest migration applied to the schema (`None`: not installed).
pub async fn schema_version(utils: &WorkerUtils) -> Result<Option<i32>, Error> {
    let rows = read(utils, sql::inspect::SCHEMA_VERSION, &[]).await?;
    rows.first().map_or(Ok(None), |row| get(row, "latest"))
}

/// Rows ever deleted from the jobs table (completed or removed jobs), per PostgreSQL's
/// statistics: sampled over time, the difference is the throughput. The counter goes back
/// when the statistics are reset or the server restarts.
pub async fn deleted_jobs(utils: &WorkerUtils) -> Result<i64, Error> {
    let schema = utils.schema();
    let rows = read(utils, sql::inspect::DELETED_JOBS, &[(&schema, Type::TEXT)]).await?;
    rows.first().map_or(Ok(0), |row| get(row, "deleted"))
}

/// A job and its state.
#[derive(Debug, Clone, Serialize)]
pub struct JobRow {
    /// The job.
    #[serde(flatten)]
    pub job: Job,
    /// One of `formica_sql::JOB_STATES`.
    pub state: String,
}

/// The order of a page of jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    /// Newest first (by id).
    #[default]
    Newest,
    /// Oldest first (by id).
    Oldest,
    /// The jobs that will run, in the order workers take them: priority, then run_at.
    Next,
}

impl Order {
    /// Every order.
    pub const ALL: [Order; 3] = [Order::Newest, Order::Oldest, Order::Next];

    /// Its name: `newest`, `oldest` or `next`.
    pub fn name(self) -> &'static str {
        match self {
            Order::Newest => "newest",
            Order::Oldest => "oldest",
            Order::Next => "next",
        }
    }

    /// The order named `name`, if any.
    pub fn named(name: &str) -> Option<Order> {
        Order::ALL.into_iter().find(|order| order.name() == name)
    }

    /// The part of `sql::inspect::JOBS` that pages and sorts in this order.
    fn sql(self) -> Result<&'static str, Error> {
        let found = sql::inspect::JOBS_ORDER.iter().find(|(name, _)| *name == self.name());
        found.map(|&(_, text)| text).ok_or_else(|| Error::Internal(format!("no SQL for order {self:?}")))
    }
}

/// Where a page of jobs starts: after the job with this id (and, in the [`Order::Next`]
/// order, this priority and run_at). As text: `id`, or `id_priority_runat` (run_at in
/// RFC 3339, or `infinity` / `-infinity`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cursor {
    id: Option<i64>,
    priority: Option<i16>,
    run_at: Option<Timestamp<DateTime<Utc>>>,
}

impl Cursor {
    /// The text of the cursor after the job `row`, for a page in `order`. Read from the
    /// row itself, so a page may end on a job that cannot be read (a `run_at` of
    /// `-infinity` comes first in the `next` order).
    fn after(row: &Row, order: Order) -> Result<String, Error> {
        let id: i64 = get(row, "id")?;
        if order != Order::Next {
            return Ok(id.to_string());
        }
        let run_at = match get(row, "run_at")? {
            Timestamp::PosInfinity => "infinity".to_owned(),
            Timestamp::NegInfinity => "-infinity".to_owned(),
            Timestamp::Value(at) => DateTime::<Utc>::to_rfc3339(&at),
        };
        Ok(format!("{id}_{}_{run_at}", get::<i16>(row, "priority")?))
    }

    /// The cursor `text` (a page's [`JobPage::next`]) for a page in `order`; `None` if it
    /// was not made for that order.
    pub fn parse(text: &str, order: Order) -> Option<Cursor> {
        let parts: Vec<&str> = text.splitn(3, '_').collect();
        match (parts.as_slice(), order) {
            ([id], Order::Newest | Order::Oldest) => {
                Some(Cursor { id: Some(id.parse().ok()?), ..Cursor::default() })
            }
            ([id, priority, run_at], Order::Next) => Some(Cursor {
                id: Some(id.parse().ok()?),
                priority: Some(priority.parse().ok()?),
                run_at: Some(match *run_at {
                    "infinity" => Timestamp::PosInfinity,
                    "-infinity" => Timestamp::NegInfinity,
                    at => Timestamp::Value(DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc)),
                }),
            }),
            _ => None,
        }
    }
}

/// Which jobs [`jobs`] lists, in which order, from where. `None` filters match any job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSelection {
    /// Only jobs of this task.
    pub task: Option<String>,
    /// Only jobs of this named queue.
    pub queue: Option<String>,
    /// Only jobs in this state (one of `formica_sql::JOB_STATES`).
    pub state: Option<String>,
    /// Only the job with this key.
    pub key: Option<String>,
    /// Only jobs whose `last_error` contains this text (case-insensitive).
    pub error: Option<String>,
    /// The order.
    pub order: Order,
    /// The page after this cursor (the first page if `None`).
    pub after: Option<Cursor>,
    /// Jobs per page.
    pub limit: i64,
}

/// One page of jobs.
#[derive(Debug, Clone, Serialize)]
pub struct JobPage {
    /// The jobs.
    pub jobs: Vec<JobRow>,
    /// The rows of the page that could not be read (as JSON, see [`undecodable_json`]).
    #[serde(serialize_with = "serialize_undecodable")]
    pub undecodable: Vec<Undecodable>,
    /// The cursor of the next page (see [`Cursor::parse`]), if there are more jobs.
    pub next: Option<String>,
}

/// A page of the jobs `selection` picks, in its order, from its cursor.
pub async fn jobs(utils: &WorkerUtils, selection: &JobSelection) -> Result<JobPage, Error> {
    let s = selection;
    let template = format!("{}{}", sql::inspect::JOBS, s.order.sql()?);
    let cursor = s.after.clone().unwrap_or_default();
    // One more than a page tells whether there is a next one.
    let fetch = s.limit + 1;
    let mut params: Vec<(&(dyn ToSql + Sync), Type)> = vec![
        (&s.task, Type::TEXT),
        (&s.queue, Type::TEXT),
        (&s.state, Type::TEXT),
        (&s.key, Type::TEXT),
        (&s.error, Type::TEXT),
        (&fetch, Type::INT8),
        (&cursor.id, Type::INT8),
    ];
    if s.order == Order::Next {
        params.extend([
            (&cursor.run_at as &(dyn ToSql + Sync), Type::TIMESTAMPTZ),
            (&cursor.priority, Type::INT2),
        ]);
    }
    let mut rows = read(utils, &template, &params).await?;
    let next = if rows.len() as i64 > s.limit {
        rows.truncate(usize::try_from(s.limit).unwrap_or_default());
        rows.last().map(|last| Cursor::after(last, s.order)).transpose()?
    } else {
        None
    };
    let (jobs, undecodable) = with_states(&rows)?;
    Ok(JobPage { jobs, undecodable, next })
}

/// The job rows read, each with its state, and those that could not be read.
fn with_states(rows: &[Row]) -> Result<(Vec<JobRow>, Vec<Undecodable>), Error> {
    let mut states: HashMap<i64, String> =
        rows.iter().map(|row| Ok((get(row, "id")?, get(row, "state")?))).collect::<Result<_, Error>>()?;
    let Decoded { jobs, undecodable } = decode_rows(rows)?;
    let jobs = jobs
        .into_iter()
        .map(|job| {
            let state =
                states.remove(&job.id).ok_or_else(|| Error::Row(format!("no state for job {}", job.id)))?;
            Ok(JobRow { job, state })
        })
        .collect::<Result<_, Error>>()?;
    Ok((jobs, undecodable))
}

/// One job, with the lock on its named queue.
#[derive(Debug, Clone, Serialize)]
pub struct JobDetail {
    /// The job and its state.
    #[serde(flatten)]
    pub row: JobRow,
    /// The worker holding the job's named queue, if any.
    pub queue_locked_by: Option<String>,
    /// Since when it holds it.
    pub queue_locked_at: Option<DateTime<Utc>>,
    /// What its handler reported last, if anything.
    pub progress: Option<crate::JobProgress>,
}

/// The job `id`, if it exists: read, or why its row cannot be.
pub async fn job(utils: &WorkerUtils, id: i64) -> Result<Option<Result<JobDetail, Undecodable>>, Error> {
    let rows = read(utils, sql::inspect::JOB, &[(&id, Type::INT8)]).await?;
    let Some(first) = rows.first() else { return Ok(None) };
    let (jobs, undecodable) = with_states(&rows)?;
    let Some(row) = jobs.into_iter().next() else { return Ok(undecodable.into_iter().next().map(Err)) };
    Ok(Some(Ok(JobDetail {
        row,
        queue_locked_by: get(first, "queue_locked_by")?,
        queue_locked_at: get(first, "queue_locked_at")?,
        progress: crate::reports::progress::from_columns(
            get(first, "progress_fraction")?,
            get(first, "progress_value")?,
            get(first, "progress_at")?,
        )?,
    })))
}

/// Why `job` is not running now, and when it will (docs/guide/why.md): every reason with its
/// evidence, where it runs if it does, and an estimate of its start. A job that never
/// existed (or ended with no history kept) is [`Error::JobNotFound`].
pub async fn why(utils: &WorkerUtils, job_ref: &JobRef) -> Result<Why, Error> {
    let checked_at = database_now(utils).await?;
    let (id, timer) = match job_ref {
        JobRef::Id(id) => (*id, None),
        JobRef::Workflow { workflow, name } => {
            match why::workflow_job(utils, *workflow, name, checked_at).await? {
                why::Found::Answer(answer) => return Ok(*answer),
                why::Found::Job(id, timer) => (id, timer.then_some(*workflow)),
            }
        }
    };
    match job(utils, id).await? {
        Some(Ok(d)) => {
            let queue_lock = (d.queue_locked_by.as_deref(), d.queue_locked_at);
            let why = why::explain(utils, &d.row.job, &d.row.state, queue_lock, checked_at).await?;
            Ok(match timer {
                Some(workflow) => why::as_timer(why, workflow),
                None => why,
            })
        }
        Some(Err(bad)) => Err(Error::Row(describe(&bad))),
        None => why::finished(utils, id, checked_at).await,
    }
}

/// A named queue.
#[derive(Debug, Clone, Serialize)]
pub struct Queue {
    /// Its name.
    pub name: String,
    /// The worker holding it, if any.
    pub locked_by: Option<String>,
    /// Since when.
    pub locked_at: Option<DateTime<Utc>>,
}

/// Every named queue, by name.
pub async fn queues(utils: &WorkerUtils) -> Result<Vec<Queue>, Error> {
    let rows = read(utils, sql::inspect::QUEUES, &[]).await?;
    rows.iter()
        .map(|r| {
            Ok(Queue {
                name: get(r, "queue_name")?,
                locked_by: get(r, "locked_by")?,
                locked_at: get(r, "locked_at")?,
            })
        })
        .collect()
}

/// The database's clock now (what the dashboard counts relative times from).
pub async fn database_now(utils: &WorkerUtils) -> Result<DateTime<Utc>, Error> {
    let rows = read(utils, "select now()", &[]).await?;
    let row = rows.first().ok_or_else(|| Error::Row("select now() answered no row".into()))?;
    get(row, "now")
}

/// The columns every table of workers starts with (the CLI's `status`, the dashboard's
/// Workers page), in this order, before the ones of its own.
pub const WORKER_COLUMNS: [&str; 8] =
    ["worker", "host", "pid", "started", "last heartbeat", "lease", "locked jobs", "locked queues"];

/// A worker seen through its lease (Formica's) or the locks it holds.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerSeen {
    /// Its id, as in `locked_by`.
    pub worker_id: String,
    /// Jobs it holds.
    pub jobs: i64,
    /// Named queues it holds.
    pub queues: i64,
    /// Its oldest lock (`None`: it holds nothing).
    pub since: Option<DateTime<Utc>>,
    /// Until when its lease says it is alive (`None`: no live lease, as graphile-worker's
    /// workers and dead ones): unlocking it before then is refused unless forced.
    pub alive_until: Option<DateTime<Utc>>,
    /// Its lease, live or lapsed and not yet swept (`None`: it has none).
    pub lease: Option<LeaseSeen>,
}

impl WorkerSeen {
    /// What its lease says of it.
    pub fn liveness(&self) -> Liveness {
        Liveness::of(self.lease.as_ref())
    }

    /// Whether an operator may want to unlock it: it holds something and is not alive (a
    /// live worker's jobs, unlocked, would run twice; a stopped one normally holds nothing).
    pub fn unlockable(&self) -> bool {
        self.liveness() != Liveness::Alive && self.jobs + self.queues > 0
    }
}

/// Every worker with a lease, live or lapsed, and every worker holding locks, by id.
pub async fn workers(utils: &WorkerUtils) -> Result<Vec<WorkerSeen>, Error> {
    let rows = read(utils, sql::inspect::WORKERS, &[]).await?;
    rows.iter()
        .map(|r| {
            Ok(WorkerSeen {
                worker_id: get(r, "worker_id")?,
                jobs: get(r, "jobs")?,
                queues: get(r, "queues")?,
                since: get(r, "since")?,
                alive_until: get(r, "alive_until")?,
                lease: LeaseSeen::from_row(r)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_order_has_its_sql_and_is_found_by_name() {
        for order in Order::ALL {
            assert!(order.sql().is_ok(), "{order:?}");
            assert_eq!(Order::named(order.name()), Some(order));
        }
        assert_eq!(Order::named("sideways"), None);
    }

    #[test]
    fn cursors_carry_the_order_they_were_made_for() {
        let by_id = Cursor { id: Some(42), ..Cursor::default() };
        assert_eq!(Cursor::parse("42", Order::Newest), Some(by_id.clone()));
        assert_eq!(Cursor::parse("42", Order::Oldest), Some(by_id));
        let at = "2030-01-02T03:04:05.123456+00:00";
        let cursor = Cursor::parse(&format!("7_-3_{at}"), Order::Next).unwrap();
        assert_eq!((cursor.id, cursor.priority), (Some(7), Some(-3)));
        let Some(Timestamp::Value(run_at)) = cursor.run_at else { panic!("{cursor:?}") };
        assert_eq!(run_at.to_rfc3339(), at);
        let infinite = Cursor::parse("7_0_-infinity", Order::Next).unwrap();
        assert_eq!(infinite.run_at, Some(Timestamp::NegInfinity));
        assert!(Cursor::parse("7", Order::Next).is_none());
        assert!(Cursor::parse(&format!("7_0_{at}"), Order::Newest).is_none());
        assert!(Cursor::parse("x", Order::Newest).is_none());
        assert!(Cursor::parse("7_x_2030", Order::Next).is_none());
    }
}
