//! Retention of finished workflows (docs/guide/workflows.md, "Retention") on real
//! PostgreSQL: a running worker's pruner removes a finished workflow past its retention and
//! keeps an unfinished one and a recent one; two passes at once delete each workflow once;
//! `delete_workflow` refuses an unfinished workflow unless forced, and says what it left, and
//! refuses a sub-workflow its job waits for unless forced, which fails that job (and, meeting
//! the sub-workflow's end, waits for it and fails nothing); a workflow goes with its
//! sub-workflows and its signal waits.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica::{Error, Retention, SignalWait, Workflow, WorkflowJob};
use formica_tests::{Running, TestDb};
use serde_json::json;
use std::time::Duration;

const WITHIN: Duration = Duration::from_secs(30);

/// A workflow of `b` waiting for `a`, both `noop` jobs.
fn pair(name: &str) -> Workflow {
    Workflow::new(name)
        .job(WorkflowJob::raw("a", "noop", json!({})))
        .job(WorkflowJob::raw("b", "noop", json!({})).depends_on(["a"]))
}

/// Whether workflow `id` still has its row.
async fn exists(db: &TestDb, id: i64) -> bool {
    db.count(&format!("select count(*) from formica_graphile_worker.workflows where id = {id}")).await == 1
}

/// Date workflow `id` and its jobs `age` back (created, released, finished).
async fn age(db: &TestDb, id: i64, age: &str) {
    db.client()
        .await
        .batch_execute(&format!(
            "update formica_graphile_worker.workflows set created_at = created_at - interval '{age}' where id = {id};
             update formica_graphile_worker.workflow_jobs set released_at = released_at - interval '{age}',
               finished_at = finished_at - interval '{age}' where workflow_id = {id};"
        ))
        .await
        .unwrap();
}

