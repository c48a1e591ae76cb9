//! Tasks as executable files, as graphile-worker runs them: any program in the tasks
//! directory is a task, whatever language it is written in.
//!
//! A file's task identifier is its path below the directory, folders joined by `/`, up to
//! the first dot of the file name (`users/emails/verify.sh` is `users/emails/verify`).
//! Folder names must match `[A-Za-z0-9_-]+`, file names `[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*`,
//! and the file must be executable by its owner; anything else is reported and skipped.
//! The program gets the payload as `{"payload": ...}` on stdin, its JSON text as stored,
//! and the job in
//! `GRAPHILE_WORKER_*` variables; exit status 0 is success. Unlike graphile-worker (whose
//! error is a bare "An error occurred"), a failure's `last_error` says the exit status and
//! the end of the program's stderr.
//!
//! A program must not outlive its job or its worker: once a worker is gone, its jobs may
//! be unlocked (`formica unlock`) and run elsewhere, and a program (or a child of it) still
//! running from the dead worker would run the job twice at once. On Unix each program runs
//! in a process group of its own, killed as a whole when the program exits, when its job
//! is aborted (a forced shutdown) and when the worker process dies, however it dies (see
//! `ProcessGroup`). Elsewhere only the program itself is killed, on abort.
//!
//! Output is read as bytes: a program may write anything, and what is not valid text is
//! logged and kept in `last_error` with visible escapes.

use formica::text::{from_bytes, storable_bytes};
use formica::{JobContext, Payload, TaskResult};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

/// How much of the end of stderr a failure keeps in `last_error`.
const STDERR_TAIL: usize = 2000;

/// A task found in the tasks directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutableTask {
    /// Its task identifier.
    pub identifier: String,
    /// The program.
    pub path: PathBuf,
}

/// What discovery found: tasks by identifier, and files it skipped with the reason.
#[derive(Debug, Default)]
pub struct Discovered {
    /// The tasks, by identifier (the first file in name order wins for an identifier).
    pub tasks: BTreeMap<String, ExecutableTask>,
    /// Files and folders that are not tasks, with why.
    pub skipped: Vec<(PathBuf, String)>,
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Scan `dir` recursively for executable tasks. A missing directory is an error (a
/// mistyped path must not start a worker that runs nothing).
pub fn discover(dir: &Path) -> std::io::Result<Discovered> {
    let mut found = Discovered::default();
    scan(dir, &mut Vec::new(), &mut found)?;
    Ok(found)
}

fn scan(dir: &Path, prefix: &mut Vec<String>, found: &mut Discovered) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            found.skipped.push((path, "the name is not valid UTF-8".into()));
            continue;
        };
        // Follow symbolic links to what they point at.
        let meta = match std::fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) => {
                found.skipped.push((path, format!("cannot be read: {e}")));
                continue;
            }
        };
        if meta.is_dir() {
            if !is_name(&name) {
                found.skipped.push((path, "folder names must match [A-Za-z0-9_-]+".into()));
                continue;
            }
            prefix.push(name);
            scan(&path, prefix, found)?;
            prefix.pop();
            continue;
        }
        let base = name.split('.').next().unwrap_or_default();
        if !name.split('.').all(is_name) {
            found.skipped.push((path, "file names must match [A-Za-z0-9_-]+(.[A-Za-z0-9_-]+)*".into()));
            continue;
        }
        if !is_owner_executable(&meta) {
            found.skipped.push((path, "not executable (chmod u+x to make it a task)".into()));
            continue;
        }
        let identifier = prefix.iter().map(String::as_str).chain([base]).collect::<Vec<_>>().join("/");
        found.tasks.entry(identifier.clone()).or_insert(ExecutableTask { identifier, path });
    }
    Ok(())
}

#[cfg(unix)]
fn is_owner_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.is_file() && meta.permissions().mode() & 0o100 != 0
}

#[cfg(not(unix))]
fn is_owner_executable(_: &std::fs::Metadata) -> bool {
    false
}

