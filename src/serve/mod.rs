//! The whole stack behind the Chat Completions wire format, as an HTTP server: any agent
//! that speaks OpenAI's API gets context management by changing its base URL.
//!
//! ```no_run
//! use llm_context::serve::Proxy;
//! use llm_context::{ContextPolicy, OpenAi};
//!
//! # #[tokio::main] async fn main() -> Result<(), llm_context::BoxError> {
//! let proxy = Proxy::builder()
//!     .policy(ContextPolicy::default().with_max_tokens(100_000))
//!     .openai(OpenAi::from_env()?)
//!     .build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! proxy.serve(listener).await?;
//! # Ok(()) }
//! ```
//!
//! This is the first part of `llm-context serve` (DESIGN § The proxy):
//!
//! - `POST /v1/chat/completions`, `stream` true or false. The request goes through the
//!   whole context stack (prune, clear, offload, prefix, memo) and on to the provider
//!   the model belongs to: the catalog's provider, else `claude-…` to Anthropic and
//!   anything else to OpenAI, so an OpenAI client reaches Claude as well. The model's
//!   reads of offloaded results (`read_context_artifact`) are answered inside the server,
//!   streams included: the client never sees them.
//! - The session is the `x-llm-context-session` header, else inferred from the request's
//!   stable head.
//! - A request that cannot fit is answered 400 before any upstream call, with
//!   `{"error": {"type": "invalid_request_error", "code": "context_length_exceeded",
//!   "message", "param": "messages"}, "llm_context": {"needed_tokens", "allowance",
//!   "breakdown"}}`. A provider's error keeps its status and its message, redacted.
//! - A non-streamed answer carries the report as headers: `x-llm-context-before-tokens`,
//!   `-after-tokens`, `-removed-messages`, `-cleared`, `-offloaded`, `-memo` (`hit` /
//!   `miss`).
//! - `GET /healthz` answers `ok`. A body over
//!   [`max_body_bytes`](ProxyBuilder::max_body_bytes) (default 64 MiB) is answered 413.
//!
//! Not built yet: `/v1/messages`, tenants and the key table, the report headers of a
//! stream, `/readyz` and `/metrics`, the concurrency limit, and replicas over Redis.
//! [`Proxy::serve_until`] drains on a signal (`llm-context serve` on SIGTERM or Ctrl-C).
//! Until tenants exist, [`check_listen`] keeps the server on loopback.

mod openai_wire;

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};

use crate::catalog::Provider;
use crate::error::ProviderError;
use crate::openai::body::request_from_body;
use crate::retry::RetryPolicy;
use crate::stream::{ChatStream, StreamEvent, Streaming};
use crate::{
    Anthropic, BoxError, Catalog, ChatRequest, ChatResponse, ContextLimitError, ContextPolicy,
    ContextPolicyLayer, OpenAi, PolicyError, PreparationReport,
};

/// The largest request body read by default: 64 MiB, room for a 10,000-message
/// transcript with large tool results. Past it the answer is 413.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The header that names a request's session.
pub const SESSION_HEADER: &str = "x-llm-context-session";

type Plain = BoxCloneSyncService<ChatRequest, ChatResponse, BoxError>;
type Streamed = BoxCloneSyncService<Streaming, ChatStream, BoxError>;

/// One upstream's stack, for both kinds of call.
#[derive(Clone)]
struct Upstream {
    plain: Plain,
    streamed: Streamed,
}

struct Shared {
    max_body_bytes: usize,
    catalog: Arc<Catalog>,
    openai: Option<Upstream>,
    anthropic: Option<Upstream>,
}

