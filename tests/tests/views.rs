//! The read model (`formica::inspect`, `WorkerUtils::list_jobs`) with rows that cannot be
//! read: a payload number beyond `f64` and a `run_at` of `-infinity`, both valid in
//! PostgreSQL. Such a row is given apart, naming the job and the column; the other rows are
//! shown, and pages walk past it in every order.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::inspect::{self, Cursor, JobSelection, Order};
use formica::{JobFilter, WorkerUtils};
use formica_tests::spoiled::good_and_undecodable_jobs;
use formica_tests::TestDb;

fn selection(order: Order, after: Option<Cursor>) -> JobSelection {
    JobSelection { task: None, queue: None, state: None, key: None, error: None, order, after, limit: 1 }
}

/// Every job id, one page of one row at a time, in `order`: each page holds one row, read
/// or not.
async fn walk(utils: &WorkerUtils, order: Order) -> Vec<i64> {
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = inspect::jobs(utils, &selection(order, after)).await.expect("a page");
        seen.extend(page.jobs.iter().map(|r| r.job.id));
        seen.extend(page.undecodable.iter().map(|u| u.job_id));
        let Some(next) = page.next else { return seen };
        after = Some(Cursor::parse(&next, order).expect("the page's own cursor"));
    }
}

#[tokio::test]
async fn listings_give_undecodable_rows_apart_naming_job_and_column_and_show_the_rest() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let [good, bad_payload, bad_run_at] = good_and_undecodable_jobs(&db).await;
    let named = |rows: &[formica::inspect::Undecodable]| -> Vec<(i64, String)> {
        rows.iter().map(|u| (u.job_id, u.error.split(':').next().unwrap().to_owned())).collect()
    };
    let bad = vec![(bad_payload, "column payload".to_owned()), (bad_run_at, "column run_at".to_owned())];

    let listed = utils.list_jobs(&JobFilter::default()).await.expect("list_jobs");
    assert_eq!(listed.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![good]);
    assert_eq!(named(&listed.undecodable), bad);
    assert!(listed.undecodable[0].error.contains("number out of range"), "{:?}", listed.undecodable);
    assert_eq!(
        inspect::describe(&listed.undecodable[0]),
        format!("job {bad_payload}: {}", listed.undecodable[0].error)
    );

    let page = inspect::jobs(&utils, &JobSelection { limit: 50, ..selection(Order::Oldest, None) })
        .await
        .expect("a page of jobs");
    assert_eq!(page.jobs.iter().map(|r| (r.job.id, r.state.as_str())).collect::<Vec<_>>(), [(good, "ready")]);
    assert_eq!(named(&page.undecodable), bad);

    // The -infinity job is the first the workers would take: the `next` order's cursor
    // must carry it.
    for order in Order::ALL {
        let mut seen = walk(&utils, order).await;
        if order == Order::Next {
            assert_eq!(seen[0], bad_run_at, "-infinity comes first");
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![good, bad_payload, bad_run_at], "{order:?}");
    }

    let shown = inspect::job(&utils, good).await.unwrap().expect("the job exists");
    assert_eq!(shown.expect("readable").row.job.id, good);
    for (id, column) in &bad {
        let shown = inspect::job(&utils, *id).await.expect("no error").expect("the job exists");
        let error = shown.expect_err("cannot be read");
        assert_eq!((error.job_id, error.error.starts_with(column.as_str())), (*id, true), "{error:?}");
    }

    let overview = inspect::overview(&utils).await.expect("the overview");
    assert_eq!(overview.totals["ready"], 3);
    assert_eq!(overview.unreadable.len(), 1, "{:?}", overview.unreadable);
    assert!(overview.unreadable[0].contains("run_at") && overview.unreadable[0].contains("\"t\""));
}
