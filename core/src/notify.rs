//! The payload of `jobs:insert` notifications.
//!
//! graphile-worker sends `{"r":<random>,"count":<n>}` (n negative when jobs were removed);
//! databases migrated before its migration 18 send an empty payload. Parsing is total: any
//! payload that does not carry an integer count means one new job, so a worker is never
//! left asleep by a payload it does not understand.

/// How many jobs a `jobs:insert` payload announces.
pub fn parse_insert_count(payload: &str) -> i64 {
    serde_json::from_str::<serde_json::Value>(payload)
        .ok()
        .and_then(|v| v.get("count").and_then(serde_json::Value::as_i64))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::parse_insert_count;

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
