//! What adding a job with a `job_key` does to the job that already holds the key: the
//! executable specification of the upsert in the `add_job` and `add_jobs` SQL functions.
//!
//! The database decides this atomically (a decision made here between a read and a write
//! would race across workers), so nothing on the worker path calls [`decide`]: it is the
//! statement of the rules, table-tested below, used by [`crate::sim`]'s in-memory database
//! and by tests that compare that database with PostgreSQL. The rules, as the SQL applies
//! them:
//!
//! | job holding the key              | `replace`         | `preserve_run_at`          | `unsafe_dedupe` |
//! |----------------------------------|-------------------|----------------------------|-----------------|
//! | none                             | insert            | insert                     | insert          |
//! | waiting, never attempted         | update            | update, keep `run_at`      | keep            |
//! | waiting a retry (0 < attempts)   | update            | update (new `run_at`)      | keep            |
//! | locked, or out of attempts       | detach and insert | detach and insert          | keep            |
//!
//! - *update*: every column takes the new value (task, queue, payload, `run_at`, priority,
//!   `max_attempts`, flags), `attempts` goes back to 0, `last_error` is cleared and the
//!   revision is bumped. When both the stored and the new payload are JSON arrays, the new
//!   payload is their concatenation, oldest elements first (batch jobs accumulate).
//! - *detach and insert*: the old job gives up its key and its attempts are set to its
//!   `max_attempts`, so it is never retried (a running task still finishes); a new job
//!   takes the key.
//! - `replace_and_abort` decides as `replace`. Beside it, when the holder is locked, the
//!   SQL (`hold_for_replace`, records step 25) asks the holder's worker to abort the run
//!   (a cancel request) and puts the new job in the named queue the run holds, so it starts
//!   only once the run is written or its worker's lease is recovered.
//! - *keep*: nothing changes but the revision (and `updated_at`), and the existing job is
//!   returned; no notification is sent.

use crate::job::JobKeyMode;
use chrono::{DateTime, Utc};
use serde_json::Value;

/// The job that holds the key, as far as the decision needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExistingJob {
    /// Its payload.
    pub payload: Value,
    /// When it is due.
    pub run_at: DateTime<Utc>,
    /// Attempts made so far.
    pub attempts: i16,
    /// Attempts allowed.
    pub max_attempts: i16,
    /// Whether a worker holds it (`locked_at` is set, however old the lock).
    pub locked: bool,
    /// Times it was updated through its key.
    pub revision: i32,
}

impl ExistingJob {
    /// graphile-worker's `is_available`: not locked and attempts left.
    pub fn is_available(&self) -> bool {
        !self.locked && self.attempts < self.max_attempts
    }
}

/// The job being added with the key, as far as the decision needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NewJob<'a> {
    /// How a clash is resolved.
    pub mode: JobKeyMode,
    /// Its payload (`{}` when the caller gave none).
    pub payload: &'a Value,
    /// When it should run (the database's `now()` when the caller gave none).
    pub run_at: DateTime<Utc>,
}

/// What the upsert does.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No job holds the key: insert the new job with it (revision 0).
    Insert,
    /// The holder is locked or out of attempts: it gives up the key (`key = null`) and its
    /// attempts become its `max_attempts`; then the new job is inserted with the key.
    DetachAndInsert {
        /// The detached job's attempts from now on.
        attempts: i16,
    },
    /// Overwrite the holder in place: every column from the new job except these two, with
    /// `attempts = 0` and `last_error = null`.
    Update {
        /// The payload to store (the concatenation when both are arrays).
        payload: Value,
        /// The `run_at` to store (the old one under `preserve_run_at` if never attempted).
        run_at: DateTime<Utc>,
        /// The holder's new revision.
        revision: i32,
    },
    /// `unsafe_dedupe`: leave the holder as it is, only bumping its revision, and return it.
    Keep {
        /// The holder's new revision.
        revision: i32,
    },
}

/// What adding `new` does, given the job `existing` that holds the same key (if any).
pub fn decide(existing: Option<&ExistingJob>, new: NewJob<'_>) -> Decision {
    let Some(existing) = existing else { return Decision::Insert };
    match new.mode {
        JobKeyMode::UnsafeDedupe => Decision::Keep { revision: existing.revision.saturating_add(1) },
        JobKeyMode::Replace | JobKeyMode::PreserveRunAt | JobKeyMode::ReplaceAndAbort
            if !existing.is_available() =>
        {
            Decision::DetachAndInsert { attempts: existing.max_attempts }
        }
        JobKeyMode::Replace | JobKeyMode::PreserveRunAt | JobKeyMode::ReplaceAndAbort => {
            let keep_run_at = new.mode == JobKeyMode::PreserveRunAt && existing.attempts == 0;
            Decision::Update {
                payload: merge_payloads(&existing.payload, new.payload),
                run_at: if keep_run_at { existing.run_at } else { new.run_at },
                revision: existing.revision.saturating_add(1),
            }
        }
    }
}

