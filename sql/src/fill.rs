//! Filling a statement's template: the one way a form of a statement is made of parts.
//!
//! A template marks each place a part goes with a comment, `/*:NAME*/` (NAME in capitals,
//! digits and `_`), so an unfilled template is still valid SQL. [`fill`] puts each named
//! text in place of every marker of its name, and refuses a marker it was given no text for
//! (an empty text leaves a part out) and a text no marker takes: a form is either made whole
//! or not made, never sent with a part silently missing. A text put in may not hold a marker
//! itself: parts are filled inside out.
//!
//! ```
//! let sql = formica_sql::fill("select 1 /*:MORE*/", &[("MORE", ", 2")]).unwrap();
//! assert_eq!(sql, "select 1 , 2");
//! assert!(formica_sql::fill("select 1 /*:MORE*/", &[]).is_err());
//! assert!(formica_sql::fill("select 1", &[("MORE", ", 2")]).is_err());
//! ```
//!
//! The schema placeholders `:SCHEMA` and `:RECORDS`, and the expression `:JOB_STATE`, are
//! another thing: values, the same in every statement, that [`crate::render`] puts in when a
//! statement is rendered for a schema.

use std::fmt;

/// A template and its parts that do not fit: a marker left unfilled, or a part no marker takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FillError {
    /// The template (or a part put in it) has a marker no part was given for.
    Unfilled(String),
    /// A part was given that no marker of the template takes.
    Unused(String),
}

impl fmt::Display for FillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FillError::Unfilled(name) => write!(f, "the template's marker /*:{name}*/ was given no text"),
            FillError::Unused(name) => write!(f, "the template has no marker /*:{name}*/ for the text given"),
        }
    }
}

impl std::error::Error for FillError {}

/// `template` with each marker `/*:NAME*/` replaced by the text `parts` gives for NAME;
/// an error if a marker has no text, a text has no marker, or a text holds a marker.
pub fn fill(template: &str, parts: &[(&str, &str)]) -> Result<String, FillError> {
    let mut used = vec![false; parts.len()];
    let mut out =
        String::with_capacity(template.len() + parts.iter().map(|(_, text)| text.len()).sum::<usize>());
    let mut rest = template;
    while let Some((before, name, after)) = next_marker(rest) {
        let Some(i) = parts.iter().position(|(n, _)| *n == name) else {
            return Err(FillError::Unfilled(name.to_owned()));
        };
        if let Some((_, inner, _)) = next_marker(parts[i].1) {
            return Err(FillError::Unfilled(inner.to_owned()));
        }
        used[i] = true;
        out.push_str(before);
        out.push_str(parts[i].1);
        rest = after;
    }
    out.push_str(rest);
    match parts.iter().zip(&used).find(|(_, used)| !**used) {
        Some(((name, _), _)) => Err(FillError::Unused((*name).to_owned())),
        None => Ok(out),
    }
}

/// The text before the first marker of `text`, the marker's name and the text after it.
fn next_marker(text: &str) -> Option<(&str, &str, &str)> {
    let mut from = 0;
    while let Some(start) = text[from..].find("/*:").map(|i| from + i) {
        let name_from = start + 3;
        let name_len = text[name_from..]
            .bytes()
            .take_while(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_')
            .count();
        let name_to = name_from + name_len;
        if name_len > 0 && text[name_to..].starts_with("*/") {
            return Some((&text[..start], &text[name_from..name_to], &text[name_to + 2..]));
        }
        from = name_from;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_marker_of_a_name_takes_its_text() {
        let sql = fill("a /*:X*/ b /*:Y*/ c /*:X*/", &[("X", "1"), ("Y", "")]).unwrap();
        assert_eq!(sql, "a 1 b  c 1");
    }

    #[test]
    fn a_marker_left_or_a_text_unused_is_refused() {
        assert_eq!(fill("a /*:X*/", &[]), Err(FillError::Unfilled("X".into())));
        assert_eq!(fill("a", &[("X", "1")]), Err(FillError::Unused("X".into())));
        assert_eq!(fill("a /*:X*/", &[("X", "/*:Y*/")]), Err(FillError::Unfilled("Y".into())));
    }

    #[test]
    fn comments_that_are_not_markers_stay() {
        let text = "a /*: x */ /*:lower*/ /*:X */ /* :X*/";
        assert_eq!(fill(text, &[]).unwrap(), text);
    }
}
