//! The embedded database: with no connection configured at all, `formica` runs a private
//! PostgreSQL cluster in `./.formica/`, so the first command works on a machine that only
//! has PostgreSQL's server binaries installed.
//!
//! The cluster listens only on a Unix socket in that folder. Any number of `formica`
//! processes in the folder share it (two workers, a `formica add` in a second terminal),
//! and the last one to leave stops it:
//! - each user holds a shared lock on `.formica/users.lock` while it runs. The kernel drops
//!   a lock when its process ends, however it ends, so a crashed user counts no more;
//! - leaving, a user gives its lock up and tries for an exclusive one without waiting:
//!   granted, no one else uses the cluster, and it stops it while holding that lock (a
//!   newcomer waits, then starts the cluster anew); refused, a later leaver stops it;
//! - `.formica/start.lock`, held exclusively while a process creates or starts the
//!   cluster and joins the users, keeps two newcomers from both starting it.
//!
//! A cluster whose last user crashed keeps running until the next user leaves.
//!
//! As root, the server runs as `postgres` (PostgreSQL refuses root), which may not be able to
//! enter the project (root's home, anything under a `0700` folder), and whose socket, which
//! lets anyone who reaches it in as the superuser, must not sit where other users may reach
//! it. So root's clusters live outside the project, in [`ROOT_CLUSTERS`]`/<folder>-<hash of
//! the project's path>`, a folder `postgres` owns with mode `0700`, and `.formica/cluster`
//! points there (the locks stay in `.formica/`). A cluster made in `.formica/` before stays
//! there. Nothing along the project's path is opened up to `postgres`.

use formica_cli::server_programs::{is_root, run, ServerPrograms};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Where root's private clusters live, one folder each (see the module docs).
pub const ROOT_CLUSTERS: &str = "/var/lib/formica";

/// This process's use of the cluster, until [`Embedded::stop`].
pub struct Embedded {
    programs: ServerPrograms,
    /// `.formica/`, where the locks are.
    dir: PathBuf,
    /// The shared lock on `users.lock` that counts this process as a user.
    user: File,
}

impl Embedded {
    /// Start (or join) the cluster of `<cwd>/.formica` and return it with its connection
    /// string.
    pub fn start() -> Result<(Embedded, String), String> {
        let project = std::env::current_dir().map_err(|e| e.to_string())?;
        let dir = project.join(".formica");
        let cluster = cluster_folder(&project)?;
        let socket = cluster.join(".s.PGSQL.5432");
        if socket.as_os_str().len() > 100 {
            return Err(format!(
                "the private database's socket path {} is too long for a Unix socket: run formica from a shorter path or pass -c",
                socket.display()
            ));
        }
        let programs = ServerPrograms::find(None, &cluster).ok_or(
            "no database given (-c, DATABASE_URL or PG* variables) and no PostgreSQL server binaries found \
             to start a private one: install them (Debian/Ubuntu: apt-get install postgresql) or pass -c <connection>",
        )?;
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // Released when this function returns, whatever it returns.
        let _starting = lock::exclusive(&dir.join("start.lock"))?;
        if cluster != dir {
            outside::prepare(&cluster, &dir.join("cluster"))?;
        }
        let data = programs.data();
        let created = !data.join("PG_VERSION").exists();
        if created {
            programs
                .initdb()
                .map_err(|e| format!("creating the private database in {}: {e}", cluster.display()))?;
        }
        // Waits while a leaving user stops the cluster.
        let user = lock::shared(&dir.join("users.lock"))?;
        let mut status = programs.command("pg_ctl");
        status.arg("-D").arg(&data).arg("status");
        let running = status.output().is_ok_and(|o| o.status.success());
        if !running {
            let log = cluster.join("server.log");
            let mut start = programs.command("pg_ctl");
            start.arg("-D").arg(&data).arg("-l").arg(&log).args(["-w", "-t", "60", "-o"]);
            start.arg(format!("-c listen_addresses='' -k {}", cluster.display()));
            start.arg("start");
            run(start, &format!("starting the private database (see {})", log.display()))?;
        }
        // Said once, when it is created; its starts and stops on each command are routine.
        if created {
            tracing::info!(
                folder = %cluster.display(),
                "no connection given: created the private PostgreSQL database of .formica/ (Unix socket \
                 only), which every formica command in this folder uses"
            );
        }
        tracing::debug!(folder = %cluster.display(), reused = running, "using the private database");
        let url = format!("host={} port=5432 user=postgres dbname=postgres", cluster.display());
        Ok((Embedded { programs, dir, user }, url))
    }

