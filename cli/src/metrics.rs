//! `--metrics-addr`: the worker's OpenTelemetry metrics served for Prometheus at
//! `GET /metrics` (feature `prometheus`), and a container's probes: `GET /healthz` (200
//! while the process runs) and `GET /readyz` (200 once the worker runs, while the database
//! answers and its lease holds; 503 with the reason otherwise).
//!
//! The meter provider is installed globally before the worker is built, so the worker's
//! instruments (see the driver's `metrics` module) report to it. The HTTP server is the
//! least Prometheus needs: one request per connection, answered and closed.

use crate::Failure;
use formica_tokio::WorkerUtils;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long `/readyz` waits for the database: a probe that hangs is a failed probe.
const READY_WITHIN: Duration = Duration::from_secs(2);

/// The worker `/readyz` reports on, once it is initialized.
#[derive(Clone, Default)]
pub struct Probe(Arc<OnceLock<(WorkerUtils, String)>>);

impl Probe {
    /// From now on, `/readyz` asks about the worker `worker_id` through `utils`.
    pub fn ready_for(&self, utils: WorkerUtils, worker_id: &str) {
        let _ = self.0.set((utils, worker_id.to_owned()));
    }

    /// `Ok`: ready; `Err`: why not.
    #[cfg_attr(not(feature = "prometheus"), allow(dead_code))]
    async fn ready(&self) -> Result<(), String> {
        let Some((utils, worker_id)) = self.0.get() else {
            return Err("the worker is starting".into());
        };
        let ready = formica_tokio::inspect::readiness(utils, Some(worker_id));
        tokio::time::timeout(READY_WITHIN, ready)
            .await
            .unwrap_or_else(|_| Err(format!("the database did not answer within {READY_WITHIN:?}")))
    }
}

/// Install the meter provider and serve its metrics and probes on `addr` (in the
/// background); `/readyz` answers for the worker given to the returned [`Probe`].
#[cfg(feature = "prometheus")]
pub async fn serve(addr: SocketAddr) -> Result<Probe, Failure> {
    use opentelemetry_sdk::metrics::SdkMeterProvider;
    let registry = prometheus::Registry::new();
    let exporter = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .build()
        .map_err(|e| Failure::Command(format!("cannot set up the metrics exporter: {e}")))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name("formica").build();
    let provider = SdkMeterProvider::builder().with_reader(exporter).with_resource(resource).build();
    opentelemetry::global::set_meter_provider(provider);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::Command(format!("cannot serve metrics on {addr}: {e}")))?;
    tracing::info!(address = %listener.local_addr().unwrap_or(addr), "serving metrics at /metrics");
    let probe = Probe::default();
    let serving = probe.clone();
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, registry.clone(), serving.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "metrics endpoint: cannot accept a connection"),
            }
        }
    });
    Ok(probe)
}

/// Without the feature the flag is refused, saying how to get it.
#[cfg(not(feature = "prometheus"))]
pub async fn serve(addr: SocketAddr) -> Result<Probe, Failure> {
    Err(Failure::Command(format!(
        "--metrics-addr {addr}: this formica was built without metrics (build it with --features prometheus)"
    )))
}

/// Answer one request: the metrics for `GET /metrics`, the probes, 404 for any other path.
#[cfg(feature = "prometheus")]
async fn answer(mut stream: tokio::net::TcpStream, registry: prometheus::Registry, probe: Probe) {
    use prometheus::Encoder;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    // The request line and headers; a request that never ends them is dropped.
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let line = request.split(|b| *b == b'\r').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = path.split(|b| *b == b'?').next().unwrap_or_default();
    let encoder = prometheus::TextEncoder::new();
    let (status, content_type, body) = match (method, path) {
        (b"GET", b"/metrics") => {
            let mut body = Vec::new();
            match encoder.encode(&registry.gather(), &mut body) {
                Ok(()) => ("200 OK", encoder.format_type().to_owned(), body),
                Err(e) => ("500 Internal Server Error", "text/plain".into(), e.to_string().into_bytes()),
            }
        }
        (b"GET", b"/healthz") => ("200 OK", "text/plain".into(), b"alive\n".to_vec()),
        (b"GET", b"/readyz") => match probe.ready().await {
            Ok(()) => ("200 OK", "text/plain".into(), b"ready\n".to_vec()),
            Err(why) => {
                ("503 Service Unavailable", "text/plain".into(), format!("not ready: {why}\n").into_bytes())
            }
        },
        _ => ("404 Not Found", "text/plain".into(), b"metrics are at /metrics\n".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
}
