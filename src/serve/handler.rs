//! The one handler every format's route is served by: read, route, run through the stack,
//! answer, in the format's own shape (`F: Format`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;
use tower::ServiceExt;
use tracing::Instrument;

use super::admit::{Admitted, admit};
use super::failures::{self, classify};
use super::keys::Tenant;
use super::ledger;
use super::upstreams::{no_upstream, provider_of};
use super::{
    AGENT_SESSION_HEADERS, SESSION_HEADER, Shared, body, metrics, plausible, request_span, timing,
};
use crate::budget::{BudgetKey, BudgetLayer, Limit, Window};
use crate::redis::RedisStores;
use crate::stream::{ChatStream, Streaming};
use crate::trace::store_call;
use crate::wire::served::{EventWriter, Format, Read, StreamOptions, created};
use crate::{ChatRequest, PreparationReport};

/// `POST F::ROUTE`. The body is not read before the key is checked.
pub(crate) async fn endpoint<F: Format>(
    State(shared): State<Arc<Shared>>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    counted::<F>(&shared, &parts, body).await
}

/// Any other method on `F::ROUTE`: 405, in the route's error shape.
pub(crate) async fn not_allowed<F: Format>() -> Response {
    let message = format!("{} takes POST only", F::ROUTE);
    let mut out = failures::error::<F>(StatusCode::METHOD_NOT_ALLOWED, &message);
    out.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    out
}

/// `GET /v1/responses`: the Responses API's WebSocket transport, which the server does
/// not serve. An upgrade is refused at once with 426, the status on which clients (Codex)
/// fall back to HTTP POST without retrying the upgrade; any other GET is 405.
pub(crate) async fn no_websocket(headers: HeaderMap) -> Response {
    use crate::wire::responses::serve::Responses;
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !upgrade {
        return not_allowed::<Responses>().await;
    }
    let message = "this server does not serve the Responses API over WebSocket: use HTTP POST                    /v1/responses (streamed or not)";
    let mut out = failures::error::<Responses>(StatusCode::UPGRADE_REQUIRED, message);
    out.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST"));
    out
}

/// A path the server does not serve: 404, in the error shape of the format its path
/// belongs to (Messages under `/v1/messages`, else Chat Completions).
pub(crate) async fn not_found(uri: axum::http::Uri) -> Response {
    use crate::wire::chat_completions::serve::ChatCompletions;
    use crate::wire::messages::serve::Messages;
    let message = "no such route: the server serves POST /v1/chat/completions and POST \
                   /v1/messages, passes any other path under /v1/ on to its provider, and \
                   serves GET /healthz, /readyz and /metrics";
    if uri.path().starts_with(Messages::ROUTE) {
        failures::error::<Messages>(StatusCode::NOT_FOUND, message)
    } else {
        failures::error::<ChatCompletions>(StatusCode::NOT_FOUND, message)
    }
}

/// One call, counted in the metrics once its headers are ready.
async fn counted<F: Format>(shared: &Shared, parts: &Parts, body: Body) -> Response {
    let headers = &parts.headers;
    let started = std::time::Instant::now();
    let route = F::ROUTE;
    // The root of the request's spans (to its headers: a stream's GenAI span outlives it).
    let span = request_span::open(route, headers);
    // Looked up once: the handler serves under it, the metrics and the log name it.
    let tenant = super::keys::tenant(shared.keys.as_ref(), headers);
    let tally = Arc::new(timing::Tally::default());
    let handled = timing::scoped(tally.clone(), handle::<F>(shared, tenant, parts, body));
    let mut response = handled.instrument(span.clone()).await;
    let tenant = tenant.ok().flatten().map_or("-", |t| t.label.as_str());
    let took = started.elapsed();
    if let Some(Drafted(draft)) = response.extensions_mut().remove::<Drafted>() {
        let waited = tally.upstream().unwrap_or_default();
        draft.answered(response.status().as_u16(), took.saturating_sub(waited));
        written(draft).await;
    }
    let outcome = response.extensions().get::<metrics::Outcome>();
    let status = response.status().as_u16();
    request_span::close(&span, status, tenant);
    let upstream = tally.upstream();
    shared
        .metrics
        .record(route, status, tenant, took, upstream, outcome);
    let (before, after, memo_hit) = outcome.and_then(|o| o.report).unwrap_or_default();
    // One structured line per request (to its headers): what an operator greps for.
    tracing::info!(
        event = "serve_request",
        route,
        status,
        tenant,
        millis = took.as_secs_f64() * 1e3,
        upstream_millis = upstream.map(|u| u.as_secs_f64() * 1e3),
        before_tokens = before,
        after_tokens = after,
        memo_hit,
        upstream_error = outcome.and_then(|o| o.upstream_error.as_deref()),
        "request answered"
    );
    response
}

