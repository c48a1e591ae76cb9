//! The payloads of the notifications a worker listens to.
//!
//! `jobs:insert`: graphile-worker sends `{"r":<random>,"count":<n>}` (n negative when jobs were removed);
//! databases migrated before its migration 18 send an empty payload. Parsing is total: any
//! payload that does not carry an integer count means one new job, so a worker is never
//! left asleep by a payload it does not understand.
//!
//! `worker:migrate`: a migrator sends `{"migrationNumber": n, "breaking": bool}` after it
//! applied migration `n`. PostgreSQL's `json_build_object` writes it with spaces
//! (`{"migrationNumber" : 19, "breaking" : true}`), so it is parsed as JSON, never matched
//! as text. A payload that is not such an object is no migration a worker must stop for.

use serde::Deserialize;

/// A migration announced on `worker:migrate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Migration {
    /// The migration's number in graphile-worker's ledger.
    #[serde(rename = "migrationNumber")]
    pub number: i64,
    /// Whether workers that do not know it must stop.
    pub breaking: bool,
}

/// The migration a `worker:migrate` payload announces, if it is one.
pub fn parse_migration(payload: &str) -> Option<Migration> {
    serde_json::from_str(payload).ok()
}

/// How many jobs a `jobs:insert` payload announces.
pub fn parse_insert_count(payload: &str) -> i64 {
    serde_json::from_str::<serde_json::Value>(payload)
        .ok()
        .and_then(|v| v.get("count").and_then(serde_json::Value::as_i64))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::{parse_insert_count, parse_migration, Migration};

    #[test]
    fn migrations_are_read_as_json_whatever_the_spacing() {
        let breaking = Some(Migration { number: 19, breaking: true });
        // What PostgreSQL's json_build_object sends, and the same without spaces.
        assert_eq!(parse_migration(r#"{"migrationNumber" : 19, "breaking" : true}"#), breaking);
        assert_eq!(parse_migration(r#"{"migrationNumber":19,"breaking":true}"#), breaking);
        assert_eq!(
            parse_migration(r#"{"migrationNumber": 20, "breaking": false}"#),
            Some(Migration { number: 20, breaking: false })
        );
        for odd in ["", "{}", r#"{"breaking":"true"}"#, r#"{"migrationNumber":1}"#, "[true]", "\u{0}"] {
            assert_eq!(parse_migration(odd), None, "{odd:?}");
        }
    }

    #[test]
    fn counts_come_from_the_payload_and_anything_else_is_one() {
        assert_eq!(parse_insert_count(r#"{"r":0.966,"count":3}"#), 3);
        assert_eq!(parse_insert_count(r#"{"r":0.1,"count":-1}"#), -1);
        for odd in [
            "",
            "{}",
            "null",
            "[1]",
            r#"{"count":"2"}"#,
            r#"{"count":2.5}"#,
            "{",
            "\u{0}",
            "9999999999999999999999",
        ] {
            assert_eq!(parse_insert_count(odd), 1, "{odd:?}");
        }
    }
}
