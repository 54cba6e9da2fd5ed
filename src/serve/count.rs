//! `POST /v1/messages/count_tokens` and `POST /v1/responses/input_tokens`: a request
//! counted as the stack would send it, not as the client wrote it. The request is
//! prepared as a call would be (pruned, cleared, offloaded, the read tool and
//! breakpoints added, or refused with 400 when it cannot fit), then counted by the
//! provider's own count endpoint when the model is that provider's (Anthropic's for
//! Messages, OpenAI's for Responses), with the server's key and the caller's headers and
//! query; else (a model another provider serves) by the stack's estimate. Never a billed
//! call, never the memo. The answer carries the report headers of a call. A chained
//! Responses count (`previous_response_id`, `conversation`) is the provider's to make:
//! passed on unmanaged.

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
use crate::transport::RequestBody;
use crate::wire::messages::faithful;
use crate::wire::messages::serve::Messages;
use crate::wire::responses::serve::Responses;
use crate::wire::served::{Format, Read};

/// The route, and its label in `/metrics`.
pub(crate) const ROUTE: &str = "/v1/messages/count_tokens";

/// The Responses API's count route, and its label in `/metrics`.
pub(crate) const RESPONSES_ROUTE: &str = "/v1/responses/input_tokens";

/// A format whose requests the proxy counts.
pub(crate) trait Counted: Format {
    /// The count route.
    const COUNT_ROUTE: &'static str;
    /// The provider whose count endpoint counts this format's requests.
    const COUNTER: Provider;

    /// The body the provider's count endpoint takes for `prepared`; `None` when there is
    /// none to send (the request was not read from this format).
    fn count_body(prepared: &ChatRequest) -> Option<Result<RequestBody, crate::BoxError>>;

    /// The answer of a count made by the stack's estimate.
    fn estimate(tokens: usize) -> serde_json::Value;
}

impl Counted for Messages {
    const COUNT_ROUTE: &'static str = ROUTE;
    const COUNTER: Provider = Provider::Anthropic;

    fn count_body(prepared: &ChatRequest) -> Option<Result<RequestBody, crate::BoxError>> {
        let mut body = match faithful::body(prepared) {
            Ok(Some(body)) => body,
            Ok(None) => return None,
            Err(e) => return Some(Err(e.into())),
        };
        body.count();
        Some(body.pieces().map_err(Into::into))
    }

    fn estimate(tokens: usize) -> serde_json::Value {
        serde_json::json!({"input_tokens": tokens})
    }
}

impl Counted for Responses {
    const COUNT_ROUTE: &'static str = RESPONSES_ROUTE;
    const COUNTER: Provider = Provider::OpenAi;

    fn count_body(prepared: &ChatRequest) -> Option<Result<RequestBody, crate::BoxError>> {
        use crate::wire::responses::faithful::faithful;
        let kept = prepared
            .params
            .origin
            .as_ref()?
            .get::<crate::wire::responses::read::Kept>()?;
        let bytes = match faithful(prepared, kept, false, None) {
            Ok(bytes) => bytes,
            Err(e) => return Some(Err(e.into())),
        };
        // The count endpoint takes a call's fields but those of its delivery (`stream`,
        // `store`, `include`, the cache key …): the ones it does not take are left out.
        const TAKEN: &[&str] = &[
            "model",
            "input",
            "previous_response_id",
            "tools",
            "text",
            "reasoning",
            "truncation",
            "instructions",
            "personality",
            "conversation",
            "tool_choice",
            "parallel_tool_calls",
        ];
        let mut body: serde_json::Map<String, serde_json::Value> =
            match serde_json::from_slice(&bytes) {
                Ok(body) => body,
                Err(e) => return Some(Err(e.into())),
            };
        body.retain(|k, _| TAKEN.contains(&k.as_str()));
        Some(
            serde_json::to_vec(&body)
                .map(RequestBody::from)
                .map_err(Into::into),
        )
    }

    fn estimate(tokens: usize) -> serde_json::Value {
        serde_json::json!({"object": "response.input_tokens", "input_tokens": tokens})
    }
}

/// `POST /v1/messages/count_tokens`, counted in the metrics.
pub(crate) async fn count_tokens(state: State<Arc<Shared>>, request: Request) -> Response {
    counted::<Messages>(state, request).await
}

/// `POST /v1/responses/input_tokens`, counted in the metrics.
pub(crate) async fn input_tokens(state: State<Arc<Shared>>, request: Request) -> Response {
    counted::<Responses>(state, request).await
}

async fn counted<F: Counted>(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let tenant = super::keys::tenant(shared.keys.as_ref(), &parts.headers);
    let label = tenant.ok().flatten().map_or("-", |t| t.label.as_str());
    let response = count::<F>(&shared, tenant, &parts, body).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    let outcome = response.extensions().get::<super::metrics::Outcome>();
    shared
        .metrics
        .record(F::COUNT_ROUTE, status, label, took, None, outcome);
    tracing::info!(
        event = "serve_request",
        route = F::COUNT_ROUTE,
        status,
        tenant = label,
        millis = took.as_secs_f64() * 1e3,
        "tokens counted"
    );
    response
}

async fn count<F: Counted>(
    shared: &Shared,
    tenant: Result<Option<&super::keys::Tenant>, &'static str>,
    parts: &axum::http::request::Parts,
    body: Body,
) -> Response {
    let shape = failures::error::<F>;
    let Admitted { permit, body } =
        match admit(shared, tenant, &parts.headers, body, true, shape).await {
            Ok(admitted) => admitted,
            Err(refused) => return refused,
        };
    let tenant = tenant.ok().flatten();
    let read = match F::read(&body.bytes) {
        Ok(read) => read,
        Err(why) => return failures::invalid::<F>(&why),
    };
    if let Some((provider, why)) = super::passthrough::unmanaged_by::<F>(shared, &read) {
        return super::passthrough::unmanaged(shared, provider, parts, body, permit, why).await;
    }
    drop(body);
    let Read {
        request: mut req, ..
    } = read;
    addressed(shared, tenant, parts, &mut req).await;
    // A count is never an answer to keep, nor one to give from the memo.
    req.memo = MemoHint::Never;
    let provider = provider_of(&shared.routes, &shared.catalog, &req.model);
    let context = &shared.contexts[tenant.map_or(0, |t| t.stacks)];
    let (prepared, report) = match prepare(context, req).await {
        Ok(prepared) => prepared,
        Err(e) => return failures::failure::<F>(&e),
    };
    let relay = shared.relays.get(&F::COUNTER);
    let mut out = match relay.filter(|_| provider == F::COUNTER) {
        Some(relay) => {
            let bytes = match F::count_body(&prepared) {
                Some(Ok(bytes)) => bytes,
                None => return estimated::<F>(&report),
                Some(Err(e)) => return failures::failure::<F>(&e),
            };
            let path = parts
                .uri
                .path_and_query()
                .map_or(F::COUNT_ROUTE, |p| p.as_str());
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
                    bytes,
                )
                .await;
            match answer {
                Ok(answer) => relayed_answer(answer, permit),
                Err(e) => return failures::failure::<F>(&crate::BoxError::from(e)),
            }
        }
        None => estimated::<F>(&report),
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
fn estimated<F: Counted>(report: &PreparationReport) -> Response {
    let mut out = (StatusCode::OK, axum::Json(F::estimate(report.after_tokens))).into_response();
    out.headers_mut().insert(
        header::HeaderName::from_static("x-llm-context-counted-by"),
        HeaderValue::from_static("estimate"),
    );
    out
}
