//! The worker flags' defaults are the library's: `formica --help` shows
//! `formica_core::worker::Config`'s and `WorkerOptions`' (no database needed).

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_core::worker::{Config, DEFAULT_LOCAL_QUEUE_SIZE};
use formica_tokio::{DEFAULT_MAX_POOL_SIZE, DEFAULT_QUEUE_DEPTH_INTERVAL};
use std::collections::BTreeMap;
use std::process::Command;

/// Each long flag of `formica --help` and its `[default: ...]`, if it shows one.
fn help_defaults() -> BTreeMap<String, Option<String>> {
    let out = Command::new(env!("CARGO_BIN_EXE_formica")).arg("--help").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('-') {
            // `-j, --jobs <JOBS>` or `--once`: the long name.
            let long = line.split_whitespace().find(|word| word.starts_with("--"));
            current = long.map(|l| l.trim_end_matches(',').to_owned());
            if let Some(flag) = &current {
                flags.insert(flag.clone(), None);
            }
        } else if let (Some(flag), Some(value)) = (&current, line.strip_prefix("[default: ")) {
            flags.insert(flag.clone(), Some(value.trim_end_matches(']').to_owned()));
        }
    }
    flags
}

#[test]
fn worker_flags_default_to_the_library_s_defaults() {
    let library = Config::default();
    let ms = |d: chrono::Duration| Some(d.num_milliseconds().to_string());
    let flags = help_defaults();
    let shown = |flag: &str| flags.get(flag).unwrap_or_else(|| panic!("{flag} is not in --help")).clone();
    assert_eq!(shown("--jobs"), Some(library.concurrency.to_string()));
    assert_eq!(shown("--poll-interval"), ms(library.poll_interval));
    assert_eq!(shown("--local-queue-size"), Some(DEFAULT_LOCAL_QUEUE_SIZE.to_string()));
    assert_eq!(library.local_queue_size, Some(DEFAULT_LOCAL_QUEUE_SIZE));
    assert_eq!(shown("--complete-batch-delay"), ms(library.complete_batch_delay));
    assert_eq!(shown("--fail-batch-delay"), ms(library.fail_batch_delay));
    assert_eq!(shown("--max-pool-size"), Some(DEFAULT_MAX_POOL_SIZE.to_string()));
    assert_eq!(shown("--queue-depth-interval"), Some(DEFAULT_QUEUE_DEPTH_INTERVAL.as_millis().to_string()));
}
