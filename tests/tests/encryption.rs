//! Encrypted payloads (docs/guide/encrypted-payloads.md): a task's payloads are stored
//! sealed (JSON in `graphile_worker.jobs`, no plaintext), opened for its handler with any key
//! of the ring; a worker without the key, or given a plaintext payload, fails the attempt
//! saying why; rotation reseals under the newest key; the dashboard shows "encrypted".

// Tests fail by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use formica::{Encryption, JobContext, JobSpec, Keyring, Runtime};
use formica_tests::dashboard::Dashboard;
use formica_tests::{on_both_runtimes, Running, TestDb};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn ring(ids: &[&str]) -> Keyring {
    ids.iter().fold(Keyring::default(), |ring, id| ring.with_key(id, [id.as_bytes()[1]; 32]).unwrap())
}

fn charge(ids: &[&str]) -> Encryption {
    Encryption::new(ring(ids)).task("charge")
}

async fn stored(db: &TestDb, id: i64) -> String {
    let row = db
        .client()
        .await
        .query_one("select payload::text from graphile_worker._private_jobs where id = $1", &[&id])
        .await
        .unwrap();
    row.get(0)
}

async fn last_error(db: &TestDb, id: i64) -> Option<String> {
    let sql = "select last_error from graphile_worker._private_jobs where id = $1 and attempts >= 1";
    db.client().await.query_opt(sql, &[&id]).await.unwrap().and_then(|row| row.get(0))
}

async fn payloads_are_stored_sealed_opened_with_any_key_of_the_ring_and_refused_without_it(
    rt: Arc<dyn Runtime>,
) {
    let db = TestDb::migrated_on(rt.clone()).await;
    let once = || JobSpec::builder().max_attempts(1).build();
    let sealing = db.utils().encrypt_payloads(charge(&["k1"]));
    let opened = sealing.add_raw_job("charge", json!({ "card": "4242" }), once()).await.unwrap();
    let text = stored(&db, opened.id).await;
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(formica::encrypted_with(&value).as_deref(), Some("k1"), "{text}");
    assert!(!text.contains("4242"), "no plaintext stored: {text}");
    // Other tasks are left alone.
    let plain = sealing.add_raw_job("other", json!({ "card": "4242" }), once()).await.unwrap();
    assert_eq!(stored(&db, plain.id).await, r#"{"card":"4242"}"#);
    // A payload of the encrypted task added without encryption: refused by the worker.
    let unsealed = db.utils().add_raw_job("charge", json!({ "card": "1111" }), once()).await.unwrap();

    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    let options = db
        .worker_options()
        .define_raw_job("charge", move |_: JobContext, payload: Value| {
            let recorded = recorded.clone();
            async move {
                recorded.lock().unwrap().push(payload);
                Ok(())
            }
        })
        .encrypt_payloads(charge(&["k1", "k2"]));
    let running = Running::listening(&rt, options).await;
    db.wait_for_count(
        &format!("select count(*) from graphile_worker.jobs where id in ({}, {})", opened.id, unsealed.id),
        1,
        Duration::from_secs(10),
    )
    .await;
    db.wait_for_count(
        &format!("select count(*) from graphile_worker.jobs where id = {} and attempts = 1", unsealed.id),
        1,
        Duration::from_secs(10),
    )
    .await;
    running.stop(Duration::from_secs(10)).await;
    assert_eq!(
        *seen.lock().unwrap(),
        vec![json!({ "card": "4242" })],
        "opened with k1, an older key of the ring"
    );
    let refused = last_error(&db, unsealed.id).await.unwrap();
    assert!(refused.contains(r#"the payload of task "charge" must be encrypted"#), "{refused}");

    // A worker whose ring lacks the key fails the job saying so, never a silent success.
    let orphan = sealing.add_raw_job("charge", json!({ "card": "4242" }), once()).await.unwrap();
    let options = db
        .worker_options()
        .define_raw_job("charge", |_, _| async { Ok(()) })
        .encrypt_payloads(charge(&["k3"]));
    let running = Running::listening(&rt, options).await;
    db.wait_for_count(
        &format!("select count(*) from graphile_worker.jobs where id = {} and attempts = 1", orphan.id),
        1,
        Duration::from_secs(10),
    )
    .await;
    running.stop(Duration::from_secs(10)).await;
    let missing = last_error(&db, orphan.id).await.unwrap();
    assert!(
        missing.contains(r#"encrypted with key "k1", which this worker's key ring does not have"#),
        "{missing}"
    );
}

on_both_runtimes!(payloads_are_stored_sealed_opened_with_any_key_of_the_ring_and_refused_without_it);

#[tokio::test]
async fn rotation_reseals_waiting_payloads_under_the_newest_key_and_the_page_shows_encrypted() {
    let db = TestDb::migrated().await;
    let later = || JobSpec::builder().run_at(chrono::Utc::now() + chrono::Duration::hours(1)).build();
    let old = db.utils().encrypt_payloads(charge(&["k1"]));
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(old.add_raw_job("charge", json!({ "i": i }), later()).await.unwrap().id);
    }
    let rotated = db.utils().rotate_payloads(&ring(&["k1", "k2"]), 2).await.unwrap();
    assert_eq!((rotated.rewritten, rotated.skipped), (5, 0));
    for id in &ids {
        let value: Value = serde_json::from_str(&stored(&db, *id).await).unwrap();
        assert_eq!(formica::encrypted_with(&value).as_deref(), Some("k2"));
    }
    assert_eq!(
        db.utils().rotate_payloads(&ring(&["k1", "k2"]), 2).await.unwrap().rewritten,
        0,
        "nothing left"
    );
    // A ring without the key a payload is sealed with: the rotation names the job (and
    // reseals the others under its newest key, k3).
    let orphan = old.add_raw_job("charge", json!({}), later()).await.unwrap();
    let error = db.utils().rotate_payloads(&ring(&["k2", "k3"]), 10).await.unwrap_err().to_string();
    assert!(error.contains(&format!("job {}:", orphan.id)) && error.contains(r#"key "k1""#), "{error}");
    let ui = Dashboard::start(db.utils(), formica_ui::Options::default()).await;
    let page = ui.get(&format!("/jobs/{}", ids[0])).await.body;
    assert!(page.contains(r#"<pre id="payload">encrypted (key &quot;k3&quot;)</pre>"#), "{page}");
}
