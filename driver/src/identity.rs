//! Who this process is, as each worker's heartbeat records it beside its lease: the host,
//! the process id and Formica's version, so an operator can tell workers apart and find
//! the process behind one (`formica status`, the dashboard's Workers page).

use std::sync::OnceLock;

/// The host, process and Formica version this process runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The host's name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`, else "unknown").
    pub host: String,
    /// The operating system's process id.
    pub pid: i32,
    /// Formica's crate version.
    pub version: &'static str,
}

/// This process's identity, read once.
pub fn process_identity() -> &'static ProcessIdentity {
    static IDENTITY: OnceLock<ProcessIdentity> = OnceLock::new();
    IDENTITY.get_or_init(|| ProcessIdentity {
        host: hostname(),
        // Process ids fit in PostgreSQL's integer on every platform Formica runs on.
        pid: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
        version: env!("CARGO_PKG_VERSION"),
    })
}

fn hostname() -> String {
    let from_kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    let from_env = || std::env::var("HOSTNAME").or_else(|_| std::env::var("COMPUTERNAME")).ok();
    from_kernel
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(from_env)
        .unwrap_or_else(|| "unknown".to_owned())
}
