//! The cron part of a worker, as a small sans-IO state machine the worker machine owns.
//!
//! It follows graphile-worker's runner (see [`super::schedule`]): register the items
//! (learning which were known before), backfill the known ones over their `fill` period,
//! then on each minute boundary schedule the items due, catching up minute by minute after
//! a late timer and never moving its cursor back when the clock does. Each minute's jobs go
//! out as one [`CronBatch`], one batch at a time, in minute order; a batch the database
//! refused is sent again (the scheduling statement is idempotent: it adds an item's job
//! only when it advances the item's `last_execution`), so no minute is skipped.

pub use super::batch::{CronBatch, CronJob, KnownCrontab};
use super::schedule::{following_minute, round_up_to_minute};
use super::{CronItem, Slot};
use chrono::{DateTime, Duration, Utc};
use std::collections::{BTreeMap, VecDeque};

/// Where the runner is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The registration must be (re)sent.
    Unregistered,
    /// The registration is in flight.
    Registering,
    /// Registered: batches flow.
    Running,
}

/// The cron runner of one worker.
#[derive(Debug, Clone)]
pub struct CronRunner {
    items: Vec<CronItem>,
    start: DateTime<Utc>,
    phase: Phase,
    /// The next minute not yet looked at.
    next: DateTime<Utc>,
    /// Batches waiting to be sent, in minute order.
    queue: VecDeque<CronBatch>,
    in_flight: Option<CronBatch>,
    /// Whether a refused statement waits for [`CronRunner::retry_at`].
    retry_at: Option<DateTime<Utc>>,
    /// The schema was installed again while the registration was in flight: it may have
    /// gone to the old tables, so register once more after it.
    register_again: bool,
}

impl CronRunner {
    /// A runner for `items` on a worker starting at `start`.
    pub fn new(items: Vec<CronItem>, start: DateTime<Utc>) -> Self {
        CronRunner {
            items,
            start,
            phase: Phase::Unregistered,
            next: round_up_to_minute(start),
            queue: VecDeque::new(),
            in_flight: None,
            retry_at: None,
            register_again: false,
        }
    }

    /// The identifiers to register, and the `known_since` for new ones, when the
    /// registration must be sent now (at start, again after it failed, or after the schema
    /// was installed again, once the batch in flight is answered).
    pub fn registration(&mut self, now: DateTime<Utc>) -> Option<(Vec<String>, DateTime<Utc>)> {
        let waiting = self.in_flight.is_some() || self.retry_at.is_some_and(|at| at > now);
        if self.phase != Phase::Unregistered || waiting {
            return None;
        }
        self.phase = Phase::Registering;
        self.retry_at = None;
        Some((self.items.iter().map(|i| i.identifier().to_owned()).collect(), self.start))
    }

    /// The registration answered with the items known before: queue their backfill.
    pub fn registered(&mut self, known: &[KnownCrontab]) {
        if std::mem::take(&mut self.register_again) {
            self.phase = Phase::Unregistered;
            return;
        }
        self.phase = Phase::Running;
        let mut minutes: BTreeMap<DateTime<Utc>, Vec<(usize, Slot)>> = BTreeMap::new();
        for (index, item) in self.items.iter().enumerate() {
            let row = known.iter().find(|k| k.identifier == item.identifier());
            let last_known = row.map(|k| k.last_execution.unwrap_or(k.known_since));
            for slot in item.backfill(last_known, self.start) {
                minutes.entry(slot.at).or_default().push((index, slot));
            }
        }
        self.enqueue(minutes, true);
    }

    /// A tick at `now`: queue every minute from the cursor up to `now` and move the cursor
    /// past it. Before registration, or early, nothing happens.
    pub fn tick(&mut self, now: DateTime<Utc>) {
        if self.phase != Phase::Running || now < self.next {
            return;
        }
        let mut minutes: BTreeMap<DateTime<Utc>, Vec<(usize, Slot)>> = BTreeMap::new();
        for (index, item) in self.items.iter().enumerate() {
            for slot in item.due(self.next, now) {
                minutes.entry(slot.at).or_default().push((index, slot));
            }
        }
        self.enqueue(minutes, false);
        self.next = self.next.max(following_minute(now));
    }

    fn enqueue(&mut self, minutes: BTreeMap<DateTime<Utc>, Vec<(usize, Slot)>>, backfilled: bool) {
        for (at, slots) in minutes {
            let jobs = slots
                .into_iter()
                .map(|(index, slot)| {
                    let item = &self.items[index];
                    CronJob {
                        identifier: item.identifier().to_owned(),
                        task: item.task().to_owned(),
                        payload: item.job_payload(slot),
                        spec: item.job_spec(slot),
                    }
                })
                .collect();
            self.queue.push_back(CronBatch { at, backfilled, jobs });
        }
    }

