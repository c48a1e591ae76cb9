//! A worker told not to migrate (`WorkerOptions::migrate(false)`) only reads the ledgers:
//! it starts on a current schema and, on one that lacks something, fails naming what is
//! missing and creates nothing.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{Error, MigrateError};
use formica_tests::TestDb;

/// `init` of a worker that may not migrate: its error's text, or `None` if it started.
async fn init_without_migrating(db: &TestDb) -> Option<String> {
    match db.worker_options().migrate(false).init().await {
        Ok(_) => None,
        Err(e @ Error::Migrate(MigrateError::NotMigrated { .. })) => Some(e.to_string()),
        Err(e) => panic!("not a NotMigrated error: {e}"),
    }
}

#[tokio::test]
async fn a_worker_told_not_to_migrate_names_the_missing_migration_and_creates_nothing() {
    let db = TestDb::new().await;
    let schemas = "select count(*) from pg_namespace where nspname like '%graphile_worker'";
    let missing = init_without_migrating(&db).await.expect("refused");
    let expected = format!(
        "no graphile_worker schema in database {}: run `formica --schema-only` to install it",
        db.name
    );
    assert_eq!(missing, expected);
    assert_eq!(db.count(schemas).await, 0, "nothing created");

    db.utils().migrate().await.unwrap();
    assert_eq!(init_without_migrating(&db).await, None, "a current schema is accepted");
    let client = db.client().await;
    client.batch_execute("delete from graphile_worker.migrations where id >= 19").await.unwrap();
    let behind = init_without_migrating(&db).await.expect("refused");
    assert!(behind.starts_with("schema graphile_worker lacks migrations 19, 20 in database"), "{behind}");
    client
        .batch_execute("insert into graphile_worker.migrations (id, breaking) values (19, true), (20, false)")
        .await
        .unwrap();

    client.batch_execute("delete from formica_graphile_worker.migrations where id = 2").await.unwrap();
    let records = init_without_migrating(&db).await.expect("refused");
    assert!(
        records.starts_with("Formica's records schema formica_graphile_worker lacks its migration 2 in"),
        "{records}"
    );
    client.batch_execute("drop schema formica_graphile_worker cascade").await.unwrap();
    let records = init_without_migrating(&db).await.expect("refused");
    assert!(
        records.starts_with("Formica's records schema formica_graphile_worker lacks its migrations 1, 2"),
        "{records}"
    );
    assert_eq!(db.count(schemas).await, 1, "the records schema was not created again");

    client.batch_execute("alter table graphile_worker.migrations drop column breaking").await.unwrap();
    let old = init_without_migrating(&db).await.expect("refused");
    assert!(
        old.starts_with("schema graphile_worker has a ledger older than graphile-worker 0.16's in"),
        "{old}"
    );
    // Migrating mends both.
    db.utils().migrate().await.unwrap();
    assert_eq!(init_without_migrating(&db).await, None, "current again");
}
