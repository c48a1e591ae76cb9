//! The `testing` feature as an application uses it: a handler's unit test with no database
//! (the one `docs/guide/testing.md` shows) and one fanning out into its workflow, assertions
//! on what was enqueued that pass and fail on the right jobs and say what they saw, `drain`,
//! and a schema per test.

use chrono::{Duration, Utc};
use formica::Runtime;
use formica_tests::{on_both_runtimes, TestDb};
use formica_tokio::testing::{Expected, TestJob, TestOutcome};
use serde_json::json;
use std::future::Future;
use std::panic::AssertUnwindSafe;

// guide: the handler
use formica_tokio::{JobContext, JobSpec, Task, TaskHandler, TaskResult};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

/// A paid order: charge it, then mail its receipt (another job, in the `mail` queue, once
/// per order).
#[derive(Serialize, Deserialize)]
struct PlaceOrder {
    order: u64,
    email: String,
}
impl Task for PlaceOrder {
    const IDENTIFIER: &'static str = "place_order";
}

#[derive(Serialize, Deserialize)]
struct SendReceipt {
    order: u64,
    to: String,
}
impl Task for SendReceipt {
    const IDENTIFIER: &'static str = "send_receipt";
}

/// The payment provider, given to the worker with `add_extension`; this one records the
/// charges and declines the orders it is told to.
#[derive(Clone, Default)]
struct Payments {
    charged: Arc<Mutex<Vec<u64>>>,
    declines: Vec<u64>,
}
impl Payments {
    fn charge(&self, order: u64) -> Result<(), String> {
        if self.declines.contains(&order) {
            return Err(format!("card declined for order {order}"));
        }
        self.charged.lock().unwrap().push(order);
        Ok(())
    }
}

impl TaskHandler for PlaceOrder {
    async fn run(self, ctx: JobContext) -> TaskResult {
        ctx.extension::<Payments>()?.charge(self.order)?;
        let receipt = SendReceipt { order: self.order, to: self.email };
        let spec = JobSpec::builder().queue_name("mail").job_key(format!("receipt:{}", self.order)).build();
        ctx.add_job(&receipt, spec).await?;
        Ok(())
    }
}
// guide: end

// guide: the unit test
#[cfg(test)]
mod tests {
    use super::*;
    use formica_tokio::serde_json::json;
    use formica_tokio::testing::{Expected, TestJob, TestOutcome};

    #[tokio::test]
    async fn an_order_is_charged_and_its_receipt_queued() {
        let payments = Payments::default();
        let order = PlaceOrder { order: 42, email: "ada@example.com".into() };
        let ran = TestJob::new(&order).extension(payments.clone()).run::<PlaceOrder>().await;

        assert_eq!(ran.outcome, TestOutcome::Completed);
        assert_eq!(*payments.charged.lock().unwrap(), [42]);
        ran.assert_added(
            &Expected::of::<SendReceipt>()
                .payload(json!({ "order": 42, "to": "ada@example.com" }))
                .queue("mail")
                .key("receipt:42"),
        );
    }

    #[tokio::test]
    async fn a_declined_order_fails_and_mails_nothing() {
        let payments = Payments { declines: vec![13], ..Payments::default() };
        let order = PlaceOrder { order: 13, email: "ada@example.com".into() };
        let ran = TestJob::new(&order).extension(payments).run::<PlaceOrder>().await;

        assert_eq!(ran.outcome, TestOutcome::Failed { error: "card declined for order 13".into() });
        ran.refute_added(&Expected::of::<SendReceipt>());
    }
}
// guide: end

/// The message of the panic `run` ends with (it must panic).
fn panic_of<T>(run: impl FnOnce() -> T) -> String {
    let panic = std::panic::catch_unwind(AssertUnwindSafe(run)).err().expect("it panics");
    panic.downcast_ref::<String>().cloned().expect("a formatted panic message")
}

/// The message of the panic `future` ends with (it must panic).
async fn async_panic_of<T>(future: impl Future<Output = T>) -> String {
    use futures::FutureExt;
    let panic = AssertUnwindSafe(future).catch_unwind().await.err().expect("it panics");
    panic.downcast_ref::<String>().cloned().expect("a formatted panic message")
}

