//! The worker statements as the model's tables answer them.

use super::*;

impl Model {
    fn unlock_queue(&mut self, queue: &Option<String>, worker: &str) {
        if let Some(lock) = queue.as_ref().and_then(|q| self.queues.get_mut(q)) {
            if lock.1.as_deref() == Some(worker) {
                *lock = (None, None);
            }
        }
    }

    /// The worker statements; `db_now` is the database clock. Returns the expected result
    /// and the jobs whose locks a sweep released.
    pub(crate) fn execute(
        &mut self,
        db_now: DateTime<Utc>,
        statement: &Statement,
    ) -> (QueryResult, Vec<i64>) {
        match statement {
            // No operation of the checked runs writes runtime schedules.
            Statement::ReadSchedules => (QueryResult::Schedules(Vec::new()), vec![]),
            Statement::RegisterCrontabs { identifiers, known_since } => {
                let mut before = Vec::new();
                for identifier in identifiers {
                    if let Some((since, last)) = self.crontabs.get(identifier) {
                        before.push(formica_core::cron::runner::KnownCrontab {
                            identifier: identifier.clone(),
                            known_since: *since,
                            last_execution: *last,
                        });
                    }
                }
                for identifier in identifiers {
                    self.crontabs.entry(identifier.clone()).or_insert((*known_since, None));
                }
                (QueryResult::KnownCrontabs(before), vec![])
            }
            Statement::ScheduleCron(batch) => {
                for job in &batch.jobs {
                    let entry = self.crontabs.entry(job.identifier.clone()).or_insert((batch.at, None));
                    if entry.1.is_some_and(|last| last >= batch.at) {
                        continue;
                    }
                    entry.1 = Some(batch.at);
                    let mut spec = job.spec.clone();
                    spec.run_at = Some(batch.at);
                    let add = RawJob { identifier: job.task.clone(), payload: job.payload.clone(), spec };
                    self.add_job(db_now, &add);
                }
                (QueryResult::Done, vec![])
            }
            // Caps, limits and fairness come from `ReadFlow`, which answers none here.
            Statement::GetJobs(request) => {
                let now = request.now.unwrap_or(db_now);
                let mut candidates: Vec<&Row> = self
                    .rows
                    .values()
                    .filter(|r| r.locked_at.is_none() && r.attempts < r.max_attempts && r.run_at <= now)
                    .filter(|r| request.task_identifiers.contains(&r.task_identifier))
                    .filter(|r| {
                        r.queue_name
                            .as_ref()
                            .is_none_or(|q| self.queues.get(q).is_some_and(|l| l.0.is_none()))
                    })
                    .filter(|r| r.queue_name.as_ref().is_none_or(|q| !request.excluded_queues.contains(q)))
                    .filter(|r| request.forbidden_flags.iter().all(|f| !r.flags.contains(f)))
                    .filter(|r| {
                        request.accepted_flags.is_empty()
                            || request.accepted_flags.iter().any(|f| r.flags.contains(f))
                    })
                    .collect();
                candidates.sort_by_key(|r| (r.priority, r.run_at, r.id));
                let mut seen_queues = BTreeSet::new();
                let chosen: Vec<i64> = candidates
                    .iter()
                    .take(request.limit)
                    .filter(|r| r.queue_name.as_ref().is_none_or(|q| seen_queues.insert(q.clone())))
                    .map(|r| r.id)
                    .collect();
                let mut jobs = Vec::new();
                // Locked at the later of the fetch's time and the database's.
                let locked_at = now.max(db_now);
                for id in chosen {
                    let Some(row) = self.rows.get_mut(&id) else { continue };
                    row.attempts += 1;
                    row.locked_at = Some(locked_at);
                    row.locked_by = Some(request.worker_id.clone());
                    let (queue, snapshot) = (row.queue_name.clone(), row.clone());
                    if let Some(q) = queue {
                        self.queues.insert(q, (Some(locked_at), Some(request.worker_id.clone())));
                    }
                    jobs.push(snapshot);
                }
                // Compared without queue ids by the caller.
                (QueryResult::jobs(jobs), vec![])
            }
            Statement::CompleteJobs { worker_id, ids, .. } => {
                let fenced = self.not_held(ids.iter().copied(), worker_id);
                for id in ids {
                    if self.rows.get(id).is_some_and(|r| r.locked_by.as_ref() == Some(worker_id)) {
                        let row = self.rows.remove(id).expect("present");
                        self.gone.insert(*id, Gone::Completed);
                        self.unlock_queue(&row.queue_name, worker_id);
                    }
                }
                (fenced, vec![])
            }
            Statement::FailJobs { worker_id, failures, .. } => {
                let fenced = self.not_held(failures.iter().map(|f| f.job_id), worker_id);
                for Failure { job_id, message, run_at, permanent, payload, delay } in failures {
                    let Some(row) = self.rows.get_mut(job_id) else { continue };
                    if row.locked_by.as_ref() != Some(worker_id) {
                        continue;
                    }
                    row.last_error = Some(message.clone());
                    if let Some(payload) = payload {
                        row.payload = payload.clone().into();
                    }
                    // The backoff counts the attempts made; a cancelled job has none left.
                    let delay = delay.unwrap_or_else(|| retry_delay(row.attempts));
                    row.run_at = run_at.unwrap_or(db_now.max(row.run_at) + delay);
                    if *permanent {
                        row.attempts = row.max_attempts;
                    }
                    row.locked_at = None;
                    row.locked_by = None;
                    let queue = row.queue_name.clone();
                    self.unlock_queue(&queue, worker_id);
                }
                (fenced, vec![])
            }
            // Every job locked by the worker and not in `known`, returned.
            Statement::ReturnUnknown { worker_id, known } => {
                let ids = self
                    .rows
                    .values()
                    .filter(|r| r.locked_by.as_ref() == Some(worker_id) && !known.contains(&r.id))
                    .map(|r| r.id)
                    .collect();
                self.execute(db_now, &Statement::ReturnJobs { worker_id: worker_id.clone(), ids })
            }
            Statement::SnoozeJobs { worker_id, snoozes } => {
                let fenced = self.not_held(snoozes.iter().map(|s| s.job_id), worker_id);
                for s in snoozes {
                    let mine =
                        self.rows.get_mut(&s.job_id).filter(|r| r.locked_by.as_ref() == Some(worker_id));
                    mine.into_iter().for_each(|row| row.run_at = s.run_at.unwrap_or(db_now + s.delay));
                }
                let ids = snoozes.iter().map(|s| s.job_id).collect(); // returned: attempt refunded
                self.execute(db_now, &Statement::ReturnJobs { worker_id: worker_id.clone(), ids });
                (fenced, vec![])
            }
            Statement::ReturnJobs { worker_id, ids } => {
                for id in ids {
                    let Some(row) = self.rows.get_mut(id) else { continue };
                    if row.locked_by.as_ref() != Some(worker_id) {
                        continue;
                    }
                    // Not refunded to a job whose key add_job or remove_job took while it
                    // was held (updated since its lock): it must not run again.
                    let replaced = row.key.is_none()
                        && row.attempts >= row.max_attempts
                        && row.locked_at.is_some_and(|locked| row.updated_at > locked);
                    if !replaced {
                        row.attempts = (row.attempts - 1).max(0);
                    }
                    row.locked_at = None;
                    row.locked_by = None;
                    let queue = row.queue_name.clone();
                    self.unlock_queue(&queue, worker_id);
                }
                (QueryResult::Done, vec![])
            }
            // A heartbeat: alive until `lease` from now, and not suspected.
            Statement::Heartbeat { worker_id, lease } => {
                self.leases.insert(worker_id.clone(), (db_now + *lease, None));
                (QueryResult::Done, vec![])
            }
            // Recovery: a lapsed lease becomes suspected; every lock of a worker suspected
            // for more than `grace` is freed, keeping its run_at with its attempt counted
            // as lost (last_error says so, unless it was cancelled), and the worker forgotten.
            Statement::RecoverLapsed { grace } => {
                let lapsed: Vec<String> = self
                    .leases
                    .iter()
                    .filter(|(_, (until, since))| {
                        *until < db_now && since.is_some_and(|s| s < db_now - *grace)
                    })
                    .map(|(w, _)| w.clone())
                    .collect();
                for (until, since) in self.leases.values_mut() {
                    if *until < db_now && since.is_none() {
                        *since = Some(db_now);
                    }
                }
                for worker in &lapsed {
                    self.leases.remove(worker);
                }
                let cancelled = self.settle_cancels(&lapsed);
                for row in self.rows.values_mut().filter(|r| !cancelled.contains(&r.id)) {
                    if let Some(worker) = row.locked_by.as_ref().filter(|w| lapsed.contains(w)) {
                        row.last_error = Some(formica_core::worker::lapsed_error(worker, row.attempts));
                    }
                }
                let released = self.force_unlock(&lapsed);
                (QueryResult::Done, released)
            }
            // The model keeps no pauses.
            Statement::ReadFlow => (QueryResult::Flow(Default::default()), vec![]),
            // Nor history (the checked workers write none) nor workflows (no operation adds one).
            Statement::PruneHistory { .. } => (QueryResult::Pruned { dropped: 0, deleted: 0 }, vec![]),
            Statement::ResolveWorkflows => (QueryResult::Resolved { settled: 0 }, vec![]),
            // The model keeps no indexes: nothing is ever bloated.
            Statement::ReindexBloated => (QueryResult::Reindexed { index: None }, vec![]),
            Statement::VacuumJobs => (QueryResult::Done, vec![]),
            // Nor agings (no operation sets one): a pass changes nothing.
            Statement::AgePriorities { .. } => (QueryResult::Aged { raised: 0 }, vec![]),
            Statement::ReadCancels { worker_id } => {
                (QueryResult::Cancels(self.read_cancels(worker_id)), vec![])
            }
            Statement::ResetLocked { locked_before } => {
                let cutoff = locked_before.unwrap_or(db_now - four_hours());
                let mut released = Vec::new();
                for row in self.rows.values_mut() {
                    if row.locked_at.is_some_and(|at| at < cutoff) {
                        row.last_error =
                            Some(formica_core::worker::stale_error(row.locked_by.as_deref(), row.attempts));
                        row.locked_at = None;
                        row.locked_by = None;
                        row.run_at = row.run_at.max(db_now);
                        released.push(row.id);
                    }
                }
                for lock in self.queues.values_mut() {
                    if lock.0.is_some_and(|at| at < cutoff) {
                        *lock = (None, None);
                    }
                }
                (QueryResult::Done, released)
            }
        }
    }
}