/// One call: read, route, run through the stack, answer.
async fn handle<F: Format>(
    shared: &Shared,
    tenant: Result<Option<&Tenant>, &'static str>,
    parts: &Parts,
    body: Body,
) -> Response {
    let headers = &parts.headers;
    let shape = failures::error::<F>;
    let Admitted { permit, body } = match admit(shared, tenant, headers, body, true, shape).await {
        Ok(admitted) => admitted,
        Err(refused) => return refused,
    };
    let tenant = tenant.ok().flatten();
    let label = tenant.map_or("-", |t| t.label.as_str());
    let read = F::read_reusing(&body.bytes, &shared.reuse, label);
    let read = match read {
        Ok(read) => read,
        Err(why) => return failures::invalid::<F>(&why),
    };
    let unmanaged = F::unmanaged(&read);
    let body::Read {
        bytes,
        mut held,
        encoded,
    } = body;
    // The client's bytes as they came, for the ledger's pass-through model (shared, not
    // copied; a body too large to model is not held).
    let client_body = (bytes.len() <= ledger::MAX_MODELLED_BYTES).then(|| bytes.clone());
    let Read {
        request: mut req,
        stream,
        include_usage,
    } = read;
    if unmanaged.is_some() {
        // Its answer extends the provider's stored state: never one from the memo.
        req.memo = llm_context_layers::MemoHint::Never;
    }
    // The request holds more than its bytes until it is answered: its parsed form, and
    // (a Messages request) its bytes, to send them back as they came. Its share of the
    // budget grows to that, and is held to the end of its answer, so that big requests
    // at once are shed (503) before memory grows past the budget.
    let mut holds = body::holding(bytes.len(), req.messages.len());
    // A compressed body is kept as it came too, to send it so if the stack leaves it be.
    if let Some((encoded, coding)) = encoded
        && let Some(origin) = req.params.origin.take()
    {
        holds = holds.saturating_add(encoded.len());
        let kept = crate::wire::served::Encoded {
            decoded: bytes.clone(),
            encoded,
            coding,
        };
        req.params.origin = Some(origin.with(kept));
    }
    drop(bytes);
    if let Err(refused) = shared.bodies.hold(&mut held, holds) {
        return super::admit::retry_later(failures::error::<F>(refused.status, &refused.message));
    }
    addressed(shared, tenant, parts, &mut req).await;
    let provider = provider_of(&shared.routes, &shared.catalog, &req.model);
    let policy = tenant.map_or(0, |t| t.stacks);
    let guarded = guard(shared, policy, label, &mut req);
    let stacks = guarded.unwrap_or(&shared.stacks[policy]);
    let Some(upstream) = stacks.get(&provider).cloned() else {
        let why = no_upstream(&req.model, provider);
        return failures::error::<F>(StatusCode::BAD_REQUEST, &why);
    };
    let model = req.model.clone();
    let tools = crate::wire::namespaces::split_names(&req.tools);
    let ceiling = plausible::ceiling(&shared.catalog, &model);
    let draft = shared.ledger.begin(ledger::Start {
        guarded: guarded.is_some(),
        tenant: label.to_owned(),
        session: req.session.clone(),
        route: F::ROUTE,
        shape: ledger::Shape::of_route(F::ROUTE),
        model: model.clone(),
        provider,
        origin: req.params.origin.clone(),
        body: client_body,
    });
    let mut out = answer::<F>(
        upstream,
        req,
        stream,
        &draft,
        Answering {
            model,
            tools,
            ceiling,
            provider,
            unmanaged,
            include_usage,
            permits: (permit, held),
        },
    )
    .await;
    if guarded.is_some() {
        out.headers_mut()
            .insert("x-llm-context-guard", HeaderValue::from_static("held"));
    }
    out.extensions_mut().insert(Drafted(draft));
    out
}