/// `PlaceOrder` with a bug: the receipt goes out of the `mail` queue, to the wrong address.
#[derive(Serialize, Deserialize)]
struct PlaceOrderWrongly {
    order: u64,
    email: String,
}
impl Task for PlaceOrderWrongly {
    const IDENTIFIER: &'static str = "place_order";
}
impl TaskHandler for PlaceOrderWrongly {
    async fn run(self, ctx: JobContext) -> TaskResult {
        let receipt = SendReceipt { order: self.order, to: "noreply@example.com".into() };
        ctx.add_job(&receipt, JobSpec::builder().job_key(format!("receipt:{}", self.order)).build()).await?;
        Ok(())
    }
}

#[tokio::test]
async fn the_unit_test_fails_when_the_handler_queues_the_wrong_receipt() {
    let order = PlaceOrderWrongly { order: 42, email: "ada@example.com".into() };
    let ran = TestJob::new(&order).run::<PlaceOrderWrongly>().await;
    assert_eq!(ran.outcome, TestOutcome::Completed);
    let receipt = Expected::of::<SendReceipt>()
        .payload(json!({ "order": 42, "to": "ada@example.com" }))
        .queue("mail")
        .key("receipt:42");
    let message = panic_of(|| ran.assert_added(&receipt));
    // It says what it looked for, and lists what was added instead, field by field.
    assert!(
        message.starts_with(&format!("no job matching {receipt} was added by the handler;")),
        "{message}"
    );
    assert!(
        message.contains(
            r#"task "send_receipt", payload {"order":42,"to":"noreply@example.com"}, queue none, key "receipt:42", priority 0"#
        ),
        "{message}"
    );
    // Each criterion alone tells the job apart: the right address, the queue.
    panic_of(|| ran.assert_added(&Expected::of::<SendReceipt>().payload(json!({ "to": "ada@example.com" }))));
    panic_of(|| ran.assert_added(&Expected::of::<SendReceipt>().queue("mail")));
    assert_eq!(ran.assert_added(&Expected::of::<SendReceipt>().key("receipt:42")).len(), 1);
    // And refuting what it did add fails, naming it.
    let message = panic_of(|| ran.refute_added(&Expected::of::<SendReceipt>()));
    assert!(
        message.contains("a job matching task \"send_receipt\" was added by the handler: found (1):"),
        "{message}"
    );
}

#[tokio::test]
async fn a_test_job_carries_its_fields_and_the_jobs_added_are_as_stored() {
    /// Reports the job it ran as and adds a follow-up without a `run_at`.
    #[derive(Serialize, Deserialize)]
    struct Probe;
    impl Task for Probe {
        const IDENTIFIER: &'static str = "probe";
    }
    impl TaskHandler for Probe {
        async fn run(self, ctx: JobContext) -> TaskResult {
            let job = ctx.job();
            let seen = (job.id, job.attempts, job.max_attempts, job.key.clone(), job.queue_name.clone());
            assert_eq!(seen, (9, 3, 5, Some("k".to_owned()), Some("q".to_owned())));
            assert_eq!(
                (job.priority, job.flags.iter().map(String::as_str).collect::<Vec<_>>()),
                (-2, vec!["vip"])
            );
            assert_eq!(ctx.worker_id(), "formica-test");
            assert!(!ctx.abort_signal().is_aborted());
            let added = ctx.add_job(&Probe, JobSpec::builder().priority(4).build()).await?;
            assert_eq!((added.id, added.attempts, added.max_attempts), (1, 0, 25));
            // No database behind it: asked for a client, it says so.
            let error = ctx.client().await.err().ok_or("a client from a test context")?.to_string();
            assert!(error.contains("has no database"), "{error}");
            Ok(())
        }
    }
    let now = Utc::now() - Duration::days(3);
    let job = TestJob::new(&Probe).id(9).attempts(3).max_attempts(5).key("k").queue("q");
    let ran = job.priority(-2).flags(["vip"]).now(now).run::<Probe>().await;
    assert_eq!(ran.outcome, TestOutcome::Completed);
    // A job added without `run_at` is due at the run's time, as the database would date it.
    let due_then = Expected::of::<Probe>().priority(4).run_at_between(now, now);
    assert_eq!(ran.assert_added(&due_then).len(), 1);
    // A payload the task does not take fails as the worker fails it.
    let ran = TestJob::raw("probe", json!(17)).run::<Probe>().await;
    let TestOutcome::Failed { error } = ran.outcome else { panic!("{:?}", ran.outcome) };
    assert!(error.starts_with("payload does not match task \"probe\""), "{error}");
}

