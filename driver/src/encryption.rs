//! Encrypted payloads (docs/guide/encrypted-payloads.md): the tasks whose payloads are
//! stored sealed with ChaCha20-Poly1305 (RFC 8439), authenticated with the task's name, under
//! the newest key of a [`Keyring`]; opened by the worker just before the handler; rewritten
//! under the newest key by [`WorkerUtils::rotate_payloads`].
//!
//! A sealed payload stays JSON in `graphile_worker.jobs.payload`: an object with one member,
//! [`ENVELOPE`], holding the algorithm, the key's id, the nonce and the sealed text (both
//! base64). Adding seals through an add layer, so every `WorkerUtils` add (and a handler's
//! `ctx.add_job`) does it; a worker opens only the payloads of the tasks it was told are
//! encrypted, so other tasks pay nothing.

use crate::error::Error;
use crate::task::Handlers;
use crate::utils::WorkerUtils;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload as Sealed};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use formica_core::job::{Payload, RawJob};
use formica_core::worker::TaskOutcome;
use futures::FutureExt as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio_postgres::types::{ToSql, Type};

/// The one member of a sealed payload's object.
pub const ENVELOPE: &str = "formica_encrypted";

/// The algorithm a sealed payload names.
const ALGORITHM: &str = "chacha20-poly1305";

/// What [`ENVELOPE`] holds.
#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    alg: String,
    key: String,
    nonce: String,
    data: String,
}

/// The keys payloads are sealed with, by id, oldest first: the newest seals, every one
/// opens. Ids are short names of your choosing (`2026-12`); keys are 32 random bytes, kept
/// where your other secrets are.
#[derive(Clone, Default)]
pub struct Keyring {
    keys: Vec<(String, Key)>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys themselves.
        f.debug_struct("Keyring").field("ids", &self.ids().collect::<Vec<_>>()).finish()
    }
}

impl Keyring {
    /// This ring with key `id` added as its newest; an error for an empty id, an id with a
    /// `:` or `,`, or one the ring has.
    pub fn with_key(mut self, id: &str, key: [u8; 32]) -> Result<Self, Error> {
        if id.is_empty() || id.contains([':', ',']) || id.trim() != id {
            return Err(Error::Options(format!(
                "a key id is a name without ':', ',' or spaces around it, not {id:?}"
            )));
        }
        if self.keys.iter().any(|(known, _)| known == id) {
            return Err(Error::Options(format!("the key ring has a key {id:?} already")));
        }
        self.keys.push((id.to_owned(), Key::from(key)));
        Ok(self)
    }

