//! Running the `formica` binary from the CLI's tests.

#![allow(clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// `formica -c <url> <args>`, logging warnings and worse, run to its end.
pub fn formica(url: &str, args: &[&str]) -> Output {
    output_within_60s(
        Command::new(env!("CARGO_BIN_EXE_formica")).args(["-c", url]).args(args).env("RUST_LOG", "warn"),
    )
}

/// The standard output of `formica -c <url> <args>`, which must succeed.
pub fn ok(url: &str, args: &[&str]) -> String {
    let out = formica(url, args);
    assert!(out.status.success(), "formica {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The JSON that `formica -c <url> <args> --json` prints; it must succeed.
pub fn json(url: &str, args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(url, &[args, &["--json"]].concat())).expect("JSON output")
}

/// Run `command` to its end, or kill it and fail if it has not ended within 60 s (a
/// mistake must not leave a worker running).
pub fn output_within_60s(command: &mut Command) -> Output {
    let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start formica");
    let pid = child.id().to_string();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(child.wait_with_output()));
    match receiver.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.expect("run formica"),
        Err(_) => {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
            panic!("{command:?} was still running after 60 s")
        }
    }
}

/// Write an executable task program `name` (with its extension) into `dir`.
pub fn write_task(dir: &Path, name: &str, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("create the tasks directory");
    let path = dir.join(name);
    std::fs::write(&path, script).expect("write the task");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("make it executable");
}

/// A worker process, killed if the test fails before it is stopped.
pub struct Worker(pub Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `formica -c <url> --tasks <tasks> <args>` logging warnings and worse, not yet started.
pub fn worker_command(url: &str, tasks: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_formica"));
    command
        .args(["-c", url, "--tasks", tasks.to_str().expect("a UTF-8 path")])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    command
}

/// A worker running the tasks in `tasks`, with `args` (e.g. `-j 4`).
pub fn worker(url: &str, tasks: &Path, args: &[&str]) -> Worker {
    Worker(worker_command(url, tasks, args).spawn().expect("start formica"))
}
