//! Formica's test support, in one place: the lockstep reference model of the job tables,
//! the trace checker of the worker machine's promises, and the one operation vocabulary
//! ([`Op`]) with its proptest strategies. Not published.
//!
//! **What it promises.** [`Run`] drives a `core::sim` [`World`](formica_core::sim::World)
//! with [`Op`]s, does every database operation to a naive model too (written from the
//! documented rules; it calls none of the core's functions), and after every step of the
//! world reads the new trace lines and checks:
//!
//! - busy slots never exceed `concurrency`;
//! - a job is started only on a lock a fetch granted to that worker, once per grant;
//! - no fetched job waits while a slot is idle, unless a fetch sent before its own is still
//!   out (or a shutdown began);
//! - every started job ends in exactly one complete, fail or return, matching how its task
//!   ended, and a fetched job that is never started is returned;
//! - the machine's clock never goes back and is the latest `now` it was given (the wall
//!   clock, or, once that went back, the time last fed plus the time elapsed since);
//!   fetches and failures carry it when `use_local_time` is on;
//! - failures follow the backoff curve `run_at = max(now, run_at) + e^min(attempts, 10) s`
//!   (as sent by the machine, and as stored when the database computes it);
//! - the job tables (every column, queue locks included) equal the model's, so job-key
//!   outcomes (all three modes, array merge, detaching), fetch order, flags and named
//!   queues all match;
//! - at most one job of a named queue runs at a time (unless its lock was taken from a live
//!   worker by an admin, a four-hour sweep or a recovery after its lease lapsed);
//! - after `Stopped` nothing is running or in flight, no timer is armed and no input
//!   brings out an effect ([`Run::stop_all`]);
//! - no job is lost: one disappears only when completed by a worker after its task
//!   succeeded, completed by an admin or removed by key.
//!
//! **Who uses it.** `core/tests/sim_model.rs` (generated [`Case`]s, [`run_case`]);
//! the fuzz target `fuzz/src/machine.rs` (bytes decoded into [`Op`]s, played by a [`Run`]);
//! and the differential test against PostgreSQL, `tests/tests/differential.rs` (the
//! database [`Action`]s and the worker statements, on both databases).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cancels;
mod case;
mod checker;
mod fenced;
mod life;
mod model;
mod ops;
mod run;
mod sending;
pub mod strategies;

pub use case::{run_case, Case, TASKS};
pub use checker::Checker;
pub use ops::{for_workers, Action, NewJob, Op, Pick};
pub use run::Run;
