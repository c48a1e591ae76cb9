//! Unique jobs: a job key derived from the task, chosen payload fields and/or a time bucket,
//! so that adding "the same job" again finds the one already there.
//!
//! It is a job key like any other (`JobSpec::job_key`), so the database's unique index on
//! keys makes it race-free, every key mode applies as documented for keys, and
//! graphile-worker's workers and `add_job` honour it. [`key`] is a pure function: the same
//! task, selected values and bucket give the same key in every process and version (the
//! key's text is part of the stored data: it must not change across releases).
//!
//! The key is `unique:<task>:<digest>` (and `@<bucket start>` with a period), where the
//! digest is the first 32 hex digits (128 bits) of the SHA-256 of the canonical JSON
//! (object keys sorted, no spaces) of `[task, selected values]`. Values are compared as
//! JSON: `1` and `1.0` differ, and a field that is absent differs from one that is `null`.

use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// Which jobs count as the same: see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unique {
    /// The payload fields that make two jobs the same: top-level names, or JSON pointers
    /// (`/customer/id`). `None`: the whole payload; `Some` of none: the payload does not
    /// matter (one job per task, or per task and bucket).
    pub fields: Option<Vec<String>>,
    /// The length of the time bucket: jobs due in the same bucket (by `run_at`, or the time
    /// of the add if none) are the same, jobs of the next bucket are not. Buckets start at
    /// the Unix epoch (an hour's at each full hour, UTC). `None`: no bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<std::time::Duration>,
    /// Not again within this long, even if the job has finished: the add claims the key in
    /// Formica's schema for this long, and an add while the claim holds adds nothing (see
    /// the unique jobs guide for its cost). `None`: only while the job exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<std::time::Duration>,
}

impl Unique {
    /// Unique by the whole payload.
    pub fn by_payload() -> Self {
        Unique { fields: None, period: None, within: None }
    }

    /// Unique by these payload fields (top-level names or JSON pointers).
    pub fn by_fields<I, S>(fields: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Unique { fields: Some(fields.into_iter().map(Into::into).collect()), period: None, within: None }
    }

    /// One job of the task per bucket of `period`, whatever its payload.
    pub fn per_period(period: std::time::Duration) -> Self {
        Unique { fields: Some(Vec::new()), period: Some(period), within: None }
    }

    /// This, and not again within `period` of an add, even once the job has finished.
    pub fn within(mut self, period: std::time::Duration) -> Self {
        self.within = Some(period);
        self
    }

    /// This, and unique per bucket of `period` too.
    pub fn per(mut self, period: std::time::Duration) -> Self {
        self.period = Some(period);
        self
    }
}

/// The job key of a job of `task` with `payload`, due at `at`, unique by `unique`.
pub fn key(task: &str, payload: &Value, unique: &Unique, at: Timestamp) -> Result<String, BadPeriod> {
    let selected = match &unique.fields {
        None => payload.clone(),
        Some(fields) => {
            let mut map = serde_json::Map::new();
            for field in fields {
                let value = match field.starts_with('/') {
                    true => payload.pointer(field),
                    false => payload.get(field),
                };
                if let Some(value) = value {
                    map.insert(field.clone(), value.clone());
                }
            }
            Value::Object(map)
        }
    };
    let mut text = String::new();
    canonical(&Value::Array(vec![Value::String(task.to_owned()), selected]), &mut text);
    let digest = Sha256::digest(text.as_bytes());
    let mut key = format!("unique:{task}:");
    for byte in &digest[..16] {
        let _ = write!(key, "{byte:02x}");
    }
    if let Some(period) = unique.period {
        let _ = write!(key, "@{}", bucket(at, period)?.format("%Y-%m-%dT%H:%M:%S%.fZ"));
    }
    Ok(key)
}

/// A period of zero, or too long to count in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadPeriod;

