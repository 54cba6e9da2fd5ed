//! `--otlp-endpoint`: the stack's spans exported over OTLP/HTTP (protobuf) to a collector.
//!
//! Only the stack's own spans and events go out (targets `llm_context…`, `INFO` and up,
//! whatever `RUST_LOG` says of the log on standard error): a collector is not a log
//! sink, and the exporter's own HTTP client must never trace itself into a loop.
//! Spans are sent in batches from the SDK's background thread; [`Telemetry::shutdown`]
//! sends what is left when the command ends.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

/// The OTLP/HTTP path of traces, added to an endpoint given without a path (as
/// `OTEL_EXPORTER_OTLP_ENDPOINT` is read by the specification).
const TRACES_PATH: &str = "/v1/traces";

/// How long one export may take: a collector that does not answer costs the batch, never
/// the command.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The URL spans are posted to: `endpoint` itself when it names a path, else
/// `endpoint` + `/v1/traces`. Only `http` and `https` URLs are taken.
pub(crate) fn traces_url(endpoint: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(endpoint)
        .map_err(|e| format!("the OTLP endpoint {endpoint:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!(
            "the OTLP endpoint {endpoint:?} must be an http:// or https:// URL with a host"
        ));
    }
    if matches!(url.path(), "" | "/") {
        Ok(format!("{}{TRACES_PATH}", endpoint.trim_end_matches('/')))
    } else {
        Ok(endpoint.to_owned())
    }
}

/// The exporter, running: ends with [`shutdown`](Self::shutdown).
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// An exporter to `endpoint` (see [`traces_url`]) and the subscriber layer that
    /// feeds it.
    pub(crate) fn start<S>(endpoint: &str) -> Result<(Self, impl Layer<S>), String>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let url = traces_url(endpoint)?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url.as_str())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot start the OTLP exporter to {url}: {e}"))?;
        // `OTEL_SERVICE_NAME` (read by the SDK's resource) names the process when set.
        let mut resource = Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("llm-context");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("llm-context");
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_threads(false)
            .with_filter(
                Targets::new()
                    .with_target("llm_context", LevelFilter::INFO)
                    .with_target("llm_context_layers", LevelFilter::INFO),
            );
        Ok((Self { provider }, layer))
    }

    /// Sends the spans still queued and stops the exporter. A failure is a warning: the
    /// command's own outcome stands.
    pub(crate) fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            super::warn_line(&format!("cannot export the last spans: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn a_bare_endpoint_gets_the_traces_path_and_a_full_one_is_kept() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://127.0.0.1:4318/").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/custom/traces").unwrap(),
            "https://otel.example/custom/traces"
        );
        for bad in ["127.0.0.1:4318", "ftp://collector/", "not a url", ""] {
            assert!(traces_url(bad).is_err(), "{bad}");
        }
    }
}
