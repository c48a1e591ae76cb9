//! Replays every committed corpus file through its target, on stable, within a time budget
//! (`FORMICA_FUZZ_REPLAY_SECS`, default 120 s), so CI proves the corpora still pass.

use std::time::{Duration, Instant};

#[test]
fn corpora_replay_without_failure() {
    let budget = std::env::var("FORMICA_FUZZ_REPLAY_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(120), Duration::from_secs);
    let started = Instant::now();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (name, target) in formica_fuzz::TARGETS {
        let mut files: Vec<_> = std::fs::read_dir(root.join(name))
            .unwrap_or_else(|e| panic!("corpus/{name}: {e}"))
            .map(|entry| entry.expect("corpus entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "corpus/{name} is empty");
        for file in files {
            if started.elapsed() > budget {
                eprintln!("replay budget of {budget:?} spent; stopping at {}", file.display());
                return;
            }
            let data = std::fs::read(&file).expect("read corpus file");
            target(&data);
        }
    }
}
