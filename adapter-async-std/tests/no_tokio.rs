//! A full worker on async-std with no tokio runtime in the process: tasks see none, and
//! every job completes.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_async_std::{AsyncStdRuntime, RawJob};
use formica_tests::{numbered_job, timeout, TestDb};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_worker_runs_jobs_under_async_std_without_any_tokio_runtime() {
    assert!(tokio::runtime::Handle::try_current().is_err());
    async_std::task::block_on(async {
        let db = TestDb::migrated_on(Arc::new(AsyncStdRuntime)).await;
        let jobs: Vec<RawJob> = (0..50).map(|n| numbered_job("probe", n)).collect();
        db.utils().add_raw_jobs(&jobs).await.expect("add jobs");

        let ran_without_tokio = Arc::new(AtomicUsize::new(0));
        let seen = ran_without_tokio.clone();
        let worker = db
            .worker_options()
            .concurrency(4)
            .define_raw_job("probe", move |_, _| {
                let seen = seen.clone();
                async move {
                    if tokio::runtime::Handle::try_current().is_err() {
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(())
                }
            })
            .init()
            .await
            .expect("init");
        timeout(&AsyncStdRuntime, Duration::from_secs(30), worker.run_once())
            .await
            .expect("in time")
            .expect("ok");
        assert_eq!(ran_without_tokio.load(Ordering::SeqCst), 50);
        assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0);
    });
}
