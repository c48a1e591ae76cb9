//! Bringing a schema to the version this Formica needs, safely beside other migrators.
//!
//! The ledger (`<schema>.migrations`) is graphile-worker's: ids 1 to 20 with the same
//! breaking flags. Each unit of work runs in one transaction that first inserts its ledger
//! rows; a concurrent migrator (Formica or graphile-worker) blocks on that primary key and
//! then fails with `23505`, which here means "someone else applied it": we re-read the
//! ledger and go on. No advisory lock is needed, and graphile-worker does the same.
//!
//! graphile-worker applies one migration per transaction, so while it installs a fresh
//! database its ledger passes through ids Formica does not upgrade from. A ledger found
//! there is refused only once it stands still: we wait on the next id's ledger row as
//! graphile-worker's own migrators do (see `is_moving`).
//!
//! Formica's own records (worker leases) live in a schema of their own,
//! [`formica_sql::records_schema`], with its own ledger, migrated the same way once the
//! graphile-worker schema is current: graphile-worker's schema and ledger stay exactly
//! its own, and it keeps accepting the database.

use crate::error::MigrateError;
use formica_sql as sql;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

/// What [`WorkerUtils::migrate`](crate::WorkerUtils::migrate) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Ledger ids this call applied (others may have been applied concurrently).
    pub applied: Vec<i32>,
    /// The newest id in the ledger afterwards.
    pub latest: i32,
}

struct Probe {
    latest: Option<i32>,
    latest_breaking: Option<i32>,
}

/// Install or upgrade the schema named `schema` through `client`. A schema found current by
/// [`check`] (reads alone) is left untouched: no DDL, so no CREATE privilege is needed.
pub async fn migrate(client: &mut Client, schema: &str) -> Result<MigrationReport, MigrateError> {
    if let Ok(latest) = check(client, schema).await {
        return Ok(MigrationReport { applied: Vec::new(), latest });
    }
    // Anything else (missing parts, a ledger another migrator is moving) is decided below.
    let failed = |step: &str| {
        let step = step.to_owned();
        let schema = schema.to_owned();
        move |source| MigrateError::Failed { schema, step, source }
    };
    let mut applied = Vec::new();
    // Each pass applies one unit or learns that someone else did; the bound only guards
    // against a ledger that keeps changing under us.
    for _ in 0..64 {
        let probe = match probe(client, schema).await {
            Ok(probe) => probe?,
            Err(e) if is_missing(&e) => {
                bootstrap(client, schema).await.map_err(failed("creating the schema"))?;
                continue;
            }
            Err(e) => return Err(failed("reading the migrations ledger")(e)),
        };
        if let Some(breaking) = probe.latest_breaking.filter(|&b| b > sql::LATEST) {
            return Err(MigrateError::NewerBreaking {
                schema: schema.to_owned(),
                breaking,
                supported: sql::LATEST,
            });
        }
        let (ids, parts): (Vec<i32>, &[&str]) = match probe.latest {
            None => ((1..=sql::LATEST).collect(), sql::INSTALL),
            Some(found) if found < sql::OLDEST_UPGRADABLE => {
                if is_moving(client, schema, found).await.map_err(failed("waiting for another migrator"))? {
                    continue;
                }
                return Err(MigrateError::TooOld { schema: schema.to_owned(), found });
            }
            Some(found) => match sql::STEPS.iter().find(|s| s.id > found) {
                Some(step) => (vec![step.id], step.sql),
                None => {
                    if found > sql::LATEST {
                        tracing::warn!(
                            schema,
                            found,
                            supported = sql::LATEST,
                            "the schema has newer, non-breaking migrations than this Formica knows"
                        );
                    }
                    migrate_records(client, schema).await.map_err(failed("Formica's records schema"))?;
                    return Ok(MigrationReport { applied, latest: found });
                }
            },
        };
        let step = format!("migration {}", ids.last().copied().unwrap_or_default());
        if apply(client, schema, &ids, parts).await.map_err(failed(&step))? {
            tracing::info!(schema, migrations = ?ids, "applied migrations");
            applied.extend(ids);
        }
    }
    Err(MigrateError::Unsettled { schema: schema.to_owned() })
}

