//! A worker whose loop wedges loses its lease, and its jobs move to another worker. In a
//! test binary of its own, so that no other test holds the threads of async-std, whose
//! worker takes the job over.

use formica::{Event, JobSpec, Runtime};
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A worker whose loop wedges (a hook that blocks the loop's thread: not a real deadlock)
/// gives its lease up past its watchdog's limit: its job runs on another worker exactly
/// once more within the documented bound, and the wedged worker's late completion, written
/// when its loop turns again, is fenced off by the new run's lock.
#[test]
fn a_wedged_worker_loses_its_job_to_another_which_its_late_completion_cannot_touch() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let tokio: Arc<dyn Runtime> = Arc::new(formica_tokio::TokioRuntime);
        let db = TestDb::migrated_on(tokio.clone()).await;
        let watchdog = Duration::from_secs(2);
        let wedge = Duration::from_secs(50);
        let runs = Arc::new(Mutex::new(Vec::new()));
        let wedged_at = Arc::new(Mutex::new(None));
        let (ran, wedging) = (runs.clone(), wedged_at.clone());
        // The wedged worker, on tokio: its task succeeds at once, then its hook blocks the
        // loop's thread as the success is reported.
        let options = db
            .worker_options()
            .watchdog(watchdog)
            .define_raw_job("once", move |ctx, _| {
                ran.lock().unwrap().push(("a", ctx.job().attempts));
                async { Ok(()) }
            })
            .on_event(move |event| {
                if let Event::JobSuccess { .. } = event {
                    *wedging.lock().unwrap() = Some(Instant::now());
                    std::thread::sleep(wedge);
                }
            });
        let a = Running::listening(&tokio, options).await;
        let job = db.utils().add_raw_job("once", json!({}), JobSpec::default()).await.unwrap();
        let since_wedge = || wedged_at.lock().unwrap().map(|at| at.elapsed());
        while since_wedge().is_none() {
            formica_tests::sleep(tokio.as_ref(), Duration::from_millis(10)).await;
        }
        // The other worker, on async-std (a's hook blocks only a's own loop thread).
        let async_std: Arc<dyn Runtime> = Arc::new(formica_async_std::AsyncStdRuntime);
        let release = Arc::new(AtomicBool::new(false));
        let (ran, released) = (runs.clone(), release.clone());
        let options = formica::WorkerOptions::with_runtime(async_std.clone())
            .database_url(&db.url)
            .define_raw_job("once", move |ctx, _| {
                ran.lock().unwrap().push(("b", ctx.job().attempts));
                let released = released.clone();
                async move {
                    while !released.load(Ordering::SeqCst) {
                        async_std::task::sleep(Duration::from_millis(10)).await;
                    }
                    Ok(())
                }
            });
        let b = Running::listening(&async_std, options).await;
        // The keeper notices within a heartbeat interval of the limit; the lease then lapses,
        // and a sweep frees the job after the grace.
        let bound = watchdog
            + formica::HEARTBEAT_INTERVAL.to_std().unwrap()
            + (formica::LEASE + formica::SUSPICION_GRACE + formica::RECOVERY_PERIOD * 8 / 3)
                .to_std()
                .unwrap()
            + Duration::from_secs(1);
        while runs.lock().unwrap().len() < 2 {
            assert!(
                since_wedge().unwrap() < bound,
                "b did not get the job within {bound:?} of the wedge: {:?}",
                runs.lock().unwrap()
            );
            formica_tests::sleep(tokio.as_ref(), Duration::from_millis(50)).await;
        }
        assert!(since_wedge().unwrap() < wedge, "recovered while a was still wedged");
        assert_eq!(*runs.lock().unwrap(), vec![("a", 1), ("b", 2)], "once more, elsewhere");
        // a's loop turns again and writes its completion: b's lock fences it off.
        while since_wedge().unwrap() < wedge + Duration::from_secs(3) {
            formica_tests::sleep(tokio.as_ref(), Duration::from_millis(100)).await;
        }
        let client = db.client().await;
        let locked_by: Option<String> = client
            .query_one("select locked_by from graphile_worker.jobs where id = $1", &[&job.id])
            .await
            .expect("the job is still there: a's late completion did not delete it")
            .get(0);
        assert_eq!(locked_by.as_deref(), Some(b.worker_id()));
        release.store(true, Ordering::SeqCst);
        db.wait_for_count("select count(*) from graphile_worker.jobs", 0, Duration::from_secs(10)).await;
        assert_eq!(runs.lock().unwrap().len(), 2, "twice in all");
        a.stop(Duration::from_secs(10)).await;
        b.stop(Duration::from_secs(10)).await;
    });
}
