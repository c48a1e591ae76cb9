//! A real pgBouncer (Debian's `pgbouncer` package) in transaction mode in front of the test
//! server, for tests that check Formica works through it with prepared statements off.
//!
//! It listens on 127.0.0.1 at a free port, forwards every database name to the server of
//! `DATABASE_URL`, and gives each database only 4 server connections, so client sessions
//! share them and anything session-bound (a named prepared statement) collides. pgBouncer
//! refuses to run as root: as root it runs as `postgres`. It is stopped on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running pgBouncer.
pub struct PgBouncer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

/// Where Debian installs it.
const PROGRAM: &str = "/usr/sbin/pgbouncer";

impl PgBouncer {
    /// Start one in front of the server of `DATABASE_URL`. Panics with the reason if it
    /// cannot.
    pub fn start() -> PgBouncer {
        Self::start_with("")
    }

    /// [`PgBouncer::start`], with `settings` (lines of `key = value`) added to its
    /// `[pgbouncer]` section.
    pub fn start_with(settings: &str) -> PgBouncer {
        let server: tokio_postgres::Config = std::env::var("DATABASE_URL")
            .expect("DATABASE_URL (run through scripts/test)")
            .parse()
            .expect("DATABASE_URL is a connection string");
        let host = match server.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        let server_port = server.get_ports().first().copied().unwrap_or(5432);
        assert!(
            std::path::Path::new(PROGRAM).exists(),
            "{PROGRAM} not found: the pgBouncer tests need Debian's pgbouncer (apt-get install pgbouncer; .ci/run does)"
        );
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("formica-pgbouncer-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create pgBouncer's folder");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let ini = format!(
            "[databases]\n\
             * = host={host} port={server_port}\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {dir}/users.txt\n\
             pool_mode = transaction\n\
             default_pool_size = 4\n\
             max_client_conn = 1000\n\
             max_db_connections = 8\n\
             logfile = {dir}/log\n\
             pidfile = {dir}/pid\n\
             {settings}\n",
            dir = dir.display()
        );
        std::fs::write(dir.join("pgbouncer.ini"), ini).expect("write pgbouncer.ini");
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").expect("write users.txt");
        let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0");
        let mut command = if root {
            let status = Command::new("chown").args(["-R", "postgres"]).arg(&dir).status();
            assert!(status.is_ok_and(|s| s.success()), "chown pgBouncer's folder to postgres");
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", PROGRAM]);
            c
        } else {
            Command::new(PROGRAM)
        };
        command
            .arg(dir.join("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = command.spawn().expect("start pgbouncer");
        let bouncer = PgBouncer { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "pgBouncer did not start; its log:\n{}", bouncer.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        bouncer
    }

    /// A connection string for `dbname` through pgBouncer.
    pub fn url(&self, dbname: &str) -> String {
        format!("host=127.0.0.1 port={} user=postgres dbname={dbname}", self.port)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        // pgBouncer itself (runuser does not pass signals on), then the child we spawned.
        if let Ok(pid) = std::fs::read_to_string(self.dir.join("pid")) {
            let _ = Command::new("kill").args(["-TERM", pid.trim()]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
