//! What the dashboard shows, read from the database: one function per page, each
//! returning a serializable value that is both the page's JSON (under `/api/`) and what
//! its HTML is rendered from.
//!
//! Every read is a plain `select` in its own read-committed statement (the SQL is in
//! `formica_sql::ui`): no row lock is taken, so a worker is never waited for or held up.

use crate::Error;
use chrono::{DateTime, Utc};
use formica::cron::Crontab;
use formica::rows::jobs_from_rows;
use formica::sql;
use formica::tokio_postgres::types::ToSql;
use formica::{Job, WorkerUtils};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// Jobs per page unless asked otherwise, and the most a page may hold.
pub const PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;
/// How far ahead the cron page looks.
const NEXT_RUNS: usize = 3;
const HOUR: Duration = Duration::from_secs(3600);

/// Job counts of one task in one queue (`None`: no named queue).
#[derive(Debug, Clone, Serialize)]
pub struct Counts {
    /// The task.
    pub task: String,
    /// The named queue, if any.
    pub queue: Option<String>,
    /// Jobs per state (every state present, zeros included).
    pub states: BTreeMap<String, i64>,
}

/// The overview page.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    /// Counts per task and queue.
    pub counts: Vec<Counts>,
    /// Counts per state over every task and queue.
    pub totals: BTreeMap<String, i64>,
    /// The earliest `run_at` of a ready job.
    pub oldest_ready_at: Option<DateTime<Utc>>,
    /// How long that job has been ready, in seconds.
    pub oldest_ready_age_seconds: Option<i64>,
    /// Jobs whose latest failure was in the last hour.
    pub failed_last_hour: i64,
    /// Jobs completed (or removed) since `completed_since`, at most an hour ago.
    pub completed: i64,
    /// Start of the window `completed` counts over (this dashboard samples the database's
    /// statistics, so the window starts no earlier than the dashboard did).
    pub completed_since: DateTime<Utc>,
}

/// Samples of the jobs table's delete counter over the last hour: the throughput.
#[derive(Debug, Default)]
pub struct Throughput {
    samples: Mutex<VecDeque<(DateTime<Utc>, i64)>>,
}

impl Throughput {
    /// Record the counter's value `deleted` at `at`; returns deletions since the oldest
    /// sample kept, and its time.
    pub fn record(&self, at: DateTime<Utc>, deleted: i64) -> (i64, DateTime<Utc>) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        // A counter that went back was reset (statistics reset, server restart).
        if samples.back().is_some_and(|&(_, last)| deleted < last) {
            samples.clear();
        }
        samples.push_back((at, deleted));
        let hour = chrono::Duration::from_std(HOUR).unwrap_or_default();
        // Keep the newest sample older than an hour as the window's start.
        while samples.len() > 1 && samples[1].0 <= at - hour {
            samples.pop_front();
        }
        let (since, first) = samples[0];
        (deleted - first, since)
    }
}

/// Sample the delete counter into `throughput`.
pub async fn sample(utils: &WorkerUtils, throughput: &Throughput) -> Result<(i64, DateTime<Utc>), Error> {
    let client = utils.pool().get().await?;
    let deleted: i64 =
        client.query_one(&render(utils, sql::ui::DELETED_JOBS), &[&utils.schema()]).await?.get(0);
    Ok(throughput.record(Utc::now(), deleted))
}

fn render(utils: &WorkerUtils, text: &str) -> String {
    sql::render(&sql::with_job_state(text), utils.schema())
}

fn zero_states() -> BTreeMap<String, i64> {
    sql::JOB_STATES.iter().map(|s| (s.to_string(), 0)).collect()
}

