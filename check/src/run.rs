//! [`Run`]: a [`World`] driven by [`Op`]s in lockstep with the model, under the checker.

use crate::checker::Checker;
use crate::model::{row_of, Row};
use crate::ops::{Action, Op, Pick};
use chrono::Duration;
use formica_core::job::Job;
use formica_core::job::RescheduleJobOptions;
use formica_core::sim::{CancelOutcome, Traced, World};
use formica_core::worker::{Config, Effect, Event, Input};

/// A world, the model of its database and the checker of its trace. Every operation is
/// done to both the world and the model, and the checker reads the trace after every step.
pub struct Run {
    world: World,
    checker: Checker,
    /// Each worker's configuration as first started.
    configs: Vec<Config>,
}

impl Run {
    /// Checks `world` from here on; its database must be empty (the model starts empty).
    pub fn new(world: World) -> Run {
        let configs = (0..world.workers()).map(|w| world.config_of(w)).collect();
        Run { world, checker: Checker::new(), configs }
    }

    /// The world.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The world, once the run is over.
    pub fn into_world(self) -> World {
        self.world
    }

    /// Reads the trace's new lines and checks them, the tables and the machines.
    pub fn check(&mut self) -> Result<(), String> {
        self.checker.consume(&self.world, &self.configs)
    }

    /// One step of the world, then [`Run::check`]; whether anything was due.
    pub fn step(&mut self) -> Result<bool, String> {
        let stepped = self.world.step().is_some();
        self.check()?;
        Ok(stepped)
    }

    /// Lets `by` pass, step by step.
    pub fn run_for(&mut self, by: Duration) -> Result<(), String> {
        let until = self.world.elapsed() + by;
        while self.world.next_at().is_some_and(|at| at <= until) {
            self.step()?;
        }
        // Nothing is due before `until`: this only moves the clock.
        self.world.run_for(until - self.world.elapsed());
        self.check()
    }

