//! Per-worker task concurrency ([`Config::task_concurrency`](super::Config::task_concurrency)):
//! at most N jobs of a task running in this worker. A task whose running and waiting jobs
//! reach its limit leaves the fetch's list, and its jobs waiting in the local queue are
//! passed over (keeping their place) while others start. Without limits nothing here runs.

use super::fetch::Fetcher;
use super::slots::Slots;
use crate::job::Job;
use crate::time::Timestamp;
use std::collections::BTreeMap;

/// Up to `free` jobs to start now: in queue order, a limited task's only while it is under
/// its limit.
pub(super) fn take(
    fetcher: &mut Fetcher,
    slots: &Slots,
    limits: &BTreeMap<String, usize>,
    free: usize,
    now: Timestamp,
) -> Vec<Job> {
    if limits.is_empty() {
        return fetcher.take(free, now);
    }
    let mut running: BTreeMap<&str, usize> = BTreeMap::new();
    fetcher.take_where(free, now, |job| {
        let Some((task, max)) = limits.get_key_value(&job.task_identifier) else { return true };
        let n = running.entry(task.as_str()).or_insert_with(|| slots.running_of(task));
        let may = *n < *max;
        *n += usize::from(may);
        may
    })
}

/// Of `tasks`, those worth fetching: not at their limit with the jobs running and waiting.
pub(super) fn fetchable(
    tasks: Vec<String>,
    fetcher: &Fetcher,
    slots: &Slots,
    limits: &BTreeMap<String, usize>,
) -> Vec<String> {
    if limits.is_empty() {
        return tasks;
    }
    let full = |task: &String| {
        limits.get(task).is_some_and(|max| slots.running_of(task) + fetcher.queued_of(task) >= *max)
    };
    tasks.into_iter().filter(|task| !full(task)).collect()
}
