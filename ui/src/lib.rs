//! formica-ui: a web dashboard to see and operate a Formica (graphile-worker) queue, as
//! `formica ui` serves it, to serve from an application of your own (axum on tokio).
//!
//! ```no_run
//! use formica::WorkerUtils;
//! use std::future::Future;
//!
//! /// Serve the dashboard of `utils`' queue on 127.0.0.1:8080, read-only, until `stop`.
//! async fn dashboard(utils: WorkerUtils, stop: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
//!     let options = formica_ui::Options { read_only: true, ..Default::default() };
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//!     formica_ui::serve(listener, utils, options, stop).await
//! }
//! ```
//!
//! [`router`] serves server-rendered pages (overview, jobs, a job, history, queues, workers, cron,
//! workflows)
//! and the JSON API under `/api/` they are built from; the pages' few scripts call the
//! API's actions, which go through [`WorkerUtils`] like the `formica` command's.
//!
//! Safe by default:
//! - [`check_bind`] refuses to listen beyond the loopback interface without a token or
//!   read-only mode;
//! - with a token, every request must carry one (`Authorization: Bearer`, or the cookie set
//!   by visiting any page with `?token=`), and its [`Role`] decides what it may do: a viewer
//!   only looks, an operator acts on jobs, an admin also changes how the queue runs
//!   ([`Options::token`] is an admin's); without one, only requests naming the host as
//!   `localhost` or an IP address are served, so a DNS-rebound site cannot reach it;
//! - actions are `POST`s that must carry the `x-formica-ui` header, which a cross-site
//!   form cannot send and a cross-site script cannot without a CORS approval that is
//!   never given; a request whose `Origin` or `Sec-Fetch-Site` says it is cross-site is
//!   refused too;
//! - every value is escaped where it is put into HTML (`html::esc`);
//! - reads never lock rows (see [`formica::inspect`]).
//!
//! `/healthz` and `/readyz` (the database answers) are served to anyone, for a
//! container's probes: they show no data.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod adding;
mod aging;
mod api;
mod bulk;
mod controls;
pub mod data;
mod guard;
pub use guard::Role;
mod held;
mod history;
mod html;
pub mod pages;
mod probes;
mod schedules;
mod why;
mod workers;
mod workflow;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use formica::cron::Crontab;
use formica::WorkerUtils;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How the dashboard runs.
#[derive(Clone, Default)]
pub struct Options {
    /// Refuse every action: only look.
    pub read_only: bool,
    /// Every request must carry a token: this one (an admin's, as a single token always was)
    /// or one of [`Options::tokens`].
    pub token: Option<String>,
    /// Tokens with their roles, beside [`Options::token`] (`formica ui --viewer-token`,
    /// `--operator-token`).
    pub tokens: Vec<(Role, String)>,
    /// The crontab to show on the cron page while no live worker records one on its lease
    /// (Formica's workers record theirs).
    pub crontab: Option<Crontab>,
    /// Where the pages and the API's reads go, if not to the database actions change: a
    /// read replica (`formica ui --read-connection`), so looking puts no load on the primary.
    /// Actions, and the reads that decide them, always go to the primary.
    pub reads: Option<WorkerUtils>,
}

/// The tokens left out: a log line never shows one.
impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("read_only", &self.read_only)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("tokens", &self.tokens.iter().map(|(role, _)| role).collect::<Vec<_>>())
            .field("crontab", &self.crontab)
            .field("reads", &self.reads.as_ref().map(WorkerUtils::schema))
            .finish()
    }
}

impl Options {
    /// The role `given` gives, if it is one of the tokens.
    fn role_of(&self, given: &str) -> Option<Role> {
        let admin = self.token.iter().map(|t| (Role::Admin, t));
        let others = self.tokens.iter().map(|(role, t)| (*role, t));
        // The highest role of a token given twice, every token compared (no early exit).
        admin.chain(others).filter(|(_, t)| guard::same(given, t)).map(|(role, _)| role).max()
    }

    fn any_token(&self) -> bool {
        self.token.is_some() || !self.tokens.is_empty()
    }
}

/// What the handlers share.
struct Shared {
    /// The primary: actions, and the reads that decide them.
    utils: WorkerUtils,
    /// What the pages and the API show: [`Options::reads`], else the primary.
    reads: WorkerUtils,
    options: Options,
    throughput: data::Throughput,
    health: data::HealthCache,
}

