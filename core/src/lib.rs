//! formica-core: the pure logic of Formica, a PostgreSQL job queue that speaks Graphile
//! Worker's schema. Applications run workers with `formica-tokio` or `formica-async-std`;
//! this crate alone checks job specs and crontabs, and tests an application's scheduling
//! without a database ([below](#test-your-scheduling-deterministically)).
//!
//! ```
//! use chrono::{TimeZone, Utc};
//! use formica_core::{cron, job::JobSpec};
//!
//! // A job spec meets the schema's limits before any database is asked.
//! let spec = JobSpec::builder().queue_name("mail").job_key("welcome:42").max_attempts(5).build();
//! assert!(spec.validate("send_welcome").is_ok());
//!
//! // A crontab item knows its next run: weekdays at 08:00 UTC.
//! let crontab = cron::parse("0 8 * * 1-5 send_digest ?max=3").unwrap();
//! let tuesday_9am = Utc.with_ymd_and_hms(2026, 11, 24, 9, 0, 0).unwrap();
//! let next = crontab.items()[0].next_after(tuesday_9am);
//! assert_eq!(next, Some(Utc.with_ymd_and_hms(2026, 11, 25, 8, 0, 0).unwrap()));
//! ```
//!
//! Nothing here does I/O, awaits, reads a clock or draws randomness: every decision is a
//! function of its inputs, so the same inputs give the same outputs on any runtime and in
//! any test. The async driver (`formica`) feeds facts in and carries effects out.
//!
//! - [`job`]: the job row, the job spec and its validation (Graphile's error codes).
//! - [`payload`]: a job's payload as stored, parsed only by what needs it.
//! - [`backoff`], [`batch`], [`job_key`], [`notify`]: small pure decisions.
//! - [`flow`]: what operators paused, and what that holds back.
//! - [`workflow`]: jobs that wait for other jobs, batches and their callbacks: the rules.
//! - [`text`]: text from tasks made storable in PostgreSQL, escapes visible.
//! - [`cron`]: the crontab format, matching and next-run computation.
//! - [`time`], [`rng`]: the core's one name for a point in time, the clock a driver feeds,
//!   and the one seeded generator.
//! - [`protocol`]: the driver contract (inputs, effects, statements, results) and its run loop.
//! - [`worker`]: the worker state machine (`handle(input, now)`, `poll_effect()`, `poll_timeout()`).
//! - [`sim`]: a deterministic world (clock, in-memory database, tasks) to test scheduling without a database.
//!
// The guide is one file, shown on GitHub as docs/guide/testing-your-scheduling.md and here.
#![doc = include_str!("docs/testing-your-scheduling.md")]
#![forbid(unsafe_code)]
// A new Input, Effect, Statement or Event variant must be handled where it matters, not
// swallowed by `_ =>`.
#![warn(clippy::wildcard_enum_match_arm)]
#![warn(missing_docs)]

pub mod aging;
pub mod backoff;
pub mod batch;
pub mod cron;
pub mod flow;
pub mod job;
pub mod job_key;
pub mod lease;
pub mod notify;
pub mod payload;
pub mod policy;
pub mod protocol;
pub mod rng;
pub mod sim;
pub mod text;
pub mod time;
pub mod unique;
pub mod worker;
pub mod workflow;