    /// A ring from text such as `FORMICA_PAYLOAD_KEYS` holds: `id:key` pairs, oldest first,
    /// separated by commas, each key 64 hexadecimal digits. An error names the pair at fault
    /// (by its id, never its key).
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut ring = Keyring::default();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((id, hex)) = pair.split_once(':') else {
                return Err(Error::Options("a key ring is `id:key` pairs separated by commas".into()));
            };
            let key = parse_hex(hex.trim()).ok_or_else(|| {
                Error::Options(format!("key {:?}: a key is 64 hexadecimal digits", id.trim()))
            })?;
            ring = ring.with_key(id.trim(), key)?;
        }
        match ring.keys.is_empty() {
            true => Err(Error::Options("a key ring needs at least one key".into())),
            false => Ok(ring),
        }
    }

    /// The ids of its keys, oldest first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(id, _)| id.as_str())
    }

    fn newest(&self) -> Result<&(String, Key), String> {
        self.keys.last().ok_or_else(|| "the key ring has no key to encrypt with".to_owned())
    }

    fn get(&self, id: &str) -> Option<&Key> {
        self.keys.iter().find(|(known, _)| known == id).map(|(_, key)| key)
    }

    /// `payload` of task `task` sealed under the newest key.
    fn seal(&self, task: &str, payload: &Value) -> Result<Value, String> {
        let (id, key) = self.newest()?;
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let text = payload.to_string();
        let data = ChaCha20Poly1305::new(key)
            .encrypt(&nonce, Sealed { msg: text.as_bytes(), aad: task.as_bytes() })
            .map_err(|_| format!("could not encrypt a payload of task {task:?}"))?;
        let envelope = Envelope {
            alg: ALGORITHM.into(),
            key: id.clone(),
            nonce: BASE64.encode(nonce),
            data: BASE64.encode(data),
        };
        Ok(serde_json::json!({ ENVELOPE: envelope }))
    }

    /// The JSON text sealed in `payload` of task `task`, or why it cannot be opened. The
    /// message names the job's task and the key, never the key's bytes.
    fn open(&self, task: &str, payload: &Value) -> Result<String, String> {
        let envelope = envelope(payload)
            .ok_or_else(|| format!("the payload of task {task:?} must be encrypted, and this one is not"))?;
        if envelope.alg != ALGORITHM {
            return Err(format!(
                "the payload of task {task:?} is encrypted with {:?}, which this worker does not know",
                envelope.alg
            ));
        }
        let key = self.get(&envelope.key).ok_or_else(|| {
            format!(
                "the payload of task {task:?} is encrypted with key {:?}, which this worker's key ring \
                 does not have (it has {:?}): give the worker that key",
                envelope.key,
                self.ids().collect::<Vec<_>>()
            )
        })?;
        let broken = || {
            let key = &envelope.key;
            format!(
                "the encrypted payload of task {task:?} (key {key:?}) cannot be read: it was altered, or \
                 sealed for another task"
            )
        };
        let nonce = BASE64.decode(&envelope.nonce).ok().filter(|n| n.len() == 12).ok_or_else(broken)?;
        let data = BASE64.decode(&envelope.data).map_err(|_| broken())?;
        let text = ChaCha20Poly1305::new(key)
            .decrypt(Nonce::from_slice(&nonce), Sealed { msg: &data, aad: task.as_bytes() })
            .map_err(|_| broken())?;
        String::from_utf8(text).map_err(|_| broken())
    }
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    let mut key = [0u8; 32];
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

fn envelope(payload: &Value) -> Option<Envelope> {
    let object = payload.as_object().filter(|o| o.len() == 1)?;
    serde_json::from_value(object.get(ENVELOPE)?.clone()).ok()
}

/// The id of the key `payload` is sealed with, if it is a sealed payload: what the dashboard
/// and the CLI show instead of its bytes.
pub fn encrypted_with(payload: &Value) -> Option<String> {
    envelope(payload).map(|envelope| envelope.key)
}

/// A payload as the dashboard and the CLI show it: pretty JSON, or, for a sealed one, only
/// that it is encrypted and under which key (its bytes tell a reader nothing).
pub fn payload_as_shown(payload: &Value) -> String {
    match encrypted_with(payload) {
        Some(key) => format!("encrypted (key {key:?})"),
        None => serde_json::to_string_pretty(payload).unwrap_or_default(),
    }
}

/// Which tasks' payloads are encrypted, and the keys: given to the [`WorkerUtils`] that add
/// their jobs and to the workers that run them.
#[derive(Clone, Debug)]
pub struct Encryption {
    keyring: Arc<Keyring>,
    tasks: BTreeSet<String>,
}

impl Encryption {
    /// Encryption with `keyring`, of no task yet.
    pub fn new(keyring: Keyring) -> Self {
        Encryption { keyring: Arc::new(keyring), tasks: BTreeSet::new() }
    }
    /// Encrypt the payloads of task `identifier`.
    pub fn task(mut self, identifier: &str) -> Self {
        self.tasks.insert(identifier.to_owned());
        self
    }

    /// The add layer: seal the payload of a job of an encrypted task.
    pub(crate) fn seal(&self, job: &mut RawJob) -> Result<(), String> {
        if self.tasks.contains(&job.identifier) && encrypted_with(&job.payload).is_none() {
            job.payload = self.keyring.seal(&job.identifier, &job.payload)?;
        }
        Ok(())
    }

