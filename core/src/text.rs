//! Text from tasks, made storable: PostgreSQL's `text` holds any UTF-8 except the NUL
//! character, and a task's error or output may be anything (a program's stderr is bytes).
//!
//! [`storable_bytes`] and [`storable`] keep every valid character as it was and write what
//! PostgreSQL would refuse as a visible escape, so the stored text still says what the task
//! said: NUL becomes `\0`, and each byte that is not part of valid UTF-8 becomes `\xNN`
//! (its value in hex). Text that was already storable comes back unchanged (borrowed), so
//! escaping twice changes nothing.
//!
//! The worker machine applies [`storable`] to every failure message it records, whatever
//! the door it came through: a driver hands a task's text over as it is, and only turns
//! bytes into text with [`from_bytes`].

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with each NUL written as `\0`.
pub fn storable(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\\0"))
    } else {
        Cow::Borrowed(text)
    }
}

/// `text`, owned, with each NUL written as `\0` (reusing `text` when it has none).
pub(crate) fn into_storable(text: String) -> String {
    match storable(&text) {
        Cow::Borrowed(_) => text,
        Cow::Owned(escaped) => escaped,
    }
}

/// `bytes` as text: valid UTF-8 kept as it is (NUL too), every other byte as `\xNN`.
pub fn from_bytes(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            // Writing to a String cannot fail.
            let _ = write!(out, "\\x{byte:02X}");
        }
    }
    Cow::Owned(out)
}

/// `bytes` as storable text: valid UTF-8 kept (NUL as `\0`), every other byte as `\xNN`.
pub fn storable_bytes(bytes: &[u8]) -> Cow<'_, str> {
    match from_bytes(bytes) {
        Cow::Borrowed(text) => storable(text),
        Cow::Owned(text) => Cow::Owned(into_storable(text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples() {
        assert_eq!(storable("plain, ünïcödé ✓"), "plain, ünïcödé ✓");
        assert!(matches!(storable("plain"), Cow::Borrowed(_)));
        assert_eq!(storable("a\0b\0"), "a\\0b\\0");
        assert_eq!(storable_bytes(b"ok \xff\xfe end"), "ok \\xFF\\xFE end");
        assert_eq!(storable_bytes(b"cut \xe2\x82"), "cut \\xE2\\x82");
        assert_eq!(storable_bytes(b"\0\xc3\xa9\x80"), "\\0\u{e9}\\x80");
        assert_eq!(from_bytes(b"\0\xc3\xa9\x80"), "\0\u{e9}\\x80");
        assert_eq!(into_storable("a\0b".into()), "a\\0b");
        assert_eq!(storable(&storable("a\0b")), "a\\0b", "escaping twice changes nothing");
    }
}