    /// The next batch to send, if registered, none is in flight and no retry is pending at
    /// `now`.
    pub fn poll_batch(&mut self, now: DateTime<Utc>) -> Option<CronBatch> {
        let waiting = self.in_flight.is_some() || self.retry_at.is_some_and(|at| at > now);
        if self.phase != Phase::Running || waiting {
            return None;
        }
        self.retry_at = None;
        let batch = self.queue.pop_front()?;
        self.in_flight = Some(batch.clone());
        Some(batch)
    }

    /// The batch in flight was written.
    pub fn batch_done(&mut self) {
        self.in_flight = None;
    }

    /// The statement in flight (registration or batch) failed at `now`: send it again
    /// after `delay`.
    pub fn failed(&mut self, now: DateTime<Utc>, delay: Duration) {
        if let Some(batch) = self.in_flight.take() {
            self.queue.push_front(batch);
        }
        if self.phase == Phase::Registering {
            // The registration sent again goes to the tables there are then.
            self.phase = Phase::Unregistered;
            self.register_again = false;
        }
        self.retry_at = Some(now + delay);
    }

    /// When the runner next needs a [`CronRunner::tick`] or a retry; `None` while its
    /// registration is in flight (nothing can happen before the answer).
    pub fn deadline(&self) -> Option<DateTime<Utc>> {
        match self.phase {
            Phase::Registering => None,
            Phase::Unregistered => self.retry_at,
            Phase::Running => Some(self.retry_at.map_or(self.next, |at| at.min(self.next))),
        }
    }

    /// Whether a statement of the runner is in flight.
    pub fn busy(&self) -> bool {
        self.in_flight.is_some() || self.phase == Phase::Registering
    }

    /// The statements due at `now`, in order: the registration, then the next minute's
    /// batch (one at a time).
    pub fn due_statements(&mut self, now: DateTime<Utc>) -> Vec<crate::protocol::Statement> {
        use crate::protocol::Statement;
        let mut statements = Vec::new();
        if let Some((identifiers, known_since)) = self.registration(now) {
            statements.push(Statement::RegisterCrontabs { identifiers, known_since });
        }
        self.tick(now);
        statements.extend(self.poll_batch(now).map(Statement::ScheduleCron));
        statements
    }

    /// The schema was installed again at `now` (its tables are new): register the items
    /// again, known since `now`, before the next batch. No minute is lost: the cursor waits,
    /// and a batch the old tables' end refused is sent again.
    pub fn reinstalled(&mut self, now: DateTime<Utc>) {
        match self.phase {
            Phase::Running => {
                self.phase = Phase::Unregistered;
                self.start = now;
            }
            Phase::Registering => self.register_again = true,
            // Its registration is still to be sent, to the new tables.
            Phase::Unregistered => {}
        }
    }