/// A handler fanning out at runtime (`add_workflow_jobs`), unit-tested: the jobs it adds to
/// its workflow are recorded, as the database would store them, and those with nothing to
/// wait for are answered as released; jobs the database path refuses are refused here too.
#[tokio::test]
async fn a_fan_out_s_workflow_jobs_are_recorded_in_a_unit_test() {
    /// Splits a file into `parts` chunks, then a merge after them all (or, with 0 parts, a
    /// merge waiting for a job not added: refused).
    #[derive(Serialize, Deserialize)]
    struct Split {
        parts: u64,
    }
    impl Task for Split {
        const IDENTIFIER: &'static str = "split";
    }
    #[derive(Serialize, Deserialize)]
    struct Chunk {
        n: u64,
    }
    impl Task for Chunk {
        const IDENTIFIER: &'static str = "chunk";
    }
    impl TaskHandler for Split {
        async fn run(self, ctx: JobContext) -> TaskResult {
            let follow = ctx.add_job(&Chunk { n: 99 }, JobSpec::default()).await?;
            let mut jobs = Vec::new();
            for n in 0..self.parts {
                jobs.push(formica::WorkflowJob::new(format!("c{n}"), &Chunk { n })?);
            }
            let names: Vec<String> = (0..self.parts).map(|n| format!("c{n}")).collect();
            let merge = formica::WorkflowJob::raw("merge", "merge", json!({}))
                .depends_on(if names.is_empty() { vec!["nowhere".to_owned()] } else { names });
            jobs.push(merge);
            let added = ctx.add_workflow_jobs(jobs).await?;
            let released: Vec<&str> = added.released.iter().map(|(name, _)| name.as_str()).collect();
            let want: Vec<String> = (0..self.parts).map(|n| format!("c{n}")).collect();
            assert_eq!(released, want, "the chunks are released, the merge waits");
            assert_eq!(added.released.first().map(|(_, id)| *id), Some(follow.id + 1), "one sequence of ids");
            Ok(())
        }
    }
    let ran = TestJob::new(&Split { parts: 3 }).run::<Split>().await;
    assert_eq!(ran.outcome, TestOutcome::Completed);
    assert_eq!(ran.added.len(), 1, "the plain add is recorded apart");
    let names: Vec<&str> = ran.workflow_jobs.iter().map(|job| job.name.as_str()).collect();
    assert_eq!(names, ["c0", "c1", "c2", "merge"]);
    let merge = &ran.workflow_jobs[3];
    assert_eq!(
        (merge.depends_on.clone(), merge.released, merge.job.id),
        (vec!["c0".to_owned(), "c1".into(), "c2".into()], false, 0)
    );
    let found = ran.assert_added_to_workflow(&Expected::of::<Chunk>().payload(json!({ "n": 1 })));
    assert_eq!((found.len(), found[0].name.as_str(), found[0].released, found[0].job.id), (1, "c1", true, 3));
    let missing =
        panic_of(|| ran.assert_added_to_workflow(&Expected::of::<Chunk>().payload(json!({ "n": 7 }))));
    assert!(
        missing.contains("was added to the workflow by the handler") && missing.contains("instead (4)"),
        "{missing}"
    );

    // A dependency outside the jobs added: refused as the database path refuses it, nothing recorded.
    let ran = TestJob::new(&Split { parts: 0 }).run::<Split>().await;
    let TestOutcome::Failed { error } = &ran.outcome else { panic!("{:?}", ran.outcome) };
    assert!(error.contains("nowhere"), "{error}");
    assert!(ran.workflow_jobs.is_empty());
}

#[tokio::test]
async fn a_batch_handler_s_failed_items_are_the_ones_kept() {
    #[derive(Serialize, Deserialize)]
    struct Notify {
        user: u64,
    }
    impl Task for Notify {
        const IDENTIFIER: &'static str = "notify";
    }
    impl formica::BatchTaskHandler for Notify {
        async fn run_batch(items: Vec<Self>, _ctx: JobContext) -> formica::BatchResult {
            Ok(items.iter().map(|n| if n.user == 2 { Err("no device".into()) } else { Ok(()) }).collect())
        }
    }
    let ran = TestJob::batch(&[Notify { user: 1 }, Notify { user: 2 }]).run_batch::<Notify>().await;
    let TestOutcome::ItemsFailed { error, items } = ran.outcome else { panic!("{:?}", ran.outcome) };
    assert_eq!(items, json!([{ "user": 2 }]));
    assert!(error.contains("payload[1]: no device"), "{error}");
}

