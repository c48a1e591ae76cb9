//! Least privilege: the grants of docs/guide/deploying.md, run as written, let a worker role
//! and a read-only dashboard role do their work without CREATE anywhere, and no role issues
//! DDL on a current schema (an event trigger logs any) but the history pruner's day
//! partitions; and no subcommand
//! creates a schema: a mistyped schema or an unmigrated database is refused with a message.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use std::io::{Read, Write};
use std::process::Command;

use crate::common;
use common::{formica, ok};

fn as_role(db: &TestDb, role: &str) -> String {
    format!("{} user={}_{role}", db.url.split(" user=").next().unwrap(), db.name)
}

/// Serve `formica ui` on `url` with `args` and answer one GET of `path`, or, if it exits
/// instead of listening, its stderr.
fn ui_get(url: &str, args: &[&str], path: &str) -> Result<String, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let mut server = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", url, "ui", "--bind", &bind])
        .args(args)
        .env("RUST_LOG", "warn")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run formica ui");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut stream = loop {
        if server.try_wait().unwrap().is_some() {
            let mut stderr = String::new();
            server.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
            return Err(stderr);
        }
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "formica ui neither listened nor exited: {e}");
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
        }
    };
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {bind}\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let _ = server.kill();
    let _ = server.wait();
    Ok(answer)
}

