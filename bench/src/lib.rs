//! Formica's benchmark programs, kept apart from the user examples and never published.
//!
//! - `examples/bench_peer.rs`: Formica as a peer of the side-by-side benchmark in
//!   `../shared/bench`, which builds it by name (`cargo build --release --workspace --example
//!   bench_peer`) and runs `target/release/examples/bench_peer`: keep the name and the path.
//! - `examples/latency_breakdown.rs`: where the time from `add_job` to the task's start goes,
//!   hop by hop.
//! - `drain-cpu`: the worker's and PostgreSQL's CPU over one drain of the bench peer.
//!
//! This library holds what the programs share.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// The setting `name` from the environment, surrounding spaces ignored; `None` if it is
/// unset or does not parse.
pub fn setting<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}