    /// Open the payloads of the encrypted tasks among `handlers` before their handler runs;
    /// one that cannot be opened fails the attempt saying why.
    pub(crate) fn wrap(&self, handlers: &mut Handlers) {
        for (task, handler) in handlers.0.iter_mut().filter(|(task, _)| self.tasks.contains(*task)) {
            let (keyring, inner, task) = (self.keyring.clone(), handler.clone(), task.clone());
            *handler = Arc::new(move |ctx, payload: Payload| {
                let opened = keyring.open(&task, payload.value()).and_then(|text| {
                    Payload::from_text(&text)
                        .map_err(|e| format!("the decrypted payload of task {task:?}: {e}"))
                });
                match opened {
                    Ok(payload) => inner(ctx, payload),
                    Err(message) => futures::future::ready(TaskOutcome::Err(message)).boxed(),
                }
            });
        }
    }
}

impl WorkerUtils {
    /// These utilities, sealing the payloads of `encryption`'s tasks as they add them.
    pub fn encrypt_payloads(self, encryption: Encryption) -> Self {
        self.before_add(move |job| encryption.seal(job))
    }

    /// Re-encrypt under `keyring`'s newest key every sealed payload of a waiting job sealed
    /// under an older one, in batches of `batch` jobs (each job one update, skipped if a
    /// worker locked or changed it meanwhile). Jobs held by a worker are left (run them
    /// again: `formica encryption rotate` once they are done). An error names a job whose
    /// key the ring lacks, after rewriting the others.
    pub async fn rotate_payloads(&self, keyring: &Keyring, batch: u32) -> Result<Rotated, Error> {
        let newest = keyring.newest().map_err(Error::Options)?.0.clone();
        let select = formica_sql::render(formica_sql::utils::SEALED_UNDER_OLDER_KEYS, self.schema());
        let update = formica_sql::render(formica_sql::utils::RESEAL, self.schema());
        let client = self.pool().get().await?;
        let (mut rotated, mut missing) = (Rotated::default(), Vec::new());
        let (mut after, batch) = (0i64, i64::from(batch.max(1)));
        loop {
            let params: [(&(dyn ToSql + Sync), Type); 4] =
                [(&ENVELOPE, Type::TEXT), (&newest, Type::TEXT), (&after, Type::INT8), (&batch, Type::INT8)];
            let rows = client.query_typed(&select, &params).await?;
            let Some(last) = rows.last() else { break };
            after = last.try_get(0)?;
            for row in &rows {
                let (id, task, text): (i64, String, String) =
                    (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
                let payload: Value = serde_json::from_str(&text)?;
                let opened = match keyring.open(&task, &payload) {
                    Ok(opened) => opened,
                    Err(message) => {
                        missing.push(format!("job {id}: {message}"));
                        continue;
                    }
                };
                let sealed = keyring.seal(&task, &serde_json::from_str(&opened)?).map_err(Error::Options)?;
                let sealed = sealed.to_string();
                let params: [(&(dyn ToSql + Sync), Type); 3] =
                    [(&id, Type::INT8), (&text, Type::TEXT), (&sealed, Type::TEXT)];
                match client.query_typed(&update, &params).await?.is_empty() {
                    true => rotated.skipped += 1,
                    false => rotated.rewritten += 1,
                }
            }
        }
        match missing.is_empty() {
            true => Ok(rotated),
            false => Err(Error::Options(format!(
                "rewrote {} payloads; could not open {}: {}",
                rotated.rewritten,
                missing.len(),
                missing.join("; ")
            ))),
        }
    }
}

/// What [`WorkerUtils::rotate_payloads`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Rotated {
    /// Payloads now sealed under the newest key.
    pub rewritten: u64,
    /// Jobs locked or changed between the read and the write, left as they were.
    pub skipped: u64,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        let text: String = text.split_whitespace().collect();
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    /// RFC 8439, 2.8.2: the AEAD construction's test vector.
    #[test]
    fn the_cipher_gives_rfc_8439_s_test_vector() {
        let plaintext: &[u8] =
            b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip \
            for the future, sunscreen would be it.";
        let aad = hex("50515253c0c1c2c3c4c5c6c7");
        let key = hex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f");
        let nonce = hex("070000004041424344454647");
        let expected = hex(RFC_8439_CIPHERTEXT_AND_TAG);
        let cipher = ChaCha20Poly1305::new(Key::from_slice(&key));
        let sealed = cipher.encrypt(Nonce::from_slice(&nonce), Sealed { msg: plaintext, aad: &aad }).unwrap();
        assert_eq!(sealed, expected);
        let opened = cipher.decrypt(Nonce::from_slice(&nonce), Sealed { msg: &expected, aad: &aad }).unwrap();
        assert_eq!(opened, plaintext);
        let mut altered = expected.clone();
        altered[0] ^= 1;
        assert!(cipher.decrypt(Nonce::from_slice(&nonce), Sealed { msg: &altered, aad: &aad }).is_err());
    }