/// The overview.
pub async fn overview(utils: &WorkerUtils, throughput: &Throughput) -> Result<Overview, Error> {
    let (completed, completed_since) = sample(utils, throughput).await?;
    let client = utils.pool().get().await?;
    let rows = client.query(&render(utils, sql::cli::STATUS), &[]).await?;
    let mut totals = zero_states();
    let mut counts = Vec::new();
    let mut oldest_ready_at: Option<DateTime<Utc>> = None;
    let mut failed_last_hour = 0;
    for row in rows {
        let mut states = zero_states();
        for state in sql::JOB_STATES {
            let n: i64 = row.try_get(state)?;
            states.insert(state.into(), n);
            *totals.entry(state.into()).or_default() += n;
        }
        if let Some(at) = row.try_get::<_, Option<DateTime<Utc>>>("oldest_ready_at")? {
            oldest_ready_at = Some(oldest_ready_at.map_or(at, |o| o.min(at)));
        }
        failed_last_hour += row.try_get::<_, i64>("failed_last_hour")?;
        counts.push(Counts {
            task: row.try_get("task_identifier")?,
            queue: row.try_get("queue_name")?,
            states,
        });
    }
    Ok(Overview {
        counts,
        totals,
        oldest_ready_at,
        oldest_ready_age_seconds: oldest_ready_at.map(|at| (Utc::now() - at).num_seconds().max(0)),
        failed_last_hour,
        completed,
        completed_since,
    })
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

/// Which jobs the jobs page lists; empty strings count as absent (HTML forms send them).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct JobQuery {
    /// Only jobs of this task.
    pub task: Option<String>,
    /// Only jobs of this named queue.
    pub queue: Option<String>,
    /// Only jobs in this state.
    pub state: Option<String>,
    /// Only the job with this key.
    pub key: Option<String>,
    /// Only jobs whose `last_error` contains this text (case-insensitive).
    pub error: Option<String>,
    /// `newest` (default), `oldest`, or `next`: the jobs that will run, in the order
    /// workers take them (priority, then run_at).
    pub sort: Option<String>,
    /// The page after this cursor (a previous page's `next`).
    pub after: Option<String>,
    /// Jobs per page (default 50, at most 500).
    pub limit: Option<i64>,
}

fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

impl JobQuery {
    /// The query with empty fields dropped (for links to the next page).
    pub fn cleaned(&self) -> JobQuery {
        let keep = |v: &Option<String>| given(v).map(str::to_owned);
        JobQuery {
            task: keep(&self.task),
            queue: keep(&self.queue),
            state: keep(&self.state),
            key: keep(&self.key),
            error: keep(&self.error),
            sort: keep(&self.sort),
            after: keep(&self.after),
            limit: self.limit,
        }
    }
}

/// One page of jobs.
#[derive(Debug, Clone, Serialize)]
pub struct JobPage {
    /// The jobs.
    pub jobs: Vec<JobRow>,
    /// The cursor of the next page, if there are more jobs.
    pub next: Option<String>,
}

/// A page of jobs matching `query`, in its order, from its cursor.
pub async fn jobs(utils: &WorkerUtils, query: &JobQuery) -> Result<JobPage, Error> {
    let sort = given(&query.sort).unwrap_or("newest");
    let (_, order) = sql::ui::JOBS_ORDER.iter().find(|(name, _)| *name == sort).ok_or_else(|| {
        Error::BadRequest(format!("unknown sort {sort:?}: expected newest, oldest or next"))
    })?;
    let state = given(&query.state);
    if let Some(state) = state {
        if !sql::JOB_STATES.contains(&state) {
            return Err(Error::BadRequest(format!(
                "unknown state {state:?}: expected one of {}",
                sql::JOB_STATES.join(", ")
            )));
        }
    }
    let limit = query.limit.unwrap_or(PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(Error::BadRequest(format!("limit must be between 1 and {MAX_PAGE}")));
    }
    let cursor = match given(&query.after) {
        None => Cursor::default(),
        Some(text) => Cursor::parse(text, sort == "next")?,
    };
    let text = render(utils, &format!("{}{order}", sql::ui::JOBS));
    let client = utils.pool().get().await?;
    let (task, queue, key, error) =
        (given(&query.task), given(&query.queue), given(&query.key), given(&query.error));
    // One more than a page tells whether there is a next one.
    let fetch = limit + 1;
    let rows = if sort == "next" {
        let params: [&(dyn ToSql + Sync); 9] =
            [&task, &queue, &state, &key, &error, &fetch, &cursor.id, &cursor.run_at, &cursor.priority];
        client.query(&text, &params).await?
    } else {
        client.query(&text, &[&task, &queue, &state, &key, &error, &fetch, &cursor.id]).await?
    };
    let mut jobs = with_states(&rows)?;
    let next = if jobs.len() as i64 > limit {
        jobs.truncate(limit as usize);
        jobs.last().map(|last| Cursor::after(&last.job, sort == "next"))
    } else {
        None
    };
    Ok(JobPage { jobs, next })
}

