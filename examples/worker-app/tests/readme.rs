//! The README's quick start "a tokio application" shows this crate's dependencies and
//! `src/main.rs` whole, so that what a reader copies is what CI builds; and the program
//! runs: it connects, runs a job and logs it at INFO with no RUST_LOG set, as the
//! observability guide's "Logs" says, and stops on SIGTERM.

use formica_tests::TestDb;
use formica_tokio::JobSpec;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[test]
fn the_readme_shows_the_app_and_its_dependencies_as_they_are() {
    let readme = include_str!("../../../README.md");
    let manifest = include_str!("../Cargo.toml");
    let start = manifest.find("[dependencies]\n").expect("a [dependencies] table");
    let end = manifest.find("\n\n[dev-dependencies]").expect("a [dev-dependencies] table after it");
    // Until the crates are published the README gives a clone's path where this manifest
    // names the registry version (which the workspace's patch points at this repository).
    let dependencies = manifest[start..end].replace(
        "formica-tokio = \"0.1\"",
        "formica-tokio = { path = \"../formica/adapter-tokio\" } # your clone; once published: \"0.1\"",
    );
    let dependencies = format!("```toml\n{dependencies}\n```\n");
    assert!(
        readme.contains(&dependencies),
        "README.md must list examples/worker-app/Cargo.toml's [dependencies] as they are, in a toml block:\n{dependencies}"
    );
    // `ignore`: this crate, not a README doctest, is what compiles it.
    let program = format!("```rust ignore\n{}```\n", include_str!("../src/main.rs"));
    assert!(
        readme.contains(&program),
        "README.md must show examples/worker-app/src/main.rs as it is, in a `rust ignore` block"
    );
}

/// The app's process, killed if the test fails before it stopped.
struct App(Child);

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_runs_a_job_logs_it_at_info_by_default_and_stops_on_sigterm() {
    let db = TestDb::migrated().await;
    let payload = serde_json::json!({ "to": "ada@example.com" });
    let job = db.utils().add_raw_job("send_welcome", payload, JobSpec::default()).await.expect("add_job");
    let mut app = App(Command::new(env!("CARGO_BIN_EXE_worker-app"))
        .env("DATABASE_URL", &db.url)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the app starts"));
    let stdout = app.0.stdout.take().expect("piped");
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut log = Vec::new();
    let done = |log: &[String], what: &str| log.iter().any(|l| l.contains(what));
    while !(done(&log, "welcome mail to ada@example.com") && done(&log, "task succeeded")) {
        match seen.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => log.push(line),
            Err(e) => panic!("the job's lines did not come ({e}); the app printed:\n{}", log.join("\n")),
        }
    }
    let mail = log.iter().find(|l| l.contains("welcome mail")).expect("seen");
    assert!(mail.contains(&format!("job_id={}", job.id)) && mail.contains("INFO"), "{mail}");
    let kill = Command::new("kill").args(["-TERM", &app.0.id().to_string()]).status().expect("kill runs");
    assert!(kill.success());
    let status = app.0.wait().expect("the app exits");
    assert!(status.success(), "{status}; the app printed:\n{}", log.join("\n"));
}
