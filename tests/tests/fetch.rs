//! The worker's fetch (`sql/queries/worker/get_jobs.sql`) on a table shaped as production
//! tables are: many priorities, and jobs scheduled for later beside those due. The
//! differential test checks it against the model on small random tables; this one checks
//! the order and the bound on a wide one, in both of the statement's shapes: one scan of
//! the index, and the walk over the priorities present that follows a slow short fetch.

use chrono::{Duration, Utc};
use formica_core::worker::{QueryResult, Statement};
use formica_sql as sql;
use formica_tests::TestDb;

const PRIORITIES: i16 = 40;

#[tokio::test]
async fn the_fetch_takes_due_jobs_in_priority_order_across_many_priorities_and_none_due_later() {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    // Per priority, two jobs due (at distinct times) and three scheduled for tomorrow, added
    // in an order unlike the fetch's.
    client
        .batch_execute(&format!(
            "select graphile_worker.add_job('t', json_build_object('p', p, 'i', i), priority => p,
               run_at => now() - interval '1 hour' + (i * {PRIORITIES} - p) * interval '1 second'
                 + case when i >= 2 then interval '1 day' else interval '0' end)
             from generate_series({lo}, {hi}) as p, generate_series(4, 0, -1) as i",
            lo = -PRIORITIES / 2,
            hi = PRIORITIES / 2 - 1,
        ))
        .await
        .unwrap();
    let due: Vec<(i16, i64)> = client
        .query(
            "select priority::smallint, id from graphile_worker._private_jobs
             where run_at <= now() order by priority, run_at, id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(due.len(), 2 * PRIORITIES as usize);
    // Within the first 32 priorities, across the 32nd, and more than are due; both shapes.
    for (limit, walk_priorities) in [3, 2 * 33 + 1, 1000].into_iter().flat_map(|l| [(l, false), (l, true)]) {
        let mut client = db.client().await;
        let tx = client.transaction().await.unwrap();
        let statement = Statement::GetJobs {
            worker_id: "w".into(),
            task_identifiers: vec!["t".into()],
            forbidden_flags: vec![],
            accepted_flags: vec![],
            limit,
            now: Some(Utc::now() + Duration::seconds(1)),
            excluded_queues: vec![],
            caps: vec![],
            limits: vec![],
            walk_priorities,
        };
        let bound = formica::statements::bind(statement);
        let rows = tx.query(&sql::render(bound.template, "graphile_worker"), &bound.values()).await.unwrap();
        let QueryResult::Jobs { jobs, .. } = bound.answer(&rows).unwrap() else { panic!("not jobs") };
        let fetched: Vec<(i16, i64)> = jobs.iter().map(|j| (j.priority, j.id)).collect();
        let expected = &due[..limit.min(due.len())];
        assert_eq!(fetched, expected, "limit {limit}, walking the priorities: {walk_priorities}");
        tx.rollback().await.unwrap();
    }
}
