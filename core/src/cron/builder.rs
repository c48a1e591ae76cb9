//! [`Cron`]: cron items written in Rust, checked by the same rules as crontab text so that a
//! built item equals the item its crontab line parses to.

use super::{interval, json5, parse, rules, CronItem, CronOptions, CrontabError, Tz};
use crate::job::{JobKeyMode, Task};
use chrono::Weekday;
use serde_json::{Map, Value};
use std::time::Duration;

/// A builder of one [`CronItem`]. Nothing is checked until [`Cron::build`], which gives
/// the first mistake as a [`CrontabError`] with `line` 0.
///
/// ```
/// use formica_core::cron::{parse, Cron};
/// use formica_core::job::Task;
///
/// struct SendDailyReport;
/// impl Task for SendDailyReport {
///     const IDENTIFIER: &'static str = "send_daily_report";
/// }
///
/// let item = Cron::daily_at::<SendDailyReport>(8, 0)
///     .fill(std::time::Duration::from_secs(3600))
///     .build()?;
/// let parsed = parse("0 8 * * * send_daily_report ?fill=1h")?;
/// assert_eq!(parsed.items(), [item]);
/// # Ok::<(), formica_core::cron::CrontabError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Cron {
    task: String,
    pattern: String,
    id: Option<String>,
    fill: Duration,
    max_attempts: Option<i16>,
    queue: Option<String>,
    priority: Option<i16>,
    job_key: Option<String>,
    job_key_mode: Option<JobKeyMode>,
    time_zone: Option<Tz>,
    payload: Option<Value>,
    interval: Option<Duration>,
}

impl Cron {
    /// Task `T` on a five-field pattern such as `"30 4 * * 1"`.
    pub fn new<T: Task>(pattern: impl Into<String>) -> Self {
        Self::for_task(T::IDENTIFIER, pattern)
    }

    /// The task named `task` on a five-field pattern, for tasks without a [`Task`] type.
    pub fn for_task(task: impl Into<String>, pattern: impl Into<String>) -> Self {
        Cron {
            task: task.into(),
            pattern: pattern.into(),
            id: None,
            fill: Duration::ZERO,
            max_attempts: None,
            queue: None,
            priority: None,
            job_key: None,
            job_key_mode: None,
            time_zone: None,
            payload: None,
            interval: None,
        }
    }

    /// Task `T` every `period` (`@every 30s`): at each instant whose Unix time is a
    /// multiple of the period, whole seconds from 1 s to a year (see [`super::interval`]).
    pub fn every<T: Task>(period: Duration) -> Self {
        Self::every_for_task(T::IDENTIFIER, period)
    }

    /// The task named `task` every `period`, for tasks without a [`Task`] type.
    pub fn every_for_task(task: impl Into<String>, period: Duration) -> Self {
        Cron { interval: Some(period), ..Self::for_task(task, "* * * * *") }
    }

    /// Every minute: `* * * * *`.
    pub fn every_minute<T: Task>() -> Self {
        Self::new::<T>("* * * * *")
    }

    /// Every `n` minutes from the top of each hour: `*/n * * * *` (so with an `n` that does
    /// not divide 60 the last gap of the hour is shorter).
    pub fn every_minutes<T: Task>(n: u32) -> Self {
        Self::new::<T>(format!("*/{n} * * * *"))
    }

    /// Every hour at `minute`: `minute * * * *`.
    pub fn hourly_at<T: Task>(minute: u32) -> Self {
        Self::new::<T>(format!("{minute} * * * *"))
    }

    /// Every day at `hour:minute` UTC: `minute hour * * *`.
    pub fn daily_at<T: Task>(hour: u32, minute: u32) -> Self {
        Self::new::<T>(format!("{minute} {hour} * * *"))
    }

    /// Every week on `day` at `hour:minute` UTC: `minute hour * * day`.
    pub fn weekly_at<T: Task>(day: Weekday, hour: u32, minute: u32) -> Self {
        Self::new::<T>(format!("{minute} {hour} * * {}", day.num_days_from_sunday()))
    }