/// Complete every job of the workflow `id` through graphile-worker's own `complete_jobs`,
/// then settle them (the resolver), until none is left to settle.
async fn finish(db: &TestDb, id: i64) {
    let client = db.client().await;
    let utils = db.utils();
    loop {
        let rows = client
            .query(
                "select job_id from formica_graphile_worker.workflow_jobs where workflow_id = $1 and state = 'released'",
                &[&id],
            )
            .await
            .unwrap();
        if rows.is_empty() {
            break;
        }
        let jobs: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        client.execute("select graphile_worker.complete_jobs($1)", &[&jobs]).await.unwrap();
        utils.resolve_workflows().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_removes_a_finished_workflow_past_its_retention_and_keeps_the_others() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let old = utils.add_workflow(&pair("old")).await.unwrap().id;
    let recent = utils.add_workflow(&pair("recent")).await.unwrap().id;
    let unfinished = utils.add_workflow(&pair("unfinished")).await.unwrap().id;
    finish(&db, old).await;
    finish(&db, recent).await;
    // Past every retention (completed 7 days, failed and cancelled 30), each by its age.
    age(&db, old, "8 days").await;
    age(&db, recent, "6 days").await;
    age(&db, unfinished, "60 days").await;
    let options =
        db.worker_options().define_raw_job("other", |_ctx, _payload: serde_json::Value| async { Ok(()) });
    let running = Running::listening(&db.runtime, options).await;
    db.wait_for_count(
        &format!("select count(*) from formica_graphile_worker.workflows where id = {old}"),
        0,
        WITHIN,
    )
    .await;
    running.stop(WITHIN).await;
    assert_eq!(
        db.count(&format!(
            "select count(*) from formica_graphile_worker.workflow_jobs where workflow_id = {old}"
        ))
        .await,
        0,
        "its jobs go with it"
    );
    assert!(exists(&db, recent).await, "completed 6 days ago: kept 7");
    assert!(exists(&db, unfinished).await, "a job still waits: kept whatever its age");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_workflow_is_kept_as_long_as_failed_jobs_history() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let failed = utils.add_workflow(&pair("failed")).await.unwrap().id;
    db.client()
        .await
        .batch_execute(&format!(
            "update formica_graphile_worker.workflow_jobs set state = 'failed', finished_at = now() - interval '20 days'
               where workflow_id = {failed} and name = 'a';
             update formica_graphile_worker.workflow_jobs set state = 'cancelled', finished_at = now() - interval '20 days'
               where workflow_id = {failed} and name = 'b';
             update formica_graphile_worker.workflows set created_at = now() - interval '20 days' where id = {failed};"
        ))
        .await
        .unwrap();
    let pruned = utils.prune_history(&Retention::default(), None).await.unwrap();
    assert!(exists(&db, failed).await, "failed 20 days ago: kept 30 ({pruned:?})");
    let later = chrono::Utc::now() + chrono::Duration::days(11);
    utils.prune_history(&Retention::default(), Some(later)).await.unwrap();
    assert!(!exists(&db, failed).await, "31 days on: removed");
    let forever = Retention { failed: None, ..Retention::default() };
    let kept = utils.add_workflow(&pair("kept")).await.unwrap().id;
    db.client()
        .await
        .batch_execute(&format!(
            "update formica_graphile_worker.workflow_jobs set state = 'failed', finished_at = now()
               where workflow_id = {kept}"
        ))
        .await
        .unwrap();
    let much_later = chrono::Utc::now() + chrono::Duration::days(3650);
    utils.prune_history(&forever, Some(much_later)).await.unwrap();
    assert!(exists(&db, kept).await, "a null retention keeps it for ever");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pruners_at_once_delete_each_finished_workflow_once() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let mut ids = Vec::new();
    for n in 0..40 {
        ids.push(utils.add_workflow(&pair(&format!("w{n}"))).await.unwrap().id);
    }
    for &id in &ids {
        finish(&db, id).await;
        age(&db, id, "8 days").await;
    }
    // Two transactions at once, each a pass of at most 30: the first holds what it took, the
    // second takes the others (skip locked) and waits for none.
    let (first, second) = (db.client().await, db.client().await);
    let pass = "select formica_graphile_worker.prune_workflows(now(), '7 days', '30 days', '30 days', 30)";
    first.batch_execute("begin").await.unwrap();
    second.batch_execute("begin").await.unwrap();
    let one: i64 = first.query_one(pass, &[]).await.unwrap().get(0);
    let two: i64 = formica_tests::timeout(db.runtime.as_ref(), Duration::from_secs(5), async {
        second.query_one(pass, &[]).await.unwrap().get(0)
    })
    .await
    .expect("the second pass waits for no lock");
    first.batch_execute("commit").await.unwrap();
    second.batch_execute("commit").await.unwrap();
    assert_eq!((one, two), (30, 10));
    assert_eq!(db.count("select count(*) from formica_graphile_worker.workflows").await, 0);
    assert_eq!(db.count("select count(*) from formica_graphile_worker.workflow_jobs").await, 0);
    assert_eq!(db.count("select count(*) from formica_graphile_worker.workflow_dependencies").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_workflow_refuses_an_unfinished_workflow_unless_forced_and_says_what_it_left() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let done = utils.add_workflow(&pair("done")).await.unwrap().id;
    finish(&db, done).await;
    // The resolver's table of released jobs (records step 33) holds none once all settled.
    let resolvers_rows = "select count(*) from formica_graphile_worker.released_workflow_jobs";
    assert_eq!(db.count(resolvers_rows).await, 0);
    let deleted = utils.delete_workflow(done, false).await.unwrap();
    assert_eq!((deleted.waiting, deleted.released), (0, 0));
    assert!(!exists(&db, done).await);
    assert!(
        matches!(utils.delete_workflow(done, false).await, Err(Error::WorkflowNotFound(id)) if id == done)
    );

    let running = utils.add_workflow(&pair("running")).await.unwrap();
    let err = utils.delete_workflow(running.id, false).await.unwrap_err();
    assert!(
        matches!(err, Error::WorkflowUnfinished { id, waiting: 1, released: 1 } if id == running.id),
        "{err}"
    );
    assert!(err.to_string().contains("not finished"), "{err}");
    assert!(exists(&db, running.id).await, "refused: nothing deleted");
    let forced = utils.delete_workflow(running.id, true).await.unwrap();
    assert_eq!((forced.waiting, forced.released), (1, 1));
    assert!(!exists(&db, running.id).await);
    // The released job stays in the queue, as a job nothing waits for.
    let job = running.released[0].1;
    assert_eq!(
        db.count(&format!("select count(*) from graphile_worker._private_jobs where id = {job}")).await,
        1
    );
    // The resolver's row for it went stale with the workflow: kept while the job waits in
    // the queue, dropped by the first pass after the job ends, which settles nothing.
    assert_eq!(utils.resolve_workflows().await.unwrap(), 0);
    assert_eq!(db.count(resolvers_rows).await, 1);
    db.client().await.execute("select graphile_worker.complete_jobs($1)", &[&vec![job]]).await.unwrap();
    assert_eq!(utils.resolve_workflows().await.unwrap(), 0);
    assert_eq!(db.count(resolvers_rows).await, 0);
}

/// A sub-workflow deleted alone while its job waits for it (records step 24): refused,
/// naming that job; forced, the job fails in the same transaction and its workflow goes on
/// as after any failure: what depends on it is cancelled, and that workflow, itself a
/// sub-workflow, ends and fails its own job in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_subworkflow_its_job_waits_for_is_refused_and_forced_fails_that_job() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    let inner = Workflow::new("inner").job(WorkflowJob::raw("x", "noop", json!({})));
    let middle = Workflow::new("middle")
        .job(WorkflowJob::workflow("sub", inner))
        .job(WorkflowJob::raw("next", "noop", json!({})).depends_on(["sub"]));
    let top = utils.add_workflow(&Workflow::new("top").job(WorkflowJob::workflow("mid", middle))).await;
    let top = top.unwrap().id;
    let sub_of = |id: i64, name: &'static str| {
        let client = &client;
        async move {
            let sql = "select subworkflow_id from formica_graphile_worker.workflow_jobs \
                where workflow_id = $1 and name = $2";
            client.query_one(sql, &[&id, &name]).await.unwrap().get::<_, i64>(0)
        }
    };
    let middle = sub_of(top, "mid").await;
    let inner = sub_of(middle, "sub").await;
    let state = |id: i64, name: &'static str| {
        let client = &client;
        async move {
            let sql = "select state, last_error from formica_graphile_worker.workflow_jobs \
                where workflow_id = $1 and name = $2";
            let row = client.query_one(sql, &[&id, &name]).await.unwrap();
            (row.get::<_, String>(0), row.get::<_, Option<String>>(1))
        }
    };

    let err = utils.delete_workflow(inner, false).await.unwrap_err();
    assert!(
        matches!(&err, Error::SubworkflowHeld { id, workflow, job } if (*id, *workflow, job.as_str()) == (inner, middle, "sub")),
        "{err}"
    );
    let said = format!("workflow {inner} is the sub-workflow of job \"sub\" of workflow {middle}");
    assert!(err.to_string().contains(&said), "{err}");
    assert!(exists(&db, inner).await, "refused: nothing deleted");
    assert_eq!(state(middle, "sub").await, ("released".to_owned(), None), "refused: nothing settled");

    let forced = utils.delete_workflow(inner, true).await.unwrap();
    assert_eq!(forced.released, 1, "x's job stays in the queue");
    assert_eq!(forced.failed_parent, Some((middle, "sub".to_owned())));
    assert!(!exists(&db, inner).await);
    let deleted = format!("its sub-workflow {inner} was deleted");
    assert_eq!(state(middle, "sub").await, ("failed".to_owned(), Some(deleted)));
    assert_eq!(state(middle, "next").await.0, "cancelled", "its dependent, by its policy");
    let (mid, why) = state(top, "mid").await;
    assert_eq!(mid, "failed", "middle ended failed, so its job did: {why:?}");
    let ended = "select state from formica_graphile_worker.workflow_states where id = $1";
    for id in [middle, top] {
        assert_eq!(client.query_one(ended, &[&id]).await.unwrap().get::<_, String>(0), "failed");
    }
    // Nothing waits for the next one: deleted without force.
    assert_eq!(utils.delete_workflow(middle, false).await.unwrap().failed_parent, None);
}

