//! A private PostgreSQL cluster for tests that must stop or restart the server: doing that
//! to the shared test server would break every test running beside them.
//!
//! The server binaries come from `FORMICA_PG_BINDIR` (set by `scripts/with-postgres`), else
//! from `pg_ctl` on `PATH`, else from the newest `/usr/lib/postgresql/*/bin`. PostgreSQL
//! refuses to run as root, so as root its programs run as `postgres` (through `runuser`),
//! as `scripts/with-postgres` and the CLI's embedded database do. The cluster lives in a
//! temporary folder, listens on 127.0.0.1 at a port chosen free when it is created and
//! kept across restarts, and is stopped and deleted on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A PostgreSQL cluster of one test's own.
pub struct PrivateCluster {
    dir: PathBuf,
    bindir: PathBuf,
    as_postgres: bool,
    port: u16,
}

fn find_bindir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("FORMICA_PG_BINDIR") {
        return Some(PathBuf::from(dir));
    }
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
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn run(mut command: Command, what: &str) -> Result<(), String> {
    let out = command.output().map_err(|e| format!("{what}: cannot run {:?}: {e}", command.get_program()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        ))
    }
}

impl PrivateCluster {
    /// Create a cluster (initdb) and start it. Panics with the reason if it cannot.
    pub fn start() -> PrivateCluster {
        let bindir = find_bindir().expect(
            "no PostgreSQL server binaries (set FORMICA_PG_BINDIR or run through scripts/with-postgres)",
        );
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("formica-private-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the cluster folder");
        let as_postgres = is_root();
        if as_postgres {
            let mut chown = Command::new("chown");
            chown.arg("postgres").arg(&dir);
            run(chown, "giving the cluster folder to postgres").expect("chown");
        }
        let cluster = PrivateCluster { dir, bindir, as_postgres, port: free_port() };
        let mut initdb = cluster.program("initdb");
        initdb.arg("-D").arg(cluster.data()).args(["-U", "postgres", "-A", "trust", "--no-sync"]);
        run(initdb, "initdb").expect("initdb");
        cluster.start_again().expect("start the private cluster");
        cluster
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn program(&self, name: &str) -> Command {
        let mut c = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(self.bindir.join(name));
            c
        } else {
            Command::new(self.bindir.join(name))
        };
        c.current_dir(&self.dir);
        c
    }

    /// Its folder (data in `data/`, the server log in `log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A connection string for `dbname` as the superuser `postgres`.
    pub fn url(&self, dbname: &str) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname={dbname}", self.port)
    }

    /// Stop the server (fast: sessions are ended, transactions rolled back), waiting until
    /// it is down.
    pub fn stop(&self) -> Result<(), String> {
        let mut stop = self.program("pg_ctl");
        stop.arg("-D").arg(self.data()).args(["-m", "fast", "-w", "-t", "60", "stop"]);
        run(stop, "pg_ctl stop")
    }

    /// Start the (stopped) server again on the same port, waiting until it accepts
    /// connections.
    pub fn start_again(&self) -> Result<(), String> {
        let mut start = self.program("pg_ctl");
        start.arg("-D").arg(self.data()).arg("-l").arg(self.dir.join("log")).args(["-w", "-t", "60", "-o"]);
        start.arg(format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off",
            self.port,
            self.dir.display()
        ));
        start.arg("start");
        run(start, "pg_ctl start").map_err(|e| format!("{e}\nserver log:\n{}", self.log()))
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let mut stop = self.program("pg_ctl");
        stop.arg("-D").arg(self.data()).args(["-m", "immediate", "-w", "stop"]);
        let _ = stop.output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