/// The guarded stacks `req` goes through, when its policy guards (`guard =
/// "pass-through"`) and the ledger finds its session costlier than pass-through: the
/// session is then edited only where the window forces it. A session the request does
/// not name is inferred here, as the stack would, so the ledger and the stack agree.
fn guard<'a>(
    shared: &'a Shared,
    policy: usize,
    tenant: &str,
    req: &mut ChatRequest,
) -> Option<&'a super::Stacks> {
    let guarded = shared.guarded[policy].as_ref()?;
    req.infer_session();
    shared
        .ledger
        .costlier(tenant, &req.session)
        .then_some(guarded)
}

/// Lets `draft` go; with a durable ledger, an answer whose draft this was leaves once its
/// row is on disk: at most 100 ms later (a store that slow or failing is counted, not
/// waited for).
async fn written(draft: Arc<ledger::Draft>) {
    if let Some(on_disk) = draft.finish() {
        let _ = tokio::time::timeout(Duration::from_millis(100), on_disk).await;
    }
}

/// A request's draft in the ledger, on its answer until the answer is counted.
#[derive(Clone)]
struct Drafted(Arc<ledger::Draft>);

/// What the answer is written with.
struct Answering {
    model: String,
    tools: crate::wire::served::Namespaced,
    ceiling: u64,
    provider: crate::catalog::Provider,
    unmanaged: Option<&'static str>,
    include_usage: bool,
    permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
}

/// Runs `req` through `upstream` and answers it in `F`'s shape, telling `draft` the report
/// and the provider's usage.
async fn answer<F: Format>(
    upstream: super::upstreams::Upstream,
    req: ChatRequest,
    stream: bool,
    draft: &Arc<ledger::Draft>,
    a: Answering,
) -> Response {
    let (ceiling, provider, unmanaged) = (a.ceiling, a.provider, a.unmanaged);
    let (model, tools, (permit, held)) = (a.model, a.tools, a.permits);
    if stream {
        return match upstream.oneshot(Streaming(req)).await {
            Ok(stream) => {
                let report = stream.report().cloned();
                if let Some(report) = &report {
                    draft.report(report);
                }
                let options = StreamOptions {
                    include_usage: a.include_usage,
                    created: created(),
                    tools,
                };
                let usage = (ceiling, provider);
                let events = F::events(model, &options);
                let mut out = sse(events, stream, (permit, held), usage, draft.clone());
                if let Some(report) = &report {
                    report_headers(&mut out, report);
                }
                say_unmanaged(&mut out, unmanaged, report.as_ref());
                out
            }
            Err(e) => failures::failure::<F>(&e),
        };
    }
    match upstream.oneshot(req).await {
        Ok(response) => {
            draft.report(&response.report);
            draft.usage(response.usage);
            if let Err(e) = plausible::check_answer(&response, ceiling, provider) {
                return failures::failure::<F>(&crate::BoxError::from(e));
            }
            let mut out = axum::Json(F::answer(&response, &model, &tools)).into_response();
            report_headers(&mut out, &response.report);
            say_unmanaged(&mut out, unmanaged, Some(&response.report));
            drop(held);
            out
        }
        Err(e) => failures::failure::<F>(&e),
    }
}

/// `x-llm-context-managed: no (why)` on the answer to a request the stack did not manage
/// (its format says why, and the stack's executor was `off`: a policy saying `local`
/// manages even a chained request).
fn say_unmanaged(
    out: &mut Response,
    why: Option<&'static str>,
    report: Option<&PreparationReport>,
) {
    let off = report.is_some_and(|r| r.executor == Some(crate::Executor::Off));
    let value = why
        .filter(|_| off)
        .and_then(|why| HeaderValue::from_str(&format!("no ({why})")).ok());
    if let Some(value) = value {
        out.headers_mut().insert("x-llm-context-managed", value);
    }
}

/// What the request's HTTP head says of it, set on `req`: the caller's headers and query
/// to pass on, its session and its tenant's scope; and the session's cuts from Redis.
pub(crate) async fn addressed(
    shared: &Shared,
    tenant: Option<&Tenant>,
    parts: &Parts,
    req: &mut ChatRequest,
) {
    let headers = &parts.headers;
    req.params.headers = forwarded(headers);
    req.params.query = parts.uri.query().map(str::to_owned);
    if let Some(session) = session_of(headers) {
        req.session = super::keys::session_id(session).into_owned();
    }
    if let Some(tenant) = tenant {
        req.scope = tenant.scope.clone();
    }
    if let Some(redis) = &shared.redis {
        load_cuts(redis, req).await;
    }
}

