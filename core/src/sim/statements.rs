//! The worker's statements on the simulated database: [`Db::execute`] answers each as the
//! driver would from PostgreSQL (fetching, completing, failing, snoozing, giving back, the leases'
//! heartbeats and recovery, crontab registration, the history pruner's and the workflows'
//! resolver's passes).

use super::db::Db;
use crate::backoff;
use crate::cron::runner::KnownCrontab;
use crate::flow::Control;
use crate::job::Job;
use crate::job::RawJob;
use crate::protocol::{Failure, Fenced, QueryResult, Snooze, Statement};
use crate::time::Timestamp;
use crate::worker::STALE_LOCK_AGE;
use crate::workflow::Outcome;
use chrono::Duration;
use std::collections::{BTreeMap, BTreeSet};

/// The answer of a write that left out `fenced`.
fn written(fenced: Vec<Fenced>) -> QueryResult {
    if fenced.is_empty() {
        QueryResult::Done
    } else {
        QueryResult::Fenced(fenced)
    }
}

impl Db {
    /// The job of the dead letter of job `job_id`'s task, if it has one: its payload the
    /// failed job's id, task, payload, last error `message` and `attempts`.
    fn dead_letter(&self, job_id: i64, attempts: i16, message: &str) -> Option<RawJob> {
        let job = self.jobs.get(&job_id)?;
        let target = self.dead_letters.get(&job.task_identifier)?;
        let payload = serde_json::json!({
            "job_id": job_id, "task": job.task_identifier, "payload": job.payload.clone().into_value(),
            "last_error": message, "attempts": attempts,
        });
        Some(RawJob::new(target.clone(), payload, crate::job::JobSpec::default()))
    }

    /// Suspect the leases that lapsed; free the jobs and queues of the workers suspected
    /// for more than `grace`, forgetting them; the jobs keep their `run_at` (their place in
    /// their queue) and their attempt counts, and one with a cancel request fails for good
    /// as cancelled instead (its request is forgotten by the next sweep). Settles the other
    /// requests (`Db::settle_cancels`). Wakes the workers if a job was freed.
    pub(super) fn recover_lapsed(&mut self, grace: Duration) {
        let now = self.now;
        // Every part of the SQL reads the state before the statement: the settling sees
        // the freed jobs still locked.
        self.settle_cancels();
        let lapsed: BTreeSet<String> = self
            .leases
            .iter()
            .filter(|(_, (until, since))| *until < now && since.is_some_and(|s| s < now - grace))
            .map(|(id, _)| id.clone())
            .collect();
        self.leases.retain(|id, _| !lapsed.contains(id));
        for (until, since) in self.leases.values_mut() {
            if *until < now && since.is_none() {
                *since = Some(now);
            }
        }
        let of_lapsed = |by: &Option<String>| by.as_ref().is_some_and(|by| lapsed.contains(by));
        let freeing: Vec<i64> =
            self.jobs.values().filter(|j| of_lapsed(&j.locked_by)).map(|j| j.id).collect();
        let freed = freeing.len() as i64;
        for id in freeing {
            let requested = self.requested(id);
            let Some(job) = self.jobs.get_mut(&id) else { continue };
            job.locked_at = None;
            let worker = job.locked_by.take();
            if let Some(reason) = requested {
                job.last_error = Some(format!("cancelled: {reason}"));
                job.attempts = job.max_attempts;
            } else if let Some(worker) = &worker {
                job.last_error = Some(crate::worker::lapsed_error(worker, job.attempts));
            }
        }
        for queue in self.queues.values_mut().filter(|q| of_lapsed(&q.locked_by)) {
            queue.locked_at = None;
            queue.locked_by = None;
        }
        if freed > 0 {
            self.notify_insert(freed);
        }
    }

