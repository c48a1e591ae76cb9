//! A job's logs (docs/guide/job-logs.md): the `tracing` events inside a job's span, at the
//! level a worker picks, kept with the job in Formica's records schema, bounded per attempt,
//! written in batches by the worker's [`Coalescer`] (never a statement a line).
//!
//! The application adds [`JobLogLayer`] to its subscriber; a worker with
//! [`WorkerOptions::job_logs`](crate::WorkerOptions::job_logs) gives each job's span a token
//! (`formica_logs`) naming the job's [`JobLog`], which the layer finds when the span opens
//! and keeps in the span's extensions, so an event reaches its job's log by walking its
//! spans. Without the option, no span has a token and the layer keeps nothing.

use super::{Batch, Coalescer};
use crate::error::Error;
use crate::runtime::Runtime;
use crate::utils::WorkerUtils;
use chrono::{DateTime, Utc};
use formica_sql::reports::{READ_LOGS, WRITE_LOGS};
use futures::future::BoxFuture;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_postgres::types::{ToSql, Type};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// The shortest time between two writes of a worker's log lines.
pub const JOB_LOGS_EVERY: Duration = Duration::from_millis(250);

/// Lines a worker holds unwritten at most (its database down): past it, lines are dropped
/// and counted in a warning.
const MAX_PENDING_LINES: usize = 100_000;

/// Which events a worker keeps with its jobs, and how many: with
/// [`WorkerOptions::job_logs`](crate::WorkerOptions::job_logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLogs {
    /// The most verbose level kept (`Level::INFO` keeps info, warn and error events).
    pub level: Level,
    /// Lines kept per attempt at most (default 500); past it, the attempt's last line says
    /// how many more were not kept.
    pub max_lines: u32,
    /// Bytes kept of a line at most (default 1024), cut at a character's boundary.
    pub max_line_bytes: usize,
}

impl JobLogs {
    /// Keep events at `level` and above, with the default bounds.
    pub fn at(level: Level) -> Self {
        JobLogs { level, max_lines: 500, max_line_bytes: 1024 }
    }
}

/// One line of a job's log, as kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobLogLine {
    /// The attempt that logged it.
    pub attempt: i16,
    /// Its place in the attempt's log, from 0.
    pub line: i32,
    /// When (the worker's clock).
    pub at: DateTime<Utc>,
    /// `ERROR`, `WARN`, `INFO`, `DEBUG` or `TRACE`.
    pub level: String,
    /// The event's message, then its other fields as `name=value`.
    pub message: String,
}

impl std::fmt::Display for JobLogLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = self.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        write!(f, "{at} {:>5} [attempt {}] {}", self.level, self.attempt, self.message)
    }
}

/// The lines of a worker's jobs logged since its last write.
#[derive(Default)]
pub(crate) struct Lines {
    lines: Vec<(i64, JobLogLine)>,
    dropped: u64,
}

impl Batch for Lines {
    const WHAT: &'static str = "logs";
    fn is_empty(&self) -> bool {
        self.lines.is_empty() && self.dropped == 0
    }
    fn write(self, utils: WorkerUtils) -> BoxFuture<'static, Result<(), Error>> {
        Box::pin(async move {
            if self.dropped > 0 {
                tracing::warn!(
                    dropped = self.dropped,
                    "job log lines not kept: the worker could not write them"
                );
            }
            let n = self.lines.len();
            let (mut ids, mut attempts, mut places) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            let (mut ats, mut levels, mut messages) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            for (id, line) in self.lines {
                ids.push(id);
                attempts.push(line.attempt);
                places.push(line.line);
                ats.push(line.at);
                levels.push(line.level);
                messages.push(line.message);
            }
            let sql = formica_sql::render(WRITE_LOGS, utils.schema());
            let params: [(&(dyn ToSql + Sync), Type); 6] = [
                (&ids, Type::INT8_ARRAY),
                (&attempts, Type::INT2_ARRAY),
                (&places, Type::INT4_ARRAY),
                (&ats, Type::TIMESTAMPTZ_ARRAY),
                (&levels, Type::TEXT_ARRAY),
                (&messages, Type::TEXT_ARRAY),
            ];
            utils.pool().get().await?.query_typed(&sql, &params).await?;
            Ok(())
        })
    }
}

/// A worker's job logs: what it keeps, and its lines on their way to the database.
pub(crate) struct LogWriter {
    options: JobLogs,
    runtime: Arc<dyn Runtime>,
    lines: Arc<Coalescer<Lines>>,
}

impl LogWriter {
    /// The writer of a worker keeping `options`, none for one that keeps no logs.
    pub(crate) fn new(utils: &WorkerUtils, options: Option<&JobLogs>) -> Option<Arc<Self>> {
        let options = options?.clone();
        let runtime = utils.pool().runtime().clone();
        Some(Arc::new(LogWriter { options, runtime, lines: Coalescer::new(utils.clone(), JOB_LOGS_EVERY) }))
    }

    /// Write the lines gathered now (the worker stops).
    pub(crate) async fn flush(&self) {
        self.lines.flush().await;
    }

