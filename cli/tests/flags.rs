//! Routing by flags from the command line: `--accepted-flags` and `--forbidden-flags`
//! reach the worker, on a real PostgreSQL.

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica_tests::TestDb;
use formica_tokio::JobSpec;
use std::process::Command;

#[tokio::test]
async fn a_worker_started_with_flag_lists_runs_only_the_jobs_they_admit() {
    use std::os::unix::fs::PermissionsExt;
    let db = TestDb::migrated().await;
    let dir = std::env::temp_dir().join(format!("formica-cli-flags-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let task = dir.join("t.sh");
    std::fs::write(&task, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&task, std::fs::Permissions::from_mode(0o755)).unwrap();
    let utils = db.utils();
    let mut left = Vec::new();
    for (flags, runs) in
        [(&["gpu"][..], true), (&["eu"], true), (&["gpu", "slow"], false), (&["cpu"], false), (&[], false)]
    {
        let spec = JobSpec::builder().flags(flags.iter().copied()).build();
        let job = utils.add_raw_job("t", serde_json::json!({}), spec).await.unwrap();
        if !runs {
            left.push(job.id);
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_formica"))
        .args(["-c", &db.url, "--once", "--tasks", dir.to_str().unwrap()])
        .args(["--accepted-flags", "gpu,eu", "--forbidden-flags", "slow"])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run formica");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = db.client().await.query("select id from graphile_worker.jobs order by id", &[]).await.unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, left, "only the jobs with gpu or eu and without slow ran");
    let _ = std::fs::remove_dir_all(dir);
}
