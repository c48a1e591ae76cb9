//! What a test expects to have been enqueued, and the assertions that check it: against
//! the jobs a [`TestJob`](super::TestJob)'s handler added, or against a real database.

use crate::error::Error;
use crate::utils::{JobFilter, WorkerUtils};
use chrono::{DateTime, SecondsFormat, Utc};
use formica_core::job::{Job, Task};
use serde::Serialize;
use serde_json::Value;
use std::fmt;

/// The jobs a test looks for: of a task, with a payload containing some fields, in a queue,
/// with a key, a priority, due within a window. What is not said matches anything.
///
/// ```
/// use formica::testing::Expected;
///
/// let reminder = Expected::task("send_reminder")
///     .payload(serde_json::json!({ "to": "ada@example.com" }))
///     .queue("mail")
///     .priority(5);
/// assert_eq!(
///     reminder.to_string(),
///     r#"task "send_reminder", payload containing {"to":"ada@example.com"}, queue "mail", priority 5"#
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expected {
    task: Option<String>,
    payload: Option<Value>,
    queue: Option<String>,
    key: Option<String>,
    priority: Option<i16>,
    run_at: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

impl Expected {
    /// Any job.
    pub fn any() -> Self {
        Expected::default()
    }
    /// Jobs of the task named `identifier`.
    pub fn task(identifier: impl Into<String>) -> Self {
        Expected { task: Some(identifier.into()), ..Expected::default() }
    }
    /// Jobs of task `T`.
    pub fn of<T: Task>() -> Self {
        Expected::task(T::IDENTIFIER)
    }
    /// Whose payload contains `subset`, as PostgreSQL's `@>` has it: an object contains
    /// another when it has each of its fields with a value containing that field's value,
    /// an array when each element of the other is contained by one of its own, and a
    /// number, string, boolean or null is only equal to itself. A typed payload given whole
    /// must match field for field.
    ///
    /// # Panics
    ///
    /// If `subset` cannot be turned into JSON (a map with non-string keys).
    pub fn payload(mut self, subset: impl Serialize) -> Self {
        let subset =
            serde_json::to_value(subset).unwrap_or_else(|e| panic!("an expected payload as JSON: {e}"));
        self.payload = Some(subset);
        self
    }
    /// In the queue named `name`.
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        self.queue = Some(name.into());
        self
    }
    /// Holding the job key `key`.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
    /// Of priority `priority`.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }
    /// Due from `earliest` to `latest`, both included.
    pub fn run_at_between(mut self, earliest: DateTime<Utc>, latest: DateTime<Utc>) -> Self {
        self.run_at = Some((earliest, latest));
        self
    }

    /// Whether `job` is one of these.
    pub fn matches(&self, job: &Job) -> bool {
        let is = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
        self.task.as_ref().is_none_or(|task| *task == job.task_identifier)
            && self.payload.as_ref().is_none_or(|subset| contains(&job.payload, subset))
            && is(&self.queue, &job.queue_name)
            && is(&self.key, &job.key)
            && self.priority.is_none_or(|priority| priority == job.priority)
            && self.run_at.is_none_or(|(earliest, latest)| (earliest..=latest).contains(&job.run_at))
    }
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(task) = &self.task {
            parts.push(format!("task {task:?}"));
        }
        if let Some(payload) = &self.payload {
            parts.push(format!("payload containing {payload}"));
        }
        if let Some(queue) = &self.queue {
            parts.push(format!("queue {queue:?}"));
        }
        if let Some(key) = &self.key {
            parts.push(format!("key {key:?}"));
        }
        if let Some(priority) = self.priority {
            parts.push(format!("priority {priority}"));
        }
        if let Some((earliest, latest)) = self.run_at {
            parts.push(format!("run_at from {} to {}", timestamp(earliest), timestamp(latest)));
        }
        match parts.is_empty() {
            true => f.write_str("any job"),
            false => f.write_str(&parts.join(", ")),
        }
    }
}

/// Whether the JSON `whole` contains `part` (PostgreSQL's `jsonb @> jsonb`, numbers compared
/// by value, without its special case of a top-level array containing a scalar).
pub fn contains(whole: &Value, part: &Value) -> bool {
    match (whole, part) {
        (Value::Object(whole), Value::Object(part)) => {
            part.iter().all(|(field, value)| whole.get(field).is_some_and(|have| contains(have, value)))
        }
        (Value::Array(whole), Value::Array(part)) => {
            part.iter().all(|value| whole.iter().any(|have| contains(have, value)))
        }
        (Value::Number(have), Value::Number(want)) => have == want || have.as_f64() == want.as_f64(),
        (have, want) => have == want,
    }
}

/// The jobs of `jobs` that `expected` matches, or a panic saying what `jobs` held instead.
/// `place` says where the jobs were looked for, for the message.
pub(crate) fn assert_found<'a>(expected: &Expected, jobs: &'a [Job], place: &str) -> Vec<&'a Job> {
    assert_found_in(expected, jobs, |job| job, place)
}