    /// The log of one attempt of job `job_id`, and the token its span carries as
    /// `formica_logs`: the layer takes the log when the span opens (and forgets the token).
    pub(crate) fn open(self: &Arc<Self>, job_id: i64, attempt: i16) -> (Arc<JobLog>, u64) {
        let log = Arc::new(JobLog {
            writer: self.clone(),
            job_id,
            attempt,
            kept: AtomicU32::new(0),
            over: AtomicU32::new(0),
        });
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        OPENING.lock().unwrap_or_else(|e| e.into_inner()).insert(token, log.clone());
        (log, token)
    }
}

/// The logs whose spans are being made, by token (each taken at once by the layer, or by
/// [`JobLog::close`] when no layer took it).
static OPENING: Mutex<BTreeMap<u64, Arc<JobLog>>> = Mutex::new(BTreeMap::new());
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// One attempt's log: how many lines it kept, and how many it did not.
pub(crate) struct JobLog {
    writer: Arc<LogWriter>,
    job_id: i64,
    attempt: i16,
    kept: AtomicU32,
    over: AtomicU32,
}

impl JobLog {
    fn keep(&self, event: &Event<'_>) {
        let options = &self.writer.options;
        if *event.metadata().level() > options.level {
            return;
        }
        let line = self.kept.fetch_add(1, Ordering::Relaxed);
        if line >= options.max_lines {
            self.over.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut text = Text::default();
        event.record(&mut text);
        self.push(line, event.metadata().level().as_str(), cut(text.message, options.max_line_bytes));
    }

    fn push(&self, line: u32, level: &str, message: String) {
        let line = JobLogLine {
            attempt: self.attempt,
            line: i32::try_from(line).unwrap_or(i32::MAX),
            at: self.writer.runtime.now(),
            level: level.to_owned(),
            message,
        };
        self.writer.lines.add(|pending| match pending.lines.len() < MAX_PENDING_LINES {
            true => pending.lines.push((self.job_id, line)),
            false => pending.dropped += 1,
        });
    }

    /// The attempt ended: forget its token if no layer took it, and say how many lines were
    /// over the bound.
    pub(crate) fn close(&self, token: u64) {
        OPENING.lock().unwrap_or_else(|e| e.into_inner()).remove(&token);
        let over = self.over.load(Ordering::Relaxed);
        if over > 0 {
            let max = self.writer.options.max_lines;
            self.push(max, "WARN", format!("{over} more lines not kept (at most {max} an attempt)"));
        }
    }
}

/// `text` cut to at most `max` bytes, at a character's boundary.
fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// An event's message, then its other fields as ` name=value`.
#[derive(Default)]
struct Text {
    message: String,
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = match (field.name(), self.message.is_empty()) {
            ("message", true) => write!(self.message, "{value:?}"),
            ("message", false) => write!(self.message, " {value:?}"),
            (name, _) => write!(self.message, " {name}={value:?}"),
        };
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.record_debug(field, &format_args!("{value}")),
            name => {
                let _ = write!(self.message, " {name}={value}");
            }
        }
    }
}

/// The token a job's span carries, read when the span opens.
struct Token(Option<u64>);

impl Visit for Token {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "formica_logs" {
            self.0 = Some(value);
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

/// The `tracing` layer that hands the events inside a job's span to its worker, for the
/// workers with [`WorkerOptions::job_logs`](crate::WorkerOptions::job_logs). Add it to the
/// application's subscriber:
///
/// ```ignore
/// use tracing_subscriber::prelude::*;
/// tracing_subscriber::registry().with(tracing_subscriber::fmt::layer()).with(formica::JobLogLayer).init();
/// ```
///
/// A global filter of the subscriber (an `EnvFilter` added as a layer) filters before it:
/// an event it drops is not kept either.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobLogLayer;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for JobLogLayer {
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attributes.metadata().fields().field("formica_logs").is_none() {
            return;
        }
        let mut token = Token(None);
        attributes.record(&mut token);
        let Some(token) = token.0 else { return };
        let Some(log) = OPENING.lock().unwrap_or_else(|e| e.into_inner()).remove(&token) else { return };
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(log);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(scope) = ctx.event_scope(event) else { return };
        for span in scope {
            if let Some(log) = span.extensions().get::<Arc<JobLog>>() {
                log.keep(event);
                return;
            }
        }
    }
}

impl WorkerUtils {
    /// The lines kept of job `id`'s runs, in order (see
    /// [`WorkerOptions::job_logs`](crate::WorkerOptions::job_logs)); none for a job run
    /// without them, or pruned with its history.
    pub async fn job_logs(&self, id: i64) -> Result<Vec<JobLogLine>, Error> {
        let sql = formica_sql::render(READ_LOGS, self.schema());
        let rows = self.pool().get().await?.query_typed(&sql, &[(&id, Type::INT8)]).await?;
        rows.iter()
            .map(|row| {
                Ok(JobLogLine {
                    attempt: row.try_get(0)?,
                    line: row.try_get(1)?,
                    at: row.try_get(2)?,
                    level: row.try_get(3)?,
                    message: row.try_get(4)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn a_long_line_is_cut_at_a_character_s_boundary() {
        assert_eq!(cut("abcdef".into(), 4), "abcd");
        assert_eq!(cut("aé".into(), 2), "a", "é takes bytes 1 and 2");
        assert_eq!(cut("short".into(), 10), "short");
    }
}
