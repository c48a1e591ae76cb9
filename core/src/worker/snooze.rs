//! A task that snoozed: the job goes back to run later with its attempt refunded, within
//! its task's snooze window; past it, the attempt fails and `last_error` says why (see
//! [`crate::policy`]).

use super::slots::Started;
use super::Worker;
use crate::protocol::Snooze;
use chrono::Duration;

impl Worker {
    /// The task of `job` asked to run again after `delay`.
    pub(super) fn snoozed(&mut self, job: &Started, delay: Duration) {
        match self.config.policy(&job.task).snooze(job.created_at, self.now, delay) {
            Ok(until) => {
                self.emit(job.snoozed(until));
                let run_at = self.config.use_local_time.then_some(until);
                let snooze = Snooze { job_id: job.job_id, delay: until - self.now, run_at };
                self.writes.snooze(snooze, self.now, self.config.fail_batch_delay);
            }
            Err(refused) => self.failed(job, refused.to_string(), None, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::backoff::Backoff;
    use crate::job::{JobSpec, RawJob};
    use crate::policy::TaskPolicy;
    use crate::sim::{TaskPlan, World, WorldConfig};
    use crate::worker::{Config, TaskOutcome};
    use chrono::Duration;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// Each run's `run_at` (seconds from the start) and attempt.
    type Runs = Rc<RefCell<Vec<(i64, i16)>>>;

    /// A world whose task `t` (with `policy`) ends its first `snoozes` runs with `outcome`, then
    /// succeeds; the times each run started are recorded.
    fn world(policy: TaskPolicy, outcome: TaskOutcome, snoozes: usize) -> (World, Runs, i64) {
        let mut world = World::new(WorldConfig::default());
        let runs = Rc::new(RefCell::new(Vec::new()));
        let seen = runs.clone();
        let start = world.now();
        world.set_script(move |job, _| {
            seen.borrow_mut().push(((job.run_at - start).num_seconds(), job.attempts));
            let outcome = if seen.borrow().len() <= snoozes { outcome.clone() } else { TaskOutcome::Ok };
            TaskPlan::finish(Duration::milliseconds(10), outcome)
        });
        let config = Config {
            task_identifiers: vec!["t".into()],
            task_policies: [("t".to_owned(), policy)].into(),
            ..Config::default()
        };
        world.add_worker(config);
        let job = world.db_mut().add_job(&RawJob::new("t", serde_json::json!({}), JobSpec::default()));
        (world, runs, job.map(|j| j.id).unwrap_or_default())
    }

    #[test]
    fn a_snoozed_job_runs_again_after_the_delay_with_its_attempt_refunded_and_no_error() {
        let (mut world, runs, id) =
            world(TaskPolicy::DEFAULT, TaskOutcome::Snoozed(Duration::seconds(30)), 3);
        world.run_for(Duration::seconds(5));
        let job = world.db().job(id).cloned().expect("the job waits");
        assert_eq!((job.attempts, job.last_error.as_deref(), job.locked_by.as_deref()), (0, None, None));
        assert!((job.run_at - world.now()).num_seconds() >= 24, "due in 30 s: {}", job.run_at);
        world.run_for(Duration::seconds(120));
        assert!(world.db().job(id).is_none(), "completed after three snoozes");
        // Each run is attempt 1, due 30 s (plus the run and the write) after the last one.
        let runs = runs.borrow().clone();
        assert_eq!(runs.len(), 4, "{runs:?}");
        assert!(runs.iter().all(|&(_, attempt)| attempt == 1), "{runs:?}");
        for pair in runs.windows(2) {
            assert!((30..=31).contains(&(pair[1].0 - pair[0].0)), "{runs:?}");
        }
        let snoozed = world.trace().iter().filter(|e| format!("{e:?}").contains("JobSnoozed")).count();
        assert_eq!(snoozed, 3, "each snooze reported");
    }

    #[test]
    fn a_snooze_past_the_window_fails_the_attempt_saying_so() {
        let policy = TaskPolicy { snooze_window: Duration::minutes(1), ..TaskPolicy::DEFAULT };
        let (mut world, runs, id) = world(policy, TaskOutcome::Snoozed(Duration::seconds(40)), 2);
        world.run_for(Duration::seconds(5));
        let job = world.db().job(id).cloned().expect("the job waits");
        assert_eq!((job.attempts, job.last_error.as_deref()), (0, None), "the first snooze is within");
        // The second run snoozes to ~80 s, past the minute: that attempt fails instead.
        let failed = |w: &World| w.db().job(id).is_some_and(|j| j.last_error.is_some());
        assert!(world.run_until(Duration::seconds(60), failed));
        let job = world.db().job(id).cloned().expect("the job waits");
        assert_eq!(job.attempts, 1, "an attempt spent");
        let error = job.last_error.unwrap_or_default();
        assert!(error.starts_with("snoozed past its limit") && error.contains("at most 1min"), "{error}");
        assert!((job.run_at - world.now()).num_seconds() <= 3, "retried by the curve, not the snooze");
        world.run_for(Duration::seconds(10));
        assert!(world.db().job(id).is_none(), "the retry ran and succeeded");
        assert_eq!(runs.borrow().len(), 3);
    }

    #[test]
    fn a_task_with_its_own_curve_is_retried_at_its_own_times() {
        let policy = TaskPolicy { backoff: Backoff::fixed(Duration::seconds(42)), ..TaskPolicy::DEFAULT };
        let (mut world, runs, id) = world(policy, TaskOutcome::Err("no".into()), 2);
        world.run_for(Duration::seconds(200));
        assert!(world.db().job(id).is_none(), "succeeded on its third attempt");
        let runs = runs.borrow().clone();
        let attempts: Vec<i16> = runs.iter().map(|r| r.1).collect();
        assert_eq!(attempts, [1, 2, 3]);
        for pair in runs.windows(2) {
            assert!((42..=43).contains(&(pair[1].0 - pair[0].0)), "42 s apart: {runs:?}");
        }
    }
}
