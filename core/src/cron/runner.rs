//! The cron part of a worker, as a small sans-IO state machine the worker machine owns.
//!
//! It follows graphile-worker's runner (see [`super::schedule`]): register the items
//! (learning which were known before), backfill the known ones over their `fill` period,
//! then on each minute boundary schedule the items due, catching up minute by minute after
//! a late timer and never moving its cursor back when the clock does. Each minute's jobs go
//! out as one [`CronBatch`], one batch at a time, in minute order; a batch the database
//! refused is sent again (the scheduling statement is idempotent: it adds an item's job
//! only when it advances the item's `last_execution`), so no minute is skipped.

pub use super::batch::{CronBatch, CronJob, KnownCrontab, ScheduleRow};
use super::interval::first_slot;
pub use super::runtime::Unreadable;
use super::runtime::{schedule_items, Reads};
use super::schedule::{following_second, round_up, round_up_to_minute};
use super::{CronItem, Slot};
use chrono::{DateTime, Duration, TimeDelta, Utc};
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
    /// The runtime schedules last read (see [`super::runtime`]), each with when this
    /// worker learnt of it (it fires from then on).
    runtime: Vec<(CronItem, DateTime<Utc>)>,
    /// Present when the worker takes runtime schedules.
    reads: Option<Reads>,
    /// The rows last read that could not be taken (each was reported once).
    unreadable: Vec<ScheduleRow>,
    start: DateTime<Utc>,
    phase: Phase,
    /// The next instant not yet looked at (a whole second: intervals have one a second).
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

/// Each slot's jobs, by slot time.
type Slots = BTreeMap<DateTime<Utc>, Vec<CronJob>>;

impl CronRunner {
    /// A runner for `items` on a worker starting at `start`.
    pub fn new(items: Vec<CronItem>, start: DateTime<Utc>) -> Self {
        CronRunner {
            items,
            runtime: Vec::new(),
            reads: None,
            unreadable: Vec::new(),
            start,
            phase: Phase::Unregistered,
            next: round_up(start, TimeDelta::seconds(1)),
            queue: VecDeque::new(),
            in_flight: None,
            retry_at: None,
            register_again: false,
        }
    }

    /// With `poll`, also schedule the runtime schedules, read at start (before the
    /// registration), then at least every `poll` and on each notification.
    pub fn with_runtime_schedules(mut self, poll: Option<Duration>) -> Self {
        self.reads = poll.map(|poll| Reads::new(poll, self.start));
        self
    }

    /// Every item: the crontab's, then the runtime schedules.
    fn all_items(&self) -> impl Iterator<Item = &CronItem> {
        self.items.iter().chain(self.runtime.iter().map(|(item, _)| item))
    }

    /// Whether a statement of the runner waits for its answer.
    fn waiting(&self, now: DateTime<Utc>) -> bool {
        let reading = self.reads.as_ref().is_some_and(Reads::in_flight);
        self.in_flight.is_some() || reading || self.retry_at.is_some_and(|at| at > now)
    }

    /// The identifiers to register, and the `known_since` for new ones, when the
    /// registration must be sent now (at start, again after it failed, or after the schema
    /// was installed again, once the batch in flight is answered).
    pub fn registration(&mut self, now: DateTime<Utc>) -> Option<(Vec<String>, DateTime<Utc>)> {
        let unread = self.reads.as_ref().is_some_and(|r| !r.answered);
        if self.phase != Phase::Unregistered || self.waiting(now) || unread {
            return None;
        }
        self.phase = Phase::Registering;
        self.retry_at = None;
        Some((self.all_items().map(|i| i.identifier().to_owned()).collect(), self.start))
    }

    /// The registration answered with the items known before: queue their backfill.
    pub fn registered(&mut self, known: &[KnownCrontab]) {
        if std::mem::take(&mut self.register_again) {
            self.phase = Phase::Unregistered;
            return;
        }
        self.phase = Phase::Running;
        let mut slots = Slots::new();
        for item in self.all_items() {
            let row = known.iter().find(|k| k.identifier == item.identifier());
            let last_known = row.map(|k| k.last_execution.unwrap_or(k.known_since));
            add_jobs(&mut slots, item, item.backfill(last_known, self.start));
        }
        self.enqueue(slots, true);
    }

