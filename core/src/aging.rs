//! Priority aging: a waiting job's priority rises with the time it has been ready, so a
//! low-priority job that waits long enough runs ahead of a steady stream of higher-priority
//! ones (docs/guide/priority-aging.md).
//!
//! An [`Aging`] is a row of Formica's records schema (`formica_<schema>.aging`), set and
//! lifted through `WorkerUtils::set_aging`/`remove_aging`. A chore of the worker machine
//! ([`Statement::AgePriorities`](crate::protocol::Statement::AgePriorities)) applies it: each
//! pass sets the `priority` of at most [`AGING_BATCH`] waiting jobs (never a locked one) of
//! the aged tasks to [`Aging::aged`] of their original priority, which it keeps beside them.
//! graphile-worker's `priority` is the column every worker fetches by, smaller first: so a
//! job's number falls as it ages, and graphile-worker's own workers see the aged number too.

use chrono::Duration;

/// The most jobs one pass of the aging chore changes: a pass's work is bounded, and a
/// longer backlog is aged over the next passes, oldest ready first.
pub const AGING_BATCH: usize = 1_000;

/// How the jobs of `task` age: every `every_ms` milliseconds a job has been ready, its
/// priority number falls by `step`, down to `best` (never below it, and a job whose own
/// priority is already at or below `best` keeps it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Aging {
    /// The task identifier.
    pub task: String,
    /// How long a job waits ready for each step.
    pub every_ms: u32,
    /// How far the priority number falls at each step.
    pub step: u16,
    /// The smallest number (the highest priority) aging brings a job to.
    pub best: i16,
}

impl Aging {
    /// The jobs of `task`, one `step` nearer `best` for each `every` they have been ready.
    pub fn new(task: impl Into<String>, every: Duration, step: u16, best: i16) -> Self {
        let every_ms = u32::try_from(every.num_milliseconds()).unwrap_or(u32::MAX);
        Aging { task: task.into(), every_ms, step, best }
    }

    /// The priority of a job whose own priority is `original` once it has been ready for
    /// `ready_ms` milliseconds (the aging chore sets this; a negative time is no time).
    pub fn aged(&self, original: i16, ready_ms: i64) -> i16 {
        if original <= self.best || self.every_ms == 0 {
            return original;
        }
        let steps = ready_ms.max(0) / i64::from(self.every_ms);
        let fallen = i64::from(original).saturating_sub(steps.saturating_mul(i64::from(self.step)));
        // Between best and original, both i16: the conversion cannot fail.
        i16::try_from(fallen.max(i64::from(self.best))).unwrap_or(self.best)
    }

    /// How long a job of priority `from` must have been ready before aging brings it to
    /// `to` or below (`None`: never, `to` is below `best`; zero: it is there already).
    pub fn reaches(&self, from: i16, to: i16) -> Option<Duration> {
        if from <= to {
            return Some(Duration::zero());
        }
        if to < self.best || self.step == 0 {
            return None;
        }
        let (fall, step) = (i64::from(from) - i64::from(to), i64::from(self.step));
        let steps = (fall + step - 1) / step;
        Some(Duration::milliseconds(steps * i64::from(self.every_ms)))
    }

    /// How logs, the dashboard and the command line name it: `report -1/30s to -10`.
    pub fn label(&self) -> String {
        let every = match self.every_ms {
            ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
            ms if ms % 60_000 == 0 => format!("{}min", ms / 60_000),
            ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
            ms => format!("{ms}ms"),
        };
        format!("{} -{}/{every} to {}", self.task, self.step, self.best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_falls_one_step_each_period_ready_down_to_best() {
        let aging = Aging::new("t", Duration::seconds(10), 2, -5);
        assert_eq!(aging.aged(4, 0), 4);
        assert_eq!(aging.aged(4, 9_999), 4);
        assert_eq!(aging.aged(4, 10_000), 2);
        assert_eq!(aging.aged(4, 35_000), -2);
        assert_eq!(aging.aged(4, 3_600_000), -5, "never below best");
        assert_eq!(aging.aged(-7, 3_600_000), -7, "a job above best keeps its own priority");
        assert_eq!(aging.aged(4, -50_000), 4, "a job not ready yet has not aged");
        assert_eq!(Aging::new("t", Duration::days(1), u16::MAX, i16::MIN).aged(i16::MAX, i64::MAX), i16::MIN);
    }

    #[test]
    fn reaches_is_the_time_ready_that_aged_needs() {
        let aging = Aging::new("t", Duration::seconds(10), 2, -5);
        for (from, to) in [(4, 0), (4, 1), (4, -5), (3, 3), (0, 4)] {
            let wait = aging.reaches(from, to).unwrap();
            assert!(aging.aged(from, wait.num_milliseconds()) <= to, "{from} to {to} after {wait}");
            let before = wait.num_milliseconds() - 1;
            assert!(before < 0 || aging.aged(from, before) > to, "{from} to {to}: not sooner than {wait}");
        }
        assert_eq!(aging.reaches(4, -6), None, "below best: never");
        assert_eq!(aging.label(), "t -2/10s to -5");
        assert_eq!(Aging::new("t", Duration::milliseconds(1_500), 1, 0).label(), "t -1/1500ms to 0");
    }
}