/// The caller's headers the upstream is sent, in order, each line as it came: all but the
/// proxy's own (`x-llm-context-…`), the credentials (the upstream gets the server's key)
/// and those of the connection and the body. Kept only as text; a value that is not is
/// left out.
pub(crate) fn forwarded(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            !name.starts_with("x-llm-context-") && !crate::client::NOT_FORWARDED.contains(&name)
        })
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}

/// The session a request names: the proxy's own header, else the first of the agents'
/// headers it has ([`AGENT_SESSION_HEADERS`]); an empty or non-text value names none.
fn session_of(headers: &HeaderMap) -> Option<&str> {
    std::iter::once(SESSION_HEADER)
        .chain(AGENT_SESSION_HEADERS.iter().copied())
        .filter_map(|name| headers.get(name)?.to_str().ok())
        .map(str::trim)
        .find(|s| !s.is_empty())
}

/// A stream as server-sent events written by `events`. The stream holds its place in the
/// concurrency limit and its share of the body budget (`permit`) to its end. Its final usage is checked against
/// `(ceiling, provider)` ([`plausible::check`]): past it the stream ends with an error
/// event, as a 502 would have been, instead of the figures.
fn sse<W: EventWriter>(
    mut events: W,
    stream: ChatStream,
    permit: (OwnedSemaphorePermit, OwnedSemaphorePermit),
    (ceiling, provider): (u64, crate::catalog::Provider),
    draft: Arc<ledger::Draft>,
) -> Response {
    let mut draft = Some(draft);
    let body = stream.flat_map(move |item| {
        let _held = &permit;
        let item = match item {
            Ok(crate::stream::StreamEvent::Done(response)) => {
                // Written now, before the client has the end of the stream.
                if let Some(draft) = draft.take() {
                    draft.usage(response.usage);
                }
                match plausible::check_answer(&response, ceiling, provider) {
                    Ok(()) => Ok(crate::stream::StreamEvent::Done(response)),
                    Err(e) => Err(crate::BoxError::from(e)),
                }
            }
            other => other,
        };
        let frames: Vec<Result<Bytes, std::convert::Infallible>> = match item {
            Ok(event) => events.event(&event).into_iter().map(Ok).collect(),
            Err(e) => vec![Ok(events.failed(&e, classify(&e)))],
        };
        futures_util::stream::iter(frames)
    });
    let mut response = Response::new(Body::from_stream(body));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The report of a prepared request, as headers, and for the metrics.
pub(crate) fn report_headers(out: &mut Response, r: &PreparationReport) {
    out.extensions_mut().insert(metrics::Outcome {
        report: Some((r.before_tokens, r.after_tokens, r.memo_hit)),
        upstream_error: None,
        executor: r.executor,
        provider_edits: r.provider_edits,
    });
    let h = out.headers_mut();
    let numbers = [
        ("x-llm-context-before-tokens", r.before_tokens),
        ("x-llm-context-after-tokens", r.after_tokens),
        ("x-llm-context-removed-messages", r.removed_messages),
        ("x-llm-context-cleared", r.cleared_results),
        ("x-llm-context-offloaded", r.offloaded_results),
        ("x-llm-context-thinking-dropped", r.thinking_dropped),
        ("x-llm-context-compacted-messages", r.compacted_messages),
    ];
    for (name, n) in numbers {
        h.insert(name, HeaderValue::from(n as u64));
    }
    let memo = if r.memo_hit { "hit" } else { "miss" };
    h.insert("x-llm-context-memo", HeaderValue::from_static(memo));
    if let Some(executor) = r.executor {
        h.insert(
            "x-llm-context-executor",
            HeaderValue::from_static(executor.as_str()),
        );
    }
    if let Some(applied) = r.provider_edits {
        let numbers = [
            (
                "x-llm-context-provider-cleared-tool-uses",
                applied.cleared_tool_uses,
            ),
            (
                "x-llm-context-provider-cleared-tokens",
                applied.cleared_input_tokens,
            ),
            (
                "x-llm-context-provider-dropped-thinking",
                applied.dropped_thinking,
            ),
            ("x-llm-context-provider-compactions", applied.compactions),
        ];
        for (name, n) in numbers {
            h.insert(name, HeaderValue::from(n as u64));
        }
    }
}

/// Brings the request's session's cuts from Redis, so that this replica cuts where the
/// last one did. The session is inferred here when the request names none, as the
/// context layer would (it then keeps this one). Redis slow or away costs only the shared
/// cut, never the request: it waits at most 100 ms.
async fn load_cuts(redis: &RedisStores, req: &mut ChatRequest) {
    req.infer_session();
    let load = redis.cuts.load(&req.scope, &req.session);
    if let Err(error) = store_call("cuts.load", Duration::from_millis(100), load).await {
        tracing::debug!(event = "cuts_not_loaded", %error, "the replica keeps its own cut");
    }
}

/// `/readyz`: `ready`, or `degraded` while Redis does not answer. Degraded is still 200:
/// every request is served (from the upstream, without the shared memo), and taking
/// every replica out of the load balancer because Redis is away would turn an outage of
/// the cache into one of the service.
pub(crate) async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let Some(redis) = &shared.redis else {
        return axum::Json(
            json!({"status": "ready", "stores": {"memo": "local", "artifacts": "local"}}),
        )
        .into_response();
    };
    let ping = tokio::time::timeout(Duration::from_secs(1), redis.ping()).await;
    let body = match ping {
        Ok(Ok(())) => json!({"status": "ready", "stores": {"redis": "ok"}}),
        Ok(Err(e)) => json!({"status": "degraded", "stores": {"redis": e.to_string()}}),
        Err(_) => json!({"status": "degraded", "stores": {"redis": "no answer within 1 s"}}),
    };
    axum::Json(body).into_response()
}

