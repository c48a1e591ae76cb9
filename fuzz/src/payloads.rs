//! Targets for what arrives from outside as text: `jobs:insert` notification payloads and
//! job specs given as JSON (as the CLI's `add` and `add_jobs` callers give them).

use formica_core::job::{JobSpec, JobSpecError, MAX_IDENTIFIER_LEN};
use formica_core::notify::parse_insert_count;

/// The notification parser is total: it never panics, and any payload that is not an
/// object with an integer `count` counts as one job.
pub fn notify(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let count = parse_insert_count(&text);
    let announced = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("count").and_then(serde_json::Value::as_i64));
    assert_eq!(count, announced.unwrap_or(1), "payload {text:?}");
}

/// A job spec decoded from JSON either fails to decode or validates without panicking, and
/// validation agrees with the schema's limits; a spec that decodes prints back to the same.
pub fn job_spec(data: &[u8]) {
    let Ok(spec) = serde_json::from_slice::<JobSpec>(data) else { return };
    let again: JobSpec = serde_json::from_str(&serde_json::to_string(&spec).expect("a spec serializes"))
        .expect("a serialized spec decodes");
    assert_eq!(again, spec);
    // Use the queue name as the identifier too, so identifier limits get exercised.
    let identifier = spec.queue_name.clone().unwrap_or_else(|| "task".to_owned());
    let identifier_len = identifier.chars().count();
    match spec.validate(&identifier) {
        Ok(()) => {
            assert!((1..=MAX_IDENTIFIER_LEN).contains(&identifier_len));
            assert!(spec.max_attempts.is_none_or(|n| n >= 1));
            assert!(spec.job_key.as_ref().is_none_or(|k| !k.is_empty()));
        }
        Err(JobSpecError::Identifier(n)) => assert_eq!(n, identifier_len),
        Err(JobSpecError::MaxAttempts(n)) => assert!(n < 1),
        Err(JobSpecError::JobKey(n)) => assert!(n == 0 || n > formica_core::job::MAX_JOB_KEY_LEN),
        Err(other) => assert!(!other.code().is_empty()),
    }
}