    /// Run one of the worker's statements and answer as the driver would.
    pub fn execute(&mut self, statement: &Statement) -> QueryResult {
        match statement {
            Statement::RegisterCrontabs { identifiers, known_since } => {
                // Like the SQL: the rows are those that existed before this statement.
                let before: Vec<KnownCrontab> =
                    identifiers.iter().filter_map(|i| self.known_crontabs.get(i).cloned()).collect();
                for identifier in identifiers {
                    self.known_crontabs.entry(identifier.clone()).or_insert_with(|| KnownCrontab {
                        identifier: identifier.clone(),
                        known_since: *known_since,
                        last_execution: None,
                    });
                }
                QueryResult::KnownCrontabs(before)
            }
            Statement::ReadSchedules => QueryResult::Schedules(self.schedule_rows()),
            Statement::PruneHistory { retention, at } => {
                let at = at.unwrap_or(self.now);
                let (dropped, deleted) = self.prune_history(retention, at);
                // Then the finished workflows past their retention (`prune_workflows`).
                QueryResult::Pruned { dropped, deleted: deleted + self.prune_workflows(retention, at) }
            }
            Statement::ResolveWorkflows => QueryResult::Resolved { settled: self.resolve_workflows() },
            // The simulated database keeps no indexes: nothing is ever bloated, nor vacuumed.
            Statement::ReindexBloated => QueryResult::Reindexed { index: None },
            Statement::VacuumJobs => QueryResult::Done,
            Statement::AgePriorities { batch } => QueryResult::Aged { raised: self.age_priorities(*batch) },
            Statement::ScheduleCron(batch) => {
                for job in &batch.jobs {
                    let known =
                        self.known_crontabs.entry(job.identifier.clone()).or_insert_with(|| KnownCrontab {
                            identifier: job.identifier.clone(),
                            known_since: batch.at,
                            last_execution: None,
                        });
                    // Only the statement that advances last_execution adds the job.
                    if known.last_execution.is_some_and(|last| last >= batch.at) {
                        continue;
                    }
                    known.last_execution = Some(batch.at);
                    let mut spec = job.spec.clone();
                    spec.run_at = Some(batch.at);
                    if let Err(e) = self.add_job(&RawJob::new(job.task.clone(), job.payload.clone(), spec)) {
                        return QueryResult::Err(e);
                    }
                }
                QueryResult::Done
            }
            // The same jobs walking the priorities or not (tests/tests/fetch.rs checks both forms).
            Statement::GetJobs(request) => {
                let flags = Flags { forbidden: &request.forbidden_flags, accepted: &request.accepted_flags };
                let fetch = Fetch {
                    task_identifiers: &request.task_identifiers,
                    excluded_queues: &request.excluded_queues,
                    flags,
                    caps: &request.caps,
                    limits: &request.limits,
                    fair: &request.fair,
                };
                QueryResult::jobs(self.get_jobs(&request.worker_id, fetch, request.limit, request.now))
            }
            Statement::CompleteJobs { worker_id, ids, settles_workflow_jobs } => {
                let fenced = self.fenced(ids.iter().copied(), worker_id);
                let mine: Vec<i64> = ids
                    .iter()
                    .copied()
                    .filter(|id| self.held_by(*id, worker_id))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect();
                for id in mine {
                    if let Some(job) = self.jobs.remove(&id) {
                        self.release_queue(job.job_queue_id, worker_id);
                        if *settles_workflow_jobs {
                            self.settle_workflow_job(id, Outcome::Completed);
                        }
                    }
                }
                written(fenced)
            }
            Statement::FailJobs { worker_id, failures, settles_workflow_jobs } => {
                let fenced = self.fenced(failures.iter().map(|f| f.job_id), worker_id);
                let mut letters = Vec::new();
                for Failure { job_id, message, run_at, permanent, payload, delay } in failures {
                    if !self.held_by(*job_id, worker_id) {
                        continue;
                    }
                    let now = self.now;
                    let Some(job) = self.jobs.get_mut(job_id) else { continue };
                    job.last_error = Some(message.clone());
                    if let Some(payload) = payload {
                        job.payload = payload.clone().into();
                    }
                    let delay = delay.unwrap_or_else(|| backoff::delay(job.attempts));
                    job.run_at = run_at.unwrap_or(now.max(job.run_at) + delay);
                    // Its attempts as its run counted them, before a cancel spends the rest.
                    let attempts = job.attempts;
                    if *permanent {
                        job.attempts = job.max_attempts;
                    }
                    job.locked_at = None;
                    job.locked_by = None;
                    let cancelled = *permanent && message.starts_with("cancelled: ");
                    if job.attempts >= job.max_attempts && !cancelled {
                        letters.push((*job_id, attempts, message));
                    }
                    let queue = job.job_queue_id;
                    self.release_queue(queue, worker_id);
                    if *settles_workflow_jobs {
                        self.settle_if_failed_for_good(*job_id);
                    }
                }
                // The same statement sends them (sql/queries/dead_letters/send.sql); an add
                // without a key cannot be refused.
                let letters: Vec<RawJob> = letters
                    .into_iter()
                    .filter_map(|(id, attempts, message)| self.dead_letter(id, attempts, message))
                    .collect();
                for letter in &letters {
                    let _ = self.add_job(letter);
                }
                written(fenced)
            }
            Statement::ReturnUnknown { worker_id, known } => {
                let unknown = self
                    .jobs
                    .values()
                    .filter(|j| j.locked_by.as_ref() == Some(worker_id) && !known.contains(&j.id))
                    .map(|j| j.id)
                    .collect();
                self.execute(&Statement::ReturnJobs { worker_id: worker_id.clone(), ids: unknown })
            }
            Statement::ReturnJobs { worker_id, ids } => {
                let mine: BTreeSet<i64> =
                    ids.iter().copied().filter(|id| self.held_by(*id, worker_id)).collect();
                for id in mine {
                    let Some(job) = self.jobs.get_mut(&id) else { continue };
                    refund_attempt(job);
                    job.locked_at = None;
                    job.locked_by = None;
                    let queue = job.job_queue_id;
                    self.release_queue(queue, worker_id);
                }
                QueryResult::Done
            }
            Statement::SnoozeJobs { worker_id, snoozes } => {
                let fenced = self.fenced(snoozes.iter().map(|s| s.job_id), worker_id);
                for Snooze { job_id, delay, run_at } in snoozes {
                    if !self.held_by(*job_id, worker_id) {
                        continue;
                    }
                    let now = self.now;
                    let Some(job) = self.jobs.get_mut(job_id) else { continue };
                    job.run_at = run_at.unwrap_or(now + *delay);
                    refund_attempt(job);
                    job.locked_at = None;
                    job.locked_by = None;
                    let queue = job.job_queue_id;
                    self.release_queue(queue, worker_id);
                }
                written(fenced)
            }
            Statement::Heartbeat { worker_id, lease } => {
                self.leases.insert(worker_id.clone(), (self.now + *lease, None));
                QueryResult::Done
            }
            Statement::RecoverLapsed { grace } => {
                self.recover_lapsed(*grace);
                QueryResult::Done
            }
            Statement::ReadCancels { worker_id } => QueryResult::Cancels(self.read_cancels(worker_id)),
            Statement::ReadFlow => QueryResult::Flow(self.controls()),
            Statement::ResetLocked { locked_before } => {
                let now = self.now;
                let cutoff = locked_before.unwrap_or(now - STALE_LOCK_AGE);
                for job in self.jobs.values_mut().filter(|j| j.locked_at.is_some_and(|at| at < cutoff)) {
                    job.last_error = Some(crate::worker::stale_error(job.locked_by.as_deref(), job.attempts));
                    job.locked_at = None;
                    job.locked_by = None;
                    job.run_at = job.run_at.max(now);
                }
                for queue in self.queues.values_mut().filter(|q| q.locked_at.is_some_and(|at| at < cutoff)) {
                    queue.locked_at = None;
                    queue.locked_by = None;
                }
                QueryResult::Done
            }
        }
    }