    /// A tick at `now`: queue every slot from the cursor up to `now` and move the cursor
    /// past it. Before registration, or early, nothing happens.
    pub fn tick(&mut self, now: DateTime<Utc>) {
        if self.phase != Phase::Running || now < self.next {
            return;
        }
        let mut slots = Slots::new();
        for item in &self.items {
            add_jobs(&mut slots, item, item.due(self.next, now));
        }
        for (item, since) in &self.runtime {
            add_jobs(&mut slots, item, item.due(self.next.max(*since), now));
        }
        self.enqueue(slots, false);
        self.next = self.next.max(following_second(now));
    }

    /// When the cursor next has a slot to look at: the next whole minute, or an interval's
    /// slot before it.
    fn wake(&self) -> DateTime<Utc> {
        let minute = round_up_to_minute(self.next);
        let periods = self.all_items().filter_map(CronItem::interval);
        periods.filter_map(|period| first_slot(period, self.next)).fold(minute, DateTime::min)
    }

    fn enqueue(&mut self, slots: Slots, backfilled: bool) {
        for (at, jobs) in slots {
            self.queue.push_back(CronBatch { at, backfilled, jobs });
        }
    }

    /// The runtime schedules were read at `now`: take them in place of the last ones.
    /// A schedule removed or changed loses its jobs not yet sent; one added fires from the
    /// cursor on (it is new to this worker: nothing before is owed). Returns the rows it
    /// cannot take that it had not already found so (a row once per text).
    pub fn schedules_read(&mut self, rows: &[ScheduleRow], now: DateTime<Utc>) -> Vec<Unreadable> {
        let Some(reads) = &mut self.reads else { return Vec::new() };
        // The schedules known at start are known since the start, as the crontab is.
        let since = if reads.answered { now } else { self.start };
        reads.answered(now);
        let (items, mut unreadable) = schedule_items(rows, &self.items);
        let known =
            std::mem::replace(&mut self.unreadable, unreadable.iter().map(|u| u.row.clone()).collect());
        unreadable.retain(|u| !known.contains(&u.row));
        let old = std::mem::take(&mut self.runtime);
        for item in items {
            let kept = old.iter().find(|(known, _)| *known == item).map(|(_, since)| *since);
            self.runtime.push((item, kept.unwrap_or(since)));
        }
        let gone: Vec<&CronItem> = old
            .iter()
            .map(|(item, _)| item)
            .filter(|item| !self.runtime.iter().any(|(new, _)| new == *item))
            .collect();
        if !gone.is_empty() {
            let dropped = |job: &CronJob| gone.iter().any(|item| item.identifier() == job.identifier);
            for batch in &mut self.queue {
                batch.jobs.retain(|job| !dropped(job));
            }
            self.queue.retain(|batch| !batch.jobs.is_empty());
        }
        unreadable
    }

    /// A notification said the runtime schedules changed at `now`: read them again.
    pub fn schedules_changed(&mut self, now: DateTime<Utc>) {
        if let Some(reads) = &mut self.reads {
            reads.changed(now);
        }
    }

