//! The Prometheus alerting rules shipped in `deploy/prometheus/`: `promtool check rules`
//! accepts them, `promtool test rules` runs their unit tests (each alert firing on the
//! series it is for, and not before its `for`), and every Formica metric they name is one
//! the driver's metrics module makes. promtool comes with Debian's `prometheus` package,
//! which CI installs: without it these tests fail, saying so.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus")
}

/// Run `promtool` with `args` in the rules' folder; it must succeed.
fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool").args(args).current_dir(rules_dir()).output().unwrap_or_else(|e| {
        panic!("promtool is not installed ({e}): install it (Debian: apt-get install prometheus) to check the alerting rules")
    });
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {}:\n{text}", args.join(" "));
    text
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    let checked = promtool(&["check", "rules", "formica-alerts.yml"]);
    assert!(checked.contains("SUCCESS: 7 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "formica-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_formica_metric_the_rules_name_is_one_the_driver_makes() {
    let rules = std::fs::read_to_string(rules_dir().join("formica-alerts.yml")).unwrap();
    let metrics = include_str!("../../driver/src/metrics.rs");
    let mut named = Vec::new();
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        let instrument = ["_total", "_seconds_bucket", "_seconds"]
            .iter()
            .fold(word.to_owned(), |w, suffix| w.strip_suffix(suffix).map(str::to_owned).unwrap_or(w));
        let is_metric = (word.starts_with("formica_") || word.starts_with("messaging_"))
            && !word.starts_with("formica_health_check")
            && word != "messaging_destination_name"
            && word != "messaging_operation_name";
        if is_metric {
            let dotted = format!("\"{}\"", instrument.replace('_', "."));
            // OpenTelemetry names keep some underscores (`oldest_due_age`): try each split.
            let found = metrics.contains(&dotted)
                || metrics.lines().any(|line| {
                    line.split('"').any(|s| s.contains('.') && s.replace('.', "_") == instrument)
                });
            assert!(found, "the rules name {word}, which no instrument of driver/src/metrics.rs makes");
            named.push(word.to_owned());
        }
    }
    for expected in ["formica_worker_up", "formica_queue_oldest_due_age_seconds", "formica_health_severity"] {
        assert!(named.iter().any(|w| w == expected), "{expected} in {named:?}");
    }
}