    /// Of `ids`, those `worker_id` does not hold (in id order, once each), with their holder.
    fn fenced(&self, ids: impl Iterator<Item = i64>, worker_id: &str) -> Vec<Fenced> {
        let others: BTreeSet<i64> = ids.filter(|id| !self.held_by(*id, worker_id)).collect();
        let holder = |id| self.jobs.get(&id).and_then(|j| j.locked_by.clone());
        others.into_iter().map(|job_id| Fenced { job_id, holder: holder(job_id) }).collect()
    }

    pub(super) fn held_by(&self, id: i64, worker_id: &str) -> bool {
        self.jobs.get(&id).is_some_and(|j| j.locked_by.as_deref() == Some(worker_id))
    }

    pub(super) fn release_queue(&mut self, queue: Option<i32>, worker_id: &str) {
        if let Some(queue) = queue.and_then(|q| self.queues.get_mut(&q)) {
            if queue.locked_by.as_deref() == Some(worker_id) {
                queue.locked_at = None;
                queue.locked_by = None;
            }
        }
    }

    /// The fetch: lock up to `limit` runnable jobs (at most one per named queue) for
    /// `worker_id`, counting the attempt; by priority, run_at (and id), within the caps and
    /// rate limits, fair tasks' places filled round robin across their tenants.
    pub(super) fn get_jobs(
        &mut self,
        worker_id: &str,
        Fetch { task_identifiers, excluded_queues, flags, caps, limits, fair }: Fetch<'_>,
        limit: usize,
        now: Option<Timestamp>,
    ) -> Vec<Job> {
        let now = now.unwrap_or(self.now);
        let limit = limit.min(i32::MAX as usize);
        if !limits.is_empty() {
            self.prune_starts(limits, now);
        }
        for fairness in fair {
            self.fair.prune(fairness);
        }
        let queue_free = |q: Option<i32>| {
            q.is_none_or(|q| {
                self.queues
                    .get(&q)
                    .is_some_and(|q| q.locked_at.is_none() && !excluded_queues.contains(&q.name))
            })
        };
        let all: Vec<&Control> = caps.iter().chain(limits).chain(fair).collect();
        let is_controlled = |task: &str| all.iter().any(|c| c.task == task);
        let mut candidates: Vec<&Job> = self
            .jobs
            .values()
            .filter(|j| j.locked_at.is_none() && j.attempts < j.max_attempts)
            .filter(|j| j.run_at <= now)
            .filter(|j| task_identifiers.contains(&j.task_identifier))
            .filter(|j| queue_free(j.job_queue_id))
            .filter(|j| flags.admit(&j.flags))
            .collect();
        candidates.sort_by_key(|j| sort_key(j));
        // As the controlled statement (sql/records/000026.sql): the first `limit` jobs of
        // the free tasks and of each controlled task no control partitions, every due job
        // of the tasks a cap or limit partitions, and of a fair task each tenant's first
        // `limit`.
        let (controlled, mut candidates): (Vec<&Job>, Vec<&Job>) =
            candidates.into_iter().partition(|j| is_controlled(&j.task_identifier));
        candidates.truncate(limit);
        let mut firsts: BTreeMap<&str, usize> = BTreeMap::new();
        let mut of_tenant: BTreeMap<(&str, String), usize> = BTreeMap::new();
        candidates.extend(controlled.into_iter().filter(|j| {
            if let Some(fairness) = fair.iter().find(|f| f.task == j.task_identifier) {
                let seen =
                    of_tenant.entry((j.task_identifier.as_str(), fairness.partition_of(j))).or_default();
                *seen += 1;
                return *seen <= limit;
            }
            let whole = all.iter().all(|c| c.task != j.task_identifier || c.partition.is_none());
            let seen = firsts.entry(j.task_identifier.as_str()).or_default();
            *seen += 1;
            !whole || *seen <= limit
        }));
        candidates.sort_by_key(|j| sort_key(j));
        let mut queues_taken = BTreeSet::new();
        let queue_firsts =
            candidates.into_iter().filter(|j| j.job_queue_id.is_none_or(|q| queues_taken.insert(q)));
        let bounds: Vec<&Control> = caps.iter().chain(limits).collect();
        let room = |c: &Control, part: &str| {
            let used = match c.period() {
                None => self.locked_in(c, part),
                Some(_) => self.started_in(c, part, now),
            };
            (c.max() as usize).saturating_sub(used)
        };
        // Each control ranks the jobs it sees in order, as the statement's window functions
        // do, whatever the others decide: first the partitioned ones, over every queue's
        // first candidate.
        let mut taken_in: BTreeMap<(usize, String), usize> = BTreeMap::new();
        let within = |j: &Job, partitioned: bool, taken_in: &mut BTreeMap<(usize, String), usize>| {
            let mut allowed = true;
            for (n, c) in bounds.iter().enumerate() {
                if c.task == j.task_identifier && c.partition.is_some() == partitioned {
                    let part = c.partition_of(j);
                    let taken = taken_in.entry((n, part.clone())).or_default();
                    *taken += 1;
                    allowed &= *taken <= room(c, &part);
                }
            }
            allowed
        };
        let passed: Vec<&Job> = queue_firsts.filter(|j| within(j, true, &mut taken_in)).collect();
        // Then fairness: a fair task's jobs take the task's places (its jobs' own sort keys,
        // in order) by their tags; then the whole task's caps and limits, in that order.
        let placed = self.place_fairly(passed, fair);
        let chosen: Vec<(i64, Option<Tag>)> = placed
            .into_iter()
            .filter(|(_, j, _)| within(j, false, &mut taken_in))
            .take(limit)
            .map(|(_, j, tag)| (j.id, tag))
            .collect();
        // As the statements, every fetch locks at the later of its time and the database's
        // (sql/queries/worker/get_jobs.sql, records migration 12).
        let lock_time = now.max(self.now);
        let mut out = Vec::new();
        let mut tenants: BTreeMap<(String, String), (i64, i64, i64)> = BTreeMap::new();
        for (id, tag) in chosen {
            let Some(job) = self.jobs.get_mut(&id) else { continue };
            job.attempts = job.attempts.saturating_add(1);
            job.locked_by = Some(worker_id.to_owned());
            job.locked_at = Some(lock_time);
            let queue = job.job_queue_id;
            let job = job.clone();
            for limit in limits.iter().filter(|l| l.task == job.task_identifier) {
                self.log_start(limit, &job, now);
            }
            if let Some(tag) = tag {
                let started = tenants
                    .entry((job.task_identifier.clone(), tag.tenant))
                    .or_insert((tag.start, tag.stride, 0));
                started.2 += 1;
            }
            out.push(job);
            if let Some(queue) = queue.and_then(|q| self.queues.get_mut(&q)) {
                queue.locked_by = Some(worker_id.to_owned());
                queue.locked_at = Some(lock_time);
            }
        }
        for ((task, tenant), (start, stride, n)) in tenants {
            self.fair.started(&task, &tenant, start, n, stride);
        }
        out.sort_by_key(sort_key);
        out
    }

