//! The library stays lean: a service that depends on formica-tokio does not build the
//! command's argument parser, log formatting, dashboard or exporters. (It builds
//! `tracing-subscriber`'s registry alone, for `JobLogLayer`: none of its formatting, filters
//! or JSON, whose crates are listed here.)

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// Crates only the `formica` command needs.
const COMMAND_ONLY: [&str; 9] = [
    "clap",
    "nu-ansi-term",
    "matchers",
    "tracing-serde",
    "axum",
    "formica-ui",
    "formica-cli",
    "opentelemetry-otlp",
    "prometheus",
];

#[test]
fn formica_tokio_with_all_features_builds_none_of_the_command_s_dependencies() {
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--locked", "-p", "formica-tokio", "--all-features"])
        .args(["-e", "normal", "--prefix", "none", "--format", "{p}"])
        .current_dir(workspace)
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    let packages: Vec<&str> = tree.lines().filter_map(|line| line.split(' ').next()).collect();
    assert!(packages.contains(&"formica-tokio") && packages.contains(&"tokio"), "{tree}");
    let found: Vec<&&str> = COMMAND_ONLY.iter().filter(|name| packages.contains(name)).collect();
    assert!(found.is_empty(), "formica-tokio depends on {found:?}:\n{tree}");
}