/// The start of the bucket of `period` that holds `at`.
pub fn bucket(at: Timestamp, period: std::time::Duration) -> Result<Timestamp, BadPeriod> {
    let period_us = i64::try_from(period.as_micros()).unwrap_or(i64::MAX);
    if period_us <= 0 {
        return Err(BadPeriod);
    }
    let start = at.timestamp_micros().div_euclid(period_us) * period_us;
    Timestamp::from_timestamp_micros(start).ok_or(BadPeriod)
}

/// `value` as JSON text with object keys sorted, whatever order the map keeps.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        scalar @ (Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_)) => {
            out.push_str(&scalar.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use std::time::Duration;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_timestamp(s, 0).unwrap_or_default()
    }

    #[test]
    fn the_key_is_stable_text() {
        // Part of the stored data: a change here splits "the same job" across a release.
        // The digest: `printf %s '["report",{"customer":42}]' | sha256sum | cut -c1-32`.
        let by = Unique::by_fields(["customer"]).per(Duration::from_secs(3600));
        let key = key("report", &json!({"customer": 42, "x": 1}), &by, t(1_700_000_123)).unwrap();
        assert_eq!(key, "unique:report:7479188bd343f0f168a29e1593d599bf@2023-11-14T22:00:00Z");
    }

    #[test]
    fn fields_pointers_absence_and_periods() {
        let at = t(1_000_000);
        let k = |payload: Value, by: &Unique| key("t", &payload, by, at).unwrap();
        let by = Unique::by_fields(["a", "/b/c"]);
        assert_eq!(
            k(json!({"a": 1, "b": {"c": 2}, "z": 3}), &by),
            k(json!({"b": {"c": 2, "d": 0}, "a": 1}), &by)
        );
        assert_ne!(k(json!({"a": 1, "b": {"c": 2}}), &by), k(json!({"a": 1, "b": {"c": 3}}), &by));
        assert_ne!(k(json!({"a": null}), &by), k(json!({}), &by), "absent is not null");
        assert_ne!(k(json!({"a": 1}), &by), k(json!({"a": 1.0}), &by), "compared as JSON");
        assert_ne!(
            key("t", &json!({}), &by, at).unwrap(),
            key("u", &json!({}), &by, at).unwrap(),
            "per task"
        );
        let none = Unique::per_period(Duration::from_secs(60));
        assert_eq!(k(json!({"a": 1}), &none), k(json!({"a": 2}), &none), "payload ignored");
        assert_eq!(
            key("t", &json!(1), &Unique::per(Unique::by_payload(), Duration::ZERO), at),
            Err(BadPeriod)
        );
        assert!(k(json!({"a": 1}), &by).len() <= 512, "within a job key's length");
    }

    fn payload() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-z]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-c]", inner, 0..4).prop_map(|m| json!(m)),
            ]
        })
    }

    proptest! {
        /// The same selected values in the same bucket give the same key; any change to a
        /// selected value, or another bucket, gives another.
        #[test]
        fn the_key_depends_on_the_selected_values_and_the_bucket_only(
            a in payload(), b in payload(), other in payload(),
            at in 0_i64..4_000_000_000, period in 1_u64..100_000,
        ) {
            let by = Unique::by_fields(["a", "b"]).per(Duration::from_secs(period));
            let base = json!({"a": a, "b": b, "other": other});
            let k = |payload: &Value, at: i64| key("t", payload, &by, t(at)).unwrap();
            let mut changed_other = base.clone();
            changed_other["other"] = json!("something else");
            prop_assert_eq!(k(&base, at), k(&changed_other, at));
            let start = bucket(t(at), Duration::from_secs(period)).unwrap();
            prop_assert!(start <= t(at) && t(at) < start + chrono::Duration::seconds(period as i64));
            prop_assert_eq!(k(&base, at), k(&base, start.timestamp()));
            prop_assert_ne!(k(&base, at), k(&base, start.timestamp() + period as i64), "next bucket");
            let mut changed = base.clone();
            changed["a"] = json!([base["a"].clone()]);
            prop_assert_ne!(k(&base, at), k(&changed, at));
        }
    }
}
