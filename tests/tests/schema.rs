//! The migrated schema against graphile-worker 0.18's, and the migrator's behaviour on
//! fresh, partly migrated, too old, too new and concurrently migrated databases.

use formica_tests::{expected_ledger, ledger, reference_facts, schema_facts, TestDb};
use formica_tokio::{sql, JobSpec, MigrateError, MigrationReport};

fn diff(ours: &[String], reference: &[String]) -> String {
    let missing: Vec<_> = reference.iter().filter(|f| !ours.contains(f)).collect();
    let extra: Vec<_> = ours.iter().filter(|f| !reference.contains(f)).collect();
    format!("missing from ours:\n{missing:#?}\nnot in the reference:\n{extra:#?}")
}

#[tokio::test]
async fn fresh_install_matches_graphile_worker_018_structurally() {
    let reference = reference_facts().await;
    assert!(reference.len() > 60, "the fixture loaded: {} facts", reference.len());
    let db = TestDb::new().await;
    let report = db.utils().migrate().await.expect("migrate");
    assert_eq!(report.applied, (1..=20).collect::<Vec<_>>());
    assert_eq!(report.latest, 20);
    let client = db.client().await;
    let ours = schema_facts(&client, "graphile_worker").await;
    assert!(ours == reference, "{}", diff(&ours, &reference));
    assert_eq!(ledger(&client, "graphile_worker").await, expected_ledger());

    // Migrating again is a no-op.
    let again = db.utils().migrate().await.expect("migrate again");
    assert!(again.applied.is_empty());
    assert_eq!(schema_facts(&client, "graphile_worker").await, reference);
}