type State = Arc<Shared>;

/// Who the dashboard says set a flow control (a pause, a cap, a rate limit).
pub(crate) const AUTHOR: &str = "dashboard";

/// Why a request failed.
#[derive(Debug)]
pub enum Error {
    /// The request is wrong (400).
    BadRequest(String),
    /// No such thing (404).
    NotFound(String),
    /// Not allowed (403).
    Forbidden(String),
    /// No or a wrong token (401).
    Unauthorized,
    /// The action found nothing to change, e.g. the job is running (409).
    Conflict(String),
    /// The database failed (500); the message says so (labelled once, by the driver).
    Database(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::BadRequest(m)
            | Error::NotFound(m)
            | Error::Forbidden(m)
            | Error::Conflict(m)
            | Error::Database(m) => f.write_str(m),
            Error::Unauthorized => {
                f.write_str("a token is required: open the dashboard's address with ?token=<token>")
            }
        }
    }
}

impl Error {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::Unauthorized => StatusCode::UNAUTHORIZED,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::Database(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<formica::Error> for Error {
    fn from(e: formica::Error) -> Self {
        if let formica::Error::Spec(_)
        | formica::Error::Crontab { .. }
        | formica::Error::Control(_)
        | formica::Error::DeadLetter(_) = e
        {
            Error::BadRequest(e.to_string())
        } else if let formica::Error::Filter(e) = e {
            Error::BadRequest(e)
        } else if let formica::Error::JobNotFound(e) = e {
            Error::NotFound(e)
        } else if let formica::Error::QueueFull { .. } = e {
            // The queue's state refuses it, not the request: adding later may succeed.
            Error::Conflict(e.to_string())
        } else {
            Error::Database(e.to_string())
        }
    }
}

impl From<formica::tokio_postgres::Error> for Error {
    fn from(e: formica::tokio_postgres::Error) -> Self {
        formica::Error::from(e).into()
    }
}

/// API errors are JSON: `{"error": "..."}`.
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        (self.status(), axum::Json(serde_json::json!({ "error": self.to_string() }))).into_response()
    }
}

/// Whether the dashboard may listen on `addr` with `options`: beyond the loopback
/// interface, only with a token or read-only.
pub fn check_bind(addr: &SocketAddr, options: &Options) -> Result<(), String> {
    if addr.ip().is_loopback() || options.any_token() || options.read_only {
        Ok(())
    } else {
        Err(format!(
            "refusing to serve the dashboard on {addr} (beyond this machine) without --token or --read-only"
        ))
    }
}

/// The dashboard's routes over `utils`.
pub fn router(utils: WorkerUtils, options: Options) -> Router {
    build(utils, options).0
}

fn build(utils: WorkerUtils, options: Options) -> (Router, State) {
    let reads = options.reads.clone().unwrap_or_else(|| utils.clone());
    let state: State = Arc::new(Shared {
        utils,
        reads,
        options,
        throughput: data::Throughput::default(),
        health: data::HealthCache::default(),
    });
    let pages = Router::new()
        .merge(pages::routes())
        .merge(history::routes())
        .merge(controls::page_routes())
        .merge(workflow::page_routes())
        .layer(axum::middleware::from_fn_with_state(state.clone(), html::page_context));
    let router = Router::new()
        .merge(pages)
        .merge(pages::asset_routes())
        .nest(
            "/api",
            api::routes()
                .merge(schedules::routes())
                .merge(controls::api_routes())
                .merge(aging::api_routes())
                .merge(workflow::api_routes()),
        )
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::guard))
        .merge(probes::routes())
        .with_state(state.clone());
    (router, state)
}

/// Serve the dashboard on `listener` until `shutdown` completes. Meanwhile the delete
/// counter is sampled every minute, so the overview's hour fills in while nobody looks.
pub async fn serve(
    listener: tokio::net::TcpListener,
    utils: WorkerUtils,
    options: Options,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (app, state) = build(utils, options);
    let sampler = tokio::spawn(async move {
        loop {
            if let Err(e) = data::sample(&state.utils, &state.throughput).await {
                tracing::warn!("dashboard: cannot sample the throughput: {e}");
            }
            tokio::time::sleep(SAMPLE_EVERY).await;
        }
    });
    let served = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
    sampler.abort();
    served
}

const SAMPLE_EVERY: Duration = Duration::from_secs(60);