/// Where a page starts: after the job with this id (and, in the `next` order, this
/// priority and run_at). As text: `id`, or `id_priority_runat`.
#[derive(Debug, Default, PartialEq)]
struct Cursor {
    id: Option<i64>,
    priority: Option<i16>,
    run_at: Option<DateTime<Utc>>,
}

impl Cursor {
    fn after(job: &Job, next_order: bool) -> String {
        if next_order {
            format!("{}_{}_{}", job.id, job.priority, job.run_at.to_rfc3339())
        } else {
            job.id.to_string()
        }
    }

    fn parse(text: &str, next_order: bool) -> Result<Cursor, Error> {
        let bad = || Error::BadRequest(format!("bad page cursor {text:?}"));
        let parts: Vec<&str> = text.splitn(3, '_').collect();
        match (parts.as_slice(), next_order) {
            ([id], false) => Ok(Cursor { id: Some(id.parse().map_err(|_| bad())?), ..Cursor::default() }),
            ([id, priority, run_at], true) => Ok(Cursor {
                id: Some(id.parse().map_err(|_| bad())?),
                priority: Some(priority.parse().map_err(|_| bad())?),
                run_at: Some(DateTime::parse_from_rfc3339(run_at).map_err(|_| bad())?.with_timezone(&Utc)),
            }),
            _ => Err(bad()),
        }
    }
}

fn with_states(rows: &[formica::tokio_postgres::Row]) -> Result<Vec<JobRow>, Error> {
    let jobs = jobs_from_rows(rows)?;
    jobs.into_iter().zip(rows).map(|(job, row)| Ok(JobRow { job, state: row.try_get("state")? })).collect()
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
}