    /// RFC 8439's ciphertext, then its 16-byte tag.
    const RFC_8439_CIPHERTEXT_AND_TAG: &str = "
        d31a8d34648e60db7b86afbc53ef7ec2 a4aded51296e08fea9e2b5a736ee62d6
        3dbea45e8ca9671282fafb69da92728b 1a71de0a9e060b2905d6a5b67ecd3b36
        92ddbd7f2d778b8c9803aee328091b58 fab324e4fad675945585808b4831d7bc
        3ff4def08e4b7a9de576d26586cec64b 6116
        1ae10b594f09e26a7e902ecbd0600691";

    #[test]
    fn a_payload_opens_for_its_task_and_key_only_and_the_newest_key_seals() {
        let old = Keyring::default().with_key("k1", [1; 32]).unwrap();
        let ring = old.clone().with_key("k2", [2; 32]).unwrap();
        let payload = serde_json::json!({ "card": "4242" });
        let sealed = old.seal("charge", &payload).unwrap();
        assert_eq!(encrypted_with(&sealed).as_deref(), Some("k1"));
        assert!(!sealed.to_string().contains("4242"));
        assert_eq!(ring.open("charge", &sealed).unwrap(), payload.to_string(), "an older key still opens");
        assert_eq!(encrypted_with(&ring.seal("charge", &payload).unwrap()).as_deref(), Some("k2"));
        let other_task = ring.open("refund", &sealed).unwrap_err();
        assert!(other_task.contains("altered, or sealed for another task"), "{other_task}");
        let missing =
            Keyring::default().with_key("k3", [3; 32]).unwrap().open("charge", &sealed).unwrap_err();
        assert!(missing.contains(r#"key "k1", which this worker's key ring does not have"#), "{missing}");
        let plain = ring.open("charge", &payload).unwrap_err();
        assert!(plain.contains("must be encrypted"), "{plain}");
    }

    /// The cost of sealing and opening a small payload (docs/performance.md):
    /// `cargo test --release -p formica-driver --lib sealing_cost -- --ignored --nocapture`.
    #[test]
    #[ignore]
    #[allow(clippy::disallowed_methods)] // A measure, outside any worker: the process's clock.
    fn sealing_cost() {
        let ring = Keyring::default().with_key("k1", [1; 32]).unwrap();
        let payload = serde_json::json!({ "customer": 42, "card": "4242424242424242", "amount": 1999 });
        let n = 100_000;
        let started = std::time::Instant::now();
        for _ in 0..n {
            let sealed = ring.seal("charge", &payload).unwrap();
            assert!(ring.open("charge", &sealed).is_ok());
        }
        println!("sealed and opened {n} payloads: {:?} each", started.elapsed() / n);
    }

    #[test]
    fn a_key_ring_is_parsed_oldest_first_and_bad_text_is_named() {
        let ring = Keyring::parse(&format!("k1:{}, k2:{}", "00".repeat(32), "ff".repeat(32))).unwrap();
        assert_eq!(ring.ids().collect::<Vec<_>>(), ["k1", "k2"]);
        let short = Keyring::parse("k1:abcd").unwrap_err().to_string();
        assert!(short.contains(r#"key "k1": a key is 64 hexadecimal digits"#), "{short}");
        let twice = Keyring::parse(&format!("k1:{0},k1:{0}", "00".repeat(32))).unwrap_err().to_string();
        assert!(twice.contains("has a key \"k1\" already"), "{twice}");
        assert!(Keyring::parse("").is_err());
        assert!(!format!("{ring:?}").contains("ffff"), "Debug shows no key");
    }
}
