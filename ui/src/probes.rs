//! A container's probes, outside the token and host checks (they show no data):
//! `GET /healthz` is 200 while the process serves; `GET /readyz` is 200 while the database
//! answers, 503 with the reason otherwise.

use crate::State;
use axum::extract::State as Ext;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use std::time::Duration;

/// How long `/readyz` waits for the database: a probe that hangs is a failed probe.
const READY_WITHIN: Duration = Duration::from_secs(2);

pub(crate) fn routes() -> Router<State> {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz))
}

async fn healthz() -> &'static str {
    "alive\n"
}

async fn readyz(Ext(s): Ext<State>) -> (StatusCode, String) {
    let ready = tokio::time::timeout(READY_WITHIN, formica::inspect::readiness(&s.utils, None)).await;
    match ready.unwrap_or_else(|_| Err(format!("the database did not answer within {READY_WITHIN:?}"))) {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}