    /// Drop what has not been sent (shutdown).
    pub fn stop(&mut self) {
        self.queue.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cron::parse;
    use chrono::TimeZone;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 22, h, m, s).unwrap()
    }

    fn runner(crontab: &str, start: DateTime<Utc>) -> CronRunner {
        CronRunner::new(parse(crontab).expect("valid crontab").into_items(), start)
    }

    fn drain(r: &mut CronRunner, now: DateTime<Utc>) -> Vec<(DateTime<Utc>, bool, usize)> {
        let mut sent = Vec::new();
        while let Some(batch) = r.poll_batch(now) {
            sent.push((batch.at, batch.backfilled, batch.jobs.len()));
            r.batch_done();
        }
        sent
    }

    #[test]
    fn a_new_item_is_registered_not_backfilled_then_scheduled_each_minute_once() {
        let start = at(10, 0, 30);
        let mut r = runner("* * * * * hello ?fill=1h", start);
        let (ids, known_since) = r.registration(start).expect("registration first");
        assert_eq!((ids, known_since), (vec!["hello".to_owned()], start));
        assert!(r.registration(start).is_none(), "one registration in flight");
        r.registered(&[]);
        assert!(drain(&mut r, start).is_empty(), "new items are not backfilled");
        assert_eq!(r.deadline(), Some(at(10, 1, 0)), "the partial minute of the start is not scheduled");
        r.tick(at(10, 1, 0));
        assert_eq!(drain(&mut r, at(10, 1, 0)), vec![(at(10, 1, 0), false, 1)]);
        r.tick(at(10, 1, 40));
        assert!(drain(&mut r, at(10, 1, 40)).is_empty(), "a minute is scheduled once");
        assert_eq!(r.deadline(), Some(at(10, 2, 0)));
    }

    #[test]
    fn a_known_item_is_backfilled_over_its_fill_period_from_its_last_execution() {
        let start = at(10, 0, 30);
        let mut r = runner("* * * * * hello ?fill=5m\n*/2 * * * * other ?fill=10m", start);
        r.registration(start);
        r.registered(&[
            KnownCrontab {
                identifier: "hello".into(),
                known_since: at(9, 0, 0),
                last_execution: Some(at(9, 57, 0)),
            },
            KnownCrontab { identifier: "other".into(), known_since: at(9, 53, 10), last_execution: None },
        ]);
        let sent = drain(&mut r, start);
        // other: even minutes from 9:54 (known since 9:53:10) to 10:00; hello: from 9:57.
        assert_eq!(
            sent,
            vec![
                (at(9, 54, 0), true, 1),
                (at(9, 56, 0), true, 1),
                (at(9, 57, 0), true, 1),
                (at(9, 58, 0), true, 2),
                (at(9, 59, 0), true, 1),
                (at(10, 0, 0), true, 2),
            ]
        );
    }

    #[test]
    fn a_late_timer_catches_up_and_a_clock_that_goes_back_schedules_nothing_again() {
        let start = at(10, 0, 0);
        let mut r = runner("* * * * * hello", start);
        r.registration(start);
        r.registered(&[]);
        r.tick(at(10, 3, 5));
        let minutes: Vec<_> = drain(&mut r, at(10, 3, 5)).into_iter().map(|(m, _, _)| m).collect();
        assert_eq!(minutes, vec![at(10, 0, 0), at(10, 1, 0), at(10, 2, 0), at(10, 3, 0)]);
        r.tick(at(10, 1, 0));
        assert!(drain(&mut r, at(10, 1, 0)).is_empty());
        assert_eq!(r.deadline(), Some(at(10, 4, 0)), "the cursor never moves back");
    }

    #[test]
    fn a_refused_batch_is_sent_again_after_the_delay_and_nothing_is_skipped() {
        let start = at(10, 0, 0);
        let mut r = runner("* * * * * hello", start);
        r.registration(start);
        r.failed(start, Duration::seconds(2));
        assert!(r.registration(at(10, 0, 1)).is_none(), "waits for the retry");
        assert!(r.registration(at(10, 0, 2)).is_some(), "registration is sent again");
        r.registered(&[]);
        r.tick(at(10, 1, 0));
        let first = r.poll_batch(at(10, 1, 0)).expect("a batch");
        r.failed(at(10, 1, 0), Duration::seconds(5));
        assert!(r.poll_batch(at(10, 1, 4)).is_none());
        assert_eq!(r.deadline(), Some(at(10, 1, 5)));
        assert_eq!(r.poll_batch(at(10, 1, 5)), Some(first));
        assert!(r.busy());
    }

    #[test]
    fn after_a_reinstall_the_items_are_registered_again_once_the_batch_in_flight_is_answered() {
        let start = at(10, 0, 30);
        let mut r = runner("* * * * * hello", start);
        r.registration(start);
        r.registered(&[]);
        r.tick(at(10, 1, 0));
        let minute = r.poll_batch(at(10, 1, 0)).expect("a batch");
        r.reinstalled(at(10, 1, 10));
        assert!(r.registration(at(10, 1, 10)).is_none(), "one cron statement at a time");
        r.batch_done();
        let (ids, known_since) = r.registration(at(10, 1, 20)).expect("registered again");
        assert_eq!(
            (ids, known_since),
            (vec!["hello".to_owned()], at(10, 1, 10)),
            "known since the reinstall"
        );
        r.tick(at(10, 2, 0));
        assert!(r.poll_batch(at(10, 2, 0)).is_none(), "no batch before the registration is answered");
        // Reinstalled again while registering: that registration may have reached the old tables.
        r.reinstalled(at(10, 2, 5));
        r.registered(&[]);
        assert!(r.registration(at(10, 2, 6)).is_some(), "registered once more");
        r.registered(&[]);
        r.tick(at(10, 2, 6));
        assert_eq!(minute.at, at(10, 1, 0));
        assert_eq!(drain(&mut r, at(10, 2, 6)), vec![(at(10, 2, 0), false, 1)], "no minute lost");
    }
}
