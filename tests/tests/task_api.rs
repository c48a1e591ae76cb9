//! What handlers can do beyond one payload in, one result out, on both runtimes: batch jobs
//! with a result per item (only the failed items are kept and retried, as graphile-worker
//! does), application state reached by type from any task, and the payload as stored:
//! parsed straight into a typed task's type, given as its text to a payload task.

use formica::{
    BatchResult, BatchTaskHandler, JobContext, JobSpec, Runtime, Task, TaskHandler, TaskResult, WorkerUtils,
};
use formica_tests::{on_both_runtimes, TestDb};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// What a test's tasks saw, shared with them as application state.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Value>>>);

impl Seen {
    fn push(&self, value: Value) {
        self.0.lock().unwrap().push(value);
    }
    fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }
}

/// A batch item: `fail` makes its first run fail.
#[derive(serde::Serialize, serde::Deserialize)]
struct Deliver {
    n: i64,
    #[serde(default)]
    fail: bool,
}

impl Task for Deliver {
    const IDENTIFIER: &'static str = "deliver";
}

impl BatchTaskHandler for Deliver {
    async fn run_batch(items: Vec<Self>, ctx: JobContext) -> BatchResult {
        let seen = ctx.extension::<Seen>()?;
        seen.push(json!(items.iter().map(|i| i.n).collect::<Vec<_>>()));
        let first = ctx.job().attempts == 1;
        Ok(items
            .iter()
            .map(|i| match i.fail && first {
                true => Err(format!("no route to {}", i.n).into()),
                false => Ok(()),
            })
            .collect())
    }
}

/// The job's `(payload, last_error, attempts, locked_by)`, or `None` once it is gone.
async fn row(db: &TestDb, id: i64) -> Option<(Value, Option<String>, i16, Option<String>)> {
    let sql =
        "select payload, last_error, attempts, locked_by from graphile_worker._private_jobs where id = $1";
    let row = db.client().await.query_opt(sql, &[&id]).await.unwrap()?;
    Some((row.get(0), row.get(1), row.get(2), row.get(3)))
}

/// Make every job due now (instead of waiting for the backoff).
async fn due_now(utils: &WorkerUtils, ids: &[i64]) {
    let options = formica::RescheduleJobOptions { run_at: Some(chrono::Utc::now()), ..Default::default() };
    utils.reschedule_jobs(ids, &options).await.unwrap();
}

async fn a_batch_job_keeps_only_its_failed_items_and_completes_once_they_succeed(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let utils = db.utils();
    let items = [Deliver { n: 1, fail: false }, Deliver { n: 2, fail: true }, Deliver { n: 3, fail: true }];
    let id = utils.add_batch_job(&items, JobSpec::default()).await.unwrap().id;
    let seen = Seen::default();
    let options = || db.worker_options().define_batch_job::<Deliver>().add_extension(seen.clone());
    options().init().await.unwrap().run_once().await.unwrap();

    let (payload, last_error, attempts, locked_by) = row(&db, id).await.expect("retried, not completed");
    assert_eq!(payload, json!([{ "n": 2, "fail": true }, { "n": 3, "fail": true }]), "only the failed items");
    assert_eq!(
        last_error.as_deref(),
        Some("Batch failures:\npayload[1]: no route to 2\npayload[2]: no route to 3"),
        "names each failed item and why"
    );
    assert_eq!((attempts, locked_by), (1, None));

    due_now(&utils, &[id]).await;
    options().init().await.unwrap().run_once().await.unwrap();
    assert_eq!(row(&db, id).await, None, "the retry of the failed items completed the job");
    assert_eq!(seen.all(), vec![json!([1, 2, 3]), json!([2, 3])], "the retry got only the failed items");
}

async fn a_batch_item_that_does_not_decode_fails_alone(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let payload = json!([{ "n": 1 }, { "n": "two" }, { "n": 3 }]);
    let id = db.utils().add_raw_job("deliver", payload, JobSpec::default()).await.unwrap().id;
    let seen = Seen::default();
    let worker = db.worker_options().define_batch_job::<Deliver>().add_extension(seen.clone());
    worker.init().await.unwrap().run_once().await.unwrap();

    assert_eq!(seen.all(), vec![json!([1, 3])], "the others ran");
    let (payload, last_error, ..) = row(&db, id).await.expect("kept for its bad item");
    assert_eq!(payload, json!([{ "n": "two" }]));
    let last_error = last_error.unwrap_or_default();
    assert!(
        last_error.starts_with("Batch failures:\npayload[1]: does not match task \"deliver\""),
        "{last_error}"
    );
}

