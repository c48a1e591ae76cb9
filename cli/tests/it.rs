//! The `formica` command's tests, one binary: a module per file beside this one, and the
//! helpers they share in `common/`, so the crate links one test binary, not one a file.

mod bulk;
mod cli;
mod common;
mod connecting;
mod controls;
mod crash;
mod defaults;
mod dependencies;
mod doctor;
mod flags;
mod flow_crash;
mod history;
mod output;
mod pgbouncer;
mod poll_interval;
mod replica;
mod roles;
mod schedule;
mod traces;
mod views;
mod why;
mod workers;
mod workflow;
mod workflow_crash;
