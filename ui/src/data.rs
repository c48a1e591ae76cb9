//! What only the dashboard adds to `formica::inspect`'s read model: the throughput it
//! samples while it runs, the queue's health as the pages' banner last read it, and the
//! jobs page's query as a form sends it.
//!
//! Every read goes through `formica::inspect`: plain `select`s that lock no row, so a
//! worker is never waited for or held up.

use crate::Error;
use chrono::{DateTime, Utc};
use formica::inspect::{self, Cursor, JobSelection, Order};
use formica::sql;
use formica::WorkerUtils;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Jobs per page unless asked otherwise, and the most a page may hold.
pub const PAGE: i64 = 50;
const MAX_PAGE: i64 = 500;
const HOUR: Duration = Duration::from_secs(3600);

/// The overview page: the queue at a glance, and the dashboard's throughput.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    /// Counts, oldest ready job and recent failures.
    #[serde(flatten)]
    pub queue: inspect::Overview,
    /// Jobs completed (or removed) since `completed_since`, at most an hour ago.
    pub completed: i64,
    /// Start of the window `completed` counts over (this dashboard samples the database's
    /// statistics, so the window starts no earlier than the dashboard did).
    pub completed_since: DateTime<Utc>,
}

/// How long the banner's health stays fresh: every page shows it, and a page may be
/// reloaded every 2 seconds by many viewers.
const HEALTH_FRESH: Duration = Duration::from_secs(30);

/// The queue's health as last read for the pages' banner, read again once stale.
#[derive(Debug, Default)]
pub struct HealthCache {
    last: Mutex<Option<(Instant, Arc<inspect::Health>)>>,
}

impl HealthCache {
    /// The health, read anew if the last read is older than 30 seconds.
    pub async fn get(&self, utils: &WorkerUtils) -> Result<Arc<inspect::Health>, Error> {
        let fresh = |last: &Option<(Instant, Arc<inspect::Health>)>| {
            last.as_ref().filter(|(at, _)| at.elapsed() < HEALTH_FRESH).map(|(_, health)| health.clone())
        };
        if let Some(health) = fresh(&self.last.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(health);
        }
        let health = Arc::new(inspect::health(utils, &inspect::Thresholds::default()).await?);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((Instant::now(), health.clone()));
        Ok(health)
    }
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
    let deleted = inspect::deleted_jobs(utils).await?;
    Ok(throughput.record(Utc::now(), deleted))
}

/// The overview: the queue as `reads` shows it, and the jobs completed as `primary`'s
/// counter says (a replica's statistics count no deletion it replays).
pub async fn overview(
    reads: &WorkerUtils,
    primary: &WorkerUtils,
    throughput: &Throughput,
) -> Result<Overview, Error> {
    let (completed, completed_since) = sample(primary, throughput).await?;
    Ok(Overview { queue: inspect::overview(reads).await?, completed, completed_since })
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

    /// The jobs the query picks, or why it picks none (a mistake in the request).
    pub fn selection(&self) -> Result<JobSelection, Error> {
        let query = self.cleaned();
        let sort = query.sort.as_deref().unwrap_or("newest");
        let order = Order::named(sort).ok_or_else(|| {
            Error::BadRequest(format!("unknown sort {sort:?}: expected newest, oldest or next"))
        })?;
        if let Some(state) = query.state.as_deref() {
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
        let after = match query.after.as_deref() {
            None => None,
            Some(text) => Some(
                Cursor::parse(text, order)
                    .ok_or_else(|| Error::BadRequest(format!("bad page cursor {text:?}")))?,
            ),
        };
        Ok(JobSelection {
            task: query.task,
            queue: query.queue,
            state: query.state,
            key: query.key,
            error: query.error,
            order,
            after,
            limit,
        })
    }
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
}
