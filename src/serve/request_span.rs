//! The span of one proxied request: the root of everything the stack does for it, and,
//! with the `otel` feature, the continuation of the client's trace (W3C `traceparent`).

use axum::http::HeaderMap;
use tracing::Span;
use tracing::field::Empty;

/// The server span of a request on `route`, in the OpenTelemetry HTTP conventions'
/// terms (`POST {route}`, kind `server`), its status still to record.
pub(super) fn open(route: &'static str, headers: &HeaderMap) -> Span {
    let span = tracing::info_span!(
        target: "llm_context::serve",
        "llm_context.request",
        otel.name = Empty,
        otel.kind = "server",
        otel.status_code = Empty,
        error.type = Empty,
        http.request.method = "POST",
        http.route = route,
        http.response.status_code = Empty,
        llm_context.tenant = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    span.record("otel.name", format!("POST {route}").as_str());
    #[cfg(feature = "otel")]
    continue_trace(&span, headers);
    #[cfg(not(feature = "otel"))]
    let _ = headers;
    span
}

/// Records the answer's status and the tenant; a 5xx is an error of the server, as the
/// HTTP conventions say (a 4xx is the client's).
pub(super) fn close(span: &Span, status: u16, tenant: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("http.response.status_code", i64::from(status));
    span.record("llm_context.tenant", tenant);
    if status >= 500 {
        // The HTTP conventions' `error.type` for a status is the status itself.
        crate::trace::failed(span, &status.to_string());
    }
}

/// Makes `span` a child of the trace the client's `traceparent` (and `tracestate`)
/// names, so that an agent's own trace holds what the proxy did for its call. A missing
/// or malformed header leaves the span a root.
#[cfg(feature = "otel")]
fn continue_trace(span: &Span, headers: &HeaderMap) {
    use opentelemetry::propagation::{Extractor, TextMapPropagator};
    use opentelemetry::trace::TraceContextExt;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    struct Headers<'a>(&'a HeaderMap);
    impl Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(|k| k.as_str()).collect()
        }
    }

    if !headers.contains_key("traceparent") {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&Headers(headers));
    if parent.span().span_context().is_valid() {
        // Fails only when no OpenTelemetry layer is listening: nothing to continue then.
        let _ = span.set_parent(parent);
    }
}
