//! PostgreSQL's server programs (`initdb`, `pg_ctl`) for a private cluster in a folder of
//! its own: the `formica` command's embedded database (`src/embedded.rs`), and the private
//! clusters of Formica's tests (`tests/src/cluster.rs`).
//!
//! PostgreSQL refuses to run as root: as root, the programs run as `postgres` (through
//! `runuser`), which owns the folder.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The server programs of one installation, run in a cluster's folder as its owner.
pub struct ServerPrograms {
    bindir: PathBuf,
    dir: PathBuf,
    as_postgres: bool,
}

/// The folder with PostgreSQL's server programs: beside `pg_ctl` on PATH, else the newest
/// `/usr/lib/postgresql/*/bin`.
fn find_bindir() -> Option<PathBuf> {
    let on_path =
        std::env::var_os("PATH").into_iter().flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    for dir in on_path {
        if dir.join("pg_ctl").is_file() && dir.join("initdb").is_file() {
            return Some(std::fs::canonicalize(dir.join("pg_ctl")).ok()?.parent()?.to_path_buf());
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Whether this process runs as root (the server programs then run as `postgres`).
pub fn is_root() -> bool {
    // `id -u` is the portable way to ask without unsafe code.
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// Run `command`; if it cannot run or fails, say that `what` failed and what it printed.
pub fn run(mut command: Command, what: &str) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("{what}: cannot run {:?}: {e}", command.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        let printed = [&out.stderr, &out.stdout].map(|s| String::from_utf8_lossy(s).trim().to_owned());
        Err(format!("{what} failed ({}): {}", out.status, printed.join("\n").trim()))
    }
}

impl ServerPrograms {
    /// The programs in `bindir` (else found on PATH or under `/usr/lib/postgresql`), for a
    /// cluster in `dir`; `None` if there are none.
    pub fn find(bindir: Option<PathBuf>, dir: &Path) -> Option<ServerPrograms> {
        let bindir = bindir.or_else(find_bindir)?;
        Some(ServerPrograms { bindir, dir: dir.to_path_buf(), as_postgres: is_root() })
    }

    /// The cluster's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cluster's data folder, `<dir>/data`.
    pub fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Create the folder (as root, giving it to `postgres`, mode `0700`: its socket lets
    /// anyone who reaches it in) and a cluster in it whose superuser `postgres` needs no
    /// password.
    pub fn initdb(&self) -> Result<(), String> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        if self.as_postgres {
            let mut chown = Command::new("chown");
            chown.arg("postgres").arg(&self.dir);
            run(chown, "giving the cluster's folder to the postgres user")?;
            let mut chmod = Command::new("chmod");
            chmod.arg("0700").arg(&self.dir);
            run(chmod, "making the cluster's folder its owner's only")?;
        }
        let mut initdb = self.command("initdb");
        initdb.arg("-D").arg(self.data()).args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        run(initdb, "initdb")
    }

    /// A command running `program` in the folder as the cluster's owner.
    pub fn command(&self, program: &str) -> Command {
        let mut c = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bindir.join(program));
            c
        } else {
            Command::new(self.bindir.join(program))
        };
        c.current_dir(&self.dir);
        c
    }
}
