//! `POST /v1/messages/count_tokens`: a Messages request counted as the stack would send
//! it, not as the client wrote it. The request is prepared as a call would be (pruned,
//! cleared, offloaded, the read tool and breakpoints added, or refused with 400 when it
//! cannot fit), then counted by Anthropic's own count endpoint when the model is
//! Anthropic's, with the server's key and the caller's headers and query; else (a model
//! another provider serves, which has no such endpoint) by the stack's estimate. Never a
//! billed call, never the memo. The answer carries the report headers of a call.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use llm_context_layers::mock::Capture;
use llm_context_layers::{ChatRequest, MemoHint, PreparationReport};
use tower::{Layer, ServiceExt};

use super::Shared;
use super::admit::{Admitted, admit};
use super::failures;
use super::handler::{addressed, forwarded, report_headers};
use super::passthrough::relayed_answer;
use super::upstreams::provider_of;
use crate::catalog::Provider;
use crate::client::BodyHeaders;
use crate::wire::messages::faithful;
use crate::wire::messages::serve::Messages;
use crate::wire::served::{Format, Read};

/// The route, and its label in `/metrics`.
pub(crate) const ROUTE: &str = "/v1/messages/count_tokens";

/// `POST /v1/messages/count_tokens`, counted in the metrics.
pub(crate) async fn count_tokens(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let tenant = super::keys::tenant(shared.keys.as_ref(), &parts.headers);
    let label = tenant.ok().flatten().map_or("-", |t| t.label.as_str());
    let response = count(&shared, tenant, &parts, body).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    let outcome = response.extensions().get::<super::metrics::Outcome>();
    shared
        .metrics
        .record(ROUTE, status, label, took, None, outcome);
    tracing::info!(
        event = "serve_request",
        route = ROUTE,
        status,
        tenant = label,
        millis = took.as_secs_f64() * 1e3,
        "tokens counted"
    );
    response
}

async fn count(
    shared: &Shared,
    tenant: Result<Option<&super::keys::Tenant>, &'static str>,
    parts: &axum::http::request::Parts,
    body: Body,
) -> Response {
    let shape = failures::error::<Messages>;
    let Admitted { permit, body } =
        match admit(shared, tenant, &parts.headers, body, true, shape).await {
            Ok(admitted) => admitted,
            Err(refused) => return refused,
        };
    let tenant = tenant.ok().flatten();
    let read = Messages::read(&body.bytes);
    drop(body);
    let Read {
        request: mut req, ..
    } = match read {
        Ok(read) => read,
        Err(why) => return failures::invalid::<Messages>(&why),
    };
    addressed(shared, tenant, parts, &mut req).await;
    // A count is never an answer to keep, nor one to give from the memo.
    req.memo = MemoHint::Never;
    let provider = provider_of(&shared.routes, &shared.catalog, &req.model);
    let context = &shared.contexts[tenant.map_or(0, |t| t.stacks)];
    let (prepared, report) = match prepare(context, req).await {
        Ok(prepared) => prepared,
        Err(e) => return failures::failure::<Messages>(&e),
    };
    let relay = shared.relays.get(&Provider::Anthropic);
    let mut out = match (provider, relay) {
        (Provider::Anthropic, Some(relay)) => {
            let mut body = match faithful::body(&prepared) {
                Ok(Some(body)) => body,
                Ok(None) => return estimated(&report),
                Err(e) => return failures::failure::<Messages>(&crate::BoxError::from(e)),
            };
            body.count();
            let bytes = match body.to_vec() {
                Ok(bytes) => bytes,
                Err(e) => return failures::failure::<Messages>(&crate::BoxError::from(e)),
            };
            let path = parts.uri.path_and_query().map_or(ROUTE, |p| p.as_str());
            let headers = forwarded(&parts.headers);
            let answer = relay
                .send(
                    http::Method::POST,
                    path,
                    headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
                    BodyHeaders {
                        kind: Some(HeaderValue::from_static("application/json")),
                        encoding: None,
                    },
                    bytes.into(),
                )
                .await;
            match answer {
                Ok(answer) => relayed_answer(answer, permit),
                Err(e) => return failures::failure::<Messages>(&crate::BoxError::from(e)),
            }
        }
        _ => estimated(&report),
    };
    report_headers(&mut out, &report);
    out
}

/// `req` as the stack would send it, and what preparing it did; or why it cannot be sent
/// (it cannot fit: a [`ContextLimitError`](crate::ContextLimitError)).
async fn prepare(
    context: &crate::ContextPolicyLayer,
    req: ChatRequest,
) -> Result<(ChatRequest, PreparationReport), crate::BoxError> {
    let capture = Capture::default();
    let response = context.layer(capture.clone()).oneshot(req).await?;
    let prepared = capture
        .take()
        .ok_or("the context layer prepared the request but did not send it")?;
    Ok((prepared, response.report))
}

/// The count by the stack's estimate of the prepared request.
fn estimated(report: &PreparationReport) -> Response {
    let mut out = (
        StatusCode::OK,
        axum::Json(serde_json::json!({"input_tokens": report.after_tokens})),
    )
        .into_response();
    out.headers_mut().insert(
        header::HeaderName::from_static("x-llm-context-counted-by"),
        HeaderValue::from_static("estimate"),
    );
    out
}
