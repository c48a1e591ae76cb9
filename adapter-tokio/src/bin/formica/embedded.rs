//! The embedded database: with no connection configured at all, `formica` runs a private
//! PostgreSQL cluster in `./.formica/`, so the first command works on a machine that only
//! has PostgreSQL's server binaries installed.
//!
//! The cluster listens only on a Unix socket in that folder. The process that starts it
//! stops it on exit; a process that finds it already running (a `formica add` in a second
//! terminal while the worker runs) uses it and leaves it running.

use std::path::PathBuf;
use std::process::Command;

/// A cluster this process may have started.
pub struct Embedded {
    dir: PathBuf,
    bindir: PathBuf,
    // PostgreSQL refuses to run as root: as root, its programs run as `postgres`.
    root: bool,
    started_here: bool,
}

fn run(mut command: Command, what: &str) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("{what}: cannot run {:?}: {e}", command.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
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

fn is_root() -> bool {
    // Root is the only user whose home is writable by nobody else; `id -u` is the portable
    // way to ask without unsafe code.
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

impl Embedded {
    /// Start (or reuse) the cluster in `<cwd>/.formica` and return it with its connection
    /// string.
    pub fn start() -> Result<(Embedded, String), String> {
        let bindir = find_bindir().ok_or(
            "no database given (-c, DATABASE_URL or PG* variables) and no PostgreSQL server binaries found \
             to start a private one: install them (Debian/Ubuntu: apt-get install postgresql) or pass -c <connection>",
        )?;
        let dir = std::env::current_dir().map_err(|e| e.to_string())?.join(".formica");
        let socket = dir.join(".s.PGSQL.5432");
        if socket.as_os_str().len() > 100 {
            return Err(format!(
                "the private database's socket path {} is too long for a Unix socket: run formica from a shorter path or pass -c",
                socket.display()
            ));
        }
        let mut cluster = Embedded { dir: dir.clone(), bindir, root: is_root(), started_here: false };
        let data = dir.join("data");
        if !data.join("PG_VERSION").exists() {
            std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            if cluster.root {
                let mut chown = Command::new("chown");
                chown.arg("postgres").arg(&dir);
                run(chown, "giving .formica to the postgres user")?;
            }
            let mut initdb = cluster.program("initdb");
            initdb.arg("-D").arg(&data).args(["-U", "postgres", "-A", "trust", "--no-sync"]);
            run(initdb, "creating the private database (initdb)")?;
        }
        let mut status = cluster.program("pg_ctl");
        status.arg("-D").arg(&data).arg("status");
        let running = status.output().is_ok_and(|o| o.status.success());
        if !running {
            let mut start = cluster.program("pg_ctl");
            start.arg("-D").arg(&data).arg("-l").arg(dir.join("server.log")).args(["-w", "-t", "60", "-o"]);
            start.arg(format!("-c listen_addresses='' -k {}", dir.display()));
            start.arg("start");
            run(start, "starting the private database (see .formica/server.log)")?;
        }
        tracing::info!(
            folder = %dir.display(),
            reused = running,
            "no connection given: using the private PostgreSQL database in .formica/ (Unix socket only)"
        );
        let url = format!("host={} port=5432 user=postgres dbname=postgres", dir.display());
        cluster.started_here = !running;
        Ok((cluster, url))
    }

    /// A command running PostgreSQL's `program` as the cluster's owner.
    fn program(&self, program: &str) -> Command {
        let mut c = if self.root {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bindir.join(program));
            c
        } else {
            Command::new(self.bindir.join(program))
        };
        c.current_dir(&self.dir);
        c
    }

    /// Stop the cluster if this process started it.
    pub fn stop(self) {
        if !self.started_here {
            return;
        }
        let mut stop = self.program("pg_ctl");
        stop.arg("-D").arg(self.dir.join("data")).args(["-m", "fast", "-w", "stop"]);
        match run(stop, "stopping the private database") {
            Ok(()) => tracing::info!("stopped the private database"),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}
