//! Priority aging on the simulated database, as the SQL does it (`sql/records/000020.sql`,
//! `sql/queries/aging/`): the settings per task, the original priority of each job aged,
//! and one pass of the chore.

use super::db::Db;
use crate::aging::Aging;
use crate::time::Timestamp;

impl Db {
    /// Set `aging` on its task (replacing the task's settings, if any; the next pass goes
    /// through its jobs).
    pub fn set_aging(&mut self, aging: Aging) {
        self.agings.insert(aging.task.clone(), (aging, None));
    }

    /// Lift the aging of `task`: its waiting jobs the chore changed get their own priority
    /// back (a locked one keeps what it has). Whether there was one.
    pub fn remove_aging(&mut self, task: &str) -> bool {
        if self.agings.remove(task).is_none() {
            return false;
        }
        let jobs = &mut self.jobs;
        self.aged.retain(|id, (original, set)| {
            let Some(job) = jobs.get_mut(id).filter(|job| job.task_identifier == task) else { return true };
            if job.locked_at.is_none() && job.priority == *set {
                job.priority = *original;
            }
            false
        });
        true
    }

    /// One pass of the aging chore: of the waiting jobs (not locked, attempts left, due) of
    /// the aged tasks whose last complete pass is a quarter of their period ago or more, the
    /// `batch` ready longest whose aged priority is below the one they have get it; the
    /// originals of jobs gone are forgotten. How many changed.
    pub(super) fn age_priorities(&mut self, batch: usize) -> u64 {
        let jobs = &self.jobs;
        self.aged.retain(|id, _| jobs.contains_key(id));
        let now = self.now;
        let quarter = |aging: &Aging| chrono::Duration::microseconds(i64::from(aging.every_ms) * 250);
        let due_tasks: Vec<String> = (self.agings.iter())
            .filter(|(_, (aging, passed))| passed.is_none_or(|at| at <= now - quarter(aging)))
            .map(|(task, _)| task.clone())
            .collect();
        let mut due: Vec<(Timestamp, i64, i16, i16)> = Vec::new();
        for job in self.jobs.values() {
            let Some((aging, _)) = self.agings.get(&job.task_identifier) else { continue };
            if !due_tasks.contains(&job.task_identifier) {
                continue;
            }
            if job.locked_at.is_some() || job.attempts >= job.max_attempts || job.run_at > now {
                continue;
            }
            // A priority someone else changed since the chore set it is the job's own again.
            let original = match self.aged.get(&job.id) {
                Some((original, set)) if *set == job.priority => *original,
                _ => job.priority,
            };
            let aged = aging.aged(original, (now - job.run_at).num_milliseconds());
            if aged < job.priority {
                due.push((job.run_at, job.id, original, aged));
            }
        }
        due.sort();
        due.truncate(batch);
        for (_, id, original, aged) in &due {
            if let Some(job) = self.jobs.get_mut(id) {
                job.priority = *aged;
                self.aged.insert(*id, (*original, *aged));
            }
        }
        // A batch cut short leaves more due: the next pass goes on without waiting.
        if due.len() < batch {
            for task in &due_tasks {
                if let Some((_, passed)) = self.agings.get_mut(task) {
                    *passed = Some(now);
                }
            }
        }
        due.len() as u64
    }
}
