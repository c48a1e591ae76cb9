//! The library part of formica-cli: what the `formica` command shares with Formica's own
//! tests. Not an API for applications (they use formica-tokio); it follows the command.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod server_programs;
