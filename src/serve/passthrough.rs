//! The routes the proxy does not manage: `GET /v1/models`, `/v1/models/{id}` and any
//! other path under `/v1/` (embeddings, files, batches, moderations), passed on to the
//! provider the path belongs to with the server's key and nothing else changed, the
//! answer streamed back as it comes. Counted in `/metrics` as the route `passthrough`.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use futures_util::TryStreamExt;

use super::Shared;
use super::admit::{Admitted, admit};
use super::failures;
use super::handler::{forwarded, not_found};
use super::keys::Tenant;
use super::upstreams::provider_of;
use crate::catalog::Provider;
use crate::client::BodyHeaders;
use crate::wire::chat_completions::serve::ChatCompletions;
use crate::wire::messages::serve::Messages;
use crate::wire::served::Format;

/// The route label of every request passed through.
const ROUTE: &str = "passthrough";

/// Response headers that belong to the upstream's connection, not the answer.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
];

/// Any path the proxy has no route for: passed through under `/v1/`, else 404.
pub(crate) async fn or_not_found(state: State<Arc<Shared>>, request: Request) -> Response {
    if request.uri().path().starts_with("/v1/") {
        relayed(state, request).await
    } else {
        not_found(request.uri().clone()).await
    }
}

/// Which provider a path belongs to: a Messages path Anthropic's, a model's page that of
/// the model, else Anthropic's when the caller speaks its API (`anthropic-version`, which
/// its SDKs always send), else OpenAI's.
fn provider_for(shared: &Shared, path: &str, headers: &HeaderMap) -> Provider {
    if path.starts_with(Messages::ROUTE) {
        return Provider::Anthropic;
    }
    if let Some(id) = path.strip_prefix("/v1/models/").filter(|id| !id.is_empty()) {
        return provider_of(&shared.routes, &shared.catalog, id);
    }
    if headers.contains_key("anthropic-version") {
        Provider::Anthropic
    } else {
        Provider::OpenAi
    }
}

/// An error in the shape of `provider`'s API.
fn error(provider: Provider, status: StatusCode, message: &str) -> Response {
    match provider {
        Provider::Anthropic => failures::error::<Messages>(status, message),
        _ => failures::error::<ChatCompletions>(status, message),
    }
}

/// Passes `request` on to its provider, counted in the metrics.
pub(crate) async fn relayed(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let tenant = super::keys::tenant(shared.keys.as_ref(), &parts.headers);
    let label = tenant.ok().flatten().map_or("-", |t| t.label.as_str());
    let provider = provider_for(&shared, parts.uri.path(), &parts.headers);
    let response = relay(&shared, provider, tenant, &parts, body).await;
    let took = started.elapsed();
    shared
        .metrics
        .record(ROUTE, response.status().as_u16(), label, took, None, None);
    shared.ledger.passed_through(label);
    tracing::info!(
        event = "serve_request",
        route = ROUTE,
        path = parts.uri.path(),
        status = response.status().as_u16(),
        tenant = label,
        millis = took.as_secs_f64() * 1e3,
        "request passed through"
    );
    response
}

/// The answer of `provider` to the request, let in as on every route, then sent with the
/// server's credentials.
async fn relay(
    shared: &Shared,
    provider: Provider,
    tenant: Result<Option<&Tenant>, &'static str>,
    parts: &axum::http::request::Parts,
    body: Body,
) -> Response {
    let shape = |status, message: &str| error(provider, status, message);
    let Admitted { permit, body } =
        match admit(shared, tenant, &parts.headers, body, false, shape).await {
            Ok(admitted) => admitted,
            Err(refused) => return refused,
        };
    let Some(relay) = shared.relays.get(&provider) else {
        let why = format!(
            "{} is passed through to the provider {provider}, which this server has no \
             upstream for",
            parts.uri.path()
        );
        return error(provider, StatusCode::NOT_FOUND, &why);
    };
    // The body goes as it came, compressed or not, so its headers go with it.
    let content = BodyHeaders {
        kind: parts.headers.get(header::CONTENT_TYPE).cloned(),
        encoding: parts.headers.get(header::CONTENT_ENCODING).cloned(),
    };
    // The body's share of the budget is held until the upstream has it.
    let answer = send(relay, parts, content, &body).await;
    drop(body);
    match answer {
        Ok(answer) => relayed_answer(answer, permit),
        Err(e) => {
            let e = crate::BoxError::from(e);
            match provider {
                Provider::Anthropic => failures::failure::<Messages>(&e),
                _ => failures::failure::<ChatCompletions>(&e),
            }
        }
    }
}

/// Whether a request read from `F` is passed on unmanaged (its body's bytes then go on as
/// they came), to which provider, and why.
pub(crate) fn unmanaged_by<F: crate::wire::served::Format>(
    shared: &Shared,
    read: &crate::wire::served::Read,
) -> Option<(Provider, &'static str)> {
    let why = F::unmanaged(read)?;
    Some((
        provider_of(&shared.routes, &shared.catalog, &read.request.model),
        why,
    ))
}

/// A request of a managed route that the stack does not manage (`why`: a chained
/// request's history is the provider's): its body, as read, sent on to `provider` with
/// the server's credentials, and the answer relayed as it comes, saying so in
/// `x-llm-context-managed`.
pub(crate) async fn unmanaged(
    shared: &Shared,
    provider: Provider,
    parts: &axum::http::request::Parts,
    body: super::body::Read,
    permit: tokio::sync::OwnedSemaphorePermit,
    why: &'static str,
) -> Response {
    let Some(relay) = shared.relays.get(&provider) else {
        let why = super::upstreams::no_upstream("this model", provider);
        return error(provider, StatusCode::BAD_REQUEST, &why);
    };
    tracing::info!(
        event = "serve_unmanaged",
        path = parts.uri.path(),
        reason = why,
        "request passed on unmanaged"
    );
    // Decoded when it was read: sent as JSON, whatever encoding it came in.
    let content = BodyHeaders {
        kind: Some(header::HeaderValue::from_static("application/json")),
        encoding: None,
    };
    let answer = send(relay, parts, content, &body).await;
    drop(body);
    match answer {
        Ok(answer) => {
            let mut out = relayed_answer(answer, permit);
            let value = format!("no ({why})");
            if let Ok(value) = header::HeaderValue::from_str(&value) {
                out.headers_mut().insert("x-llm-context-managed", value);
            }
            out
        }
        Err(e) => failures::failure::<ChatCompletions>(&crate::BoxError::from(e)),
    }
}

/// Sends `body` on with the method, path, query and headers it came with, and the
/// server's credentials.
async fn send(
    relay: &crate::client::Relay,
    parts: &axum::http::request::Parts,
    content: BodyHeaders,
    body: &super::body::Read,
) -> Result<crate::transport::HttpStreamResponse, crate::ProviderError> {
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |p| p.as_str());
    let headers = forwarded(&parts.headers);
    relay
        .send(
            parts.method.clone(),
            path,
            headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            content,
            body.bytes.clone().into(),
        )
        .await
}

/// The upstream's answer as it came (status, headers but the connection's, the body
/// streamed), holding `permit`, the request's place in the concurrency limit, to its end.
pub(crate) fn relayed_answer(
    answer: crate::transport::HttpStreamResponse,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> Response {
    let (head, stream) = answer.into_parts();
    let body = Body::from_stream(stream.map_err(std::io::Error::other).map_ok(move |piece| {
        let _held = &permit;
        piece
    }));
    let mut out = Response::new(body);
    *out.status_mut() = head.status;
    for (name, value) in &head.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out.headers_mut().append(name, value.clone());
        }
    }
    out
}