async fn a_raw_batch_keeps_every_item_when_all_fail_or_its_results_do_not_match(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let utils = db.utils();
    let all_fail =
        utils.add_raw_job("raw", json!([{ "all": "fail" }, 2]), JobSpec::default()).await.unwrap().id;
    let too_few =
        utils.add_raw_job("raw", json!([{ "one": "result" }, 2, 3]), JobSpec::default()).await.unwrap().id;
    let not_array =
        utils.add_raw_job("raw", json!({ "not": "an array" }), JobSpec::default()).await.unwrap().id;
    let worker = db.worker_options().define_raw_batch_job("raw", |_ctx, items: Vec<Value>| async move {
        let results: Vec<TaskResult> = match items[0].get("one") {
            Some(_) => vec![Ok(())],
            None => items.iter().map(|i| Err(format!("refused {i}").into())).collect(),
        };
        Ok(results)
    });
    worker.init().await.unwrap().run_once().await.unwrap();

    let (payload, last_error, ..) = row(&db, all_fail).await.unwrap();
    assert_eq!(payload, json!([{ "all": "fail" }, 2]), "every item failed: every item is kept, in order");
    assert_eq!(
        last_error.as_deref(),
        Some("Batch failures:\npayload[0]: refused {\"all\":\"fail\"}\npayload[1]: refused 2")
    );
    let (payload, last_error, ..) = row(&db, too_few).await.unwrap();
    assert_eq!(payload, json!([{ "one": "result" }, 2, 3]), "a miscount keeps every item");
    assert!(last_error.unwrap_or_default().contains("returned 1 results for 3 items"));
    let (payload, last_error, ..) = row(&db, not_array).await.unwrap();
    assert_eq!(payload, json!({ "not": "an array" }));
    assert!(last_error.unwrap_or_default().contains("must be a JSON array of items"));
}

/// A typed task that records its payload through application state.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    n: i64,
}

impl Task for Record {
    const IDENTIFIER: &'static str = "record";
}

impl TaskHandler for Record {
    async fn run(self, ctx: JobContext) -> TaskResult {
        let prefix = ctx.extension::<&'static str>()?;
        ctx.extension::<Seen>()?.push(json!(format!("{prefix}{}", self.n)));
        Ok(())
    }
}

async fn typed_tasks_reach_application_state_by_type(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let utils = db.utils();
    let seen = Seen::default();
    utils.add_job(&Record { n: 1 }, JobSpec::default()).await.unwrap();
    let worker = db.worker_options().define_job::<Record>().add_extension(seen.clone()).add_extension("n=");
    worker.init().await.unwrap().run_once().await.unwrap();
    assert_eq!(seen.all(), vec![json!("n=1")]);
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0, "it completed");

    // A worker that was not given the state: the attempt fails, naming the missing type.
    let id = utils.add_job(&Record { n: 2 }, JobSpec::default()).await.unwrap().id;
    let worker = db.worker_options().define_job::<Record>().add_extension("n=");
    worker.init().await.unwrap().run_once().await.unwrap();
    let (_, last_error, attempts, _) = row(&db, id).await.expect("failed, kept");
    assert_eq!(attempts, 1);
    let last_error = last_error.unwrap_or_default();
    assert!(
        last_error.starts_with("no extension of type ") && last_error.contains("Seen: add one with"),
        "{last_error}"
    );
}

/// The keys of an object payload, in the order its parser meets them: as stored when the
/// text is parsed, sorted when read from a `serde_json::Value` in between (whose map sorts).
#[derive(Debug, PartialEq)]
struct KeyOrder(Vec<String>);

impl<'de> serde::Deserialize<'de> for KeyOrder {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = KeyOrder;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<KeyOrder, A::Error> {
                let mut keys = Vec::new();
                while let Some((key, serde::de::IgnoredAny)) = map.next_entry()? {
                    keys.push(key);
                }
                Ok(KeyOrder(keys))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

impl serde::Serialize for KeyOrder {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter().map(|key| (key, ())))
    }
}

impl Task for KeyOrder {
    const IDENTIFIER: &'static str = "key_order";
}

impl TaskHandler for KeyOrder {
    async fn run(self, ctx: JobContext) -> TaskResult {
        ctx.extension::<Seen>()?.push(json!(self.0));
        Ok(())
    }
}

async fn the_payload_goes_from_the_row_to_the_task_as_stored(rt: Arc<dyn Runtime>) {
    let db = TestDb::migrated_on(rt).await;
    let stored = r#"{"b" : 1,  "a": [2, {"d": 3, "c": 4}]}"#;
    for task in ["key_order", "text"] {
        let sql = "select (graphile_worker.add_job($1, $2::text::json)).id";
        db.client().await.query_one(sql, &[&task, &stored]).await.unwrap();
    }
    let (seen, texts) = (Seen::default(), Seen::default());
    let texts_for_task = texts.clone();
    let worker = db.worker_options().define_job::<KeyOrder>().add_extension(seen.clone()).define_payload_job(
        "text",
        move |ctx: JobContext, payload: formica::Payload| {
            // The text as stored; the job's payload still reads as a `Value`.
            texts_for_task.push(json!([payload.text(), ctx.job().payload["a"][1]["c"]]));
            async { Ok(()) }
        },
    );
    worker.init().await.unwrap().run_once().await.unwrap();
    assert_eq!(seen.all(), vec![json!(["b", "a"])], "the typed task read the stored text, keys in order");
    assert_eq!(texts.all(), vec![json!([stored, 4])], "the payload task got the text byte for byte");
    assert_eq!(db.count("select count(*) from graphile_worker.jobs").await, 0, "both completed");
}

on_both_runtimes!(
    a_batch_job_keeps_only_its_failed_items_and_completes_once_they_succeed,
    a_batch_item_that_does_not_decode_fails_alone,
    a_raw_batch_keeps_every_item_when_all_fail_or_its_results_do_not_match,
    typed_tasks_reach_application_state_by_type,
    the_payload_goes_from_the_row_to_the_task_as_stored,
);
