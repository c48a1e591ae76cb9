//! The embedded database: with no connection configured at all, `formica` runs a private
//! PostgreSQL cluster in `./.formica/`, so the first command works on a machine that only
//! has PostgreSQL's server binaries installed.
//!
//! The cluster listens only on a Unix socket in that folder. The process that starts it
//! stops it on exit; a process that finds it already running (a `formica add` in a second
//! terminal while the worker runs) uses it and leaves it running.

use formica_tokio::server_programs::{run, ServerPrograms};

/// A cluster this process may have started.
pub struct Embedded {
    programs: ServerPrograms,
    started_here: bool,
}

impl Embedded {
    /// Start (or reuse) the cluster in `<cwd>/.formica` and return it with its connection
    /// string.
    pub fn start() -> Result<(Embedded, String), String> {
        let dir = std::env::current_dir().map_err(|e| e.to_string())?.join(".formica");
        let socket = dir.join(".s.PGSQL.5432");
        if socket.as_os_str().len() > 100 {
            return Err(format!(
                "the private database's socket path {} is too long for a Unix socket: run formica from a shorter path or pass -c",
                socket.display()
            ));
        }
        let programs = ServerPrograms::find(None, &dir).ok_or(
            "no database given (-c, DATABASE_URL or PG* variables) and no PostgreSQL server binaries found \
             to start a private one: install them (Debian/Ubuntu: apt-get install postgresql) or pass -c <connection>",
        )?;
        let data = programs.data();
        if !data.join("PG_VERSION").exists() {
            programs.initdb().map_err(|e| format!("creating the private database in .formica/: {e}"))?;
        }
        let mut status = programs.command("pg_ctl");
        status.arg("-D").arg(&data).arg("status");
        let running = status.output().is_ok_and(|o| o.status.success());
        if !running {
            let mut start = programs.command("pg_ctl");
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
        Ok((Embedded { programs, started_here: !running }, url))
    }

    /// Stop the cluster if this process started it.
    pub fn stop(self) {
        if !self.started_here {
            return;
        }
        let mut stop = self.programs.command("pg_ctl");
        stop.arg("-D").arg(self.programs.data()).args(["-m", "fast", "-w", "stop"]);
        match run(stop, "stopping the private database") {
            Ok(()) => tracing::info!("stopped the private database"),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}