    /// `?id=`: the item's identifier, when it must differ from the task identifier (a task
    /// scheduled twice). A letter or `_`, then letters, digits, `_` or `-`.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// `?fill=`: backfill runs missed over this period when a worker starts (whole
    /// seconds; a fraction is dropped).
    pub fn fill(mut self, period: Duration) -> Self {
        self.fill = Duration::from_secs(period.as_secs());
        self
    }

    /// `?max=`: attempts each job gets (at least 1).
    pub fn max_attempts(mut self, n: i16) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// `?queue=`: the named queue the jobs join (letters, digits, `_`, `-`, `:`).
    pub fn queue(mut self, name: impl Into<String>) -> Self {
        self.queue = Some(name.into());
        self
    }

    /// `?priority=`: lower runs first.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// `?jobKey=`: the job key the jobs share (1 to 512 characters).
    pub fn job_key(mut self, key: impl Into<String>) -> Self {
        self.job_key = Some(key.into());
        self
    }

    /// `?jobKeyMode=`: [`JobKeyMode::Replace`] or [`JobKeyMode::PreserveRunAt`];
    /// `UnsafeDedupe` is refused, as graphile-worker's crontab refuses it.
    pub fn job_key_mode(mut self, mode: JobKeyMode) -> Self {
        self.job_key_mode = Some(mode);
        self
    }

    /// `?tz=`: read the pattern in this zone's wall clock rather than UTC, by the
    /// daylight-saving rule of [`super::zone`] (graphile-worker's parser refuses the option).
    pub fn time_zone(mut self, zone: Tz) -> Self {
        self.time_zone = Some(zone);
        self
    }

    /// The payload merged into each job: a JSON object. Its numbers are read as JavaScript
    /// numbers, as a crontab's JSON5 payload is (`1.0` becomes `1`).
    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = Some(payload);
        self
    }

    /// The item, or the first rule it breaks.
    pub fn build(self) -> Result<CronItem, CrontabError> {
        let [minutes, hours, dates, months, dows] =
            parse::pattern(&self.pattern).map_err(|p| mistake(p.message))?;
        parse::check_task(&self.task).map_err(|p| mistake(p.message))?;
        let identifier =
            checked("id", self.id, |id| rules::check_id(id))?.unwrap_or_else(|| self.task.clone());
        let options = CronOptions {
            backfill_period: self.fill,
            max_attempts: checked("max", self.max_attempts, |n| {
                rules::check_max_attempts(Some((*n).into()))
            })?,
            queue_name: checked("queue", self.queue, |q| rules::check_queue(q))?,
            priority: self.priority,
            job_key: checked("jobKey", self.job_key, |k| rules::check_job_key(k))?,
            job_key_mode: checked("jobKeyMode", self.job_key_mode, |m| rules::check_job_key_mode(*m))?,
            time_zone: self.time_zone,
        };
        let payload = match self.payload.map(|v| json5::normalize(&v, 0)).transpose().map_err(mistake)? {
            None => Map::new(),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(mistake("the payload must be a JSON object".to_owned())),
        };
        let interval = self
            .interval
            .map(|p| interval::check_period(p).map_err(|e| mistake(format!("invalid period: {e}"))))
            .transpose()?;
        if interval.is_some() && options.time_zone.is_some() {
            return Err(mistake(interval::INTERVAL_ZONE.to_owned()));
        }
        Ok(CronItem {
            identifier,
            task: self.task,
            minutes,
            hours,
            dates,
            months,
            dows,
            options,
            payload,
            interval,
        })
    }
}

/// A builder error: no line or column.
fn mistake(message: String) -> CrontabError {
    CrontabError { line: 0, column: 0, message }
}

/// Option `key`'s `value`, if set, passed through the crontab's `rule` for it.
fn checked<T: ToString, U>(
    key: &str,
    value: Option<T>,
    rule: impl Fn(&T) -> Result<U, String>,
) -> Result<Option<U>, CrontabError> {
    value
        .map(|v| rule(&v).map_err(|expected| mistake(rules::invalid_option(key, &v.to_string(), &expected))))
        .transpose()
}

impl TryFrom<Cron> for CronItem {
    type Error = CrontabError;
    fn try_from(cron: Cron) -> Result<Self, Self::Error> {
        cron.build()
    }
}