/// `/metrics`, in the OpenMetrics text format Prometheus scrapes.
///
/// Every tenant's label is in it, so who may read it is checked first: with a metrics key
/// ([`ProxyBuilder::metrics_key`](super::ProxyBuilder::metrics_key)), a request bearing
/// that key; else, with a key table, a peer on loopback; else (single-tenant, already
/// loopback-only) anyone.
pub(crate) async fn metrics_text(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    if let Some(refused) = refused(&shared, &request) {
        return refused;
    }
    if let (Some(budgets), Some(keys)) = (&shared.budgets, &shared.keys) {
        record_budgets(&shared.metrics, budgets, keys.values()).await;
    }
    let mut out = Response::new(Body::from(shared.metrics.encode()));
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    out
}

/// Each tenant's budget use in its current windows (a session's window is per session,
/// so not a tenant's figure); a store that does not answer leaves the last figures.
async fn record_budgets<'a>(
    metrics: &metrics::Metrics,
    budgets: &BudgetLayer,
    tenants: impl Iterator<Item = &'a Tenant>,
) {
    let now = SystemTime::now();
    for tenant in tenants {
        let limits: Vec<Limit> = budgets
            .limits_for(&tenant.scope)
            .iter()
            .filter(|l| l.window != Window::Session)
            .copied()
            .collect();
        if limits.is_empty() {
            continue;
        }
        let key = BudgetKey::new(&tenant.scope, "");
        let Ok(used) = budgets.store().used(&key, &limits, now).await else {
            continue;
        };
        for (limit, used) in limits.iter().zip(used) {
            metrics.budget(&tenant.label, limit.name(), used, limit.max);
        }
    }
}

/// The answer refusing `request` what `/metrics` tells (the metrics, the ledger), 403;
/// `None`: it may read it.
pub(crate) fn refused(shared: &Shared, request: &Request) -> Option<Response> {
    let why = may_read_metrics(shared, request).err()?;
    use crate::wire::chat_completions::serve::ChatCompletions;
    Some(failures::error::<ChatCompletions>(
        StatusCode::FORBIDDEN,
        why,
    ))
}

/// Whether `request` may read `/metrics`, or why not.
fn may_read_metrics(shared: &Shared, request: &Request) -> Result<(), &'static str> {
    if let Some(digest) = &shared.metrics_key {
        let key = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        return match key {
            Some(key) if super::keys::key_digest(key.trim()) == *digest => Ok(()),
            _ => Err("/metrics needs the metrics key (Authorization: Bearer …)"),
        };
    }
    if shared.keys.is_none() {
        return Ok(());
    }
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>();
    match peer {
        Some(peer) if peer.0.ip().is_loopback() => Ok(()),
        _ => Err("/metrics is served to loopback only unless a metrics key is configured"),
    }
}
