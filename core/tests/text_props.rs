//! Any text a task produces becomes text PostgreSQL stores, saying what the task said.

// Tests fail by panicking, and match only the variants they look for.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::wildcard_enum_match_arm)]

use formica_core::text::{storable, storable_bytes};
use proptest::prelude::*;

/// A piece of a task's output, and how it must read once stored.
#[derive(Debug, Clone)]
enum Piece {
    /// Valid UTF-8 without NUL: kept as it is.
    Text(String),
    Nul,
    /// A byte that never occurs in UTF-8.
    Foreign(u8),
    /// The first bytes of a multi-byte character, cut short.
    Cut(char, usize),
}

impl Piece {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Piece::Text(text) => text.as_bytes().to_vec(),
            Piece::Nul => vec![0],
            Piece::Foreign(byte) => vec![*byte],
            Piece::Cut(c, keep) => c.to_string().as_bytes()[..*keep].to_vec(),
        }
    }

    fn stored(&self) -> String {
        match self {
            Piece::Text(text) => text.clone(),
            Piece::Nul => "\\0".into(),
            _ => self.bytes().iter().map(|b| format!("\\x{b:02X}")).collect(),
        }
    }
}

fn piece() -> impl Strategy<Value = Piece> {
    prop_oneof![
        "[^\u{0}]{0,12}".prop_map(Piece::Text),
        Just(Piece::Nul),
        prop_oneof![Just(0xC0u8), Just(0xC1u8), 0xF5u8..=0xFF].prop_map(Piece::Foreign),
        any::<char>()
            .prop_filter("multi-byte", |c| c.len_utf8() > 1)
            .prop_flat_map(|c| (Just(c), 1..c.len_utf8()))
            .prop_map(|(c, keep)| Piece::Cut(c, keep)),
    ]
}

/// What the database accepts as `text`: UTF-8 (guaranteed by `str`) without NUL.
fn is_storable(text: &str) -> bool {
    !text.contains('\0')
}

proptest! {
    #[test]
    fn any_bytes_become_storable_text_that_stays_as_it_is(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let stored = storable_bytes(&bytes);
        prop_assert!(is_storable(&stored));
        prop_assert_eq!(storable_bytes(stored.as_bytes()), stored.clone(), "storing twice changes nothing");
    }

    #[test]
    fn any_string_becomes_storable_and_only_nul_changes(text in any::<String>()) {
        let stored = storable(&text);
        prop_assert!(is_storable(&stored));
        prop_assert_eq!(stored.as_ref(), text.replace('\0', "\\0"));
        prop_assert_eq!(storable_bytes(text.as_bytes()), stored);
    }

    #[test]
    fn valid_text_is_kept_and_the_rest_is_escaped_in_place(pieces in prop::collection::vec(piece(), 0..12)) {
        let bytes: Vec<u8> = pieces.iter().flat_map(Piece::bytes).collect();
        let expected: String = pieces.iter().map(Piece::stored).collect();
        prop_assert_eq!(storable_bytes(&bytes), expected);
    }
}
