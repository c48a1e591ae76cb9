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
//! - [`backoff`], [`batch`], [`job_key`], [`notify`]: small pure decisions.
//! - [`text`]: text from tasks made storable in PostgreSQL, escapes visible.
//! - [`cron`]: the crontab format, matching and next-run computation.
//! - [`time`], [`rng`]: the core's one name for a point in time, the clock a driver feeds,
//!   and the one seeded generator.
//! - [`protocol`]: the driver contract (inputs, effects, statements, results) and its run loop.
//! - [`worker`]: the worker state machine (`handle(input, now)`, `poll_effect()`, `poll_timeout()`).
//! - [`sim`]: a deterministic world (clock, in-memory database, tasks) to test scheduling without a database.
//!
//! # Test your scheduling deterministically
//!
//! An application's scheduling (which jobs it adds on which event, with which queue, key,
//! `run_at` and attempts, and its crontab) can be property-tested with this crate alone:
//! [`sim::World`] runs the real worker machines against an in-memory database with
//! Formica's SQL semantics, on a simulated clock, and replays any run from its seed.
//!
//! 1. Write the decisions as data: a function from an event to the jobs to add, each a
//!    [`job::RawJob`] (task, payload, [`job::JobSpec`]). Production passes them to the
//!    driver's `add_raw_jobs`; the test passes each, the same value, to [`sim::Db::add_job`]
//!    through [`sim::World::db_mut`].
//! 2. Say how the application reacts to an event and what must always hold, as a
//!    [`sim::App`].
//! 3. Play scenarios of events, [`sim::Fault`]s and waits with [`sim::faults::run_ops`],
//!    which checks after every step; then [`sim::faults::heal`] and
//!    [`sim::faults::settle`]: once the faults stop, everything must run.
//! 4. With the `proptest` feature, `sim::strategies::ops` generates the scenarios (and
//!    `job_spec`, `crontab`, `fault` the parts); a failure shrinks to a short list of ops.
//!
//! ```
//! use formica_core::job::{JobSpec, RawJob};
//! use formica_core::sim::faults::{heal, run_ops, settle};
//! use formica_core::sim::{App, Fault, Op, World, WorldConfig};
//! use formica_core::worker::Config;
//!
//! /// The policy: a signup gets one welcome mail, whatever the retries of the event.
//! fn decide(user: &u32) -> (&'static str, serde_json::Value, JobSpec) {
//!     let spec = JobSpec::builder().job_key(format!("welcome:{user}")).build();
//!     ("welcome", serde_json::json!({ "user": user }), spec)
//! }
//!
//! struct Signups;
//! impl App<u32> for Signups {
//!     fn on_event(&mut self, world: &mut World, user: &u32) {
//!         let (task, payload, spec) = decide(user);
//!         world.db_mut().add_job(&RawJob::new(task, payload, spec)).unwrap();
//!     }
//!     fn check(&mut self, world: &World) -> Result<(), String> {
//!         match world.db().jobs().filter(|j| j.locked_at.is_none()).count() {
//!             0 | 1 => Ok(()),
//!             n => Err(format!("{n} welcome mails wait")),
//!         }
//!     }
//! }
//!
//! let mut world = World::new(WorldConfig::default());
//! for n in 0..2 {
//!     let tasks = vec!["welcome".to_owned()];
//!     world.add_worker(Config { worker_id: format!("w{n}"), task_identifiers: tasks, ..Config::default() });
//! }
//! let ops = [Op::Event(7), Op::Fault(Fault::Crash(0)), Op::Event(7), Op::Wait(500), Op::Event(7)];
//! run_ops(&mut world, &ops, &mut Signups).unwrap();
//! heal(&mut world);
//! let all_sent = |w: &World| w.db().jobs().next().is_none();
//! settle(&mut world, chrono::Duration::hours(5), all_sent, |w| Signups.check(w)).unwrap();
//! ```
//!
//! `examples/digest-policy` in Formica's repository is a complete example to copy: a
//! per-account digest with a job key, a queue per account, retries and a crontab, checked
//! under random crashes, restarts, clock jumps, dropped listeners and failing queries.
//! [`sim`] says what the simulation models faithfully (and how that is checked against
//! PostgreSQL) and what it does not.
#![forbid(unsafe_code)]
// A new Input, Effect, Statement or Event variant must be handled where it matters, not
// swallowed by `_ =>`.
#![warn(clippy::wildcard_enum_match_arm)]
#![warn(missing_docs)]

pub mod backoff;
pub mod batch;
pub mod cron;
pub mod job;
pub mod job_key;
pub mod lease;
pub mod notify;
pub mod protocol;
pub mod rng;
pub mod sim;
pub mod text;
pub mod time;
pub mod worker;