/// The DDL statements logged by the test's event trigger: "role: tag".
/// The DDL logged, but the history pruner's day partitions (docs/guide/history.md), which it
/// creates and drops as the owner of the history through `prune_history`.
async fn ddl_issued(client: &formica_tokio::tokio_postgres::Client) -> Vec<String> {
    let rows = client
        .query(
            "select role || ': ' || tag from public.ddl_log
             where not (query like '%.prune_history(%' and tag in ('CREATE TABLE', 'DROP TABLE'))",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

async fn drop_roles(db: &TestDb) {
    let server = formica_tests::connect(
        db.runtime.as_ref(),
        &db.url.replace(&format!("dbname={}", db.name), "dbname=postgres"),
    )
    .await;
    for role in ["owner", "worker", "dashboard"] {
        let role = format!("{}_{role}", db.name);
        let _ = server.batch_execute(&format!("revoke all on database {} from {role}", db.name)).await;
        let _ = server.batch_execute(&format!("drop role if exists {role}")).await;
    }
}

#[tokio::test]
async fn the_guide_s_grants_let_a_worker_and_a_dashboard_role_work_without_create() {
    let db = TestDb::new().await;
    let [as_superuser, as_owner] = db.deploying_guide_grants();
    db.client().await.batch_execute(&as_superuser).await.expect("the guide's superuser grants");
    let (owner, worker, dashboard) =
        (as_role(&db, "owner"), as_role(&db, "worker"), as_role(&db, "dashboard"));
    assert_eq!(ok(&owner, &["--schema-only"]).trim(), "Schema updated");
    formica_tests::connect(db.runtime.as_ref(), &owner)
        .await
        .batch_execute(&as_owner)
        .await
        .expect("the guide's owner grants");
    let client = db.client().await;
    for role in ["worker", "dashboard"] {
        let role = format!("{}_{role}", db.name);
        let can_create = client
            .query_one(
                "select has_database_privilege($1, current_database(), 'CREATE, TEMP')
                   or has_schema_privilege($1, 'graphile_worker', 'CREATE')
                   or has_schema_privilege($1, 'formica_graphile_worker', 'CREATE')
                   or has_schema_privilege($1, 'public', 'CREATE')",
                &[&role],
            )
            .await
            .unwrap()
            .get::<_, bool>(0);
        assert!(!can_create, "{role} may create nothing, so it can issue no DDL");
    }

    // Every DDL statement from here on is logged, whoever issues it, even one that fails.
    client
        .batch_execute(
            "create table public.ddl_log (role text, tag text, query text);
             create function public.log_ddl() returns event_trigger language plpgsql security definer as
               $$ begin insert into public.ddl_log values (session_user, tg_tag, current_query()); end $$;
             create event trigger log_ddl on ddl_command_start execute function public.log_ddl();",
        )
        .await
        .unwrap();
    // The owner, who may create, issues no DDL either once the schema is current.
    ok(&owner, &["status"]);
    ok(&owner, &["--once", "--tasks", "."]);
    assert_eq!(ddl_issued(&client).await, Vec::<String>::new(), "the owner issued no DDL");

    // The worker role adds jobs, runs them, and cleans up; with --no-migrate or without.
    let dir = std::env::temp_dir().join(format!("formica-roles-{}", db.name));
    std::fs::create_dir_all(&dir).unwrap();
    let task = dir.join("done.sh");
    std::fs::write(&task, "#!/bin/sh\ncat > /dev/null\n").unwrap();
    std::fs::set_permissions(&task, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let tasks = dir.to_str().unwrap();
    for worker_args in [&["--once", "--tasks", tasks][..], &["--once", "--no-migrate", "--tasks", tasks]] {
        ok(&worker, &["add", "done", r#"{"n":1}"#, "--queue", "q"]);
        assert!(ok(&worker, &["jobs"]).contains("done"));
        ok(&worker, worker_args);
        assert_eq!(
            db.count("select count(*) from graphile_worker.jobs").await,
            0,
            "{worker_args:?} ran the job"
        );
    }
    ok(&worker, &["--cleanup", "GC_JOB_QUEUES,GC_TASK_IDENTIFIERS", "--tasks", tasks]);
    assert_eq!(db.count("select count(*) from graphile_worker._private_job_queues").await, 0, "cleaned up");
    let _ = std::fs::remove_dir_all(&dir);

    // The dashboard role looks, and may not change anything.
    let id = ok(&worker, &["add", "waiting", "--json"]);
    let id = serde_json::from_str::<serde_json::Value>(&id).unwrap()[0]["id"].as_i64().unwrap().to_string();
    assert!(ok(&dashboard, &["status"]).contains("waiting"));
    assert!(ok(&dashboard, &["jobs"]).contains("waiting"));
    assert!(ok(&dashboard, &["job", &id]).contains("waiting"));
    let overview = ui_get(&dashboard, &["--read-only"], "/api/overview").expect("the dashboard serves");
    assert!(overview.starts_with("HTTP/1.1 200") && overview.contains("\"totals\""), "{overview}");
    let refused = formica(&dashboard, &["add", "t"]);
    assert!(!refused.status.success(), "the dashboard role cannot add jobs");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("permission denied"));

    assert_eq!(ddl_issued(&client).await, Vec::<String>::new(), "no DDL once the schema is current");
    client.batch_execute("drop event trigger log_ddl").await.unwrap();
    // A role without select on the history is told what to grant, labelled once.
    let revoke = format!("revoke select on formica_graphile_worker.job_history from {}_dashboard", db.name);
    client.batch_execute(&revoke).await.unwrap();
    let history = ui_get(&dashboard, &["--read-only"], "/history").expect("the dashboard serves");
    let expected = "permission denied for table job_history: grant select on \
                    &quot;formica_graphile_worker&quot;.job_history to this role";
    assert!(history.starts_with("HTTP/1.1 500") && history.contains(expected), "{history}");
    assert!(!history.contains("database error"), "{history}");
    drop(client);
    let admin = db.client().await;
    let _ = admin
        .batch_execute("drop schema graphile_worker cascade; drop schema formica_graphile_worker cascade")
        .await;
    for role in ["owner", "worker", "dashboard"] {
        let _ = admin.batch_execute(&format!("drop owned by {}_{role}", db.name)).await;
    }
    drop(admin);
    drop_roles(&db).await;
}

#[tokio::test]
async fn a_mistyped_schema_or_an_unmigrated_database_is_refused_by_every_command_and_nothing_is_created() {
    let migrated = TestDb::migrated().await;
    let fresh = TestDb::new().await;
    let commands: [&[&str]; 12] = [
        &["jobs"],
        &["job", "1"],
        &["status"],
        &["add", "t"],
        &["complete", "1"],
        &["fail", "1"],
        &["cancel", "1"],
        &["reschedule", "1", "--priority", "1"],
        &["remove", "k"],
        &["unlock", "w"],
        &["--once", "--no-migrate", "--tasks", "."],
        &["--cleanup", "GC_JOB_QUEUES", "--no-migrate", "--tasks", "."],
    ];
    let schemas = "select count(*) from pg_namespace where nspname like '%graphile_w%'";
    for (db, schema) in [(&migrated, "graphile_wroker"), (&fresh, "graphile_worker")] {
        let before = db.count(schemas).await;
        let expected =
            format!("no {schema} schema in database {}: run `formica --schema-only` to install it", db.name);
        for command in commands {
            let out = formica(&db.url, &[&["-s", schema][..], command].concat());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{command:?} on {schema}: {stderr}");
            assert!(stderr.contains(&expected), "{command:?} on {schema}: {stderr}");
        }
        let ui = ui_get(&db.url, &["-s", schema, "--read-only"], "/api/overview").expect_err("ui refuses");
        assert!(ui.contains(&expected), "ui on {schema}: {ui}");
        assert_eq!(db.count(schemas).await, before, "no schema was created in {}", db.name);
    }
}