#[tokio::test]
async fn custom_schema_name_is_used_everywhere() {
    let reference = reference_facts().await;
    let db = TestDb::new().await;
    let utils = db.utils_for("Formica Jobs");
    utils.migrate().await.expect("migrate");
    let client = db.client().await;
    let ours = schema_facts(&client, "Formica Jobs").await;
    assert!(ours == reference, "{}", diff(&ours, &reference));
    let job = utils.add_raw_job("task", serde_json::json!({"a": 1}), JobSpec::default()).await.expect("add");
    assert_eq!(job.task_identifier, "task");
    let n: i64 = client.query_one("select count(*) from \"Formica Jobs\".jobs", &[]).await.unwrap().get(0);
    assert_eq!(n, 1);
    let other: bool = client
        .query_one("select exists (select 1 from pg_namespace where nspname = 'graphile_worker')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!other, "nothing was created in the default schema");
}

/// Rewind a freshly migrated schema to what graphile-worker leaves after migration 16:
/// no view, an insert trigger that notifies, and a ledger ending at 16.
async fn rewind_to_16(client: &tokio_postgres::Client) {
    client
        .batch_execute(
            r#"
            drop view graphile_worker.jobs;
            create function graphile_worker.tg_jobs__after_insert() returns trigger language plpgsql as $$
            begin perform pg_notify('jobs:insert', ''); return null; end; $$;
            create trigger _900_after_insert after insert on graphile_worker._private_jobs
              for each statement execute procedure graphile_worker.tg_jobs__after_insert();
            delete from graphile_worker.migrations where id > 16;
            "#,
        )
        .await
        .expect("rewind to 16");
}

#[tokio::test]
async fn a_database_at_16_gets_only_the_missing_steps_and_ends_equal() {
    let reference = reference_facts().await;
    let db = TestDb::migrated().await;
    let client = db.client().await;
    db.utils().add_raw_job("kept", serde_json::json!({"x": 1}), JobSpec::default()).await.unwrap();
    rewind_to_16(&client).await;
    assert!(schema_facts(&client, "graphile_worker")
        .await
        .iter()
        .any(|f| f.starts_with("trigger _900_after_insert")));

    let report = db.utils().migrate().await.expect("upgrade");
    assert_eq!(report.applied, vec![17, 18, 19, 20]);
    let ours = schema_facts(&client, "graphile_worker").await;
    assert!(ours == reference, "{}", diff(&ours, &reference));
    assert_eq!(ledger(&client, "graphile_worker").await, expected_ledger());
    let kept: i64 = client
        .query_one("select count(*) from graphile_worker.jobs where task_identifier = 'kept'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 1, "the job added before the upgrade survives it");
}

#[tokio::test]
async fn a_database_below_16_is_refused_with_what_to_do() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client.batch_execute("delete from graphile_worker.migrations where id >= 14").await.unwrap();
    let err = db.utils().migrate().await.expect_err("must refuse");
    match &err {
        formica_tokio::Error::Migrate(MigrateError::TooOld { found, .. }) => assert_eq!(*found, 13),
        other => panic!("unexpected error {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("migration 13") && text.contains("graphile-worker"), "{text}");
    assert_eq!(ledger(&client, "graphile_worker").await.len(), 13, "nothing was applied");
}

#[tokio::test]
async fn a_newer_breaking_migration_is_refused_and_a_newer_plain_one_accepted() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute("insert into graphile_worker.migrations (id, breaking) values (21, false)")
        .await
        .unwrap();
    let report = db.utils().migrate().await.expect("a newer non-breaking migration is accepted");
    assert_eq!(report.latest, 21);
    assert!(report.applied.is_empty());

    client
        .batch_execute("insert into graphile_worker.migrations (id, breaking) values (22, true)")
        .await
        .unwrap();
    let err = db.utils().migrate().await.expect_err("a newer breaking migration is refused");
    assert!(
        matches!(
            err,
            formica_tokio::Error::Migrate(MigrateError::NewerBreaking { breaking: 22, supported: 20, .. })
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("unsafe"), "{err}");
}

#[tokio::test]
async fn concurrent_migrators_each_migration_applied_exactly_once() {
    let reference = reference_facts().await;
    let db = TestDb::new().await;
    let mut handles = Vec::new();
    for _ in 0..8 {
        // Separate pools: separate sessions racing on one fresh database.
        let utils = db.utils();
        handles.push(tokio::spawn(async move { utils.migrate().await }));
    }
    let mut applied = Vec::new();
    for h in handles {
        let report = h.await.expect("join").expect("no migrator fails");
        assert_eq!(report.latest, 20);
        applied.extend(report.applied);
    }
    applied.sort();
    assert_eq!(applied, (1..=20).collect::<Vec<_>>(), "each migration applied by exactly one migrator");
    let client = db.client().await;
    assert_eq!(ledger(&client, "graphile_worker").await, expected_ledger());
    assert_eq!(schema_facts(&client, "graphile_worker").await, reference);
}

/// graphile-worker migrates a fresh database one migration per transaction, so a Formica
/// migrator starting meanwhile finds ledgers it does not upgrade from (below 16): it waits
/// for the other migrator instead of refusing. The other migrator is a session doing what
/// graphile-worker's does, a transaction per migration with its ledger row first (here the
/// whole schema comes with migration 15, and 16 to 20 are ledger rows alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrator_waits_for_graphile_worker_migrating_the_same_fresh_database() {
    let reference = reference_facts().await;
    let db = TestDb::new().await;
    let other = db.client().await;
    let record = |id: i32| {
        let breaking = expected_ledger()[id as usize - 1].1;
        format!("insert into graphile_worker.migrations (id, breaking) values ({id}, {breaking})")
    };
    other.batch_execute(&sql::render(sql::migrate::BOOTSTRAP, "graphile_worker")).await.unwrap();
    for id in 1..=14 {
        other.batch_execute(&record(id)).await.unwrap();
    }
    other.batch_execute("begin").await.unwrap();
    other.batch_execute(&record(15)).await.unwrap();
    for part in sql::INSTALL {
        other.batch_execute(&sql::render(part, "graphile_worker")).await.unwrap();
    }

    let utils = db.utils();
    let ours = tokio::spawn(async move { utils.migrate().await });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!ours.is_finished(), "Formica waits while migration 15 is being applied: {:?}", ours.await);
    // The rest of Node's migrations land before Formica looks again (one transaction here:
    // separate ones would let Formica, then past 16, race Node for the next ledger row).
    for id in 16..=20 {
        other.batch_execute(&record(id)).await.unwrap();
    }
    other.batch_execute("commit").await.unwrap();
    let report = ours.await.unwrap().expect("Formica's migrator waits, then finds the schema current");
    assert_eq!(report, MigrationReport { applied: vec![], latest: 20 });
    let client = db.client().await;
    assert_eq!(ledger(&client, "graphile_worker").await, expected_ledger());
    assert_eq!(schema_facts(&client, "graphile_worker").await, reference);
}

/// PostgreSQL JIT-compiles a plan whose estimated cost passes `jit_above_cost` at every
/// execution: the resolver's pass (every 2 s) spent up to a second of the server's CPU so,
/// and the functions that disable sequential scans are as exposed (records step 29). Every
/// function of the records schema that PostgreSQL cannot inline runs with JIT off (but the
/// controlled fetch's, run only where the fetch turned it off), under a schema name that
/// needs quoting too.
#[tokio::test]
async fn no_records_function_compiles_its_statements_with_jit() {
    let db = TestDb::new().await;
    db.utils_for("Formica Jobs").migrate().await.expect("migrate");
    let client = db.client().await;
    let rows = client
        .query(
            "select functions.proname, coalesce('jit=off' = any(functions.proconfig), false)
             from pg_proc as functions
             join pg_language as languages on languages.oid = functions.prolang
             where functions.pronamespace = '\"formica_Formica Jobs\"'::regnamespace
               and (languages.lanname = 'plpgsql' or (languages.lanname = 'sql' and functions.proconfig is not null))
               and functions.proname not in ('lock_jobs_controlled', 'fetched_names')",
            &[],
        )
        .await
        .unwrap();
    let names: Vec<String> = rows.iter().map(|row| row.get(0)).collect();
    assert!(names.iter().any(|name| name == "resolve_workflows"), "{names:?}");
    assert!(names.len() > 20, "the records schema's functions: {names:?}");
    let compiled: Vec<&String> =
        names.iter().zip(&rows).filter(|(_, row)| !row.get::<_, bool>(1)).map(|(n, _)| n).collect();
    assert!(compiled.is_empty(), "functions without jit = off: {compiled:?}");
}