/// The items of `items` whose job (`job` of each) `expected` matches, or a panic saying
/// what `items` held instead, as [`assert_found`].
pub(crate) fn assert_found_in<'a, T>(
    expected: &Expected,
    items: &'a [T],
    job: impl Fn(&T) -> &Job,
    place: &str,
) -> Vec<&'a T> {
    let found: Vec<&T> = items.iter().filter(|item| expected.matches(job(item))).collect();
    if found.is_empty() {
        panic!("no job matching {expected} was {place}; {}", listing("instead", items.iter().map(job)));
    }
    found
}

/// A panic naming the jobs of `jobs` that `expected` matches, if there are any.
pub(crate) fn refute_found(expected: &Expected, jobs: &[Job], place: &str) {
    let found: Vec<&Job> = jobs.iter().filter(|job| expected.matches(job)).collect();
    if !found.is_empty() {
        panic!("a job matching {expected} was {place}: {}", listing("found", found.into_iter()));
    }
}

/// "found 2 jobs:" and a line for each, or "found none".
fn listing<'a>(what: &str, jobs: impl ExactSizeIterator<Item = &'a Job>) -> String {
    match jobs.len() {
        0 => format!("{what}: none"),
        n => {
            let lines: Vec<String> = jobs.map(|job| format!("\n  - {}", describe(job))).collect();
            format!("{what} ({n}):{}", lines.concat())
        }
    }
}

/// One job as the messages show it: what [`Expected`] can match.
pub fn describe(job: &Job) -> String {
    let or_none = |value: &Option<String>| value.as_ref().map_or("none".to_owned(), |v| format!("{v:?}"));
    format!(
        "job {}: task {:?}, payload {}, queue {}, key {}, priority {}, run_at {}",
        job.id,
        job.task_identifier,
        job.payload,
        or_none(&job.queue_name),
        or_none(&job.key),
        job.priority,
        timestamp(job.run_at)
    )
}

fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Every job stored in `utils`'s schema (waiting, running or failed; completed jobs are
/// deleted) that `expected` matches, oldest first.
pub async fn enqueued(utils: &WorkerUtils, expected: &Expected) -> Result<Vec<Job>, Error> {
    Ok(stored(utils).await?.into_iter().filter(|job| expected.matches(job)).collect())
}

/// The jobs stored in `utils`'s schema that `expected` matches, oldest first.
///
/// # Panics
///
/// If there are none, listing every job stored instead (task, payload, queue, key,
/// priority, run_at), or if the jobs cannot be read.
pub async fn assert_enqueued(utils: &WorkerUtils, expected: &Expected) -> Vec<Job> {
    let jobs = stored_or_panic(utils).await;
    let place = format!("enqueued in schema {:?}", utils.schema());
    assert_found(expected, &jobs, &place).into_iter().cloned().collect()
}

/// # Panics
///
/// If a job stored in `utils`'s schema matches `expected` (listing those that do), or if the
/// jobs cannot be read.
pub async fn refute_enqueued(utils: &WorkerUtils, expected: &Expected) {
    let jobs = stored_or_panic(utils).await;
    refute_found(expected, &jobs, &format!("enqueued in schema {:?}", utils.schema()));
}

/// Every job of the schema that can be read.
async fn stored(utils: &WorkerUtils) -> Result<Vec<Job>, Error> {
    Ok(utils.list_jobs(&JobFilter { limit: i64::MAX, ..JobFilter::default() }).await?.jobs)
}

async fn stored_or_panic(utils: &WorkerUtils) -> Vec<Job> {
    stored(utils).await.unwrap_or_else(|e| panic!("reading the jobs of schema {:?}: {e}", utils.schema()))
}

#[cfg(test)]
mod tests {
    use super::contains;
    use serde_json::json;

    #[test]
    fn containment_is_postgresql_s() {
        let whole = json!({ "to": "ada", "tags": ["a", "b", { "n": 1 }], "meta": { "lang": "en", "n": 2 } });
        assert!(contains(&whole, &json!({})));
        assert!(contains(&whole, &json!({ "to": "ada" })));
        assert!(contains(&whole, &json!({ "meta": { "lang": "en" } })));
        assert!(contains(&whole, &json!({ "tags": ["b", "a"] })), "order does not matter in arrays");
        assert!(contains(&whole, &json!({ "tags": [{ "n": 1.0 }] })), "numbers compare by value");
        assert!(!contains(&whole, &json!({ "to": "bob" })));
        assert!(!contains(&whole, &json!({ "meta": { "lang": "en", "x": 1 } })));
        assert!(!contains(&whole, &json!({ "tags": ["c"] })));
        assert!(!contains(&whole, &json!({ "to": null })), "a missing field is not null");
        assert!(!contains(&json!([1, 2]), &json!(1)), "no top-level array-contains-scalar case");
    }
}
