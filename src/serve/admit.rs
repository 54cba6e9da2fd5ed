//! Letting a request in, the same way on every route the proxy serves: a place in the
//! concurrency limit, the key, then the body within its tenant's limit.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use tokio::sync::OwnedSemaphorePermit;

use super::keys::Tenant;
use super::{Shared, body, decode};

/// A request let in: its place in the concurrency limit (held to the end of its answer)
/// and its body.
pub(crate) struct Admitted {
    pub(crate) permit: OwnedSemaphorePermit,
    pub(crate) body: body::Read,
}

/// Lets a request in, or the answer refusing it, written by `error` in the route's
/// shape: 503 with `retry-after` when the concurrency limit is reached (shed, not
/// queued: a queue behind calls of seconds each only makes every client late), 401 for
/// a missing or unknown key, then the body's own refusals (413, 408, and 503 with
/// `retry-after` past the in-flight body budget). The body is not read before the key
/// is checked. A managed route (`decode`) reads a compressed body decoded
/// ([`decode::decoded`]: 415 for an unknown encoding, 413 past the limit decoded); the
/// pass-through keeps the bytes as they came.
pub(crate) async fn admit(
    shared: &Shared,
    tenant: Result<Option<&Tenant>, &'static str>,
    headers: &HeaderMap,
    body: Body,
    decode: bool,
    error: impl Fn(StatusCode, &str) -> Response,
) -> Result<Admitted, Response> {
    let Ok(permit) = shared.in_flight.clone().try_acquire_owned() else {
        let message = "the server is at its concurrency limit: retry shortly";
        return Err(retry_later(error(StatusCode::SERVICE_UNAVAILABLE, message)));
    };
    let tenant = tenant.map_err(|why| error(StatusCode::UNAUTHORIZED, why))?;
    let limit = tenant
        .and_then(|t| t.max_body_bytes)
        .unwrap_or(shared.max_body_bytes);
    let read = match body::read(&shared.bodies, headers, body, limit).await {
        Ok(read) if decode => decode::decoded(&shared.bodies, headers, read, limit).await,
        other => other,
    };
    match read {
        Ok(body) => Ok(Admitted { permit, body }),
        Err(refused) => {
            let out = error(refused.status, &refused.message);
            Err(if refused.status == StatusCode::SERVICE_UNAVAILABLE {
                retry_later(out)
            } else {
                out
            })
        }
    }
}

/// `out` with `retry-after: 1`.
pub(crate) fn retry_later(mut out: Response) -> Response {
    out.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    out
}