#[tokio::test]
async fn assert_enqueued_passes_and_fails_on_the_right_jobs_and_lists_what_it_saw() {
    use formica_tokio::testing::{assert_enqueued, describe, enqueued, refute_enqueued, TestSchema};
    let db = TestDb::new().await;
    let schema = TestSchema::new(db.pool()).await.unwrap();
    let utils = schema.utils();
    let at = Utc::now() + Duration::hours(1);
    let spec = JobSpec::builder().queue_name("mail").job_key("receipt:42").priority(3).run_at(at).build();
    let payload = json!({ "order": 42, "to": "ada", "lines": [1, 2] });
    let receipt = utils.add_raw_job("send_receipt", payload, spec).await.unwrap();
    let audit = utils.add_raw_job("audit", json!({ "order": 42 }), JobSpec::default()).await.unwrap();

    let minute = Duration::minutes(1);
    let receipts = Expected::task("send_receipt");
    for expected in [
        receipts.clone(),
        receipts.clone().payload(json!({ "order": 42 })),
        receipts.clone().payload(json!({ "lines": [2] })),
        receipts.clone().queue("mail"),
        receipts.clone().key("receipt:42"),
        receipts.clone().priority(3),
        receipts.clone().run_at_between(at - minute, at + minute),
        receipts.clone().payload(json!({ "to": "ada" })).queue("mail").key("receipt:42").priority(3),
    ] {
        let found = assert_enqueued(utils, &expected).await;
        assert_eq!(found.iter().map(|j| j.id).collect::<Vec<_>>(), [receipt.id], "{expected}");
        assert_eq!(enqueued(utils, &expected).await.unwrap(), found);
        let message = async_panic_of(refute_enqueued(utils, &expected)).await;
        assert!(message.contains(&format!("found (1):\n  - {}", describe(&receipt))), "{message}");
    }
    let by_order = assert_enqueued(utils, &Expected::any().payload(json!({ "order": 42 }))).await;
    assert_eq!(by_order.iter().map(|j| j.id).collect::<Vec<_>>(), [receipt.id, audit.id]);

    for expected in [
        Expected::task("refund"),
        receipts.clone().payload(json!({ "order": 43 })),
        receipts.clone().payload(json!({ "lines": [3] })),
        receipts.clone().queue("sms"),
        receipts.clone().key("receipt:43"),
        receipts.clone().priority(0),
        receipts.clone().run_at_between(at - Duration::hours(2), at - minute),
    ] {
        let message = async_panic_of(assert_enqueued(utils, &expected)).await;
        let head =
            format!("no job matching {expected} was enqueued in schema {:?}; instead (2):", schema.name());
        assert!(message.starts_with(&head), "{message}");
        for job in [&receipt, &audit] {
            assert!(message.contains(&format!("\n  - {}", describe(job))), "{message}");
        }
        assert!(
            message.contains(r#"task "send_receipt", payload {"lines":[1,2],"order":42,"to":"ada"}, queue "mail", key "receipt:42", priority 3, run_at "#),
            "{message}"
        );
        assert!(enqueued(utils, &expected).await.unwrap().is_empty());
        refute_enqueued(utils, &expected).await;
    }
    schema.remove().await.unwrap();
}

#[tokio::test]
async fn each_test_schema_is_its_own_and_goes_with_its_records() {
    use formica_tokio::testing::{assert_enqueued, refute_enqueued, TestSchema};
    let db = TestDb::new().await;
    let (first, second) =
        (TestSchema::new(db.pool()).await.unwrap(), TestSchema::new(db.pool()).await.unwrap());
    assert_ne!(first.name(), second.name());
    first.utils().add_raw_job("audit", json!({}), JobSpec::default()).await.unwrap();
    assert_enqueued(first.utils(), &Expected::task("audit")).await;
    refute_enqueued(second.utils(), &Expected::any()).await;

    let schemas_of = |name: &str| {
        format!("select count(*) from pg_namespace where nspname in ('{name}', 'formica_{name}')")
    };
    let (first_schemas, second_schemas) = (schemas_of(first.name()), schemas_of(second.name()));
    assert_eq!(db.count(&first_schemas).await, 2, "the job schema and Formica's records schema");
    first.remove().await.unwrap();
    assert_eq!(db.count(&first_schemas).await, 0);
    // Dropped without `remove`, it goes too, on a thread of its own.
    assert_eq!(db.count(&second_schemas).await, 2);
    drop(second);
    db.wait_for_count(&second_schemas, 0, std::time::Duration::from_secs(10)).await;
}

on_both_runtimes!(drain_runs_the_due_jobs_of_the_given_tasks_only, drain_wants_a_handler_for_each_task);

async fn drain_runs_the_due_jobs_of_the_given_tasks_only(runtime: Arc<dyn Runtime>) {
    use formica_async_std::testing::{drain, enqueued, Drained, Ended, TestSchema};
    let db = TestDb::new_on(runtime).await;
    let schema = TestSchema::new(db.pool()).await.unwrap();
    let utils = schema.utils();
    let add = |payload, spec| utils.add_raw_job("charge", payload, spec);
    let paid = add(json!({ "ok": true }), JobSpec::default()).await.unwrap();
    let declined = add(json!({ "ok": false }), JobSpec::default()).await.unwrap();
    let last_try = add(json!({ "ok": false }), JobSpec::builder().max_attempts(1).build()).await.unwrap();
    let later = JobSpec::builder().run_at(Utc::now() + Duration::hours(1)).build();
    let tomorrow = add(json!({ "ok": true }), later).await.unwrap();
    let mail = utils.add_raw_job("mail", json!({}), JobSpec::default()).await.unwrap();

    let options = schema
        .worker_options()
        .define_raw_job("charge", |_, payload| async move {
            match payload["ok"].as_bool() {
                Some(true) => Ok(()),
                _ => Err("declined".into()),
            }
        })
        .define_raw_job("mail", |_, _| async { panic!("drained `charge` only") });
    let started = Utc::now();
    let mut drained = drain(options, &["charge"]).await.unwrap();
    drained.sort_by_key(|d| d.job_id);

    let ended = |job_id, outcome| Drained { job_id, task: "charge".into(), attempt: 1, outcome };
    let Ended::Failed { retry_at, .. } = drained[1].outcome.clone() else { panic!("{drained:?}") };
    assert!(retry_at > started, "a failed job is due again only after its backoff: {retry_at}");
    assert_eq!(
        drained,
        [
            ended(paid.id, Ended::Completed),
            ended(declined.id, Ended::Failed { error: "declined".into(), retry_at }),
            ended(last_try.id, Ended::PermanentlyFailed { error: "declined".into() }),
        ]
    );
    // The failed ones are kept, the future one and the other task's wait, untouched.
    let left = enqueued(utils, &Expected::any()).await.unwrap();
    let left: Vec<(i64, i16)> = left.iter().map(|j| (j.id, j.attempts)).collect();
    assert_eq!(left, [(declined.id, 1), (last_try.id, 1), (tomorrow.id, 0), (mail.id, 0)]);
    schema.remove().await.unwrap();
}

async fn drain_wants_a_handler_for_each_task(runtime: Arc<dyn Runtime>) {
    use formica_async_std::testing::{drain, TestSchema};
    let db = TestDb::new_on(runtime).await;
    let schema = TestSchema::new(db.pool()).await.unwrap();
    let options = schema.worker_options().define_raw_job("charge", |_, _| async { Ok(()) });
    let error = drain(options, &["charge", "mail"]).await.unwrap_err().to_string();
    assert_eq!(error, "invalid configuration: drain: the options define no handler for task \"mail\"");
    schema.remove().await.unwrap();
}

/// The guide's first two Rust blocks, the handler and its unit test, are this file's, word
/// for word: what the guide shows is what runs here.
#[test]
fn the_guide_s_unit_test_is_this_one() {
    let guide = include_str!("../../docs/guide/testing.md");
    let source = include_str!("testing.rs");
    let blocks: Vec<&str> = guide
        .split("```rust\n")
        .skip(1)
        .take(2)
        .map(|block| &block[..block.find("```\n").expect("the block ends")])
        .collect();
    assert!(blocks[0].contains("impl TaskHandler for PlaceOrder"), "the handler first:\n{}", blocks[0]);
    assert!(blocks[1].contains("mod tests"), "then its unit test:\n{}", blocks[1]);
    for block in blocks {
        assert!(
            source.contains(block),
            "docs/guide/testing.md shows a block that is not tests/tests/testing.rs's:\n{block}"
        );
    }
}