/// With reads alone, whether `schema` and its records schema have every migration this
/// Formica needs: the ledger's newest id if so, else [`MigrateError::NotMigrated`] naming
/// what is missing (or why the schema cannot be used at all).
pub async fn check(client: &Client, schema: &str) -> Result<i32, MigrateError> {
    let failed = |source| MigrateError::Failed {
        schema: schema.to_owned(),
        step: "reading the migrations ledger".to_owned(),
        source,
    };
    let probe = match probe(client, schema).await {
        Ok(probe) => probe?,
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_COLUMN) => {
            let lacking = format!("schema {schema} has a ledger older than graphile-worker 0.16's");
            return Err(not_migrated(client, schema, lacking).await);
        }
        Err(e) if is_missing(&e) => {
            return Err(not_migrated(client, schema, format!("no {schema} schema")).await)
        }
        Err(e) => return Err(failed(e)),
    };
    if let Some(breaking) = probe.latest_breaking.filter(|&b| b > sql::LATEST) {
        return Err(MigrateError::NewerBreaking {
            schema: schema.to_owned(),
            breaking,
            supported: sql::LATEST,
        });
    }
    let latest = match probe.latest {
        None => {
            return Err(
                not_migrated(client, schema, format!("no {schema} schema (its ledger is empty)")).await
            )
        }
        Some(found) if found < sql::OLDEST_UPGRADABLE => {
            return Err(MigrateError::TooOld { schema: schema.to_owned(), found })
        }
        Some(found) if found < sql::LATEST => {
            let missing: Vec<i32> = (found + 1..=sql::LATEST).collect();
            let lacking = format!("schema {schema} lacks {}", migrations(&missing));
            return Err(not_migrated(client, schema, lacking).await);
        }
        Some(found) => found,
    };
    let records = sql::records_schema(schema);
    let applied: Vec<i32> =
        match client.query_typed(&sql::render(sql::migrate::RECORDS_APPLIED, schema), &[]).await {
            Ok(rows) => rows.iter().map(|row| row.try_get(0)).collect::<Result<_, _>>().map_err(failed)?,
            Err(e) if is_missing(&e) => Vec::new(),
            Err(e) => return Err(failed(e)),
        };
    let missing: Vec<i32> =
        sql::RECORDS_STEPS.iter().map(|step| step.id).filter(|id| !applied.contains(id)).collect();
    if missing.is_empty() {
        Ok(latest)
    } else {
        let lacking = format!("Formica's records schema {records} lacks its {}", migrations(&missing));
        Err(not_migrated(client, schema, lacking).await)
    }
}

/// "migration 20", "migrations 19, 20".
fn migrations(ids: &[i32]) -> String {
    let each: Vec<String> = ids.iter().map(i32::to_string).collect();
    format!("migration{} {}", if ids.len() == 1 { "" } else { "s" }, each.join(", "))
}

/// [`MigrateError::NotMigrated`] for `lacking`, naming the database (when it can be read).
async fn not_migrated(client: &Client, schema: &str, lacking: String) -> MigrateError {
    let database = match client.query_typed_one("select current_database()", &[]).await {
        Ok(row) => row.try_get(0).unwrap_or_default(),
        Err(_) => String::new(),
    };
    MigrateError::NotMigrated { schema: schema.to_owned(), database, lacking }
}

async fn probe(client: &Client, schema: &str) -> Result<Result<Probe, MigrateError>, tokio_postgres::Error> {
    // Unnamed statements throughout (query_typed): safe behind pgBouncer in transaction mode.
    let row = client.query_typed_one(&sql::render(sql::migrate::PROBE, schema), &[]).await?;
    let version: i32 = row.try_get("server_version_num")?;
    if version < 120_000 {
        return Ok(Err(MigrateError::ServerTooOld(version)));
    }
    Ok(Ok(Probe { latest: row.try_get("latest")?, latest_breaking: row.try_get("latest_breaking")? }))
}

/// The schema or its ledger does not exist yet.
fn is_missing(e: &tokio_postgres::Error) -> bool {
    matches!(e.code(), Some(c) if *c == SqlState::UNDEFINED_TABLE || *c == SqlState::UNDEFINED_COLUMN || *c == SqlState::INVALID_SCHEMA_NAME)
}

/// Another session created or inserted the same object at the same moment.
fn is_clash(e: &tokio_postgres::Error) -> bool {
    matches!(e.code(), Some(c) if *c == SqlState::UNIQUE_VIOLATION || *c == SqlState::DUPLICATE_SCHEMA
        || *c == SqlState::DUPLICATE_TABLE || *c == SqlState::DUPLICATE_OBJECT)
}

