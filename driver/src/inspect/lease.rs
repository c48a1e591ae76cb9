//! A worker's lease as the read model shows it: who and where the worker is, and whether
//! it is alive; and the readiness probes answer from it.

use crate::rows::ResultRow;
use crate::utils::WorkerUtils;
use crate::Error;
use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

/// A Formica worker's lease: written by each of its heartbeats, deleted by the sweep that
/// frees a lapsed worker's jobs.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseSeen {
    /// The host it runs on (`None`: its last heartbeat predates records migration 3).
    pub host: Option<String>,
    /// Its process id on that host.
    pub pid: Option<i32>,
    /// Its Formica version.
    pub version: Option<String>,
    /// Its first heartbeat.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub heartbeat_at: DateTime<Utc>,
    /// Until when it is alive unless it renews.
    pub expires_at: DateTime<Utc>,
    /// When the worker stopped cleanly, ending its lease (`None`: it runs, or died).
    pub stopped_at: Option<DateTime<Utc>>,
    /// It expired without the worker stopping: it stopped renewing (killed, wedged or cut
    /// off) and the next sweep of a live worker frees what it holds.
    pub lapsed: bool,
    /// How many items its crontab has (`None`: it records none, running no crontab or
    /// predating records migration 4); the items are on the Cron page.
    pub cron_items: Option<usize>,
}

impl LeaseSeen {
    /// The lease in a row of `sql/queries/inspect/workers.sql` (`None`: the worker has
    /// none, as graphile-worker's).
    pub(crate) fn from_row(row: &Row) -> Result<Option<LeaseSeen>, Error> {
        let Some(expires_at) = row.read(row.column("lease_until")?)? else { return Ok(None) };
        let get = |name: &str| row.column(name);
        Ok(Some(LeaseSeen {
            host: row.read(get("host")?)?,
            pid: row.read(get("pid")?)?,
            version: row.read(get("version")?)?,
            started_at: row.read(get("started_at")?)?,
            heartbeat_at: row.read(get("heartbeat_at")?)?,
            expires_at,
            stopped_at: row.read(get("stopped_at")?)?,
            lapsed: row.read(get("lapsed")?)?,
            cron_items: row.read::<Option<String>>(get("crontab")?)?.map(|text| text.lines().count()),
        }))
    }
}

/// What a worker's lease says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its lease is live: it runs (unlocking its jobs would run them twice).
    Alive,
    /// It stopped cleanly and ended its lease; the sweep forgets it after its grace.
    Stopped,
    /// Its lease expired without its stopping: it died, or is cut off or wedged.
    Lapsed,
    /// It has no lease (graphile-worker's workers): only the locks it holds are seen.
    NoLease,
}

impl LeaseSeen {
    /// How the lease stands, in the words `formica status` and the Workers page both use,
    /// its moment written by `at`: "alive until …", "stopped at …" or "lapsed at …".
    pub fn state(&self, at: impl Fn(&DateTime<Utc>) -> String) -> String {
        match Liveness::of(Some(self)) {
            Liveness::Stopped => {
                format!("stopped at {}", self.stopped_at.as_ref().map_or("-".to_owned(), &at))
            }
            Liveness::Lapsed => format!("lapsed at {}", at(&self.expires_at)),
            Liveness::Alive | Liveness::NoLease => format!("alive until {}", at(&self.expires_at)),
        }
    }
}

impl Liveness {
    /// Of a worker with `lease`.
    pub fn of(lease: Option<&LeaseSeen>) -> Liveness {
        match lease {
            None => Liveness::NoLease,
            Some(l) if l.lapsed => Liveness::Lapsed,
            Some(l) if l.stopped_at.is_some() => Liveness::Stopped,
            Some(_) => Liveness::Alive,
        }
    }
}

/// Whether the database answers and, given a worker, that worker's lease holds by the
/// database clock: what `/readyz` reports. `Err` says why not, in a few words. The caller
/// bounds the wait (a cut connection can hang).
pub async fn readiness(utils: &WorkerUtils, worker_id: Option<&str>) -> Result<(), String> {
    let unreachable = |e: &dyn std::fmt::Display| format!("the database is unreachable: {e}");
    let client = utils.pool().get().await.map_err(|e| unreachable(&e))?;
    let Some(worker_id) = worker_id else {
        return client.simple_query("select 1").await.map(drop).map_err(|e| unreachable(&e));
    };
    let sql = formica_sql::render(formica_sql::inspect::LEASE_HOLDS, utils.schema());
    let rows = client.query_typed(&sql, &[(&worker_id, Type::TEXT)]).await.map_err(|e| unreachable(&e))?;
    match rows.first().map(|r| r.try_get::<_, bool>(0)) {
        Some(Ok(true)) => Ok(()),
        Some(Ok(false)) => Err(format!("the lease of worker {worker_id} lapsed")),
        Some(Err(e)) => Err(e.to_string()),
        None => Err(format!("worker {worker_id} holds no lease yet")),
    }
}