    /// `passed` (in sort order) with the sort key each takes: its own, or under fairness
    /// the key of its task's job in the place its tag reaches; by those keys.
    fn place_fairly<'j>(
        &self,
        passed: Vec<&'j Job>,
        fair: &[Control],
    ) -> Vec<(SortKey, &'j Job, Option<Tag>)> {
        let mut ranks: BTreeMap<(&str, String), i64> = BTreeMap::new();
        let mut placed = Vec::new();
        let mut of_task: BTreeMap<&str, Vec<(&Job, Tag)>> = BTreeMap::new();
        for j in passed {
            let Some(fairness) = fair.iter().find(|f| f.task == j.task_identifier) else {
                placed.push((sort_key(j), j, None));
                continue;
            };
            let tenant = fairness.partition_of(j);
            let rank = ranks.entry((j.task_identifier.as_str(), tenant.clone())).or_default();
            *rank += 1;
            let start = self.fair.start(&fairness.task, &tenant);
            let stride = fairness.stride_of(&tenant);
            let tag = Tag { tenant, start, stride, begins: start + (*rank - 1) * stride };
            of_task.entry(j.task_identifier.as_str()).or_default().push((j, tag));
        }
        for (_, mut jobs) in of_task {
            let places: Vec<SortKey> = jobs.iter().map(|(j, _)| sort_key(j)).collect();
            jobs.sort_by_key(|(j, tag)| (tag.begins, sort_key(j)));
            placed.extend(places.into_iter().zip(jobs).map(|(place, (j, tag))| (place, j, Some(tag))));
        }
        placed.sort_by_key(|(place, _, _)| *place);
        placed
    }
}

