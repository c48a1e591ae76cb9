//! The bodies of Formica's fuzz targets, kept in a library so that two drivers share them:
//! libFuzzer (`scripts/fuzz`, nightly, the bins in `fuzz_targets/`) explores, and the
//! `replay` test runs every committed corpus file on stable in `cargo test`.
//!
//! Each target takes arbitrary bytes and panics only when a property is broken.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod crontab;
pub mod machine;
pub mod payloads;

/// A target: arbitrary bytes in, a panic only when a property breaks.
pub type Target = fn(&[u8]);

/// Every target by the name of its corpus folder (`fuzz/corpus/<name>/`).
pub const TARGETS: &[(&str, Target)] = &[
    ("crontab", crontab::check),
    ("notify", payloads::notify),
    ("job_spec", payloads::job_spec),
    ("machine", machine::check),
];