    /// Does `op` to the world (and to the model, for what changes the database), then
    /// [`Run::check`].
    pub fn apply(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Event(action) => self.act(action)?,
            Op::Fault(fault) => fault.apply(&mut self.world),
            Op::Wait(ms) => self.run_for(Duration::milliseconds(i64::from(*ms)))?,
        }
        self.check()
    }

    /// The ids `pick` chooses among the jobs present, in id order.
    fn picked(&self, pick: &Pick) -> Vec<i64> {
        let ids: Vec<i64> = self.world.db().jobs().map(|j| j.id).collect();
        pick.among(&ids)
    }

    fn act(&mut self, action: &Action) -> Result<(), String> {
        let now = self.world.now();
        let rows = |jobs: &[Job]| jobs.iter().map(row_of).collect::<Vec<Row>>();
        match action {
            Action::RawJob(job) => {
                let add = job.add_job(now);
                let got = self.world.db_mut().add_job(&add).map(|j| row_of(&j)).ok();
                agree(&format!("add_job {add:?}"), got, self.checker.model.add_job(now, &add))
            }
            Action::AddJobs { jobs, preserve_run_at } => {
                let adds: Vec<_> = jobs.iter().map(|j| j.add_job(now)).collect();
                let got = self.world.db_mut().add_jobs(&adds, *preserve_run_at).map(|v| rows(&v)).ok();
                agree("add_jobs", got, self.checker.model.add_jobs(now, &adds, *preserve_run_at))
            }
            Action::RemoveJob { key } => {
                let got = self.world.db_mut().remove_job(key).map(|j| row_of(&j));
                agree(&format!("remove_job {key}"), got, self.checker.model.remove_job(now, key))
            }
            Action::CompleteJobs { pick } => {
                let ids = self.picked(pick);
                let got = rows(&self.world.db_mut().complete_jobs(&ids));
                agree("complete_jobs", got, self.checker.model.complete_jobs(now, &ids))
            }
            Action::PermanentlyFailJobs { pick, message } => {
                let ids = self.picked(pick);
                let message = message.as_deref();
                let got = rows(&self.world.db_mut().permanently_fail_jobs(&ids, message));
                agree(
                    "permanently_fail_jobs",
                    got,
                    self.checker.model.permanently_fail_jobs(now, &ids, message),
                )
            }
            Action::RescheduleJobs { pick, delay_s, priority, attempts, max_attempts } => {
                let ids = self.picked(pick);
                let with = RescheduleJobOptions {
                    run_at: delay_s.map(|s| now + Duration::seconds(s)),
                    priority: *priority,
                    attempts: *attempts,
                    max_attempts: *max_attempts,
                };
                let done = self.world.db_mut().reschedule_jobs(&ids, &with);
                let got = rows(&done.map_err(|e| format!("reschedule: {e:?}"))?);
                agree("reschedule_jobs", got, self.checker.model.reschedule_jobs(now, &ids, &with))
            }
            Action::ForceUnlockWorkers(workers) => {
                let refs: Vec<&str> = workers.iter().map(String::as_str).collect();
                self.world.db_mut().force_unlock_workers(&refs);
                self.checker.model.force_unlock(workers);
                Ok(())
            }
            Action::ForceUnlockCrashed => {
                let crashed = self.checker.crashed();
                self.act(&Action::ForceUnlockWorkers(crashed))
            }
            Action::CancelJobs { pick, reason } => {
                let ids = self.picked(pick);
                let got: Vec<(i64, Option<(String, bool)>)> = (self.world.db_mut().cancel_jobs(&ids, reason))
                    .into_iter()
                    .map(|(id, outcome)| match outcome {
                        CancelOutcome::Failed => (id, None),
                        CancelOutcome::Recorded { worker_id, leased } => (id, Some((worker_id, leased))),
                    })
                    .collect();
                agree("cancel_jobs", got, self.checker.model.cancel_jobs(&ids, reason))
            }
            Action::Fetch { .. }
            | Action::WorkerComplete { .. }
            | Action::WorkerFail { .. }
            | Action::WorkerReturn { .. }
            | Action::WorkerSnooze { .. }
            | Action::WorkerReadCancels { .. }
            | Action::WorkerRecover => {
                Err(format!("{action:?}: in a world, the workers send their own statements"))
            }
            Action::Steps(n) => {
                for _ in 0..*n {
                    if !self.step()? {
                        break;
                    }
                }
                Ok(())
            }
            Action::FinishTask { worker, nth, outcome } => {
                let running: Vec<i64> = self.world.running(*worker).map(|j| j.id).collect();
                if !running.is_empty() {
                    let job_id = running[usize::from(*nth) % running.len()];
                    self.world.finish_task(*worker, job_id, outcome.clone());
                }
                Ok(())
            }
            Action::Notify(payload) => {
                self.world.notify("jobs:insert", payload);
                Ok(())
            }
            Action::Shutdown { worker, graceful } => {
                self.world.shutdown(*worker, *graceful);
                Ok(())
            }
        }
    }

    /// Stops every worker gracefully (listeners accepted again) and checks, step by step,
    /// until all have stopped or crashed, within `limit`; then checks what is left: no work
    /// out, no lock held, no timer armed, no effect for any input, and no job lost.
    pub fn stop_all(&mut self, limit: Duration) -> Result<(), String> {
        let workers = self.configs.len();
        for w in 0..workers {
            self.world.set_listener_available(w, true);
            self.world.shutdown(w, true);
        }
        self.check()?;
        let until = self.world.elapsed() + limit;
        while !(0..workers).all(|w| self.world.is_stopped(w) || self.world.is_crashed(w)) {
            if self.world.next_at().is_none_or(|at| at > until) {
                return Err(self.stuck(limit));
            }
            self.step()?;
        }
        for w in (0..workers).filter(|w| self.world.is_stopped(*w)) {
            self.check_stopped(w)?;
        }
        self.check_no_job_lost()
    }

    /// Why the workers did not stop: each one's state and the trace's last lines.
    fn stuck(&self, limit: Duration) -> String {
        let world = &self.world;
        let stuck: Vec<String> = (0..self.configs.len())
            .filter(|w| !world.is_stopped(*w) && !world.is_crashed(*w))
            .map(|w| {
                format!(
                    "{}: {} running, {} in flight, timer {:?}",
                    world.worker_id(w),
                    world.running(w).count(),
                    world.in_flight(w),
                    world.machine(w).poll_timeout()
                )
            })
            .collect();
        let tail: Vec<String> = world.trace().iter().rev().take(30).map(|e| format!("{e:?}")).collect();
        format!(
            "the workers did not stop within {} hours: {stuck:?}\nlast trace entries (newest first):\n{}",
            limit.num_hours(),
            tail.join("\n")
        )
    }

    /// A stopped worker has nothing out, holds no lock it did not name as abandoned, arms
    /// no timer and answers no input.
    fn check_stopped(&self, w: usize) -> Result<(), String> {
        let world = &self.world;
        let id = world.worker_id(w);
        // A machine that gave up on a refusing database stops with statements out, and
        // the jobs it names stay locked for a sweep.
        let abandoned: Vec<&Vec<i64>> = (world.trace().iter())
            .filter(|e| e.worker == Some(w))
            .filter_map(|e| match &e.what {
                Traced::Effect(Effect::Emit(Event::OutcomesAbandoned { job_ids })) => Some(job_ids),
                _ => None,
            })
            .collect();
        let gave_up = !abandoned.is_empty();
        if (world.in_flight(w) != 0 && !gave_up) || world.running(w).count() != 0 {
            return Err(format!("{id}: stopped with work out"));
        }
        if world.machine(w).poll_timeout().is_some() {
            return Err(format!("{id}: a timer is armed after Stopped"));
        }
        let held = |j: &&Job| {
            j.locked_by.as_deref() == Some(id.as_str()) && !abandoned.iter().any(|a| a.contains(&j.id))
        };
        if let Some(job) = world.db().jobs().find(held) {
            return Err(format!("{id}: stopped but still holds job {}", job.id));
        }
        let mut machine = world.machine(w).clone();
        for input in [Input::Timeout, Input::ListenerUp, Input::ShutdownRequested { graceful: false }] {
            machine.handle(input, world.now()).map_err(|e| e.to_string())?;
            if let Some(effect) = machine.poll_effect() {
                return Err(format!("{id}: effect {effect:?} after Stopped"));
            }
        }
        Ok(())
    }

    /// Every id ever handed out is in the table, or left it for a reason (completed after
    /// its task succeeded, completed by an admin, removed by key), and did not come back.
    fn check_no_job_lost(&self) -> Result<(), String> {
        let model = &self.checker.model;
        for &id in &model.created {
            let in_table = self.world.db().job(id).is_some();
            if !in_table && !model.gone.contains_key(&id) {
                return Err(format!("job {id} vanished"));
            }
            if in_table && model.gone.contains_key(&id) {
                return Err(format!("job {id} came back"));
            }
        }
        Ok(())
    }
}

/// The sim's answer to a database action against the model's.
fn agree<T: PartialEq + std::fmt::Debug>(what: &str, sim: T, model: T) -> Result<(), String> {
    match sim == model {
        true => Ok(()),
        false => Err(format!("{what}: sim {sim:?}, model {model:?}")),
    }
}
