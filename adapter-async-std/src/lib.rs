//! formica-async-std: Formica on the async-std runtime.
//!
//! Will supply the driver's `Runtime` with async-std's sockets, timers and tasks, with no
//! tokio runtime anywhere in the dependency graph. Not written yet: see the open issue
//! "async-std adapter".
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use formica::*;
