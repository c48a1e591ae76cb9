//! The job page's "Why it is not running" section (docs/guide/why.md): what
//! `formica::inspect::why` answers, as `formica why` prints it, a reason a line with its end
//! where known, where a running job runs, and the estimate of its start.

use crate::html::{esc, relative, stamp};
use crate::State;
use chrono::{DateTime, Utc};
use formica::inspect::{self, JobRef, Why};
use std::fmt::Write;

/// The section for job `id`: its answer, or the error reading it (the page shows the rest).
pub(crate) async fn section(s: &State, id: i64) -> String {
    let mut html = String::from(r#"<h2>Why it is not running</h2><div id="why">"#);
    match inspect::why(&s.utils, &JobRef::Id(id)).await {
        Ok(why) => html.push_str(&answer(&why)),
        Err(e) => {
            let _ = write!(html, r#"<p class="error">{}</p>"#, esc(&e.to_string()));
        }
    }
    html.push_str("</div>");
    html
}

/// The answer as HTML, its times absolute and relative to when the database was asked.
fn answer(why: &Why) -> String {
    let at = |t: &DateTime<Utc>| format!("{} ({})", stamp(t), relative(t, &why.checked_at));
    let mut html = String::new();
    if let Some(running) = &why.running {
        let since = running.since.as_ref().map(|t| format!(" since {}", at(t))).unwrap_or_default();
        let place = running.host.as_ref().map(|h| format!(" on {h}")).unwrap_or_default();
        let _ = write!(
            html,
            r#"<p class="running">Running: worker {}{}{}.</p>"#,
            esc(&running.worker),
            esc(&place),
            esc(&since)
        );
    } else if why.reasons.is_empty() {
        html.push_str("<p>Nothing holds it: the next fetch of a worker that runs its task takes it.</p>");
    }
    if !why.reasons.is_empty() {
        html.push_str("<ul>");
        for reason in &why.reasons {
            let until = reason.until().map(|t| format!(" Until {}.", at(&t))).unwrap_or_default();
            let _ = write!(
                html,
                r#"<li class="reason {0}"><strong>{0}</strong>: {1}.{2}</li>"#,
                reason.name(),
                esc(&reason.describe(&why.task, &at)),
                esc(&until)
            );
        }
        html.push_str("</ul>");
    }
    if let Some(estimate) = &why.estimate {
        let _ = write!(html, r#"<p class="estimate">{}</p>"#, esc(&estimate.describe(&at)));
    }
    html
}
