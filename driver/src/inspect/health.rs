//! The queue's health, read from PostgreSQL's catalogs and statistics: what holds back
//! vacuum's horizon (and which backend), dead rows, bloat, autovacuum falling behind, the
//! fetch's cost, and the schema drifting from graphile-worker 0.18's. Each check has a
//! [`Severity`] by [`Thresholds`], a summary and its evidence; `formica doctor`, the
//! metrics and the dashboard's banner show the same [`Health`].
//!
//! Every statement reads catalog views and statistics only (`formica_sql::health`): no
//! table is scanned and no lock taken, so a check costs the same on a table of a million
//! jobs as on an empty one. A check that cannot be read (a missing privilege) says so in
//! its own result, as a warning, and the others are still made.

use super::query::{get, read};
use crate::utils::WorkerUtils;
use crate::Error;
use formica_sql as sql;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_postgres::types::Type;
use tokio_postgres::Row;

/// How wrong a check found things, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Nothing to do.
    Ok,
    /// This database cannot tell (pg_stat_statements is not installed, the schema is newer
    /// than this Formica): the summary says why.
    Unknown,
    /// Look at it soon.
    Warning,
    /// Act now: the queue is or will soon be slowed down or broken.
    Critical,
}

impl Severity {
    /// Its name: `ok`, `unknown`, `warning`, `critical`.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Unknown => "unknown",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// As a metric's value: 0 ok or unknown, 1 warning, 2 critical.
    pub fn level(self) -> u64 {
        match self {
            Severity::Ok | Severity::Unknown => 0,
            Severity::Warning => 1,
            Severity::Critical => 2,
        }
    }
}

/// The checks, in the order they are made and shown.
pub const CHECKS: [&str; 6] = ["horizon", "dead_rows", "autovacuum", "bloat", "fetch_cost", "schema"];

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// Which check (one of [`CHECKS`]).
    pub name: &'static str,
    /// How wrong things are.
    pub severity: Severity,
    /// One line for people.
    pub summary: String,
    /// The check's measure, the one its metric reports (see each check in
    /// docs/guide/health.md): seconds, rows, bytes, buffers or differences; `None` when
    /// nothing was measured.
    pub value: Option<f64>,
    /// What was seen, a line each: the backends, tables, indexes and facts behind the
    /// severity.
    pub evidence: Vec<String>,
}

/// Every check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Health {
    /// In the order of [`CHECKS`].
    pub checks: Vec<Check>,
}

impl Health {
    /// The worst severity of any check.
    pub fn worst(&self) -> Severity {
        self.checks.iter().map(|check| check.severity).max().unwrap_or(Severity::Ok)
    }

    /// The checks that found something wrong (a warning or worse).
    pub fn wrong(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|check| check.severity >= Severity::Warning)
    }

    /// The check `name`, if made.
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|check| check.name == name)
    }
}

/// When each check warns and when it is critical. The defaults suit a queue whose jobs
/// take seconds to minutes; a queue of long jobs may raise the horizon's.
#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// A transaction (or snapshot, or prepared transaction) open this long warns...
    pub horizon_warning: Duration,
    /// ...and this long is critical.
    pub horizon_critical: Duration,
    /// A horizon holder this many transactions old warns (slots have no time)...
    pub horizon_xids_warning: i64,
    /// ...and this many is critical.
    pub horizon_xids_critical: i64,
    /// A replication slot keeping this many bytes of WAL warns (a standby or subscriber
    /// behind, or a slot nobody reads any more)...
    pub slot_wal_warning: i64,
    /// ...and this many is critical.
    pub slot_wal_critical: i64,
    /// Dead rows count only from this many on (a small table's are nothing).
    pub dead_rows_min: i64,
    /// Dead rows at this share of the live ones warn...
    pub dead_ratio_warning: f64,
    /// ...and at this share are critical.
    pub dead_ratio_critical: f64,
    /// Bloat counts only from this many bytes on.
    pub bloat_min_bytes: i64,
    /// A relation this share of which is bloat warns (an index filled by inserts settles
    /// half to two thirds full, so up to about half is normal)...
    pub bloat_ratio_warning: f64,
    /// ...and this share is critical.
    pub bloat_ratio_critical: f64,
    /// A table past autovacuum's trigger point and not vacuumed for this long is behind.
    pub autovacuum_behind: Duration,
    /// A fetch reading this many buffers on average warns...
    pub fetch_buffers_warning: f64,
    /// ...and this many is critical.
    pub fetch_buffers_critical: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            horizon_warning: Duration::from_secs(5 * 60),
            horizon_critical: Duration::from_secs(60 * 60),
            horizon_xids_warning: 10_000_000,
            horizon_xids_critical: 100_000_000,
            slot_wal_warning: 1 << 30,
            slot_wal_critical: 10 << 30,
            dead_rows_min: 10_000,
            dead_ratio_warning: 0.2,
            dead_ratio_critical: 1.0,
            bloat_min_bytes: 64 << 20,
            bloat_ratio_warning: 0.6,
            bloat_ratio_critical: 0.8,
            autovacuum_behind: Duration::from_secs(10 * 60),
            fetch_buffers_warning: 1_000.0,
            fetch_buffers_critical: 10_000.0,
        }
    }
}

