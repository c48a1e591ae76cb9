//! Crontab parser target: any bytes, read as (lossy) UTF-8 crontab text.
//!
//! Properties: parsing never panics; an error points inside the text (a line that exists,
//! a column within or just past it); every crontab that parses prints to text that parses
//! back to the same crontab; and every item's `next_after` from a fixed time is a later
//! whole minute that the item matches.

use chrono::{DateTime, TimeZone, Timelike, Utc};
use formica_core::cron::parse;

/// Never panics on any text; whatever parses prints back to text that parses to the same,
/// and its next runs match.
pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let tab = match parse(&text) {
        Ok(tab) => tab,
        Err(e) => {
            let line = text.split('\n').nth(e.line.wrapping_sub(1));
            let width = line.map(|l| l.chars().count());
            assert!(width.is_some_and(|w| (1..=w + 1).contains(&e.column)), "{e:?} for {text:?}");
            assert!(!e.message.is_empty());
            return;
        }
    };
    let printed = tab.to_string();
    let again = parse(&printed).unwrap_or_else(|e| panic!("printed crontab {printed:?} does not parse: {e}"));
    assert_eq!(again, tab, "printed as {printed:?}");
    let from: DateTime<Utc> = Utc.with_ymd_and_hms(2024, 2, 28, 23, 59, 30).single().expect("a valid time");
    for item in tab.items() {
        if let Some(next) = item.next_after(from) {
            assert!(next > from && next.second() == 0 && next.nanosecond() == 0, "{item}: {next}");
            assert!(item.matches(next), "{item} does not match its next run {next}");
        }
    }
}