/// The payload an update stores: the concatenation when both are JSON arrays (old first),
/// else the new payload.
pub fn merge_payloads(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Array(old), Value::Array(new)) => Value::Array(old.iter().chain(new).cloned().collect()),
        _ => new.clone(),
    }
}

#[cfg(test)]
#[allow(clippy::wildcard_enum_match_arm)] // Each case looks for one decision.
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000 + s, 0).unwrap_or_default()
    }

    fn existing(attempts: i16, max_attempts: i16, locked: bool) -> ExistingJob {
        ExistingJob {
            payload: json!({"old": 1}),
            run_at: t(100),
            attempts,
            max_attempts,
            locked,
            revision: 3,
        }
    }

    use JobKeyMode::{PreserveRunAt as Preserve, Replace, UnsafeDedupe};

    #[test]
    fn the_table_of_cases() {
        let new_payload = json!({"new": 2});
        let new = |mode| NewJob { mode, payload: &new_payload, run_at: t(500) };
        let update = |run_at| Decision::Update { payload: json!({"new": 2}), run_at, revision: 4 };
        let cases: Vec<(&str, Option<ExistingJob>, JobKeyMode, Decision)> = vec![
            ("none/replace", None, Replace, Decision::Insert),
            ("none/preserve", None, Preserve, Decision::Insert),
            ("none/dedupe", None, UnsafeDedupe, Decision::Insert),
            ("fresh/replace", Some(existing(0, 25, false)), Replace, update(t(500))),
            ("fresh/preserve", Some(existing(0, 25, false)), Preserve, update(t(100))),
            ("fresh/dedupe", Some(existing(0, 25, false)), UnsafeDedupe, Decision::Keep { revision: 4 }),
            ("retry/replace", Some(existing(2, 25, false)), Replace, update(t(500))),
            ("retry/preserve", Some(existing(2, 25, false)), Preserve, update(t(500))),
            ("retry/dedupe", Some(existing(2, 25, false)), UnsafeDedupe, Decision::Keep { revision: 4 }),
            (
                "locked/replace",
                Some(existing(1, 25, true)),
                Replace,
                Decision::DetachAndInsert { attempts: 25 },
            ),
            (
                "locked/preserve",
                Some(existing(1, 5, true)),
                Preserve,
                Decision::DetachAndInsert { attempts: 5 },
            ),
            ("locked/dedupe", Some(existing(1, 25, true)), UnsafeDedupe, Decision::Keep { revision: 4 }),
            // Locked before its first attempt was counted: still locked, still detached.
            (
                "locked0/preserve",
                Some(existing(0, 25, true)),
                Preserve,
                Decision::DetachAndInsert { attempts: 25 },
            ),
            (
                "failed/replace",
                Some(existing(3, 3, false)),
                Replace,
                Decision::DetachAndInsert { attempts: 3 },
            ),
            (
                "failed/preserve",
                Some(existing(3, 3, false)),
                Preserve,
                Decision::DetachAndInsert { attempts: 3 },
            ),
            ("failed/dedupe", Some(existing(3, 3, false)), UnsafeDedupe, Decision::Keep { revision: 4 }),
            // Attempts above the limit (max_attempts lowered by reschedule): set to the limit.
            ("over/replace", Some(existing(9, 4, false)), Replace, Decision::DetachAndInsert { attempts: 4 }),
            ("last-retry/replace", Some(existing(2, 3, false)), Replace, update(t(500))),
        ];
        for (name, old, mode, want) in cases {
            assert_eq!(decide(old.as_ref(), new(mode)), want, "{name}");
        }
    }

    #[test]
    fn arrays_merge_only_when_both_are_arrays_and_never_under_dedupe() {
        let mut old = existing(0, 25, false);
        old.payload = json!([1, {"a": 1}]);
        let arr = json!([2, 3]);
        let obj = json!({"o": true});
        let decision = |mode, payload: &Value| decide(Some(&old), NewJob { mode, payload, run_at: t(500) });
        for mode in [Replace, Preserve] {
            match decision(mode, &arr) {
                Decision::Update { payload, .. } => assert_eq!(payload, json!([1, {"a": 1}, 2, 3])),
                other => panic!("{other:?}"),
            }
            match decision(mode, &obj) {
                Decision::Update { payload, .. } => assert_eq!(payload, obj),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(decision(UnsafeDedupe, &arr), Decision::Keep { revision: 4 });
        old.payload = json!({"was": "object"});
        match decide(Some(&old), NewJob { mode: Replace, payload: &arr, run_at: t(1) }) {
            Decision::Update { payload, .. } => assert_eq!(payload, arr, "an array replaces an object"),
            other => panic!("{other:?}"),
        }
        assert_eq!(merge_payloads(&json!([]), &json!([])), json!([]));
        assert_eq!(merge_payloads(&json!([1]), &json!("s")), json!("s"));
        assert_eq!(merge_payloads(&Value::Null, &json!([1])), json!([1]));
    }

    #[test]
    fn availability_is_graphile_workers() {
        assert!(existing(0, 1, false).is_available());
        assert!(!existing(1, 1, false).is_available());
        assert!(!existing(0, 1, true).is_available());
    }
}
