//! What a utility learnt of a table of Formica's records schema: whether this role can use
//! it (the records migrated that far, the rights granted). Asked on the connection adding
//! the first time it matters, then known while usable; while not, asked again every
//! [`RECHECK`] times (the records may be migrated or granted meanwhile). Shared by clones.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;

/// Uses between two asks for a table that was not usable.
const RECHECK: u32 = 100;
const PRESENT: u32 = u32::MAX;

/// A table's use as last learnt: `0` never asked, [`PRESENT`], else uses since it was not.
#[derive(Debug, Clone, Default)]
pub(crate) struct TableKnown(Arc<AtomicU32>);

/// Whether this use may count on the table.
pub(crate) enum Usable {
    /// It may.
    Yes,
    /// It may not: do without.
    No,
    /// Ask the database first, then [`TableKnown::learn`] the answer.
    Ask,
}

impl TableKnown {
    /// Whether this use may count on the table.
    pub(crate) fn usable(&self) -> Usable {
        match self.0.load(Relaxed) {
            PRESENT => Usable::Yes,
            0 => Usable::Ask,
            missing => {
                self.0.store((missing + 1) % RECHECK, Relaxed);
                Usable::No
            }
        }
    }

    /// The database's answer to an [`Usable::Ask`].
    pub(crate) fn learn(&self, present: bool) {
        self.0.store(if present { PRESENT } else { 1 }, Relaxed);
    }
}

/// What a utility learnt of the records tables its adds use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecordsKnown {
    /// `job_traces`, to record the trace context of jobs added in a span (inserts, updates).
    pub(crate) traces: TableKnown,
    /// `bounds`, to keep them (select).
    pub(crate) bounds: TableKnown,
}

impl PartialEq for TableKnown {
    /// What a utility learnt of the database is not part of what it is: always equal.
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for TableKnown {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usable_table_is_known_and_a_missing_one_asked_again_every_hundred_uses() {
        let table = TableKnown::default();
        assert!(matches!(table.usable(), Usable::Ask));
        table.learn(false);
        let mut asks = 0;
        for _ in 0..RECHECK * 2 {
            if matches!(table.usable(), Usable::Ask) {
                asks += 1;
                table.learn(false);
            }
        }
        assert_eq!(asks, 2, "asked again once every {RECHECK} uses");
        table.learn(true);
        assert!(matches!(table.usable(), Usable::Yes) && matches!(table.usable(), Usable::Yes));
    }
}
