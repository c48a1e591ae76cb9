//! Runtime schedules: cron and interval items kept in Formica's `schedules` table (added,
//! changed and removed through `WorkerUtils`, the CLI or the dashboard) rather than in a
//! worker's crontab. A worker that takes them reads the table at start, on each
//! [`SCHEDULES`](crate::protocol::SCHEDULES) notification and every poll interval, and
//! schedules them with its crontab's items: through the same `known_crontabs` ledger, so
//! each slot is added once across every worker.

use super::batch::ScheduleRow;
use super::{parse, CronItem};
use chrono::{DateTime, Duration, Utc};

/// When the runner reads the schedules.
#[derive(Debug, Clone)]
pub(super) struct Reads {
    /// How often it reads without being notified.
    poll: Duration,
    /// When it reads next (`None`: a read is in flight).
    due: Option<DateTime<Utc>>,
    /// Whether a read was answered: the registration waits for the first one, so the
    /// schedules known at start are registered (and backfilled) with the crontab.
    pub(super) answered: bool,
    /// A change was notified while a read was in flight (it may have read before it).
    again: bool,
}

impl Reads {
    /// Reads every `poll`, the first one at once.
    pub(super) fn new(poll: Duration, now: DateTime<Utc>) -> Self {
        Reads { poll, due: Some(now), answered: false, again: false }
    }

    /// Whether a read is to be sent at `now` (and mark it sent).
    pub(super) fn send(&mut self, now: DateTime<Utc>) -> bool {
        let due = self.due.is_some_and(|at| at <= now);
        if due {
            self.due = None;
        }
        due
    }

    pub(super) fn in_flight(&self) -> bool {
        self.due.is_none()
    }

    pub(super) fn deadline(&self) -> Option<DateTime<Utc>> {
        self.due
    }

    /// The read in flight was answered at `now`.
    pub(super) fn answered(&mut self, now: DateTime<Utc>) {
        self.answered = true;
        let again = std::mem::take(&mut self.again);
        self.due = Some(if again { now } else { now + self.poll });
    }

    /// The read in flight failed at `now`: read again after `delay`. The crontab is
    /// registered without waiting any longer (a table the worker's role may not read must
    /// not stop its crontab): schedules read later fire from then on.
    pub(super) fn failed(&mut self, now: DateTime<Utc>, delay: Duration) {
        self.answered = true;
        self.due = Some(now + delay);
    }

    /// A notification said the schedules changed: read at once (after the read in flight).
    pub(super) fn changed(&mut self, now: DateTime<Utc>) {
        match &mut self.due {
            Some(due) => *due = (*due).min(now),
            None => self.again = true,
        }
    }
}

/// What a worker makes of the rows read: the items it takes, and the rows it cannot take,
/// each with why. A row must parse to one item whose identifier is the row's (a row
/// edited by hand into something else, or stored before the parser refused its text, is
/// not taken); rows whose identifier is an item of the worker's own crontab are ignored,
/// as the crontab wins.
pub(super) fn schedule_items(rows: &[ScheduleRow], crontab: &[CronItem]) -> (Vec<CronItem>, Vec<Unreadable>) {
    let mut unreadable = Vec::new();
    let items = rows
        .iter()
        .filter(|row| crontab.iter().all(|item| item.identifier() != row.identifier))
        .filter_map(|row| {
            let taken = parse(&row.line).map_err(|e| e.to_string()).and_then(|crontab| {
                let mut items = crontab.into_items();
                match (items.pop(), items.is_empty()) {
                    (Some(item), true) if item.identifier() == row.identifier => Ok(item),
                    (Some(item), true) => Err(format!("its line's identifier is '{}'", item.identifier())),
                    _ => Err("expected exactly one cron or '@every' line".to_owned()),
                }
            });
            taken.map_err(|error| unreadable.push(Unreadable { row: row.clone(), error })).ok()
        })
        .collect();
    (items, unreadable)
}

/// A stored schedule that a worker cannot take (reported once per row and text, as
/// [`Event::ScheduleUnreadable`](crate::protocol::Event::ScheduleUnreadable)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The row.
    pub row: ScheduleRow,
    /// Why it cannot be taken.
    pub error: String,
}
