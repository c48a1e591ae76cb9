//! Batch jobs: a job whose payload is a JSON array of items, run by one task that reports
//! a result per item.
//!
//! The semantics are graphile-worker's, which a shared queue relies on: when every item
//! succeeds the job completes; when some fail, the attempt fails and the job keeps only the
//! failed items as its payload, so its retry runs those alone (when all fail, that is every
//! item, in order). The decision lives here, once, so every driver and the simulation agree.
//!
//! Where Formica is stricter: a count of results that does not match the items fails the
//! attempt and keeps every item (graphile-worker takes it as a success, which would drop
//! the items nobody reported on).

use crate::protocol::TaskOutcome;
use serde_json::Value;
use std::fmt::Write;

/// What `last_error` starts with when items failed (graphile-worker's words); a line per
/// failed item follows: `payload[<index>]: <error>`, the index into the payload as it ran.
pub const BATCH_FAILURES: &str = "Batch failures:";

/// How the attempt of a batch job of `items` ends, given one result per item, in order.
pub fn outcome(items: Vec<Value>, results: Vec<Result<(), String>>) -> TaskOutcome {
    if results.len() != items.len() {
        return miscounted(results.len(), items.len());
    }
    let mut error = BATCH_FAILURES.to_owned();
    let mut failed = Vec::new();
    for (index, (item, result)) in items.into_iter().zip(results).enumerate() {
        if let Err(message) = result {
            let _ = write!(error, "\npayload[{index}]: {message}");
            failed.push(item);
        }
    }
    match failed.is_empty() {
        true => TaskOutcome::Ok,
        false => TaskOutcome::ItemsFailed { error, items: Value::Array(failed) },
    }
}

/// The attempt's outcome when a handler gave `results` results for `items` items: it fails,
/// keeping every item.
pub fn miscounted(results: usize, items: usize) -> TaskOutcome {
    TaskOutcome::Err(format!(
        "the batch handler returned {results} results for {items} items (one per item, in order): \
         the job keeps all its items"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn items() -> Vec<Value> {
        vec![json!({"id": 1}), json!({"id": 2}), json!({"id": 3})]
    }

    #[test]
    fn only_the_failed_items_are_kept_and_named() {
        let outcome = outcome(items(), vec![Ok(()), Err("no route".into()), Err("nul\0".into())]);
        assert_eq!(
            outcome,
            TaskOutcome::ItemsFailed {
                // As the items said it: the machine makes it storable when it records it.
                error: "Batch failures:\npayload[1]: no route\npayload[2]: nul\0".into(),
                items: json!([{"id": 2}, {"id": 3}]),
            }
        );
    }

    #[test]
    fn all_succeeding_completes_and_all_failing_keeps_every_item() {
        assert_eq!(outcome(items(), vec![Ok(()); 3]), TaskOutcome::Ok);
        assert_eq!(outcome(Vec::new(), Vec::new()), TaskOutcome::Ok);
        let TaskOutcome::ItemsFailed { items: kept, .. } = outcome(items(), vec![Err("x".into()); 3]) else {
            panic!("not a failure");
        };
        assert_eq!(kept, Value::Array(items()));
    }

    #[test]
    fn a_result_count_that_does_not_match_fails_keeping_every_item() {
        let TaskOutcome::Err(error) = outcome(items(), vec![Ok(())]) else { panic!("not an error") };
        assert!(error.contains("returned 1 results for 3 items"), "{error}");
    }
}