/// The jobs table, whose health matters most.
const JOBS_TABLE: &str = "_private_jobs";

/// Make every check on the schema of `utils`.
pub async fn health(utils: &WorkerUtils, thresholds: &Thresholds) -> Result<Health, Error> {
    let t = thresholds;
    let tables = read(utils, sql::health::TABLES, &[(&utils.schema(), Type::TEXT)]).await;
    let tables = tables.and_then(|rows| rows.iter().map(Relation::from_row).collect::<Result<Vec<_>, _>>());
    let checks = vec![
        unreadable("horizon", horizon(utils, t).await),
        unreadable("dead_rows", tables.as_ref().map(|tables| dead_rows(tables, t)).map_err(again)),
        unreadable(
            "autovacuum",
            match &tables {
                Ok(tables) => autovacuum(utils, tables, t).await,
                Err(e) => Err(again(e)),
            },
        ),
        unreadable("bloat", tables.as_ref().map(|tables| bloat(tables, t)).map_err(again)),
        unreadable("fetch_cost", fetch_cost(utils, t).await),
        unreadable("schema", schema(utils).await),
    ];
    Ok(Health { checks })
}

/// A check that could not be made is a warning saying why.
fn unreadable(name: &'static str, check: Result<Check, Error>) -> Check {
    check.unwrap_or_else(|e| Check {
        name,
        severity: Severity::Warning,
        summary: format!("could not be read: {e}"),
        value: None,
        evidence: vec![],
    })
}

/// The error `e` again, as text, for a second check that read the same failed statement.
fn again(e: &Error) -> Error {
    Error::Row(e.to_string())
}