/// The server: build it with [`Proxy::builder`], run it with [`serve`](Self::serve), or
/// take its [`router`](Self::router) to mount it in an axum application of your own.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("openai", &self.shared.openai.is_some())
            .field("anthropic", &self.shared.anthropic.is_some())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Proxy`].
#[derive(Debug)]
pub struct ProxyBuilder {
    max_body_bytes: usize,
    policy: ContextPolicy,
    catalog: Option<Arc<Catalog>>,
    openai: Option<OpenAi>,
    anthropic: Option<Anthropic>,
}

impl Proxy {
    /// A builder: the default policy, the built-in catalog, no upstream yet.
    pub fn builder() -> ProxyBuilder {
        ProxyBuilder::default()
    }

    /// The routes, as an axum router.
    pub fn router(self) -> Router {
        let limit = DefaultBodyLimit::max(self.shared.max_body_bytes);
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/v1/chat/completions", post(chat_completions))
            .layer(limit)
            .with_state(self.shared)
    }

    /// Serves on `listener` until the process ends.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }

    /// Serves on `listener` until `shutdown` completes, then drains: no new connection is
    /// accepted, and the requests in flight (streams included) run to their end, for at
    /// most `drain` more; what is still running then is cut off.
    pub async fn serve_until(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
        drain: Duration,
    ) -> std::io::Result<()> {
        let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = axum::serve(listener, self.router()).with_graceful_shutdown(async move {
            shutdown.await;
            tracing::warn!(
                event = "serve_draining",
                drain_seconds = drain.as_secs_f64(),
                "shutting down: draining the requests in flight"
            );
            let _ = stopping.send(());
        });
        let deadline = async move {
            if stopped.await.is_ok() {
                tokio::time::sleep(drain).await;
            } else {
                // The server ended on its own: never cut it off.
                std::future::pending::<()>().await;
            }
        };
        let server = std::pin::pin!(server.into_future());
        let deadline = std::pin::pin!(deadline);
        match futures_util::future::select(server, deadline).await {
            futures_util::future::Either::Left((result, _)) => result,
            futures_util::future::Either::Right(((), _)) => {
                tracing::warn!(
                    event = "serve_drain_timeout",
                    "the drain timeout passed: the requests still in flight are cut off"
                );
                Ok(())
            }
        }
    }
}

impl Default for ProxyBuilder {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            policy: ContextPolicy::default(),
            catalog: None,
            openai: None,
            anthropic: None,
        }
    }
}

impl ProxyBuilder {
    /// The largest request body read (default [`DEFAULT_MAX_BODY_BYTES`]); a longer one
    /// is answered 413.
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body_bytes = limit;
        self
    }

    /// The context policy every request is prepared under.
    pub fn policy(mut self, policy: ContextPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The catalog: context windows (when the policy sets no `max_tokens`), prices and
    /// which provider serves a model.
    pub fn catalog(mut self, catalog: Arc<Catalog>) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// The OpenAI(-compatible) upstream.
    pub fn openai(mut self, client: OpenAi) -> Self {
        self.openai = Some(client);
        self
    }

    /// The Anthropic upstream.
    pub fn anthropic(mut self, client: Anthropic) -> Self {
        self.anthropic = Some(client);
        self
    }

    /// The server; fails when the policy does not validate. Both upstreams share one
    /// context layer: one artifact store, one memory of each session's cut.
    pub fn build(self) -> Result<Proxy, PolicyError> {
        let catalog = self.catalog.unwrap_or_else(Catalog::builtin);
        let context = ContextPolicyLayer::new(self.policy)?
            .with_catalog(catalog.clone())
            // The client never sees the stack's artifact tool: its reads are answered here.
            .with_auto_resolve();
        let stack = |context: &ContextPolicyLayer| {
            ServiceBuilder::new()
                .layer(context.clone())
                .retry(RetryPolicy::default())
        };
        let openai = self.openai.map(|client| {
            let stack = stack(&context).service(client);
            Upstream {
                plain: BoxCloneSyncService::new(stack.clone()),
                streamed: BoxCloneSyncService::new(stack),
            }
        });
        let anthropic = self.anthropic.map(|client| {
            let stack = stack(&context).service(client);
            Upstream {
                plain: BoxCloneSyncService::new(stack.clone()),
                streamed: BoxCloneSyncService::new(stack),
            }
        });
        Ok(Proxy {
            shared: Arc::new(Shared {
                max_body_bytes: self.max_body_bytes,
                catalog,
                openai,
                anthropic,
            }),
        })
    }
}

/// Refuses an address other than loopback: a server without a key table serves whoever
/// reaches it, on the operator's upstream keys.
pub fn check_listen(addr: SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "refusing to listen on {addr}: without a key table the server is single-tenant and \
             serves only loopback (127.0.0.1 or ::1)"
        ))
    }
}

impl Shared {
    /// The upstream that serves `model`: the catalog's provider, else by its name; or
    /// why there is none (the provider's key is not set here).
    fn upstream(&self, model: &str) -> Result<&Upstream, String> {
        let provider = self.catalog.get(model).and_then(|m| m.provider).unwrap_or(
            if model.starts_with("claude-") {
                Provider::Anthropic
            } else {
                Provider::OpenAi
            },
        );
        let (upstream, name) = match provider {
            Provider::Anthropic => (&self.anthropic, "Anthropic"),
            _ => (&self.openai, "OpenAI"),
        };
        upstream.as_ref().ok_or_else(|| {
            format!("the model {model:?} is served by {name}, which this server has no key for")
        })
    }
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            let message = format!("the body is not JSON: {e}");
            return error(StatusCode::BAD_REQUEST, "invalid_request_error", &message);
        }
    };
    let (mut req, _) = match request_from_body(&body) {
        Ok(parsed) => parsed,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &e.to_string(),
            );
        }
    };
    if let Some(session) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        req = req.with_session(session);
    }
    let upstream = match shared.upstream(&req.model) {
        Ok(u) => u.clone(),
        Err(why) => return error(StatusCode::BAD_REQUEST, "invalid_request_error", &why),
    };
    let model = req.model.clone();
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if body["stream"] == json!(true) {
        let include_usage = body["stream_options"]["include_usage"] == json!(true);
        return match upstream.streamed.oneshot(Streaming(req)).await {
            Ok(stream) => sse(stream, model, created, include_usage),
            Err(e) => failure(&e),
        };
    }
    match upstream.plain.oneshot(req).await {
        Ok(response) => {
            let mut out =
                axum::Json(openai_wire::completion(&response, &model, created)).into_response();
            report_headers(out.headers_mut(), &response.report);
            out
        }
        Err(e) => failure(&e),
    }
}

/// The stream as server-sent `chat.completion.chunk` events, then `[DONE]`. A failure
/// after the stream began is an `error` event, and the stream ends without `[DONE]`.
fn sse(stream: ChatStream, model: String, created: u64, include_usage: bool) -> Response {
    let events = stream.flat_map(move |item| {
        let lines: Vec<Result<Bytes, std::convert::Infallible>> = match item {
            Ok(event) => {
                let done = matches!(event, StreamEvent::Done(_));
                let mut out: Vec<_> = openai_wire::chunks(&event, &model, created, include_usage)
                    .into_iter()
                    .map(|c| Ok(Bytes::from(format!("data: {c}\n\n"))))
                    .collect();
                if done {
                    out.push(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
                }
                out
            }
            Err(e) => vec![Ok(Bytes::from(format!("data: {}\n\n", error_body(&e))))],
        };
        futures_util::stream::iter(lines)
    });
    let mut response = Response::new(Body::from_stream(events));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The report of a prepared request, as headers.
fn report_headers(h: &mut HeaderMap, r: &PreparationReport) {
    let numbers = [
        ("x-llm-context-before-tokens", r.before_tokens),
        ("x-llm-context-after-tokens", r.after_tokens),
        ("x-llm-context-removed-messages", r.removed_messages),
        ("x-llm-context-cleared", r.cleared_observations),
        ("x-llm-context-offloaded", r.offloaded_results),
    ];
    for (name, n) in numbers {
        h.insert(name, HeaderValue::from(n as u64));
    }
    let memo = if r.memo_hit { "hit" } else { "miss" };
    h.insert("x-llm-context-memo", HeaderValue::from_static(memo));
}

/// An error in OpenAI's shape.
fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"error": {"type": kind, "message": message, "param": null, "code": null}});
    (status, axum::Json(body)).into_response()
}

/// The body of a failure: the context-limit shape, or the provider's error.
fn error_body(e: &BoxError) -> Value {
    if let Some(limit) = e.downcast_ref::<ContextLimitError>() {
        return json!({
            "error": {"type": "invalid_request_error", "code": "context_length_exceeded",
                      "message": limit.to_string(), "param": "messages"},
            "llm_context": {"needed_tokens": limit.needed_tokens, "allowance": limit.allowance,
                            "breakdown": limit.breakdown},
        });
    }
    if let Some(p) = find_provider_error(e) {
        return json!({"error": {"type": p.error_type().unwrap_or("upstream_error"),
                                "message": p.message, "param": null, "code": p.code()}});
    }
    json!({"error": {"type": "server_error", "message": e.to_string(), "param": null, "code": null}})
}

fn find_provider_error(e: &BoxError) -> Option<&ProviderError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(&**e);
    while let Some(err) = cur {
        if let Some(p) = err.downcast_ref::<ProviderError>() {
            return Some(p);
        }
        cur = err.source();
    }
    None
}

/// A failure before any answer: 400 for a request that cannot fit (nothing was sent), the
/// provider's own status for its errors (502 when it gave none), else 500.
fn failure(e: &BoxError) -> Response {
    let status = if e.downcast_ref::<ContextLimitError>().is_some()
        || e.downcast_ref::<crate::PairingError>().is_some()
    {
        StatusCode::BAD_REQUEST
    } else if let Some(p) = find_provider_error(e) {
        // The provider's error status; a success it sent that could not be read (or no
        // status at all: a timeout, a reset) is a bad gateway, never a 200.
        p.status
            .filter(|s| *s >= 400)
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::BAD_GATEWAY)
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    (status, axum::Json(error_body(e))).into_response()
}
