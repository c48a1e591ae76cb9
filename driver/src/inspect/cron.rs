//! Cron items as the read model shows them: the crontab the live workers run (each records
//! its own on its lease) or, while none runs one, the crontab the reader was given; each
//! item with graphile-worker's record of it (`known_crontabs`), and the items only that
//! record knows.

use super::query::{get, read};
use crate::utils::WorkerUtils;
use crate::Error;
use chrono::{DateTime, Utc};
use formica_core::cron::{self, CronItem, Crontab};
use formica_sql as sql;
use serde::Serialize;
use std::collections::BTreeMap;

/// How many next runs [`cron()`] gives for each item of the crontab.
pub const NEXT_RUNS: usize = 3;

/// Whose crontab [`CronItems::items`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CrontabSource {
    /// The live workers' (each item names the workers that run it).
    Workers,
    /// The one given to [`cron()`]: no live worker records one.
    Given,
    /// None: no live worker records one and none was given; only the database's record of
    /// items is listed.
    None,
}

/// The cron items, and where their crontab came from.
#[derive(Debug, Clone, Serialize)]
pub struct CronItems {
    /// Whose crontab the items with a `spec` are from.
    pub source: CrontabSource,
    /// The crontab's items in its order, then those only the database knows, by identifier.
    pub items: Vec<CronRow>,
    /// The workers' crontabs that could not be read, for people (left out of `items`).
    pub unreadable: Vec<String>,
}

/// A cron item: from a crontab, and from the database's record.
#[derive(Debug, Clone, Serialize)]
pub struct CronRow {
    /// Its identifier.
    pub identifier: String,
    /// Its crontab line in canonical form, if it is in the crontab.
    pub spec: Option<String>,
    /// Its task, if known.
    pub task: Option<String>,
    /// The live workers running it, by id (empty unless the source is the workers).
    pub workers: Vec<String>,
    /// When a worker first registered it.
    pub known_since: Option<DateTime<Utc>>,
    /// The slot it last ran for.
    pub last_execution: Option<DateTime<Utc>>,
    /// Its next [`NEXT_RUNS`] runs, if it is in the crontab.
    pub next_runs: Vec<DateTime<Utc>>,
}

/// Cron items: those of the live workers' crontabs (an item two workers run with different
/// lines is listed once per line), else those of `given`; then those only the database
/// knows.
pub async fn cron(utils: &WorkerUtils, given: Option<&Crontab>) -> Result<CronItems, Error> {
    let (running, unreadable) = live_items(utils).await?;
    let (source, listed) = match (running.is_empty(), given) {
        (false, _) => (CrontabSource::Workers, running),
        (true, Some(given)) => {
            (CrontabSource::Given, given.items().iter().map(|item| (item.clone(), Vec::new())).collect())
        }
        (true, None) => (CrontabSource::None, Vec::new()),
    };
    let mut known: BTreeMap<String, (DateTime<Utc>, Option<DateTime<Utc>>)> = BTreeMap::new();
    for r in &read(utils, sql::inspect::CRONTABS, &[]).await? {
        known.insert(get(r, "identifier")?, (get(r, "known_since")?, get(r, "last_execution")?));
    }
    let now = utils.pool().runtime().now();
    let mut items: Vec<CronRow> = listed
        .into_iter()
        .map(|(item, workers)| {
            let record = known.get(item.identifier());
            CronRow {
                identifier: item.identifier().to_owned(),
                spec: Some(item.to_string()),
                task: Some(item.task().to_owned()),
                workers,
                known_since: record.map(|r| r.0),
                last_execution: record.and_then(|r| r.1),
                next_runs: std::iter::successors(item.next_after(now), |&at| item.next_after(at))
                    .take(NEXT_RUNS)
                    .collect(),
            }
        })
        .collect();
    for item in &items {
        known.remove(&item.identifier);
    }
    items.extend(known.into_iter().map(|(identifier, (since, last))| CronRow {
        identifier,
        spec: None,
        task: None,
        workers: Vec::new(),
        known_since: Some(since),
        last_execution: last,
        next_runs: Vec::new(),
    }));
    Ok(CronItems { source, items, unreadable })
}

/// Each distinct item the live workers run, in the order first seen (workers by id), with
/// the workers running it; and the crontabs that could not be read.
async fn live_items(utils: &WorkerUtils) -> Result<(Vec<(CronItem, Vec<String>)>, Vec<String>), Error> {
    let mut items: Vec<(CronItem, Vec<String>)> = Vec::new();
    let mut unreadable = Vec::new();
    for r in &read(utils, sql::inspect::LIVE_CRONTABS, &[]).await? {
        let (worker, text): (String, String) = (get(r, "worker_id")?, get(r, "crontab")?);
        let crontab = match cron::parse(&text) {
            Ok(crontab) => crontab,
            Err(e) => {
                unreadable.push(format!("the crontab of worker {worker}: {e}"));
                continue;
            }
        };
        for item in crontab.into_items() {
            match items.iter_mut().find(|(seen, _)| *seen == item) {
                Some((_, workers)) => workers.push(worker.clone()),
                None => items.push((item, vec![worker.clone()])),
            }
        }
    }
    Ok((items, unreadable))
}