async fn bootstrap(client: &Client, schema: &str) -> Result<(), tokio_postgres::Error> {
    let result = async {
        client.batch_execute(&sql::render(sql::migrate::BOOTSTRAP, schema)).await?;
        let breaking = sql::BREAKING.to_vec();
        client
            .query_typed(&sql::render(sql::migrate::MARK_BREAKING, schema), &[(&breaking, Type::INT4_ARRAY)])
            .await?;
        Ok(())
    }
    .await;
    match result {
        Err(e) if is_clash(&e) => Ok(()),
        other => other,
    }
}

/// How often, and how long apart, [`is_moving`] looks for a migrator between two of its
/// transactions.
const MOVING_CHECKS: usize = 10;
const MOVING_PAUSE: &str = "select pg_sleep(0.1)";

/// Whether a ledger seen at `found` is being walked up by another migrator. Recording the
/// next id (in a transaction rolled back at once) waits for a migrator whose row for it is
/// not committed yet, and clashes once it is; between its transactions, the ledger is
/// looked at again a few times over about a second.
async fn is_moving(client: &mut Client, schema: &str, found: i32) -> Result<bool, tokio_postgres::Error> {
    let next = found + 1;
    for _ in 0..MOVING_CHECKS {
        let tx = client.transaction().await?;
        let breaking = sql::BREAKING.contains(&next);
        let (ids, flags) = (vec![next], vec![breaking]);
        let record = [(&ids as &(dyn ToSql + Sync), Type::INT4_ARRAY), (&flags, Type::BOOL_ARRAY)];
        match tx.query_typed(&sql::render(sql::migrate::RECORD, schema), &record).await {
            Err(e) if is_clash(&e) => return Ok(true),
            other => other?,
        };
        tx.rollback().await?;
        match probe(client, schema).await? {
            Ok(probe) if probe.latest != Some(found) => return Ok(true),
            _ => {}
        }
        client.batch_execute(MOVING_PAUSE).await?;
    }
    Ok(false)
}

/// Bring the records schema of `schema` up to date: each missing step in a transaction that
/// first records it (a concurrent migrator's clash means it applied the step).
async fn migrate_records(client: &mut Client, schema: &str) -> Result<(), tokio_postgres::Error> {
    match client.batch_execute(&sql::render(sql::migrate::RECORDS_BOOTSTRAP, schema)).await {
        Err(e) if is_clash(&e) => {}
        other => other?,
    }
    let applied: Vec<i32> = client
        .query_typed(&sql::render(sql::migrate::RECORDS_APPLIED, schema), &[])
        .await?
        .iter()
        .map(|row| row.try_get(0))
        .collect::<Result<_, _>>()?;
    for step in sql::RECORDS_STEPS.iter().filter(|step| !applied.contains(&step.id)) {
        let tx = client.transaction().await?;
        let record = sql::render(sql::migrate::RECORDS_RECORD, schema);
        match tx.query_typed(&record, &[(&step.id, Type::INT4)]).await {
            Err(e) if is_clash(&e) => continue,
            other => other?,
        };
        for part in step.sql {
            tx.batch_execute(&sql::render(part, schema)).await?;
        }
        tx.commit().await?;
        tracing::info!(schema, records_migration = step.id, "applied a migration of Formica's records");
    }
    Ok(())
}

/// Apply `parts` recorded as `ids` in one transaction. `Ok(false)`: another migrator
/// recorded them first.
async fn apply(
    client: &mut Client,
    schema: &str,
    ids: &[i32],
    parts: &[&str],
) -> Result<bool, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    let breaking: Vec<bool> = ids.iter().map(|id| sql::BREAKING.contains(id)).collect();
    let record = [(&ids as &(dyn ToSql + Sync), Type::INT4_ARRAY), (&breaking, Type::BOOL_ARRAY)];
    match tx.query_typed(&sql::render(sql::migrate::RECORD, schema), &record).await {
        Err(e) if is_clash(&e) => return Ok(false),
        other => other?,
    };
    for part in parts {
        tx.batch_execute(&sql::render(part, schema)).await?;
    }
    tx.query_typed(&sql::render(sql::migrate::NOTIFY, schema), &[(&ids, Type::INT4_ARRAY)]).await?;
    tx.commit().await?;
    Ok(true)
}