/// A forced delete of a sub-workflow meeting the settling of its last job: the delete waits
/// for the settling's locks (the sub-workflow's jobs first, as the settling takes them), then
/// sees the job holding it settled by the sub-workflow's end, and fails nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_meeting_the_end_of_the_subworkflow_waits_for_it_and_fails_nothing() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let inner = Workflow::new("inner").job(WorkflowJob::raw("x", "noop", json!({})));
    let outer = Workflow::new("outer").job(WorkflowJob::workflow("sub", inner));
    let outer = utils.add_workflow(&outer).await.unwrap().id;
    let sql = "select subworkflow_id from formica_graphile_worker.workflow_jobs where workflow_id = $1";
    let inner: i64 = db.client().await.query_one(sql, &[&outer]).await.unwrap().get(0);
    // x settles (as the resolver settles it) in a transaction left open: the trigger has
    // settled sub too, under the locks of x and sub.
    let mut settler = db.client().await;
    let tx = settler.transaction().await.unwrap();
    let settle = "update formica_graphile_worker.workflow_jobs set state = 'completed', finished_at = now() \
        where workflow_id = $1";
    assert_eq!(tx.execute(settle, &[&inner]).await.unwrap(), 1);
    let deleting = {
        let utils = utils.clone();
        tokio::spawn(async move { utils.delete_workflow(inner, true).await })
    };
    let waiting = "select count(*) from pg_stat_activity where wait_event_type = 'Lock' and query like '%delete_workflow%'";
    db.wait_for_count(waiting, 1, WITHIN).await;
    tx.commit().await.unwrap();
    let deleted = deleting.await.unwrap().unwrap();
    assert_eq!(
        (deleted.waiting, deleted.released, deleted.failed_parent),
        (0, 0, None),
        "it found inner finished"
    );
    let state = "select state from formica_graphile_worker.workflow_jobs where workflow_id = $1";
    let sub: String = db.client().await.query_one(state, &[&outer]).await.unwrap().get(0);
    assert_eq!(sub, "completed", "sub settled once, by its sub-workflow's end");
    assert!(!exists(&db, inner).await);
}