impl ExecutableTask {
    /// Run the program for the job in `ctx`, given `payload` (as stored: see
    /// [`formica::WorkerOptions::define_payload_job`]). Dropping the future (a forced
    /// shutdown) kills the program and its process group.
    pub async fn run(&self, ctx: JobContext, payload: Payload) -> TaskResult {
        let job = ctx.job();
        let mut command = tokio::process::Command::new(&self.path);
        command
            .env("GRAPHILE_WORKER_PAYLOAD_FORMAT", "json")
            .env("GRAPHILE_WORKER_TASK_IDENTIFIER", &job.task_identifier)
            .env("GRAPHILE_WORKER_JOB_ID", job.id.to_string())
            .env("GRAPHILE_WORKER_JOB_ATTEMPTS", job.attempts.to_string())
            .env("GRAPHILE_WORKER_JOB_MAX_ATTEMPTS", job.max_attempts.to_string())
            .env("GRAPHILE_WORKER_JOB_PRIORITY", job.priority.to_string())
            .env(
                "GRAPHILE_WORKER_JOB_RUN_AT",
                job.run_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            )
            .env_remove("GRAPHILE_WORKER_JOB_KEY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(key) = &job.key {
            command.env("GRAPHILE_WORKER_JOB_KEY", key);
        }
        let cannot_start = |e: std::io::Error| format!("cannot start {}: {e}", self.path.display());
        let group = ProcessGroup::start().map_err(cannot_start)?;
        group.admit(&mut command);
        let mut child = command.spawn().map_err(cannot_start)?;
        let input = format!("{{\"payload\":{payload}}}");
        let mut stdin = child.stdin.take().ok_or("no stdin pipe")?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let stderr = child.stderr.take().ok_or("no stderr pipe")?;
        let feed = async move {
            // A program that exits without reading its input is not an error of ours.
            let _ = stdin.write_all(input.as_bytes()).await;
            drop(stdin);
        };
        let program = async move {
            let status = child.wait().await;
            // What the program left running ends with it (and stops holding its pipes open).
            drop(group);
            status
        };
        let (_, _, tail, status) =
            tokio::join!(feed, log_lines(stdout, false), log_lines(stderr, true), program);
        let status = status?;
        if status.success() {
            return Ok(());
        }
        let tail = tail.trim_end();
        Err(if tail.is_empty() {
            format!("{} {status}", self.path.display())
        } else {
            format!("{} {status}; stderr ends with:\n{tail}", self.path.display())
        }
        .into())
    }
}

/// The process group a program runs in, killed as a whole when this value is dropped or
/// the worker process dies.
///
/// Its leader is a guardian, `sh` waiting to read from a pipe whose only writing end is
/// this value's: when the end closes, dropped here or closed by the kernel because the
/// worker died (SIGKILL, OOM), the guardian kills its group (`kill -KILL 0`). So it works
/// on any Unix, and reaches the program's own children too, which a parent-death signal
/// (Linux's `PR_SET_PDEATHSIG`, for the direct child only) does not. A process that leaves
/// the group on purpose (`setsid`) is not followed.
#[cfg(unix)]
struct ProcessGroup {
    id: u32,
    // Holds the writing end of the guardian's stdin.
    _guardian: tokio::process::Child,
}

#[cfg(unix)]
impl ProcessGroup {
    fn start() -> std::io::Result<Self> {
        let guardian = tokio::process::Command::new("/bin/sh")
            .args(["-c", "read _; kill -KILL 0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let id = guardian.id().ok_or_else(|| std::io::Error::other("the group's guardian exited at once"))?;
        Ok(ProcessGroup { id, _guardian: guardian })
    }

    fn admit(&self, command: &mut tokio::process::Command) {
        command.process_group(self.id as i32);
    }
}

/// Elsewhere there are no process groups: the program alone is killed on drop.
#[cfg(not(unix))]
struct ProcessGroup;

#[cfg(not(unix))]
impl ProcessGroup {
    fn start() -> std::io::Result<Self> {
        Ok(ProcessGroup)
    }

    fn admit(&self, _: &mut tokio::process::Command) {}
}

/// Log each line (stdout at info, stderr at warn) in the job's span, and return the end of
/// the stream (used for stderr). The stream is read as bytes to its end, whatever it holds;
/// what is not valid text is logged and kept escaped (see [`formica::text`]).
async fn log_lines(stream: impl AsyncRead + Unpin, is_stderr: bool) -> String {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    let mut tail = Vec::new();
    loop {
        line.clear();
        if !matches!(reader.read_until(b'\n', &mut line).await, Ok(n) if n > 0) {
            break;
        }
        let text = storable_bytes(line.strip_suffix(b"\n").unwrap_or(&line));
        if is_stderr {
            // Not ERROR: the run may yet succeed, or be retried; its outcome's line (WARN for
            // a retry, ERROR once out of attempts) carries the end of stderr too.
            tracing::warn!(target: "formica::task", "{text}");
            tail.extend_from_slice(&line);
            if tail.len() > 2 * STDERR_TAIL {
                keep_tail(&mut tail);
            }
        } else {
            tracing::info!(target: "formica::task", "{text}");
        }
    }
    keep_tail(&mut tail);
    // Text only: the core makes it storable with every failure message.
    from_bytes(&tail).into_owned()
}

/// Cut `bytes` to its last [`STDERR_TAIL`] bytes, not starting inside a UTF-8 character.
fn keep_tail(bytes: &mut Vec<u8>) {
    if let Some(cut) = bytes.len().checked_sub(STDERR_TAIL) {
        let is_continuation = |b: &u8| b & 0xC0 == 0x80;
        let cut = cut + bytes[cut..].iter().take(3).take_while(|b| is_continuation(b)).count();
        bytes.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_tail_starts_on_a_character_boundary() {
        let mut bytes = "xé".as_bytes().to_vec();
        bytes.extend(vec![b'a'; STDERR_TAIL - 1]);
        keep_tail(&mut bytes);
        assert_eq!(bytes, vec![b'a'; STDERR_TAIL - 1], "the cut fell inside 'é': the rest of it is dropped");
        let mut short = b"short \xff".to_vec();
        keep_tail(&mut short);
        assert_eq!(short, b"short \xff");
    }
}
