//! The Workers page: every worker by its lease (alive, stopped, or lapsed) or by the locks
//! it holds, and an Unlock button only where unlocking can help: a worker that holds
//! something and is not alive (a live worker's jobs, unlocked, would run twice).

use crate::html::{button, error_page, page, table, time};
use crate::State;
use axum::extract::State as Ext;
use axum::response::Response;
use formica::inspect::{self, WorkerSeen};

pub(crate) async fn page_of_workers(Ext(s): Ext<State>) -> Response {
    let workers = match inspect::workers(&s.reads).await {
        Ok(w) => w,
        Err(e) => return error_page(&s, e),
    };
    let rows: Vec<Vec<String>> = workers.iter().map(row).collect();
    let headers: Vec<&str> =
        inspect::WORKER_COLUMNS.into_iter().chain(["holding since", "cron items", "version", ""]).collect();
    let html = format!(
        r#"<p>Every Formica worker by its lease (renewed every few seconds): alive, stopped (it stopped cleanly and holds nothing), or lapsed (it stopped renewing without stopping: it died or is cut off, and a live worker's next sweep frees what it holds); and every other worker holding jobs or queues. A stopped or lapsed worker is forgotten a little after.</p><div class="wide">{}</div>"#,
        table(&headers, &rows)
    );
    page(&s, "Workers", &html)
}

fn row(w: &WorkerSeen) -> Vec<String> {
    let actions = if w.unlockable() {
        let body = serde_json::json!({ "worker_id": w.worker_id }).to_string();
        let confirm = format!(
            "Is worker {} dead? Its jobs and queues will be released for others to run.",
            w.worker_id
        );
        button("Unlock", "/api/workers/unlock", &confirm, &[("body", &body)])
    } else {
        String::new()
    };
    let lease = w.lease.as_ref();
    let text = |v: Option<String>| v.map_or("-".to_owned(), |v| crate::html::esc(&v));
    let state = lease.map_or("no lease".to_owned(), |l| l.state(time));
    let state = match state.strip_prefix("lapsed") {
        Some(rest) => format!("<b>lapsed</b>{rest}"),
        None => state,
    };
    vec![
        crate::html::esc(&w.worker_id),
        text(lease.and_then(|l| l.host.clone())),
        text(lease.and_then(|l| l.pid).map(|p| p.to_string())),
        lease.map_or("-".to_owned(), |l| time(&l.started_at)),
        lease.map_or("-".to_owned(), |l| time(&l.heartbeat_at)),
        state,
        w.jobs.to_string(),
        w.queues.to_string(),
        w.since.as_ref().map_or("-".to_owned(), time),
        lease.and_then(|l| l.cron_items).map_or("-".to_owned(), |n| format!(r#"<a href="/cron">{n}</a>"#)),
        text(lease.and_then(|l| l.version.clone())),
        actions,
    ]
}
