//! How each answer from the database reaches the part whose query it was, and how each
//! refusal is retried: the one place that knows which part owns which statement.

use super::part::Part;
use super::{Phase, Worker};
use crate::cron::runner::Unreadable;
use crate::job::Job;
use crate::protocol::{DbError, Event, Failure, Fenced, MisuseError, QueryId, QueryResult, Undecodable};
use crate::time::Timestamp;
use std::collections::BTreeSet;

impl Worker {
    pub(super) fn query_done(&mut self, id: QueryId, result: QueryResult) -> Result<(), MisuseError> {
        let part = *self.pending.get(&id).ok_or(MisuseError::UnknownQuery(id))?;
        if !part.fits(&result) {
            // Nothing changed: the query is still pending.
            return Err(MisuseError::WrongResult(id));
        }
        self.pending.remove(&id);
        match result {
            QueryResult::Err(error) => self.query_failed(id, part, error),
            QueryResult::Jobs { jobs, undecodable } => {
                let rows = jobs.len() + undecodable.len();
                (rows == 0).then(|| self.emit(Event::FetchEmpty));
                let held = if jobs.is_empty() { BTreeSet::new() } else { self.held() };
                // A job whose return or failure is being written comes back if that write
                // committed before this fetch locked the job again: the new lock is ours and
                // no write of ours would release it, so it is given back once that write is
                // done. (Were the job freed by a sweep instead, the write in flight settles
                // it, and the return finds it no longer ours.)
                let (again, jobs): (Vec<Job>, Vec<Job>) =
                    jobs.into_iter().partition(|job| self.writes.releasing(job.id));
                // Jobs a pause read since the fetch was sent holds back go back unstarted.
                let flow = self.flow.state();
                let (paused, jobs): (Vec<Job>, Vec<Job>) = if flow.pauses_nothing() {
                    (Vec::new(), jobs)
                } else {
                    jobs.into_iter()
                        .partition(|j| flow.holds_back(&j.task_identifier, j.queue_name.as_deref()))
                };
                // Jobs locked when the lease may have lapsed are given back too.
                let accepting = self.taking_jobs();
                // The rate limits' starts: every job locked counts, whatever becomes of it.
                let tasks: Vec<String> = match self.flow.state().has_limits() {
                    false => Vec::new(),
                    true => {
                        jobs.iter().chain(&again).chain(&paused).map(|j| j.task_identifier.clone()).collect()
                    }
                };
                self.vacuum.locked(rows);
                let mut back =
                    self.fetcher.fetched(id, rows, jobs, &held, self.slots.len(), accepting, self.now);
                self.flow.fetched(tasks.iter().map(String::as_str), self.fetcher.is_drained(), self.now);
                back.extend(again.iter().chain(&paused).map(|job| job.id));
                self.writes.give_back(back, self.now);
                // An unreadable row fails its attempt as a task's error would: its lock is
                // released, and it is retried (an edited row may read next time).
                for Undecodable { job_id, error } in undecodable {
                    let message = format!("Formica could not read job {job_id}: {error}");
                    self.emit(Event::JobUndecodable { job_id, error });
                    self.writes.fail(
                        Failure {
                            job_id,
                            message,
                            run_at: None,
                            permanent: false,
                            payload: None,
                            delay: None,
                        },
                        self.now,
                        self.config.fail_batch_delay,
                    );
                }
            }
            QueryResult::Pruned { dropped, deleted } => {
                self.pruner.ended(self.now, true, &mut self.rng);
                (dropped > 0 || deleted > 0).then(|| self.emit(Event::HistoryPruned { dropped, deleted }));
            }
            QueryResult::Resolved { settled } => {
                self.resolver.ended(self.now, true, &mut self.rng);
                // Released dependents may be ours to run.
                (settled > 0).then(|| {
                    self.emit(Event::WorkflowsResolved { settled });
                    self.fetcher.wake();
                });
            }
            QueryResult::Reindexed { index } => {
                self.reindexer.ended(self.now, true, &mut self.rng);
                if let Some(index) = index {
                    self.emit(Event::IndexRebuilt { index });
                }
            }
            QueryResult::Aged { raised } => {
                self.ager.ended(self.now, true, &mut self.rng);
                (raised > 0).then(|| self.emit(Event::PrioritiesAged { raised }));
            }
            QueryResult::Cancels(requests) => self.cancels_read(requests),
            QueryResult::Flow(controls) => self.flow_read(&controls),
            QueryResult::KnownCrontabs(known) => {
                if let Some(cron) = &mut self.cron {
                    cron.registered(&known);
                }
            }
            QueryResult::Schedules(rows) => {
                let unreadable = self.cron.as_mut().map(|cron| cron.schedules_read(&rows, self.now));
                for Unreadable { row, error } in unreadable.unwrap_or_default() {
                    self.emit(Event::ScheduleUnreadable {
                        identifier: row.identifier,
                        line: row.line,
                        error,
                    });
                }
            }
            QueryResult::Fenced(fenced) => {
                // Those runs are another worker's (or over): theirs settles them.
                for Fenced { job_id, holder } in fenced {
                    self.emit(Event::OutcomeFenced { job_id, holder });
                }
                self.writes.written(id, self.now);
                self.fetcher.wake();
            }
            QueryResult::Done => match part {
                // Finished jobs released their named queues: the next job of a queue may be
                // runnable now.
                Part::Write => {
                    self.writes.written(id, self.now);
                    self.fetcher.wake();
                }
                Part::Cron => {
                    if let Some(cron) = &mut self.cron {
                        cron.batch_done();
                    }
                    // Its jobs may be due now.
                    self.fetcher.wake();
                }
                Part::Sweep => self.sweeper.ended(),
                // Freed jobs may be ours to run.
                Part::Recovery => {
                    self.lease.recovery_ended();
                    self.fetcher.wake();
                }
                Part::Reclaim => self.fetcher.reclaim_ended(false),
                Part::Vacuum => self.vacuum.ended(self.now, true),
                Part::Fetch
                | Part::Cancels
                | Part::Flow
                | Part::Prune
                | Part::Resolve
                | Part::Reindex
                | Part::Age => {}
            },
        }
        Ok(())
    }

