//! `--metrics-addr`: the worker's OpenTelemetry metrics served for Prometheus at
//! `GET /metrics` (feature `prometheus`).
//!
//! The meter provider is installed globally before the worker is built, so the worker's
//! instruments (see the driver's `metrics` module) report to it. The HTTP server is the
//! least Prometheus needs: one request per connection, answered and closed.

use crate::Failure;
use std::net::SocketAddr;

/// Install the meter provider and serve its metrics on `addr` (in the background).
#[cfg(feature = "prometheus")]
pub async fn serve(addr: SocketAddr) -> Result<(), Failure> {
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
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream, registry.clone()));
                }
                Err(e) => tracing::warn!(error = %e, "metrics endpoint: cannot accept a connection"),
            }
        }
    });
    Ok(())
}

/// Without the feature the flag is refused, saying how to get it.
#[cfg(not(feature = "prometheus"))]
pub async fn serve(addr: SocketAddr) -> Result<(), Failure> {
    Err(Failure::Command(format!(
        "--metrics-addr {addr}: this formica was built without metrics (build it with --features prometheus)"
    )))
}

/// Answer one request: the metrics for `GET /metrics`, 404 for any other path.
#[cfg(feature = "prometheus")]
async fn answer(mut stream: tokio::net::TcpStream, registry: prometheus::Registry) {
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