/// The fetch's order: priority, run_at, id.
type SortKey = (i16, Timestamp, i64);

fn sort_key(job: &Job) -> SortKey {
    (job.priority, job.run_at, job.id)
}

/// A fair task's job as fairness sees it: its tenant, where the tenant's starts begin in
/// this fetch, how far each advances it, and where this one's begins (its tag: the jobs
/// are taken in that order, start-time fair queueing).
#[derive(Debug, Clone)]
struct Tag {
    tenant: String,
    start: i64,
    stride: i64,
    begins: i64,
}

/// Which jobs a fetch looks at: of these tasks, not in these named queues, with these
/// flags, within these caps.
pub(super) struct Fetch<'a> {
    task_identifiers: &'a [String],
    excluded_queues: &'a [String],
    flags: Flags<'a>,
    caps: &'a [Control],
    limits: &'a [Control],
    fair: &'a [Control],
}

/// The flags a fetch refuses and, if any, the ones it requires one of.
#[derive(Clone, Copy)]
pub(super) struct Flags<'a> {
    forbidden: &'a [String],
    accepted: &'a [String],
}

impl Flags<'_> {
    /// Whether a job carrying `flags` may be fetched: none forbidden, and one accepted when
    /// the worker names any.
    fn admit(&self, flags: &BTreeSet<String>) -> bool {
        !self.forbidden.iter().any(|f| flags.contains(f))
            && (self.accepted.is_empty() || self.accepted.iter().any(|f| flags.contains(f)))
    }
}

/// Refund a returned or snoozed job's attempt, unless add_job or remove_job took its key
/// while it was held (it was updated since its lock): that job was replaced or removed and
/// must not run again (sql/queries/worker/return_jobs.sql).
fn refund_attempt(job: &mut Job) {
    let given_up = job.key.is_none()
        && job.attempts >= job.max_attempts
        && job.locked_at.is_some_and(|locked| job.updated_at > locked);
    if !given_up {
        job.attempts = job.attempts.saturating_sub(1).max(0);
    }
}