    /// The flow controls were read: say what changed, and look for jobs a resume freed.
    fn flow_read(&mut self, controls: &crate::flow::Controls) {
        if let Some(state) = self.flow.read(controls, self.now) {
            let (paused, capped) = (state.paused(), state.labels());
            self.emit(Event::FlowChanged { paused, capped });
            self.hold_back_paused();
            self.fetcher.wake();
        }
    }

    /// Every failure is retried: a write (by [`Writes`], never dropped), a fetch after
    /// `poll_interval`, a sweep at the next sweep, a chore's pass after its back-off, cron by
    /// its runner.
    fn query_failed(&mut self, id: QueryId, part: Part, error: DbError) {
        let statement = self.writes.name(id).unwrap_or(part.statement());
        // Nothing is fetched before the flow controls are read.
        let fetching = matches!(part, Part::Fetch | Part::Reclaim | Part::Flow);
        let gave_up = self.gave_up_once(fetching, statement, &error);
        match part {
            // Whatever the error, the fetch may have locked jobs: the connection may have
            // died after it ran, or the driver failed to read its rows.
            Part::Fetch => self.fetcher.failed(id),
            // Run-once gave up: its lease ends as it stops, and recovery frees them.
            Part::Reclaim => {
                self.fetcher.reclaim_ended(!gave_up);
                self.writes.refused_beside();
            }
            // The poll reads again (a fetch waits for a first read).
            Part::Flow => self.flow.ended(self.now),
            // A failed pass backs off.
            Part::Prune => self.pruner.ended(self.now, false, &mut self.rng),
            Part::Resolve => self.resolver.ended(self.now, false, &mut self.rng),
            Part::Reindex => self.reindexer.ended(self.now, false, &mut self.rng),
            Part::Age => self.ager.ended(self.now, false, &mut self.rng),
            Part::Vacuum => self.vacuum.ended(self.now, false),
            Part::Write | Part::Sweep | Part::Cron | Part::Recovery | Part::Cancels => {}
        }
        if gave_up {
            return;
        }
        let message = error.message.clone();
        self.emit(Event::DatabaseError { statement, error: error.message });
        match part {
            Part::Fetch => {
                self.fetcher.unknown();
                self.retry_at = Some(self.now + self.config.poll_interval);
            }
            Part::Sweep => self.sweeper.ended(),
            Part::Recovery => self.lease.recovery_ended(),
            Part::Reclaim => self.retry_at = Some(self.now + self.config.poll_interval),
            // The next heartbeat reads again, whatever was owed.
            Part::Cancels => {
                self.cancels.read_ended();
            }
            Part::Flow | Part::Prune | Part::Resolve | Part::Reindex | Part::Age | Part::Vacuum => {}
            Part::Cron => {
                if let Some(cron) = &mut self.cron {
                    cron.failed(self.now, self.config.poll_interval);
                }
            }
            Part::Write => self.writes.failed(id, self.now, error.retryable, &message),
        }
    }

    /// Run-once cannot wait for a missing table or a permission to be fixed: a statement it
    /// needs to fetch (`needed`) refused for good stops it, saying so, rather than never
    /// returning. True if it gave up (the statement is not retried); the first refusal says
    /// so, a later one while it stops is reported as a database error.
    fn gave_up_once(&mut self, needed: bool, statement: &'static str, error: &DbError) -> bool {
        let give_up = self.config.run_once && !error.retryable && needed;
        if give_up && self.phase == Phase::Running {
            self.emit(Event::GaveUp { statement, error: error.message.clone() });
            self.shutdown(true);
        } else if give_up {
            self.emit(Event::DatabaseError { statement, error: error.message.clone() });
        }
        give_up
    }

    /// A heartbeat sent at `sent` ended: if the lease holds again after it lapsed, say so and
    /// look for jobs at once. One that landed also reads the cancel requests (the path that
    /// needs no listener).
    pub(super) fn heartbeat(&mut self, sent: Timestamp, result: Result<(), DbError>) {
        match result {
            Ok(()) => {
                if self.lease.landed(sent, self.now) {
                    self.emit(Event::LeaseRenewed);
                    self.fetcher.wake();
                }
                self.read_cancels();
            }
            Err(error) => {
                let statement = "renew the lease";
                if !self.gave_up_once(true, statement, &error) {
                    self.emit(Event::DatabaseError { statement, error: error.message });
                }
            }
        }
    }
}
