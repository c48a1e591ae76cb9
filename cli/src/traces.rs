//! Job spans exported over OTLP (feature `otlp`), when the usual variables ask for it:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (HTTP, protobuf),
//! `OTEL_SERVICE_NAME` (default `formica`), `OTEL_TRACES_EXPORTER=none` to turn it off.
//!
//! The tracer provider is installed globally before the worker is built (the driver's
//! `traces` module starts one span per job run on it) and flushed when [`Exporting`] drops.

/// Spans are being exported; dropping it flushes them.
pub struct Exporting(#[cfg(feature = "otlp")] opentelemetry_sdk::trace::SdkTracerProvider);

#[cfg(feature = "otlp")]
impl Drop for Exporting {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            tracing::warn!(error = %e, "cannot flush the last spans");
        }
    }
}

/// Export spans if an OTLP endpoint is configured (`Ok(None)`: it is not).
#[cfg(feature = "otlp")]
pub fn init() -> Result<Option<Exporting>, String> {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let off = std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v == "none");
    if off || !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("cannot set up the OTLP span exporter: {e}"))?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "formica".into());
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(service).build();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    tracing::info!("exporting job spans over OTLP");
    Ok(Some(Exporting(provider)))
}

/// Built without the feature: say so when an endpoint is configured, then run without.
#[cfg(not(feature = "otlp"))]
pub fn init() -> Result<Option<Exporting>, String> {
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
        tracing::warn!(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but this formica was built without the otlp feature"
        );
    }
    Ok(None)
}
