//! Failures as answers: the status of each kind of failure, and the response in the
//! route's own error shape.

use std::time::SystemTime;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::metrics;
use crate::budget::BudgetExceeded;
use crate::error::ProviderError;
use crate::wire::served::{Format, find};
use crate::{BoxError, ContextLimitError};

/// The status of a failure: 400 for a request that cannot fit, whose tools clash with the
/// read tool, or that the upstream's format cannot express (nothing was sent), the
/// provider's own status for its errors (502 when it gave none), else 500.
pub(crate) fn classify(e: &BoxError) -> StatusCode {
    if find::<BudgetExceeded>(e).is_some() {
        StatusCode::TOO_MANY_REQUESTS
    } else if e.downcast_ref::<ContextLimitError>().is_some()
        || e.downcast_ref::<crate::PairingError>().is_some()
        // A client tool under the read tool's name with another definition: the
        // request's fault, named (not a 500).
        || find::<crate::ToolConflictError>(e).is_some()
    {
        StatusCode::BAD_REQUEST
    } else if find::<tower::timeout::error::Elapsed>(e).is_some() {
        StatusCode::GATEWAY_TIMEOUT
    } else if let Some(p) = find::<ProviderError>(e)
        && p.kind == crate::error::ProviderErrorKind::Unsupported
    {
        // The request cannot be written in the upstream's format (a block of another
        // format's kind): the request's fault, and nothing was sent.
        StatusCode::BAD_REQUEST
    } else if let Some(p) = find::<ProviderError>(e) {
        // The provider's error status; a success it sent that could not be read (or no
        // status at all: a timeout, a reset) is a bad gateway, never a 200.
        p.status
            .filter(|s| *s >= 400)
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::BAD_GATEWAY)
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    }
}

/// An error the server answers itself, in `F`'s shape.
pub(crate) fn error<F: Format>(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(F::error(status, message))).into_response()
}

/// A body that cannot be read, in `F`'s shape: 400, and nothing was sent.
pub(crate) fn invalid<F: Format>(e: &crate::wire::checks::Invalid) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(F::invalid(e))).into_response()
}

/// A failure before any answer, in `F`'s shape, with what the metrics count of it.
pub(crate) fn failure<F: Format>(e: &BoxError) -> Response {
    let status = classify(e);
    let mut out = (status, axum::Json(F::failure(e, status))).into_response();
    // A budget's window that resets: when to ask again.
    if let Some(at) = find::<BudgetExceeded>(e).and_then(|b| b.resets_at) {
        let secs = at
            .duration_since(SystemTime::now())
            .map_or(0, |d| d.as_secs() + 1);
        out.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    let kind = if find::<tower::timeout::error::Elapsed>(e).is_some() {
        Some("timeout".to_owned())
    } else {
        find::<ProviderError>(e).map(|p| format!("{:?}", p.kind))
    };
    out.extensions_mut().insert(metrics::Outcome {
        upstream_error: kind,
        ..metrics::Outcome::default()
    });
    out
}
