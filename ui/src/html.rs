//! The pieces every page is built of: escaping, the page frame, tables, action buttons.
//! Every value from the database or the request goes through [`esc`] on its way into the
//! HTML.

use crate::{Error, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, SecondsFormat, Utc};
use std::fmt::Write;

/// `text` made safe to put into HTML, as element text or a quoted attribute value.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A query string value, percent-encoded.
pub(crate) fn url(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

tokio::task_local! {
    /// The database's clock when the page being rendered began: relative times count from
    /// it (set by [`page_context`] around each page).
    static NOW: DateTime<Utc>;
    /// The health banner of the page being rendered (empty when nothing is wrong).
    static BANNER: String;
}

/// Render the page of `request` knowing the database's clock (one `select now()`), so its
/// times say how long ago they were by the same clock that wrote them, and the queue's
/// health (read at most every 30 s) for the banner. A page whose read of the clock fails
/// shows absolute times only (its own reads report the failure); one whose read of the
/// health fails shows no banner.
pub(crate) async fn page_context(
    axum::extract::State(s): axum::extract::State<State>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let banner = s.health.get(&s.utils).await.map(|health| banner(&health)).unwrap_or_default();
    match formica::inspect::database_now(&s.reads).await {
        Ok(now) => NOW.scope(now, BANNER.scope(banner, next.run(request))).await,
        Err(_) => BANNER.scope(banner, next.run(request)).await,
    }
}

/// The banner every page opens with while a health check warns or is critical: each such
/// check's summary, and where the evidence is.
fn banner(health: &formica::inspect::Health) -> String {
    let wrong: String = health
        .wrong()
        .map(|check| {
            format!(
                "<li><strong>{}</strong> ({}): {}</li>",
                esc(check.name),
                check.severity.name(),
                esc(&check.summary)
            )
        })
        .collect();
    if wrong.is_empty() {
        return String::new();
    }
    format!(
        r#"<div class="banner {worst}" id="health"><p>Queue health: {worst}</p><ul>{wrong}</ul>
<p>The evidence: <code>formica doctor</code>, or <a href="/api/health">/api/health</a>.</p></div>"#,
        worst = health.worst().name()
    )
}

/// `at` as an operator reads it: the absolute time, and beside it how long ago (or how
/// soon) by the database's clock, when the page knows it.
pub(crate) fn time(at: &DateTime<Utc>) -> String {
    let absolute = stamp(at);
    match NOW.try_with(|now| *now) {
        Ok(now) => format!(r#"<time>{absolute}</time> <span class="ago">({})</span>"#, relative(at, &now)),
        Err(_) => absolute,
    }
}

/// `at`, absolute only (for attributes and form fields).
pub(crate) fn stamp(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// How long before `now` `at` was, or how long after it `at` is: `3 min ago`, `in 8 s`.
pub(crate) fn relative(at: &DateTime<Utc>, now: &DateTime<Utc>) -> String {
    let seconds = (*now - *at).num_seconds();
    match seconds {
        0 => "now".to_owned(),
        s if s > 0 => format!("{} ago", age(s)),
        s => format!("in {}", age(-s)),
    }
}

pub(crate) fn opt_time(at: &Option<DateTime<Utc>>) -> String {
    at.as_ref().map(time).unwrap_or_default()
}

/// Defence in depth behind [`esc`]: no script but the dashboard's own file runs, and no
/// other site may frame the pages (to trick a click on an action).
const POLICY: &str = "default-src 'self'; frame-ancestors 'none'; form-action 'self'";

pub(crate) fn page(s: &State, title: &str, body: &str) -> Response {
    let mode = match crate::guard::role() {
        _ if s.options.read_only => r#"<span class="badge">read-only</span>"#.to_owned(),
        Some(role) if role < crate::Role::Admin => format!(r#"<span class="badge">{}</span>"#, role.name()),
        _ => String::new(),
    };
    let headers = [(header::CONTENT_SECURITY_POLICY, POLICY), (header::X_FRAME_OPTIONS, "DENY")];
    let html = Html(format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} · formica</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/assets/style.css"><script src="/assets/app.js" defer></script></head>
<body><nav><strong>formica</strong> <a href="/">Overview</a> <a href="/jobs">Jobs</a>
<a href="/history">History</a> <a href="/queues">Queues</a> <a href="/workers">Workers</a> <a href="/cron">Cron</a> <a href="/flow">Flow</a> <a href="/workflows">Workflows</a> {mode}
<label class="refresh" title="Reload this page's content every 2 seconds"><input type="checkbox" id="auto-refresh"> auto-refresh</label>
<span class="schema">schema {schema}</span></nav>
<main>{banner}<h1>{title}</h1><p id="message" class="error" hidden></p>
{body}</main></body></html>"#,
        banner = BANNER.try_with(Clone::clone).unwrap_or_default(),
        title = esc(title),
        schema = esc(s.utils.schema()),
    ));
    (headers, html).into_response()
}

pub(crate) fn error_page(s: &State, e: impl Into<Error>) -> Response {
    let e = e.into();
    let status = e.status();
    let mut response = page(s, "Error", &format!(r#"<p class="error">{}</p>"#, esc(&e.to_string())));
    *response.status_mut() = status;
    response
}

pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut html = String::from("<table><thead><tr>");
    for h in headers {
        let _ = write!(html, "<th>{}</th>", esc(h));
    }
    html.push_str("</tr></thead><tbody>");
    for row in rows {
        html.push_str("<tr>");
        for cell in row {
            let _ = write!(html, "<td>{cell}</td>");
        }
        html.push_str("</tr>");
    }
    if rows.is_empty() {
        let _ = write!(html, r#"<tr><td colspan="{}" class="none">none</td></tr>"#, headers.len());
    }
    html + "</tbody></table>"
}

/// An action button: asks `confirm`, then posts to `path` as JSON the fields of the form
/// named by a `data-form` attribute and the object of a `data-body` one, given in `attrs`.
/// Nothing if the reader's role may not post to `path`.
pub(crate) fn button(label: &str, path: &str, confirm: &str, attrs: &[(&str, &str)]) -> String {
    if !crate::guard::may(path) {
        return String::new();
    }
    let extra: String =
        attrs.iter().map(|(name, value)| format!(r#" data-{name}="{}""#, esc(value))).collect();
    format!(
        r#"<button data-action="{}" data-confirm="{}"{extra}>{}</button>"#,
        esc(path),
        esc(confirm),
        esc(label)
    )
}

pub(crate) fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 7200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3600),
        s => format!("{} days", s / 86_400),
    }
}

/// A `last_error` in a list: its first line (cut at 100 characters); if that is not all of
/// it, the whole text a click away.
pub(crate) fn error_cell(text: Option<&str>) -> String {
    let Some(text) = text else { return String::new() };
    let line = first_line(text, 100);
    if line == text {
        return esc(text);
    }
    format!(
        r#"<details class="error-text"><summary>{}</summary><pre>{}</pre></details>"#,
        esc(&line),
        esc(text)
    )
}

pub(crate) fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    if line.chars().count() > max || line.len() < text.len() {
        line.chars().take(max).collect::<String>() + "…"
    } else {
        line.to_owned()
    }
}

/// A filter form's text input `name`, holding `value`, with `hint` shown while empty.
pub(crate) fn text_field(name: &str, value: &Option<String>, hint: &str) -> String {
    format!(
        r#"<label>{name} <input name="{name}" value="{}" placeholder="{hint}"></label>"#,
        esc(value.as_deref().unwrap_or(""))
    )
}

pub(crate) fn select(name: &str, current: Option<&str>, choices: &[(&str, &str)]) -> String {
    let mut html = format!(r#"<select name="{name}">"#);
    for (value, label) in choices {
        let selected = if current == Some(*value) { " selected" } else { "" };
        let _ = write!(html, r#"<option value="{}"{selected}>{}</option>"#, esc(value), esc(label));
    }
    html + "</select>"
}

/// [`select`] with its name as its label, for a filter form.
pub(crate) fn labelled_select(name: &str, current: Option<&str>, choices: &[(&str, &str)]) -> String {
    format!("<label>{name} {}</label>", select(name, current, choices))
}

/// The filters of a listing: `fields` ([`text_field`], [`labelled_select`]) sent to `action`.
pub(crate) fn filter_form(action: &str, fields: &[String]) -> String {
    format!(
        r#"<form class="filters" method="get" action="{action}">{}<button type="submit">Filter</button></form>"#,
        fields.concat()
    )
}

/// What could not be read from the database (rows, values), one item each, or nothing.
pub(crate) fn unreadable(items: &[String]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let list: String = items.iter().map(|item| format!("<li>{}</li>", esc(item))).collect();
    format!(
        r#"<div class="error" id="unreadable"><p>Could not be read (the rest is shown):</p><ul>{list}</ul></div>"#
    )
}