    /// The next batch to send, if registered, none is in flight and no retry is pending at
    /// `now`.
    pub fn poll_batch(&mut self, now: DateTime<Utc>) -> Option<CronBatch> {
        if self.phase != Phase::Running || self.waiting(now) {
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

    /// The statement in flight (a read of the schedules, the registration or a batch)
    /// failed at `now`: send it again after `delay`.
    pub fn failed(&mut self, now: DateTime<Utc>, delay: Duration) {
        if let Some(reads) = self.reads.as_mut().filter(|r| r.in_flight()) {
            reads.failed(now, delay);
            return;
        }
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
        // A retry or a read due while a statement is in flight waits for its answer.
        let idle = !self.busy();
        let retry = self.retry_at.filter(|_| idle);
        let read = self.reads.as_ref().and_then(Reads::deadline).filter(|_| idle);
        let wake = (self.phase == Phase::Running).then(|| self.wake());
        [retry, read, wake].into_iter().flatten().min()
    }

    /// Whether a statement of the runner is in flight.
    pub fn busy(&self) -> bool {
        let reading = self.reads.as_ref().is_some_and(Reads::in_flight);
        self.in_flight.is_some() || self.phase == Phase::Registering || reading
    }

    /// The statements due at `now`, in order: the registration, then the next minute's
    /// batch (one at a time).
    pub fn due_statements(&mut self, now: DateTime<Utc>) -> Vec<crate::protocol::Statement> {
        use crate::protocol::Statement;
        let mut statements = Vec::new();
        // A read goes whenever nothing is in flight, even while a refused batch waits.
        let idle = !self.busy();
        if let Some(reads) = self.reads.as_mut().filter(|_| idle) {
            if reads.send(now) {
                return vec![Statement::ReadSchedules];
            }
        }
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

/// `item`'s jobs for `slots`, added under each slot's time.
fn add_jobs(into: &mut Slots, item: &CronItem, slots: Vec<Slot>) {
    for slot in slots {
        let job = CronJob {
            identifier: item.identifier().to_owned(),
            task: item.task().to_owned(),
            payload: item.job_payload(slot),
            spec: item.job_spec(slot),
        };
        into.entry(slot.at).or_default().push(job);
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

    fn row(line: &str) -> ScheduleRow {
        let item = parse(line).expect("valid line").into_items().remove(0);
        ScheduleRow { identifier: item.identifier().to_owned(), line: item.to_string() }
    }

    #[test]
    fn runtime_schedules_are_read_before_the_registration_then_on_notice_and_taken_up_from_then() {
        let start = at(10, 0, 30);
        let mut r = runner("0 * * * * hourly", start).with_runtime_schedules(Some(Duration::seconds(60)));
        assert_eq!(r.due_statements(start), vec![crate::protocol::Statement::ReadSchedules], "read first");
        assert!(r.registration(start).is_none(), "the registration waits for the read");
        assert_eq!(r.deadline(), None, "nothing before the answer");
        r.schedules_read(&[row("@every 10s beat")], start);
        let (ids, _) = r.registration(start).expect("registered with the runtime schedule");
        assert_eq!(ids, vec!["hourly".to_owned(), "beat".to_owned()]);
        r.registered(&[]);
        assert_eq!(r.deadline(), Some(at(10, 0, 30)), "the interval's slot at the start");
        r.tick(at(10, 0, 40));
        assert_eq!(drain(&mut r, at(10, 0, 40)), vec![(at(10, 0, 30), false, 1), (at(10, 0, 40), false, 1)]);
        assert_eq!(r.deadline(), Some(at(10, 0, 50)));
        // Notified of a new schedule at 10:00:45: read at once, fires from then on.
        r.schedules_changed(at(10, 0, 45));
        assert_eq!(r.deadline(), Some(at(10, 0, 45)));
        assert_eq!(r.due_statements(at(10, 0, 45)), vec![crate::protocol::Statement::ReadSchedules]);
        r.schedules_read(&[row("@every 10s beat"), row("@every 1s fast")], at(10, 0, 45));
        r.tick(at(10, 0, 46));
        assert_eq!(drain(&mut r, at(10, 0, 46)), vec![(at(10, 0, 45), false, 1), (at(10, 0, 46), false, 1)]);
        // Removed: its jobs not yet sent are dropped, and it fires no more.
        r.tick(at(10, 0, 48));
        r.schedules_read(&[row("@every 10s beat")], at(10, 0, 48));
        assert!(drain(&mut r, at(10, 0, 48)).is_empty(), "fast's 10:00:47 and :48 dropped");
        r.tick(at(10, 0, 50));
        assert_eq!(drain(&mut r, at(10, 0, 50)), vec![(at(10, 0, 50), false, 1)]);
    }

    #[test]
    fn a_row_that_cannot_be_taken_is_reported_once_per_text_and_the_others_are_taken() {
        let start = at(10, 0, 30);
        let mut r = runner("0 * * * * hourly", start).with_runtime_schedules(Some(Duration::seconds(60)));
        let raw =
            |identifier: &str, line: &str| ScheduleRow { identifier: identifier.into(), line: line.into() };
        let rows = [
            raw("weekly", "@every 1w weekly"),
            raw("zoned", "@every 30s zoned ?tz=Europe/Paris"),
            raw("other", "@every 30s beat"),
            raw("hourly", "not even a line"),
            row("@every 10s beat"),
        ];
        let reported =
            |u: Vec<Unreadable>| u.into_iter().map(|u| (u.row.identifier, u.error)).collect::<Vec<_>>();
        let first = reported(r.schedules_read(&rows, start));
        let names: Vec<_> = first.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(names, ["weekly", "zoned", "other"], "the crontab's own identifier is ignored: {first:?}");
        assert!(first[0].1.contains("invalid period after '@every'"), "{first:?}");
        assert!(first[1].1.contains("takes no 'tz' option"), "{first:?}");
        assert!(first[2].1.contains("identifier is 'beat'"), "{first:?}");
        let (ids, _) = r.registration(start).expect("registered");
        assert_eq!(ids, ["hourly", "beat"], "the readable schedule is taken");
        assert!(r.schedules_read(&rows, at(10, 1, 0)).is_empty(), "each row and text once");
        let edited = [raw("weekly", "@every 2w weekly"), rows[1].clone()];
        assert_eq!(reported(r.schedules_read(&edited, at(10, 2, 0))).len(), 1, "a new text is reported");
        assert!(r.schedules_read(&edited, at(10, 3, 0)).is_empty());
    }

    #[test]
    fn a_read_due_while_a_batch_is_in_flight_waits_for_it_without_a_past_deadline() {
        let start = at(10, 0, 0);
        let mut r = runner("* * * * * tick", start).with_runtime_schedules(Some(Duration::seconds(5)));
        r.due_statements(start);
        r.schedules_read(&[], start);
        r.registration(start);
        r.registered(&[]);
        let sent = r.due_statements(at(10, 0, 0));
        assert!(matches!(sent[..], [crate::protocol::Statement::ScheduleCron(_)]), "{sent:?}");
        r.schedules_changed(at(10, 0, 1));
        assert!(r.deadline().is_some_and(|d| d > at(10, 0, 1)), "no deadline in the past while busy");
        assert!(r.due_statements(at(10, 0, 2)).is_empty(), "one statement at a time");
        r.batch_done();
        assert_eq!(r.due_statements(at(10, 0, 2)), vec![crate::protocol::Statement::ReadSchedules]);
        r.failed(at(10, 0, 2), Duration::seconds(3));
        assert_eq!(r.deadline(), Some(at(10, 0, 5)), "a refused read is sent again after the delay");
    }

    #[test]
    fn a_read_in_flight_while_a_refused_batch_waits_leaves_no_deadline_in_the_past() {
        let start = at(10, 0, 30);
        let mut r = runner("* * * * * tick", start).with_runtime_schedules(Some(Duration::seconds(60)));
        r.due_statements(start);
        r.schedules_read(&[], start);
        r.due_statements(start);
        r.registered(&[]);
        assert!(matches!(r.due_statements(at(10, 1, 0))[..], [crate::protocol::Statement::ScheduleCron(_)]));
        r.failed(at(10, 1, 0), Duration::seconds(2));
        r.schedules_changed(at(10, 1, 1));
        assert_eq!(r.due_statements(at(10, 1, 1)), vec![crate::protocol::Statement::ReadSchedules]);
        // The batch's retry time passes while the read is in flight: nothing can be sent.
        assert!(r.deadline().is_none_or(|d| d > at(10, 1, 3)), "{:?}", r.deadline());
        r.schedules_read(&[], at(10, 1, 3));
        assert!(matches!(r.due_statements(at(10, 1, 3))[..], [crate::protocol::Statement::ScheduleCron(_)]));
    }

    #[test]
    fn a_first_read_refused_does_not_hold_back_the_crontab() {
        let start = at(10, 0, 0);
        let mut r = runner("* * * * * tick", start).with_runtime_schedules(Some(Duration::seconds(5)));
        assert_eq!(r.due_statements(start), vec![crate::protocol::Statement::ReadSchedules]);
        r.failed(start, Duration::seconds(2));
        assert!(r.registration(start).is_some(), "registered without the runtime schedules");
        r.registered(&[]);
        assert_eq!(r.due_statements(at(10, 0, 2)), vec![crate::protocol::Statement::ReadSchedules]);
        r.schedules_read(&[row("@every 1s late")], at(10, 0, 2));
        r.tick(at(10, 0, 3));
        let sent = drain(&mut r, at(10, 0, 3));
        assert_eq!(sent, vec![(at(10, 0, 0), false, 1), (at(10, 0, 2), false, 1), (at(10, 0, 3), false, 1)]);
    }
}