/// A finished workflow goes with its sub-workflows and its jobs' signal waits (records step
/// 24's trigger): the pruner never takes a sub-workflow alone, and takes it with its workflow;
/// `delete_workflow` takes them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_goes_with_its_subworkflows_and_its_signal_waits() {
    let db = TestDb::migrated().await;
    let utils = db.utils();
    let client = db.client().await;
    let nested = |name: &str| {
        let inner = Workflow::new("inner").job(WorkflowJob::raw("x", "noop", json!({})));
        Workflow::new(name)
            .job(WorkflowJob::raw("a", "noop", json!({})).wait_for_signal(SignalWait::new("go")))
            .job(WorkflowJob::workflow("sub", inner).depends_on(["a"]))
    };
    let mut families = Vec::new();
    for name in ["pruned", "deleted"] {
        let id = utils.add_workflow(&nested(name)).await.unwrap().id;
        utils.signal_workflow(id, "go", None).await.unwrap();
        // Complete every job released, in the workflow or its sub-workflow, until none is.
        loop {
            let sql = "select jobs.job_id from formica_graphile_worker.workflow_jobs as jobs \
                where jobs.state = 'released' and jobs.job_id is not null";
            let jobs: Vec<i64> = client.query(sql, &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
            if jobs.is_empty() {
                break;
            }
            client.execute("select graphile_worker.complete_jobs($1)", &[&jobs]).await.unwrap();
            utils.resolve_workflows().await.unwrap();
        }
        let sql = "select subworkflow_id from formica_graphile_worker.workflow_jobs where workflow_id = $1 and name = 'sub'";
        let sub: i64 = client.query_one(sql, &[&id]).await.unwrap().get(0);
        assert_eq!(utils.workflow(id).await.unwrap().unwrap().summary.state, "completed");
        age(&db, sub, "10 days").await;
        age(&db, id, "10 days").await;
        families.push((id, sub));
    }
    let waits = |id: i64| {
        format!("select count(*) from formica_graphile_worker.workflow_waits where workflow_id = {id}")
    };
    assert_eq!(db.count(&waits(families[0].0)).await, 1, "a waited for its signal");
    let pass = "select formica_graphile_worker.prune_workflows(now(), '7 days', '30 days', '30 days', 1)";
    let pruned: i64 = client.query_one(pass, &[]).await.unwrap().get(0);
    assert_eq!(pruned, 1, "one workflow a pass: a workflow, not a sub-workflow");
    let (pruned_id, pruned_sub) = families[0];
    assert!(!exists(&db, pruned_id).await && !exists(&db, pruned_sub).await, "the oldest went, whole");
    assert_eq!(db.count(&waits(pruned_id)).await, 0, "its signal waits too");
    let (id, sub) = families[1];
    assert!(exists(&db, id).await && exists(&db, sub).await, "the batch of 1 left the other");
    utils.delete_workflow(id, false).await.unwrap();
    assert!(!exists(&db, id).await && !exists(&db, sub).await, "deleted with its sub-workflow");
    assert_eq!(db.count(&waits(id)).await, 0);
}
