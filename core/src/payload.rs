//! A job's payload as PostgreSQL stored it: its JSON text, parsed only by what needs it.
//!
//! A worker reads each payload's text and checks it once, building nothing (that it is JSON
//! a [`Value`] can hold, so a row that could not become a `Value` is still refused as it is
//! read); a typed handler then parses the text straight into its type, an executable task
//! is given the text as stored, and the `Value` is built only when something asks for it
//! ([`Payload::value`], or `*job.payload` through [`Deref`]), once.

use serde::de::{Deserialize, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

/// A job's payload: the JSON text as stored, and its [`Value`] once asked for. Cloning it
/// is cheap (the clones share both forms). It reads as a `Value` through [`Deref`]
/// (`job.payload["to"]`, `job.payload.get("to")`), compares as one, and serializes as one.
#[derive(Clone)]
pub struct Payload(Arc<Forms>);

/// The form a payload was made from, and the other one, made from it when first asked for.
enum Forms {
    Text { text: Box<str>, value: OnceLock<Value> },
    Value { value: Value, text: OnceLock<Box<str>> },
}

impl Payload {
    /// The payload stored as `text`, if it is JSON a [`Value`] can hold (serde_json's
    /// limits: nested at most 128 deep, numbers within `f64`). Checking builds nothing.
    pub fn from_text(text: &str) -> Result<Payload, serde_json::Error> {
        serde_json::from_str::<Checked>(text)?;
        Ok(Payload(Arc::new(Forms::Text { text: Box::from(text), value: OnceLock::new() })))
    }

    /// The JSON text: as stored, for a payload read from the database.
    pub fn text(&self) -> &str {
        match &*self.0 {
            Forms::Text { text, .. } => text,
            Forms::Value { value, text } => text.get_or_init(|| value.to_string().into()),
        }
    }

    /// The payload as a [`Value`], parsed the first time it is asked for.
    pub fn value(&self) -> &Value {
        match &*self.0 {
            Forms::Text { text, value } => value.get_or_init(|| parse(text)),
            Forms::Value { value, .. } => value,
        }
    }

    /// The payload as a `T`, parsed from the text (or read from the `Value`, if it was
    /// built already) with no `Value` in between.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match self.built() {
            Some(value) => T::deserialize(value),
            None => serde_json::from_str(self.text()),
        }
    }

    /// The payload as an owned [`Value`]: taken if this is its only holder, else parsed
    /// afresh from the text (or cloned, if it was built already).
    pub fn into_value(self) -> Value {
        match Arc::try_unwrap(self.0) {
            Ok(Forms::Value { value, .. }) => value,
            Ok(Forms::Text { text, value }) => value.into_inner().unwrap_or_else(|| parse(&text)),
            Err(shared) => {
                let shared = Payload(shared);
                shared.built().cloned().unwrap_or_else(|| parse(shared.text()))
            }
        }
    }

    /// The `Value`, if it was built already.
    fn built(&self) -> Option<&Value> {
        match &*self.0 {
            Forms::Text { value, .. } => value.get(),
            Forms::Value { value, .. } => Some(value),
        }
    }
}

/// Text [`Payload::from_text`] checked (or made from a `Value`) parses as a `Value`.
fn parse(text: &str) -> Value {
    serde_json::from_str(text)
        .unwrap_or_else(|e| unreachable!("a payload's text is checked to parse as a Value: {e}"))
}

impl From<Value> for Payload {
    fn from(value: Value) -> Self {
        Payload(Arc::new(Forms::Value { value, text: OnceLock::new() }))
    }
}

impl From<Payload> for Value {
    fn from(payload: Payload) -> Value {
        payload.into_value()
    }
}

impl Deref for Payload {
    type Target = Value;
    fn deref(&self) -> &Value {
        self.value()
    }
}

/// Changing the `Value` leaves the clones as they were and drops the stored text.
impl DerefMut for Payload {
    fn deref_mut(&mut self) -> &mut Value {
        let value = std::mem::replace(self, Payload::from(Value::Null)).into_value();
        *self = Payload::from(value);
        match Arc::get_mut(&mut self.0) {
            Some(Forms::Value { value, .. }) => value,
            _ => unreachable!("a payload just made from a Value has one holder"),
        }
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.value() == other.value()
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl PartialEq<Payload> for Value {
    fn eq(&self, other: &Payload) -> bool {
        self == other.value()
    }
}

/// The JSON text.
impl fmt::Display for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// The JSON text (showing it parses nothing).
impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Payload::from)
    }
}

/// JSON walked as a [`Value`] is read (every number converted, every string unescaped,
/// the same depth limit), keeping nothing: what a `Value` would refuse, this refuses.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Checked)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Checked, A::Error> {
        while items.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Checked, A::Error> {
        while entries.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

#[cfg(test)]
mod tests {
    use super::Payload;
    use serde_json::{json, Value};

    #[test]
    fn stored_text_is_kept_and_parsed_on_demand() {
        let text = r#"{"to" : "ada",  "n": [1, 2.5, null]}"#;
        let payload = Payload::from_text(text).unwrap();
        assert_eq!(payload.text(), text, "the text as stored, spaces and all");
        assert_eq!(payload.to_string(), text);
        assert_eq!(payload["to"], "ada");
        assert_eq!(payload, json!({"to": "ada", "n": [1, 2.5, null]}));
        #[derive(serde::Deserialize, PartialEq, Debug)]
        struct Mail {
            to: String,
        }
        assert_eq!(payload.parse::<Mail>().unwrap(), Mail { to: "ada".into() });
        assert_eq!(payload.clone().into_value(), json!({"to": "ada", "n": [1, 2.5, null]}));
    }

    #[test]
    fn refuses_what_a_value_refuses() {
        let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
        let cases = [r#"{"n": 1e400}"#, r#"["\ud800"]"#, deep.as_str(), "{", "[1] 2"];
        for text in cases {
            let as_value = serde_json::from_str::<Value>(text).unwrap_err().to_string();
            let as_payload = Payload::from_text(text).err().map(|e| e.to_string());
            assert_eq!(as_payload, Some(as_value), "{text}");
        }
        // Accepted where a `Value` is, at serde_json's depth limit and below it.
        let nested = |depth| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let accepted = (1..=129).filter(|&d| Payload::from_text(&nested(d)).is_ok()).count();
        let as_value = (1..=129).filter(|&d| serde_json::from_str::<Value>(&nested(d)).is_ok()).count();
        assert_eq!((accepted, as_value), (127, 127));
    }

    #[test]
    fn a_value_gets_its_text_and_changes_leave_clones_alone() {
        let mut payload = Payload::from(json!({"a": 1}));
        assert_eq!(payload.text(), r#"{"a":1}"#);
        let before = payload.clone();
        payload["a"] = json!(2);
        assert_eq!((payload.text(), before.text()), (r#"{"a":2}"#, r#"{"a":1}"#));
        let stored = Payload::from_text("[1]").unwrap();
        assert_eq!(stored.into_value(), json!([1]), "taken whole when it is the only holder");
    }
}