/// `seconds` for people: `42 s`, `12 min`, `3 h`, `2 d`.
fn span(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

/// `bytes` for people: `512 B`, `12.3 MB`.
fn size(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let (mut value, mut unit) = (bytes, 0);
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// The check named `name` from its `findings` (severity and evidence each), with `ok` as
/// its summary when none is wrong.
fn judged(name: &'static str, findings: Vec<(Severity, String)>, value: Option<f64>, ok: String) -> Check {
    let severity = findings.iter().map(|(severity, _)| *severity).max().unwrap_or(Severity::Ok);
    let wrong = findings.iter().filter(|(s, _)| *s >= Severity::Warning).count();
    let summary = match severity {
        Severity::Ok | Severity::Unknown => ok,
        _ => {
            let first =
                findings.iter().find(|(s, _)| *s == severity).map(|(_, e)| e.as_str()).unwrap_or_default();
            match wrong {
                1 => first.to_owned(),
                n => format!("{first} (and {} more)", n - 1),
            }
        }
    };
    let evidence =
        findings.into_iter().map(|(severity, line)| format!("{}: {line}", severity.name())).collect();
    Check { name, severity, summary, value, evidence }
}

/// The oldest transactions, prepared transactions and replication slots that hold back
/// vacuum's horizon in this database.
async fn horizon(utils: &WorkerUtils, t: &Thresholds) -> Result<Check, Error> {
    let rows = read(utils, sql::health::HORIZON, &[]).await?;
    let mut findings = Vec::new();
    let mut oldest: Option<f64> = None;
    for row in &rows {
        let kind: String = get(row, "kind")?;
        let holder: String = get(row, "holder")?;
        let state: Option<String> = get(row, "state")?;
        let age: Option<f64> = get(row, "age_seconds")?;
        let xids: Option<i64> = get(row, "xid_age")?;
        let wal: Option<i64> = get(row, "retained_wal_bytes")?;
        oldest = match (oldest, age) {
            (Some(o), Some(a)) => Some(o.max(a)),
            (o, a) => o.or(a),
        };
        let by_age = match age {
            Some(a) if a >= t.horizon_critical.as_secs_f64() => Severity::Critical,
            Some(a) if a >= t.horizon_warning.as_secs_f64() => Severity::Warning,
            _ => Severity::Ok,
        };
        let by_xids = match xids {
            Some(x) if x >= t.horizon_xids_critical => Severity::Critical,
            Some(x) if x >= t.horizon_xids_warning => Severity::Warning,
            _ => Severity::Ok,
        };
        let by_wal = match wal {
            Some(w) if w >= t.slot_wal_critical => Severity::Critical,
            Some(w) if w >= t.slot_wal_warning => Severity::Warning,
            _ => Severity::Ok,
        };
        let severity = by_age.max(by_xids).max(by_wal);
        let mut line = match kind.as_str() {
            "session" => {
                let application: Option<String> = get(row, "application_name")?;
                let backend: Option<String> = get(row, "backend_type")?;
                format!(
                    "session pid {holder} ({}application_name {:?}, {}): transaction open {}",
                    backend.filter(|b| b != "client backend").map(|b| format!("{b}, ")).unwrap_or_default(),
                    application.unwrap_or_default(),
                    state.unwrap_or_else(|| "state hidden".into()),
                    age.map_or_else(|| "for an unknown time".into(), span)
                )
            }
            "prepared" => format!(
                "prepared transaction {holder:?}: prepared {} ago (COMMIT PREPARED or ROLLBACK PREPARED it)",
                age.map_or_else(|| "an unknown time".into(), span)
            ),
            _ => {
                let slot_type: Option<String> = get(row, "backend_type")?;
                format!(
                    "{} replication slot {holder:?} ({}){}",
                    slot_type.unwrap_or_default(),
                    state.unwrap_or_default(),
                    wal.map(|w| format!(": keeps {} of WAL", size(w as f64))).unwrap_or_default()
                )
            }
        };
        if let Some(x) = xids {
            line.push_str(&format!(", {x} transactions behind"));
        }
        if let Ok(Some(query)) = get::<Option<String>>(row, "query") {
            if !query.is_empty() && kind == "session" {
                line.push_str(&format!("; last query: {query}"));
            }
        }
        // Short transactions come and go: only those past a threshold are evidence.
        if severity >= Severity::Warning {
            findings.push((severity, line));
        }
    }
    let ok = match oldest {
        Some(age) => format!("the oldest transaction holding the horizon is {} old", span(age)),
        None => "nothing holds vacuum's horizon back".to_owned(),
    };
    Ok(judged("horizon", findings, Some(oldest.unwrap_or(0.0)), ok))
}

/// A table or index of the schema as `tables.sql` reads it.
#[derive(Debug, Clone)]
struct Relation {
    kind: String,
    name: String,
    table: String,
    bytes: i64,
    packed_bytes: Option<i64>,
    live_rows: Option<i64>,
    dead_rows: Option<i64>,
    vacuum_age_seconds: Option<f64>,
    autovacuum_threshold: Option<i64>,
    autovacuum_enabled: Option<bool>,
}

impl Relation {
    fn from_row(row: &Row) -> Result<Relation, Error> {
        Ok(Relation {
            kind: get(row, "kind")?,
            name: get(row, "name")?,
            table: get(row, "table_name")?,
            bytes: get(row, "bytes")?,
            packed_bytes: get(row, "packed_bytes")?,
            live_rows: get(row, "live_rows")?,
            dead_rows: get(row, "dead_rows")?,
            vacuum_age_seconds: get(row, "vacuum_age_seconds")?,
            autovacuum_threshold: get(row, "autovacuum_threshold")?,
            autovacuum_enabled: get(row, "autovacuum_enabled")?,
        })
    }

    /// Bytes beyond its packed estimate, if known.
    fn bloat(&self) -> Option<i64> {
        self.packed_bytes.map(|packed| (self.bytes - packed).max(0))
    }
}

/// Dead rows of each table against its live ones.
fn dead_rows(tables: &[Relation], t: &Thresholds) -> Check {
    let mut findings = Vec::new();
    let mut jobs_dead = None;
    for table in tables.iter().filter(|r| r.kind == "table") {
        let (Some(dead), live) = (table.dead_rows, table.live_rows.unwrap_or(0)) else { continue };
        if table.name == JOBS_TABLE {
            jobs_dead = Some(dead as f64);
        }
        if dead < t.dead_rows_min {
            continue;
        }
        let ratio = dead as f64 / (live.max(1)) as f64;
        let severity = match ratio {
            r if r >= t.dead_ratio_critical => Severity::Critical,
            r if r >= t.dead_ratio_warning => Severity::Warning,
            _ => Severity::Ok,
        };
        findings.push((severity, format!("table {}: {dead} dead rows beside {live} live", table.name)));
    }
    let ok = format!("{} dead rows in the jobs table", jobs_dead.unwrap_or(0.0));
    judged("dead_rows", findings, jobs_dead, ok)
}

/// Tables past autovacuum's trigger point that it has not vacuumed for a while, or may not.
async fn autovacuum(utils: &WorkerUtils, tables: &[Relation], t: &Thresholds) -> Result<Check, Error> {
    // A table never vacuumed is behind only once the server has been up long enough.
    let rows =
        read(utils, "select extract(epoch from now() - pg_postmaster_start_time())::float8 as up", &[])
            .await?;
    let up: f64 = rows.first().map(|row| get(row, "up")).transpose()?.unwrap_or(0.0);
    let mut findings = Vec::new();
    let mut jobs_age = None;
    for table in tables.iter().filter(|r| r.kind == "table") {
        let (Some(dead), Some(threshold)) = (table.dead_rows, table.autovacuum_threshold) else { continue };
        let age = table.vacuum_age_seconds.unwrap_or(up);
        if table.name == JOBS_TABLE {
            jobs_age = table.vacuum_age_seconds;
        }
        if dead <= threshold {
            continue;
        }
        let last = table
            .vacuum_age_seconds
            .map_or_else(|| "never vacuumed".into(), |a| format!("last vacuumed {} ago", span(a)));
        if table.autovacuum_enabled == Some(false) {
            findings.push((
                Severity::Warning,
                format!("table {}: autovacuum is off, and {dead} dead rows are past its trigger point of {threshold} ({last})", table.name),
            ));
        } else if age >= t.autovacuum_behind.as_secs_f64() {
            findings.push((
                Severity::Warning,
                format!(
                    "table {}: {dead} dead rows are past autovacuum's trigger point of {threshold}, {last}",
                    table.name
                ),
            ));
        }
    }
    let ok = match jobs_age {
        Some(age) => format!("the jobs table was last vacuumed {} ago", span(age)),
        None => "autovacuum keeps up".to_owned(),
    };
    Ok(judged("autovacuum", findings, jobs_age, ok))
}

/// Tables and indexes much bigger than their packed estimate.
fn bloat(relations: &[Relation], t: &Thresholds) -> Check {
    let mut findings = Vec::new();
    let mut most: Option<i64> = None;
    for relation in relations {
        let Some(bloat) = relation.bloat() else { continue };
        most = Some(most.map_or(bloat, |m| m.max(bloat)));
        if bloat < t.bloat_min_bytes || relation.bytes == 0 {
            continue;
        }
        let ratio = bloat as f64 / relation.bytes as f64;
        let severity = match ratio {
            r if r >= t.bloat_ratio_critical => Severity::Critical,
            r if r >= t.bloat_ratio_warning => Severity::Warning,
            _ => Severity::Ok,
        };
        let of =
            if relation.kind == "index" { format!(" of table {}", relation.table) } else { String::new() };
        findings.push((
            severity,
            format!(
                "{} {}{of}: {} of which about {} ({:.0}%) is bloat",
                relation.kind,
                relation.name,
                size(relation.bytes as f64),
                size(bloat as f64),
                ratio * 100.0
            ),
        ));
    }
    let ok = format!("at most {} of bloat in a table or index", size(most.unwrap_or(0) as f64));
    judged("bloat", findings, Some(most.unwrap_or(0) as f64), ok)
}

/// The indexes of the jobs table whose bloat is past the warning threshold, most bloated
/// first: what the reindexing chore rebuilds.
pub async fn bloated_indexes(utils: &WorkerUtils, t: &Thresholds) -> Result<Vec<String>, Error> {
    let rows = read(utils, sql::health::TABLES, &[(&utils.schema(), Type::TEXT)]).await?;
    let mut found: Vec<(i64, String)> = Vec::new();
    for row in &rows {
        let relation = Relation::from_row(row)?;
        let Some(bloat) = relation.bloat() else { continue };
        let bloated = relation.kind == "index"
            && relation.table == JOBS_TABLE
            && bloat >= t.bloat_min_bytes
            && relation.bytes > 0
            && bloat as f64 / relation.bytes as f64 >= t.bloat_ratio_warning;
        if bloated {
            found.push((bloat, relation.name));
        }
    }
    found.sort_by_key(|(bloat, _)| std::cmp::Reverse(*bloat));
    Ok(found.into_iter().map(|(_, name)| name).collect())
}

/// The fetch's average cost in buffers, from pg_stat_statements when it is installed.
async fn fetch_cost(utils: &WorkerUtils, t: &Thresholds) -> Result<Check, Error> {
    let installed = read(utils, sql::health::STAT_STATEMENTS, &[]).await?;
    let Some(schema) = installed.first().map(|row| get::<String>(row, "schema")).transpose()? else {
        return Ok(Check {
            name: "fetch_cost",
            severity: Severity::Unknown,
            summary:
                "pg_stat_statements is not installed in this database: the fetch's cost is not measured \
                      here (the workers' fetch duration metric is)"
                    .into(),
            value: None,
            evidence: vec![],
        });
    };
    let jobs = format!("{}.{JOBS_TABLE}", sql::quote_ident(utils.schema()));
    let limited = format!("{}.lock_jobs_controlled", sql::quote_ident(&sql::records_schema(utils.schema())));
    let rows =
        match read(utils, &sql::health::fetch_cost(&schema), &[(&jobs, Type::TEXT), (&limited, Type::TEXT)])
            .await
        {
            Ok(rows) => rows,
            // Installed but not loaded (shared_preload_libraries), or too old a version.
            Err(e) => {
                return Ok(Check {
                    name: "fetch_cost",
                    severity: Severity::Unknown,
                    summary: format!("pg_stat_statements cannot be read: {e}"),
                    value: None,
                    evidence: vec![],
                })
            }
        };
    let row = rows.first().ok_or_else(|| Error::Row("the fetch's cost answered no row".into()))?;
    let (calls, total_ms, buffers, jobs): (i64, f64, i64, i64) =
        (get(row, "calls")?, get(row, "total_ms")?, get(row, "buffers")?, get(row, "rows")?);
    if calls == 0 {
        return Ok(Check {
            name: "fetch_cost",
            severity: Severity::Ok,
            summary: "no fetch counted by pg_stat_statements yet".into(),
            value: None,
            evidence: vec![],
        });
    }
    let per_fetch = buffers as f64 / calls as f64;
    let severity = match per_fetch {
        b if b >= t.fetch_buffers_critical => Severity::Critical,
        b if b >= t.fetch_buffers_warning => Severity::Warning,
        _ => Severity::Ok,
    };
    let line = format!(
        "{calls} fetches read {per_fetch:.0} buffers and took {:.2} ms each on average, {:.1} jobs each",
        total_ms / calls as f64,
        jobs as f64 / calls as f64
    );
    Ok(Check {
        name: "fetch_cost",
        severity,
        summary: line.clone(),
        value: Some(per_fetch),
        evidence: vec![format!("{}: {line} (since pg_stat_statements was last reset)", severity.name())],
    })
}

/// The schema's indexes and functions against graphile-worker 0.18's.
async fn schema(utils: &WorkerUtils) -> Result<Check, Error> {
    let rows = read(utils, sql::inspect::SCHEMA_VERSION, &[]).await?;
    let version: Option<i32> = rows.first().map_or(Ok(None), |row| get(row, "latest"))?;
    if version.is_some_and(|v| v > sql::LATEST) {
        return Ok(Check {
            name: "schema",
            severity: Severity::Unknown,
            summary: format!(
                "the schema is at migration {}, newer than graphile-worker 0.18's {}: not compared",
                version.unwrap_or_default(),
                sql::LATEST
            ),
            value: None,
            evidence: vec![],
        });
    }
    let rows = read(utils, sql::health::SCHEMA_FACTS, &[(&utils.schema(), Type::TEXT)]).await?;
    let facts: Vec<String> = rows.iter().map(|row| get(row, "fact")).collect::<Result<_, _>>()?;
    let findings = drift(sql::health::EXPECTED, &facts);
    let value = Some(findings.len() as f64);
    Ok(judged("schema", findings, value, "graphile-worker 0.18's indexes and functions, unchanged".into()))
}

/// What differs between the `expected` facts (one a line) and the `actual` ones: a fact
/// missing or changed is critical, one that graphile-worker does not have a warning. A
/// function missing or added is one finding, not two (its body's).
pub(crate) fn drift(expected: &str, actual: &[String]) -> Vec<(Severity, String)> {
    fn by_key<'a>(facts: impl Iterator<Item = &'a str>) -> BTreeMap<&'a str, &'a str> {
        facts.filter(|f| !f.trim().is_empty()).map(|f| f.split_once(": ").unwrap_or((f, ""))).collect()
    }
    let expected = by_key(expected.lines());
    let actual = by_key(actual.iter().map(String::as_str));
    let function_of = |key: &str| key.strip_prefix("body ").map(|f| format!("function {f}"));
    let mut findings = Vec::new();
    for (key, definition) in &expected {
        match actual.get(key) {
            None if function_of(key).is_some_and(|f| !actual.contains_key(f.as_str())) => {}
            None => findings.push((Severity::Critical, format!("missing {key}: {definition}"))),
            Some(found) if found != definition => {
                findings.push((Severity::Critical, format!("changed {key}: {found}, expected {definition}")))
            }
            Some(_) => {}
        }
    }
    for (key, definition) in &actual {
        let extra =
            !expected.contains_key(key) && function_of(key).is_none_or(|f| expected.contains_key(f.as_str()));
        if extra {
            findings.push((Severity::Warning, format!("not graphile-worker 0.18's {key}: {definition}")));
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_names_what_is_missing_changed_or_added_once_per_function() {
        let expected =
            "index a: CREATE INDEX a ON t (x)\nfunction f(x int): returns int\nbody f(x int): md5 1\n";
        let same: Vec<String> = expected.lines().map(str::to_owned).collect();
        assert!(drift(expected, &same).is_empty());
        let actual = vec![
            "function f(x int): returns int".to_owned(),
            "body f(x int): md5 2".to_owned(),
            "function g(): returns void".to_owned(),
            "body g(): md5 3".to_owned(),
        ];
        let found = drift(expected, &actual);
        let lines: Vec<String> = found.iter().map(|(s, l)| format!("{} {l}", s.name())).collect();
        assert_eq!(
            lines,
            [
                "critical changed body f(x int): md5 2, expected md5 1",
                "critical missing index a: CREATE INDEX a ON t (x)",
                "warning not graphile-worker 0.18's function g(): returns void",
            ]
        );
    }

    #[test]
    fn spans_and_sizes_read_as_people_write_them() {
        assert_eq!(
            (span(42.0), span(600.0), span(7200.0), span(200_000.0)),
            ("42 s".into(), "10 min".into(), "2 h".into(), "2 d".into())
        );
        assert_eq!((size(512.0), size(3.5 * 1024.0 * 1024.0)), ("512 B".into(), "3.5 MB".into()));
    }
}
