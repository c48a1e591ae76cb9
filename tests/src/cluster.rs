//! A private PostgreSQL cluster for tests that must stop or restart the server: doing that
//! to the shared test server would break every test running beside them.
//!
//! The server binaries come from `FORMICA_PG_BINDIR` (set by `scripts/with-postgres`), else
//! from `pg_ctl` on `PATH`, else from the newest `/usr/lib/postgresql/*/bin`; they run as
//! the CLI's embedded database runs them (`formica_cli::server_programs`). The cluster
//! lives in a temporary folder, listens on 127.0.0.1 at a port chosen free when it is
//! created and kept across restarts, and is stopped and deleted on drop.

use formica_cli::server_programs::{run, ServerPrograms};
use std::path::{Path, PathBuf};

/// A PostgreSQL cluster of one test's own.
pub struct PrivateCluster {
    programs: ServerPrograms,
    port: u16,
    /// Server settings beyond the defaults, as `-c name=value` words.
    settings: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

impl PrivateCluster {
    /// Create a cluster (initdb) and start it. Panics with the reason if it cannot.
    pub fn start() -> PrivateCluster {
        PrivateCluster::start_with(&[], |_| {})
    }

    /// Create a cluster, let `prepare` put files in its data folder (as the server's owner
    /// will read them), and start it with the server `settings` (`name`, `value`).
    pub fn start_with(settings: &[(&str, &str)], prepare: impl FnOnce(&Path)) -> PrivateCluster {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("formica-private-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let programs = ServerPrograms::find(std::env::var_os("FORMICA_PG_BINDIR").map(PathBuf::from), &dir)
            .expect(
                "no PostgreSQL server binaries (set FORMICA_PG_BINDIR or run through scripts/with-postgres)",
            );
        programs.initdb().expect("create the private cluster");
        prepare(&programs.data());
        if is_root() {
            let status =
                std::process::Command::new("chown").args(["-R", "postgres"]).arg(programs.data()).status();
            assert!(status.is_ok_and(|s| s.success()), "chown the data folder to postgres");
        }
        let settings = settings.iter().map(|(name, value)| format!(" -c {name}={value}")).collect();
        let cluster = PrivateCluster { programs, port: free_port(), settings };
        cluster.start_again().expect("start the private cluster");
        cluster
    }

    /// Its folder (data in `data/`, the server log in `log`).
    pub fn dir(&self) -> &Path {
        self.programs.dir()
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
        let mut stop = self.programs.command("pg_ctl");
        stop.arg("-D").arg(self.programs.data()).args(["-m", "fast", "-w", "-t", "60", "stop"]);
        run(stop, "pg_ctl stop")
    }

    /// Start the (stopped) server again on the same port, waiting until it accepts
    /// connections.
    pub fn start_again(&self) -> Result<(), String> {
        let mut start = self.programs.command("pg_ctl");
        start
            .arg("-D")
            .arg(self.programs.data())
            .arg("-l")
            .arg(self.dir().join("log"))
            .args(["-w", "-t", "60", "-o"]);
        start.arg(format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off{}",
            self.port,
            self.dir().display(),
            self.settings
        ));
        start.arg("start");
        run(start, "pg_ctl start").map_err(|e| format!("{e}\nserver log:\n{}", self.log()))
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("log")).unwrap_or_default()
    }
}

fn is_root() -> bool {
    std::process::Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let mut stop = self.programs.command("pg_ctl");
        stop.arg("-D").arg(self.programs.data()).args(["-m", "immediate", "-w", "stop"]);
        let _ = stop.output();
        let _ = std::fs::remove_dir_all(self.dir());
    }
}
