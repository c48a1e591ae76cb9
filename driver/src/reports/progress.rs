//! Progress (docs/guide/progress.md): how far a running job says it is, written coalesced
//! (the latest value of each job, at most every [`PROGRESS_EVERY`]), read and waited on
//! through [`WorkerUtils`].

use crate::error::Error;
use crate::task::JobContext;
use crate::utils::WorkerUtils;
use crate::waiting::Waiting;
use chrono::{DateTime, Utc};
use formica_sql::reports::{PROGRESSED, READ_PROGRESS};
use serde::Serialize;
use serde_json::Value;
use std::time::Duration;
use tokio_postgres::types::Type;

/// The shortest time between two progress writes of a worker, whatever its handlers report.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// The largest progress value, as JSON text: progress is a few numbers and words, not data.
pub const MAX_PROGRESS_VALUE: usize = 8 * 1024;

/// What a handler says of how far it is: a fraction, a small JSON value, or both.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Progress {
    /// How far, from 0 to 1.
    pub fraction: Option<f64>,
    /// Anything else (say `{"rows": 1200, "of": 5000}`), at most [`MAX_PROGRESS_VALUE`] bytes
    /// as JSON.
    pub value: Option<Value>,
}

impl Progress {
    /// `fraction` of the work done, from 0 to 1.
    pub fn fraction(fraction: f64) -> Self {
        Progress { fraction: Some(fraction), value: None }
    }
    /// A JSON value saying how far.
    pub fn value(value: Value) -> Self {
        Progress { fraction: None, value: Some(value) }
    }
    /// This progress with `value` beside its fraction.
    pub fn with_value(mut self, value: Value) -> Self {
        self.value = Some(value);
        self
    }

    /// The fraction checked and the value as JSON text, or why not.
    fn checked(&self) -> Result<(Option<f64>, Option<String>), Error> {
        if let Some(f) = self.fraction.filter(|f| !(0.0..=1.0).contains(f)) {
            return Err(Error::Options(format!("a progress fraction is from 0 to 1, not {f}")));
        }
        let value = self.value.as_ref().map(|v| v.to_string());
        if let Some(text) = value.as_ref().filter(|t| t.len() > MAX_PROGRESS_VALUE) {
            return Err(Error::Options(format!(
                "a progress value is at most {MAX_PROGRESS_VALUE} bytes as JSON, this one has {}",
                text.len()
            )));
        }
        Ok((self.fraction, value))
    }
}

/// As people read it: `42%`, the value, or both (`42% {"rows":420}`).
impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.fraction, &self.value) {
            (Some(fraction), Some(value)) => write!(f, "{}% {value}", percent(fraction)),
            (Some(fraction), None) => write!(f, "{}%", percent(fraction)),
            (None, Some(value)) => write!(f, "{value}"),
            (None, None) => f.write_str("(none)"),
        }
    }
}

/// A fraction as a percentage, to a tenth at most.
fn percent(fraction: f64) -> f64 {
    (fraction * 1000.0).round() / 10.0
}

/// A job's progress as last written.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobProgress {
    /// What the handler reported last.
    #[serde(flatten)]
    pub progress: Progress,
    /// When it was written.
    pub updated_at: DateTime<Utc>,
}

impl JobContext {
    /// Say how far this job is. Cheap to call as often as you like: the worker writes the
    /// latest value of its jobs at most every [`PROGRESS_EVERY`], and the last one in any
    /// case. Read it with [`WorkerUtils::job_progress`] or wait on it with
    /// [`WorkerUtils::wait_for_progress`]; the dashboard's job page and `formica job ID`
    /// show it. An error for a fraction outside 0..=1 or a value over
    /// [`MAX_PROGRESS_VALUE`]; in a context of the `testing` module, nothing is written.
    pub fn set_progress(&self, progress: Progress) -> Result<(), Error> {
        match &self.progress {
            Some(writer) => {
                let checked = progress.checked()?;
                writer.add(|latest| latest.set(self.job.id, checked));
                Ok(())
            }
            None => progress.checked().map(drop),
        }
    }
}

impl WorkerUtils {
    /// The progress job `id` reported last, if any (kept after the job ends, until the
    /// history's pruner removes it past every retention).
    pub async fn job_progress(&self, id: i64) -> Result<Option<JobProgress>, Error> {
        let client = self.pool().get().await?;
        read(&client, self.schema(), id).await
    }

    /// Wait until the progress of job `id` satisfies `until`, at most `timeout`, and return
    /// it: woken by each write that names the job (no polling). [`Error::TimedOut`] if it
    /// does not within `timeout`, even if the job ended.
    ///
    /// ```ignore
    /// let half = utils.wait_for_progress(job.id, |p| p.progress.fraction >= Some(0.5), timeout).await?;
    /// ```
    pub async fn wait_for_progress(
        &self,
        id: i64,
        mut until: impl FnMut(&JobProgress) -> bool,
        timeout: Duration,
    ) -> Result<JobProgress, Error> {
        let mut waiting = Waiting::listen(self, PROGRESSED, timeout).await?;
        loop {
            // Read after LISTEN: a write before it is seen here, one after it is notified.
            if let Some(progress) = read(&waiting.client, self.schema(), id).await?.filter(&mut until) {
                return Ok(progress);
            }
            if !waiting.named(id).await? {
                return Err(Error::TimedOut(format!(
                    "the progress of job {id} did not come as awaited within {timeout:?}"
                )));
            }
        }
    }
}

async fn read(client: &tokio_postgres::Client, schema: &str, id: i64) -> Result<Option<JobProgress>, Error> {
    let sql = formica_sql::render(READ_PROGRESS, schema);
    match client.query_typed(&sql, &[(&id, Type::INT8)]).await?.into_iter().next() {
        Some(row) => from_columns(row.try_get(0)?, row.try_get(1)?, row.try_get(2)?),
        None => Ok(None),
    }
}

/// A progress from its columns (fraction, value as JSON text, when written; the last null:
/// no progress), as this module and the job's read (`crate::inspect`) have them.
pub(crate) fn from_columns(
    fraction: Option<f64>,
    value: Option<String>,
    updated_at: Option<DateTime<Utc>>,
) -> Result<Option<JobProgress>, Error> {
    let Some(updated_at) = updated_at else { return Ok(None) };
    let value = match value {
        Some(text) => {
            Some(serde_json::from_str(&text).map_err(|e| Error::Row(format!("progress value: {e}")))?)
        }
        None => None,
    };
    Ok(Some(JobProgress { progress: Progress { fraction, value }, updated_at }))
}
