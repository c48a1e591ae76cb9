//! The real graphile-worker 0.18.0 (Node), for the tests run by
//! `scripts/compat-graphile-worker`, which installs it from npm and sets
//! `FORMICA_GRAPHILE_WORKER` to its CLI.

use crate::TestDb;
use std::path::Path;
use std::process::{Child, Command};

/// The test database's URL as node-postgres takes it (it does not take key=value strings).
pub fn node_url(db: &TestDb) -> String {
    let server: tokio_postgres::Config =
        std::env::var("DATABASE_URL").expect("DATABASE_URL").parse().expect("a database URL");
    let host = match &server.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
    };
    let port = server.get_ports().first().copied().unwrap_or(5432);
    let user = server.get_user().unwrap_or("postgres");
    format!("postgres://{user}@{host}:{port}/{}", db.name)
}

/// graphile-worker's CLI (`FORMICA_GRAPHILE_WORKER`).
pub fn cli() -> String {
    std::env::var("FORMICA_GRAPHILE_WORKER")
        .expect("FORMICA_GRAPHILE_WORKER is not set: run scripts/compat-graphile-worker")
}

/// A child process (a Node worker), killed when the test ends or fails.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Node worker on `db` running the tasks of `cwd/tasks`, with `args` (e.g. `-j 4`).
pub fn worker(db: &TestDb, cwd: &Path, args: &[&str]) -> KillOnDrop {
    let child = Command::new("node")
        .arg(cli())
        .arg("-c")
        .arg(node_url(db))
        .args(args)
        .current_dir(cwd)
        .spawn()
        .expect("start node");
    KillOnDrop(child)
}