/// The job `id`, if it exists.
pub async fn job(utils: &WorkerUtils, id: i64) -> Result<Option<JobDetail>, Error> {
    let client = utils.pool().get().await?;
    let rows = client.query(&render(utils, sql::ui::JOB), &[&id]).await?;
    let Some(first) = rows.first() else { return Ok(None) };
    let row = with_states(&rows)?.remove(0);
    Ok(Some(JobDetail {
        row,
        queue_locked_by: first.try_get("queue_locked_by")?,
        queue_locked_at: first.try_get("queue_locked_at")?,
    }))
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

/// Every named queue.
pub async fn queues(utils: &WorkerUtils) -> Result<Vec<Queue>, Error> {
    let client = utils.pool().get().await?;
    let rows = client.query(&render(utils, sql::ui::QUEUES), &[]).await?;
    rows.iter()
        .map(|r| Ok(Queue { name: r.try_get(0)?, locked_by: r.try_get(1)?, locked_at: r.try_get(2)? }))
        .collect()
}

/// A worker seen through the locks it holds (workers write no heartbeat).
#[derive(Debug, Clone, Serialize)]
pub struct WorkerSeen {
    /// Its id, as in `locked_by`.
    pub worker_id: String,
    /// Jobs it holds.
    pub jobs: i64,
    /// Named queues it holds.
    pub queues: i64,
    /// Its oldest lock.
    pub since: DateTime<Utc>,
}

/// Workers holding locks.
pub async fn workers(utils: &WorkerUtils) -> Result<Vec<WorkerSeen>, Error> {
    let client = utils.pool().get().await?;
    let rows = client.query(&render(utils, sql::cli::WORKERS), &[]).await?;
    rows.iter()
        .map(|r| {
            Ok(WorkerSeen {
                worker_id: r.try_get("locked_by")?,
                jobs: r.try_get("jobs")?,
                queues: r.try_get("queues")?,
                since: r.try_get("since")?,
            })
        })
        .collect()
}

/// A cron item: from the crontab the dashboard was given, and from the database's record.
#[derive(Debug, Clone, Serialize)]
pub struct CronRow {
    /// Its identifier.
    pub identifier: String,
    /// Its crontab line in canonical form, if the dashboard was given the crontab.
    pub spec: Option<String>,
    /// Its task, if known.
    pub task: Option<String>,
    /// When a worker first registered it.
    pub known_since: Option<DateTime<Utc>>,
    /// The slot it last ran for.
    pub last_execution: Option<DateTime<Utc>>,
    /// Its next runs, if the crontab is known.
    pub next_runs: Vec<DateTime<Utc>>,
}

/// Cron items: those of `crontab` in its order, then those only the database knows.
pub async fn cron(utils: &WorkerUtils, crontab: Option<&Crontab>) -> Result<Vec<CronRow>, Error> {
    let client = utils.pool().get().await?;
    let rows = client.query(&render(utils, sql::ui::CRONTABS), &[]).await?;
    let mut known: BTreeMap<String, (DateTime<Utc>, Option<DateTime<Utc>>)> = BTreeMap::new();
    for r in &rows {
        known.insert(r.try_get(0)?, (r.try_get(1)?, r.try_get(2)?));
    }
    let now = Utc::now();
    let mut out = Vec::new();
    for item in crontab.map(Crontab::items).unwrap_or_default() {
        let record = known.remove(item.identifier());
        out.push(CronRow {
            identifier: item.identifier().to_owned(),
            spec: Some(item.to_string()),
            task: Some(item.task().to_owned()),
            known_since: record.map(|r| r.0),
            last_execution: record.and_then(|r| r.1),
            next_runs: std::iter::successors(item.next_after(now), |&at| item.next_after(at))
                .take(NEXT_RUNS)
                .collect(),
        });
    }
    out.extend(known.into_iter().map(|(identifier, (since, last))| CronRow {
        identifier,
        spec: None,
        task: None,
        known_since: Some(since),
        last_execution: last,
        next_runs: Vec::new(),
    }));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_counts_deletes_over_the_last_hour_and_survives_a_reset() {
        let t = Throughput::default();
        let start = Utc::now();
        assert_eq!(t.record(start, 100), (0, start));
        let later = start + chrono::Duration::minutes(30);
        assert_eq!(t.record(later, 150), (50, start));
        let much_later = start + chrono::Duration::minutes(95);
        // The window starts at the newest sample an hour old or older.
        assert_eq!(t.record(much_later, 400), (250, later));
        assert_eq!(t.record(much_later, 7), (0, much_later));
    }

    #[test]
    fn cursors_carry_the_order_they_were_made_for() {
        assert_eq!(Cursor::parse("42", false).unwrap(), Cursor { id: Some(42), ..Cursor::default() });
        let at = "2030-01-02T03:04:05.123456+00:00";
        let cursor = Cursor::parse(&format!("7_-3_{at}"), true).unwrap();
        assert_eq!((cursor.id, cursor.priority), (Some(7), Some(-3)));
        assert_eq!(cursor.run_at.map(|t| t.to_rfc3339()), Some(at.to_owned()));
        assert!(Cursor::parse("7", true).is_err());
        assert!(Cursor::parse(&format!("7_0_{at}"), false).is_err());
        assert!(Cursor::parse("x", false).is_err());
        assert!(Cursor::parse("7_x_2030", true).is_err());
    }
}
