//! Rows as an outside writer (SQL, another client) can leave them: valid in PostgreSQL,
//! yet not readable as a job, and worker leases, for the views' tests.

use crate::TestDb;
use formica::JobSpec;
use serde_json::json;

/// Jobs of task `t`: `[good, bad payload, bad run_at]`. The payload holds `1e400` (beyond
/// `f64`), the run_at is `-infinity` (beyond chrono), each set by SQL.
pub async fn good_and_undecodable_jobs(db: &TestDb) -> [i64; 3] {
    let utils = db.utils();
    let mut ids = [0; 3];
    for (i, id) in ids.iter_mut().enumerate() {
        *id = utils.add_raw_job("t", json!({ "n": i }), JobSpec::default()).await.expect("add a job").id;
    }
    db.client()
        .await
        .batch_execute(&format!(
            "update graphile_worker._private_jobs set payload = '{{\"x\": 1e400}}' where id = {};
             update graphile_worker._private_jobs set run_at = '-infinity' where id = {};",
            ids[1], ids[2]
        ))
        .await
        .expect("spoil two jobs");
    ids
}

/// Give `worker` a lease expiring `seconds` from now (in the past if negative), as its
/// heartbeat would.
pub async fn lease(db: &TestDb, worker: &str, seconds: i64) {
    db.client()
        .await
        .execute(
            "insert into formica_graphile_worker.leases (worker_id, expires_at)
             values ($1, now() + $2::bigint * interval '1 second')
             on conflict (worker_id) do update set expires_at = excluded.expires_at",
            &[&worker, &seconds],
        )
        .await
        .expect("write a lease");
}

/// Lock the job `id` and its named queue, if any, for `worker`.
pub async fn lock(db: &TestDb, id: i64, worker: &str) {
    db.client()
        .await
        .execute(
            "with job as (
               update graphile_worker._private_jobs set locked_by = $2, locked_at = now(), attempts = 1
               where id = $1 returning job_queue_id
             )
             update graphile_worker._private_job_queues set locked_by = $2, locked_at = now()
             where id in (select job_queue_id from job)",
            &[&id, &worker],
        )
        .await
        .expect("lock a job");
}
