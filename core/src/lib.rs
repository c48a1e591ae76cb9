//! formica-core: the pure logic of Formica, a PostgreSQL job queue that speaks Graphile
//! Worker's schema.
//!
//! Nothing here does I/O, awaits, reads a clock or draws randomness: every decision is a
//! function of its inputs, so the same inputs give the same outputs on any runtime and in
//! any test. The async driver (`formica`) feeds facts in and carries effects out.
//!
//! - [`job`]: the job row, the job spec and its validation (Graphile's error codes).
//! - [`backoff`], [`job_key`], [`notify`]: small pure decisions.
//! - [`text`]: text from tasks made storable in PostgreSQL, escapes visible.
//! - [`cron`]: the crontab format, matching and next-run computation.
//! - [`time`], [`rng`]: the core's one name for a point in time, the clock a driver feeds,
//!   and the one seeded generator.
//! - [`protocol`]: the driver contract (inputs, effects, statements, results) and its run loop.
//! - [`worker`]: the worker state machine (`handle(input, now)`, `poll_effect()`, `poll_timeout()`).
//! - [`sim`]: a deterministic world (clock, in-memory database, tasks) to test scheduling without a database.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backoff;
pub mod cron;
pub mod job;
pub mod job_key;
pub mod notify;
pub mod protocol;
pub mod rng;
pub mod sim;
pub mod text;
pub mod time;
pub mod worker;