    /// Leave the cluster, stopping it if no other process uses it.
    pub fn stop(self) {
        drop(self.user);
        let users = self.dir.join("users.lock");
        let alone = match lock::try_exclusive(&users) {
            Ok(alone) => alone,
            Err(e) => {
                tracing::warn!("{e}: the private database is left running");
                return;
            }
        };
        let Some(_alone) = alone else {
            tracing::debug!("the private database is left running for the other formica processes using it");
            return;
        };
        let mut stop = self.programs.command("pg_ctl");
        stop.arg("-D").arg(self.programs.data()).args(["-m", "fast", "-w", "stop"]);
        match run(stop, "stopping the private database") {
            Ok(()) => tracing::debug!("stopped the private database"),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}

/// The folder of the cluster of `project`: its `.formica/`, or as root (unless a cluster is
/// there already) a folder of [`ROOT_CLUSTERS`] named after the project's path.
fn cluster_folder(project: &Path) -> Result<PathBuf, String> {
    let dir = project.join(".formica");
    if dir.join("data").exists() || !is_root() {
        return Ok(dir);
    }
    let path =
        std::fs::canonicalize(project).map_err(|e| format!("cannot resolve {}: {e}", project.display()))?;
    let name: String = path
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || "_-".contains(*c))
                .take(32)
                .collect()
        })
        .unwrap_or_default();
    // FNV-1a: the same path gives the same folder with every build.
    let hash = path
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    Ok(Path::new(ROOT_CLUSTERS).join(format!("{name}-{hash:016x}")))
}

/// Root's clusters outside the project (see the module docs).
#[cfg(unix)]
mod outside {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Make [`ROOT_CLUSTERS`] traversable (not listable) by `postgres`, and `pointer` a link
    /// to `cluster` (initdb makes `cluster` itself, `postgres`'s, `0700`).
    pub fn prepare(cluster: &Path, pointer: &Path) -> Result<(), String> {
        let parent = cluster.parent().unwrap_or(cluster);
        std::fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o711))
            .map_err(|e| format!("cannot set the mode of {}: {e}", parent.display()))?;
        if std::fs::read_link(pointer).is_ok_and(|target| target == cluster) {
            return Ok(());
        }
        let _ = std::fs::remove_file(pointer);
        std::os::unix::fs::symlink(cluster, pointer)
            .map_err(|e| format!("cannot link {} to {}: {e}", pointer.display(), cluster.display()))
    }
}

#[cfg(not(unix))]
mod outside {
    use super::*;

    pub fn prepare(_: &Path, _: &Path) -> Result<(), String> {
        Err("the private database needs a Unix system: pass -c <connection>".into())
    }
}

/// Advisory whole-file locks (`flock`), held as long as the returned file is open.
#[cfg(unix)]
mod lock {
    use super::*;
    use rustix::fs::{flock, FlockOperation};

    fn open(path: &Path) -> Result<File, String> {
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| format!("cannot open the lock file {}: {e}", path.display()))
    }

    fn lock(path: &Path, operation: FlockOperation) -> Result<File, String> {
        let file = open(path)?;
        flock(&file, operation).map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
        Ok(file)
    }

    /// Wait for the lock that no one else may hold meanwhile.
    pub fn exclusive(path: &Path) -> Result<File, String> {
        lock(path, FlockOperation::LockExclusive)
    }

    /// Wait for a lock others may hold too, but not exclusively.
    pub fn shared(path: &Path) -> Result<File, String> {
        lock(path, FlockOperation::LockShared)
    }

    /// The exclusive lock if no one holds any lock on `path` now, else `None`.
    pub fn try_exclusive(path: &Path) -> Result<Option<File>, String> {
        let file = open(path)?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(file)),
            Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(format!("cannot lock {}: {e}", path.display())),
        }
    }
}

/// Without `flock`, processes cannot tell whether others use the cluster: refuse to run one.
#[cfg(not(unix))]
mod lock {
    use super::*;

    const UNSUPPORTED: &str =
        "the private database needs a Unix system: pass -c <connection>, DATABASE_URL or the PG* variables";

    pub fn exclusive(_: &Path) -> Result<File, String> {
        Err(UNSUPPORTED.into())
    }

    pub fn shared(_: &Path) -> Result<File, String> {
        Err(UNSUPPORTED.into())
    }

    pub fn try_exclusive(_: &Path) -> Result<Option<File>, String> {
        Err(UNSUPPORTED.into())
    }
}
