//! The worker: [`WorkerOptions`] builds a [`Worker`], whose one async loop drives
//! `formica_core::worker::Worker` and runs the jobs it starts.
//!
//! - `options`: the builder, its crontab sources, and `init`;
//! - `run`: [`Worker`] and [`WorkerHandle`], and where running places the parts;
//! - `threads`: the threads those parts run on, and stopping them;
//! - `turning`: the loop, which carries the core's effects out and feeds inputs back;
//! - `turn`: which source of inputs the loop looks at first, and when it yields;
//! - `start`: a task's start, its abort signal and its panics;
//! - `shared`: what every part of a running worker reaches.

mod options;
mod run;
mod shared;
mod start;
mod threads;
mod turn;
mod turning;

pub use self::options::{
    CronSource, WorkerOptions, DEFAULT_MAX_POOL_SIZE, DEFAULT_QUEUE_DEPTH_INTERVAL, DEFAULT_SCHEDULES_POLL,
};
pub use self::run::{Worker, WorkerHandle};
pub use crate::log::Hook;
pub use crate::statements::FlagsFn;
