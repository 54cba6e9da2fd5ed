//! The whole stack behind the Chat Completions and Anthropic Messages wire formats, as an
//! HTTP server: any agent that speaks either API gets context management by changing its
//! base URL.
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
//! What it does (DESIGN § The proxy):
//!
//! - `POST /v1/chat/completions` (OpenAI Chat Completions) and `POST /v1/messages`
//!   (Anthropic Messages), `stream` true or false. The request goes through the whole
//!   context stack (prune, clear, offload, prefix, memo) and on to the provider the model
//!   belongs to: the catalog's provider, else `claude-…` to Anthropic and anything else
//!   to OpenAI, whatever the format it came in, so an OpenAI client reaches Claude and an
//!   Anthropic client reaches GPT. The answer goes back in the client's format. The
//!   model's reads of offloaded results (`read_context_artifact`) are answered inside the
//!   server, streams included: the client never sees them.
//! - A Messages history keeps its `thinking` and `redacted_thinking` blocks, signatures
//!   included, before the `tool_use` they led to; top-level fields the proxy does not
//!   model (`metadata`, `thinking`, `top_k`, …) are passed on. A content block it cannot
//!   carry (documents, server tools' blocks) is refused with 400 and its type named,
//!   never dropped; `cache_control` markers are replaced by the stack's own. A tool
//!   result's `is_error` flag is not carried (the neutral model has no place for it).
//! - The session is the `x-llm-context-session` header, else inferred from the request's
//!   stable head; the tenant is the key's (see below).
//! - A request that cannot fit is answered 400 before any upstream call: on
//!   `/v1/chat/completions` with `{"error": {"type": "invalid_request_error", "code":
//!   "context_length_exceeded", "message", "param": "messages"}, "llm_context":
//!   {"needed_tokens", "allowance", "breakdown"}}`, on `/v1/messages` with Anthropic's
//!   `{"type": "error", "error": {"type": "invalid_request_error", "message"}}`. A
//!   provider's error keeps its status and its message, redacted; every error is in the
//!   route's own shape.
//! - Every answer, streamed or not, carries the report as headers:
//!   `x-llm-context-before-tokens`, `-after-tokens`, `-removed-messages`, `-cleared`,
//!   `-offloaded`, `-memo` (`hit` / `miss`). A stream's are what preparation did before
//!   the first event ([`ChatStream::report`]).
//! - A deterministic request (`temperature: 0`) asked again is answered from the memo
//!   ([`ProxyBuilder::memo_store`]; in this process by default).
//! - `GET /healthz` answers `ok`. A body over
//!   [`max_body_bytes`](ProxyBuilder::max_body_bytes) (default 64 MiB) is answered 413.
//!   [`Proxy::serve_until`] drains on a signal (`llm-context serve` on SIGTERM or
//!   Ctrl-C).
//!
//! - Limits: the body size (413), the requests served at once
//!   ([`max_concurrency`](ProxyBuilder::max_concurrency); one more is shed with 503 and
//!   `retry-after`), and each upstream attempt's time
//!   ([`upstream_timeout`](ProxyBuilder::upstream_timeout); 504 past it).
//!
//! - Tenants: [`ProxyBuilder::tenant`] adds a client key to the key table by its SHA-256
//!   digest, with its [`Scope`] and optionally its own policy. With a key table, a
//!   request without a known key (`Authorization: Bearer …` or `x-api-key`) is 401 in
//!   the route's shape; without one the server is single-tenant, and [`check_listen`]
//!   keeps it on loopback. [`ProxyBuilder::route`] sends model-name prefixes to a
//!   provider, over the catalog.
//!
//! - `GET /metrics`: Prometheus (OpenMetrics) text from a registry the server owns:
//!   `llm_context_requests_total{route,status,tenant}`,
//!   `llm_context_request_duration_seconds{route}` (to the response's headers), split
//!   into `llm_context_preparation_duration_seconds{route}` (the proxy's own part) and
//!   `llm_context_upstream_duration_seconds{route}` (waiting on the provider, every
//!   attempt and artifact read together; a memo hit makes none),
//!   `llm_context_tokens_before_total` / `_after_total{tenant}`,
//!   `llm_context_memo_hits_total{tenant}`, `llm_context_upstream_errors_total{kind}`.
//!   `GET /readyz` answers `{"status": "ready" | "degraded", "stores": {…}}`, 200 either
//!   way: degraded still serves.
//! - Budgets: [`ProxyBuilder::budgets`] checks each upstream call against its tenant's
//!   [`BudgetLayer`] before it is sent; one that would cross a limit is 429
//!   (`budget_exceeded`), never sent. `/metrics` reports each tenant's use.
//! - Replicas: [`ProxyBuilder::redis`] puts memo (single flight included), artifacts
//!   and sessions' cuts on Redis, shared by every replica on it; Redis away, at start or mid-run, degrades
//!   (no shared memo) and never fails a request, and the stores reconnect by themselves.
//! - Spans: each request is a `POST {route}` server span (`http.route`,
//!   `http.response.status_code`, `llm_context.tenant`) above the call's GenAI span
//!   ([`trace`](crate::trace)). With the `otel` feature, a W3C `traceparent` header makes
//!   it a child of the client's span, so the agent's trace holds what the proxy did.
//!

mod anthropic_wire;
mod metrics;
mod openai_wire;
mod request_span;
mod timing;

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::OwnedSemaphorePermit;
use tower::util::BoxCloneSyncService;
use tower::{ServiceBuilder, ServiceExt};
use tracing::Instrument;

use crate::attempt::AttemptSpanLayer;
use crate::budget::{BudgetExceeded, BudgetKey, BudgetLayer, Limit, Window, rfc3339};
pub use crate::catalog::Provider;
use crate::error::ProviderError;
use crate::memo::{LocalMemoStore, MemoLayer, MemoStore};
use crate::openai::body::request_from_str;
use crate::redis::RedisStores;
use crate::retry::RetryPolicy;
use crate::stream::{ChatStream, StreamEvent, Streaming};
use crate::trace::{GenAiSpanLayer, store_call};
use crate::{
    Anthropic, BoxError, Catalog, ChatRequest, ChatResponse, ContextLimitError, ContextPolicy,
    ContextPolicyLayer, OpenAi, PolicyError, PreparationReport, Scope,
};
use llm_context_layers::ArtifactStore;

/// The largest request body read by default: 64 MiB, room for a 10,000-message
/// transcript with large tool results. Past it the answer is 413.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// The requests served at once by default; past it a request is shed (503).
pub const DEFAULT_MAX_CONCURRENCY: usize = 1024;

/// How long an upstream attempt may take to answer by default (to its headers, for a
/// stream): 10 minutes, room for a long reasoning call.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(600);

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

impl Upstream {
    /// One stack, boxed once for each kind of call.
    fn new<S>(stack: S) -> Self
    where
        S: tower::Service<ChatRequest, Response = ChatResponse, Error = BoxError>
            + tower::Service<Streaming, Response = ChatStream, Error = BoxError>
            + Clone
            + Send
            + Sync
            + 'static,
        <S as tower::Service<ChatRequest>>::Future: Send + 'static,
        <S as tower::Service<Streaming>>::Future: Send + 'static,
    {
        Self {
            plain: BoxCloneSyncService::new(stack.clone()),
            streamed: BoxCloneSyncService::new(stack),
        }
    }
}

/// The stacks of one policy, one per upstream.
#[derive(Clone)]
struct Stacks {
    openai: Option<Upstream>,
    anthropic: Option<Upstream>,
}

/// Who a client key belongs to, and which policy's stacks serve it.
#[derive(Clone, Debug)]
struct Tenant {
    scope: Scope,
    /// As DESIGN names tenants, in the metrics and the logs: "org", or "org:domain".
    label: String,
    stacks: usize,
}

struct Shared {
    max_body_bytes: usize,
    /// One permit per request in flight, held to the end of its stream.
    in_flight: Arc<tokio::sync::Semaphore>,
    catalog: Arc<Catalog>,
    /// The default policy's stacks first, then one per tenant with its own policy.
    stacks: Vec<Stacks>,
    /// The key table, by SHA-256 of the key; `None`: single-tenant, no key asked for.
    keys: Option<HashMap<[u8; 32], Tenant>>,
    /// Model-name prefixes to providers, longest first; they win over the catalog.
    routes: Vec<(String, Provider)>,
    metrics: metrics::Metrics,
    /// Pinged by `/readyz`.
    redis: Option<RedisStores>,
    /// Read by `/metrics` for each tenant's budget use.
    budgets: Option<BudgetLayer>,
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
            .field("openai", &self.shared.stacks[0].openai.is_some())
            .field("anthropic", &self.shared.stacks[0].anthropic.is_some())
            .field(
                "tenants",
                &self.shared.keys.as_ref().map_or(0, HashMap::len),
            )
            .finish_non_exhaustive()
    }
}

/// Builds a [`Proxy`].
pub struct ProxyBuilder {
    max_body_bytes: usize,
    max_concurrency: usize,
    upstream_timeout: Duration,
    policy: ContextPolicy,
    catalog: Option<Arc<Catalog>>,
    openai: Option<OpenAi>,
    anthropic: Option<Anthropic>,
    memo: Option<Arc<dyn MemoStore>>,
    keys: Vec<([u8; 32], Scope, Option<ContextPolicy>)>,
    routes: Vec<(String, Provider)>,
    artifacts: Option<Arc<dyn ArtifactStore>>,
    redis: Option<RedisStores>,
    budgets: Option<BudgetLayer>,
}

impl std::fmt::Debug for ProxyBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyBuilder")
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_concurrency", &self.max_concurrency)
            .field("upstream_timeout", &self.upstream_timeout)
            .field("policy", &self.policy)
            .field("openai", &self.openai.is_some())
            .field("anthropic", &self.anthropic.is_some())
            .field("memo", &self.memo.is_some())
            .field("keys", &self.keys.len())
            .field("routes", &self.routes)
            .field("redis", &self.redis.is_some())
            .field("budgets", &self.budgets)
            .finish_non_exhaustive()
    }
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
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics_text))
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/messages", post(messages))
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
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            policy: ContextPolicy::default(),
            catalog: None,
            openai: None,
            anthropic: None,
            memo: None,
            keys: Vec::new(),
            routes: Vec::new(),
            artifacts: None,
            redis: None,
            budgets: None,
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

    /// The requests served at once (default [`DEFAULT_MAX_CONCURRENCY`]; a stream counts
    /// until its last event). One more is shed at once: 503 with `retry-after: 1`, in the
    /// route's error shape (`overloaded_error` on `/v1/messages`), rather than queued
    /// behind calls that take seconds each.
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n;
        self
    }

    /// How long one upstream attempt may take to answer (default
    /// [`DEFAULT_UPSTREAM_TIMEOUT`]): to the whole answer, or to the stream's headers for
    /// a stream (a stream that has begun is not cut). Past it the answer is 504.
    pub fn upstream_timeout(mut self, timeout: Duration) -> Self {
        self.upstream_timeout = timeout;
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

    /// The memo store: a deterministic request (`temperature: 0`) asked again is
    /// answered from it, with `x-llm-context-memo: hit`. By default a
    /// [`LocalMemoStore`] in this process; a Redis store shares it between replicas.
    pub fn memo_store(mut self, store: Arc<dyn MemoStore>) -> Self {
        self.memo = Some(store);
        self
    }

    /// A client key of the key table, by its SHA-256 digest ([`key_digest`], or
    /// [`parse_digest`] of the config's hex): its requests are served for `scope` (memo,
    /// artifacts and cuts are kept per tenant), under `policy` when given, else the
    /// default policy. With one key or more, every request must carry a known key
    /// (`Authorization: Bearer …` or `x-api-key`), else it is answered 401 in the
    /// route's own shape.
    pub fn tenant(
        mut self,
        key_sha256: [u8; 32],
        scope: Scope,
        policy: Option<ContextPolicy>,
    ) -> Self {
        self.keys.push((key_sha256, scope, policy));
        self
    }

    /// Sends models whose name starts with `prefix` to `provider`, whatever the catalog
    /// says (the longest matching prefix wins).
    pub fn route(mut self, prefix: impl Into<String>, provider: Provider) -> Self {
        self.routes.push((prefix.into(), provider));
        self
    }

    /// The artifact store offloaded results go to (by default one in this process per
    /// policy). A shared store lets every replica answer the model's reads of what
    /// another offloaded.
    pub fn artifact_store(mut self, store: Arc<dyn ArtifactStore>) -> Self {
        self.artifacts = Some(store);
        self
    }

    /// Memo (single flight included), artifacts, sessions' cuts and budget counters on
    /// Redis, shared by every replica on it, and `/readyz` pinging it. Each request's session's cuts
    /// are loaded before it is prepared, so a conversation whose turns reach different
    /// replicas keeps one cached prefix. Redis away, at start or later, degrades: the
    /// upstream answers, `/readyz` says `degraded`, budgets fail open (with a warning),
    /// and the stores reconnect by themselves.
    pub fn redis(mut self, stores: RedisStores) -> Self {
        self.memo = Some(Arc::new(stores.memo.clone()));
        self.artifacts = Some(Arc::new(stores.artifacts.clone()));
        self.redis = Some(stores);
        self
    }

    /// Budgets enforced before each upstream call ([`BudgetLayer`]; per tenant with
    /// [`BudgetLayer::for_tenant`]). A call that would cross one is answered 429 without
    /// an upstream call: on `/v1/chat/completions` `{"error": {"type":
    /// "insufficient_quota", "code": "budget_exceeded", "message", "param"},
    /// "llm_context": {"limit", "used", "requested", "max", "resets_at"}}`, on
    /// `/v1/messages` Anthropic's `rate_limit_error`; with `retry-after` when the window
    /// resets. Memo hits cost nothing.
    pub fn budgets(mut self, budgets: BudgetLayer) -> Self {
        self.budgets = Some(budgets);
        self
    }

    /// The server; fails when a policy does not validate. The upstreams of one policy
    /// share one context layer (one artifact store, one memory of each session's cut);
    /// every stack shares the memo store, whose keys are per tenant.
    pub fn build(self) -> Result<Proxy, PolicyError> {
        let catalog = self.catalog.unwrap_or_else(Catalog::builtin);
        let memo = self
            .memo
            .unwrap_or_else(|| Arc::new(LocalMemoStore::default()));
        let timeout = self.upstream_timeout;
        let artifacts = self.artifacts.clone();
        let cuts = self.redis.as_ref().map(|r| r.cuts.clone());
        // Replicas on one Redis share their tenants' budgets.
        let budgets = match (self.budgets, &self.redis) {
            (Some(b), Some(redis)) => Some(b.with_store(Arc::new(redis.budgets.clone()))),
            (b, _) => b,
        };
        let stacks_for = |policy: ContextPolicy| -> Result<Stacks, PolicyError> {
            let mut context = ContextPolicyLayer::new(policy)?;
            if let Some(store) = &artifacts {
                context = context.with_artifact_store(store.clone());
            }
            if let Some(cuts) = &cuts {
                context = context.with_cut_store(Arc::new(cuts.clone()));
            }
            let context = context
                .with_catalog(catalog.clone())
                // The client never sees the stack's artifact tool: its reads are answered
                // here.
                .with_auto_resolve()
                .with_memo(MemoLayer::new(memo.clone()));
            let stack = || {
                ServiceBuilder::new()
                    // One GenAI span per call, around everything the stack does for it.
                    .layer(GenAiSpanLayer::with_catalog(catalog.clone()))
                    .layer(context.clone())
                    // Under the memo (inside the context layer): a hit never reaches it.
                    .option_layer(budgets.clone())
                    .layer(timing::TimedLayer)
                    .retry(RetryPolicy::default())
                    // One span per attempt, under the call's.
                    .layer(AttemptSpanLayer)
                    // Per attempt: a retry gets the whole time again.
                    .timeout(timeout)
            };
            Ok(Stacks {
                openai: self
                    .openai
                    .clone()
                    .map(|c| Upstream::new(stack().service(c))),
                anthropic: self
                    .anthropic
                    .clone()
                    .map(|c| Upstream::new(stack().service(c))),
            })
        };
        let mut stacks = vec![stacks_for(self.policy.clone())?];
        let keys = if self.keys.is_empty() {
            None
        } else {
            let mut table = HashMap::new();
            for (digest, scope, policy) in self.keys {
                let index = match policy {
                    Some(policy) => {
                        stacks.push(stacks_for(policy)?);
                        stacks.len() - 1
                    }
                    None => 0,
                };
                let label = tenant_label(&scope);
                let tenant = Tenant {
                    scope,
                    label,
                    stacks: index,
                };
                table.insert(digest, tenant);
            }
            Some(table)
        };
        let mut routes = self.routes;
        routes.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        Ok(Proxy {
            shared: Arc::new(Shared {
                max_body_bytes: self.max_body_bytes,
                in_flight: Arc::new(tokio::sync::Semaphore::new(self.max_concurrency)),
                catalog,
                stacks,
                keys,
                routes,
                metrics: metrics::Metrics::new(),
                redis: self.redis,
                budgets,
            }),
        })
    }
}

/// A tenant as the metrics, the logs and the config's `[budgets]` name it: `org`, or
/// `org:domain`; `-` for a scope without an organisation.
pub fn tenant_label(scope: &Scope) -> String {
    match (&scope.org, &scope.domain) {
        (Some(org), Some(domain)) => format!("{org}:{domain}"),
        (Some(org), None) => org.clone(),
        _ => "-".to_owned(),
    }
}

/// The SHA-256 digest of a client key, as the key table holds it.
pub fn key_digest(key: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes()).into()
}

/// A digest written as 64 hex digits (the config's `sha256`), or what is wrong with it.
pub fn parse_digest(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(format!(
            "a key digest must be 64 hex digits (SHA-256), not {} characters",
            hex.chars().count()
        ));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("a key digest must be hex digits: {hex:?}"))?;
    }
    Ok(out)
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
    /// The upstream of `stacks` that serves `model`: the config's routes, else the
    /// catalog's provider, else by its name; or why there is none (the provider's key
    /// is not set here).
    fn upstream(&self, stacks: usize, model: &str) -> Result<&Upstream, String> {
        let routed = self
            .routes
            .iter()
            .find(|(prefix, _)| model.starts_with(prefix.as_str()))
            .map(|(_, p)| *p);
        let provider = routed
            .or_else(|| self.catalog.get(model).and_then(|m| m.provider))
            .unwrap_or(if model.starts_with("claude-") {
                Provider::Anthropic
            } else {
                Provider::OpenAi
            });
        let stacks = &self.stacks[stacks];
        let (upstream, name) = match provider {
            Provider::Anthropic => (&stacks.anthropic, "Anthropic"),
            _ => (&stacks.openai, "OpenAI"),
        };
        upstream.as_ref().ok_or_else(|| {
            format!("the model {model:?} is served by {name}, which this server has no key for")
        })
    }

    /// The tenant of a request's key, `Ok(None)` when there is no key table, or the 401
    /// message.
    fn tenant(&self, headers: &HeaderMap) -> Result<Option<&Tenant>, &'static str> {
        let Some(keys) = &self.keys else {
            return Ok(None);
        };
        let key = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
            .ok_or("an API key is required (Authorization: Bearer, or x-api-key)")?;
        keys.get(&key_digest(key.trim()))
            .map(Some)
            .ok_or("the API key is not known to this server")
    }
}

/// The wire format of a route: what it reads, and how it writes answers and errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
}

async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    counted(&shared, Format::OpenAi, &headers, body).await
}

async fn messages(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    counted(&shared, Format::Anthropic, &headers, body).await
}

/// `/readyz`: `ready`, or `degraded` while Redis does not answer. Degraded is still 200:
/// every request is served (from the upstream, without the shared memo), and taking
/// every replica out of the load balancer because Redis is away would turn an outage of
/// the cache into one of the service.
async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
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
async fn metrics_text(State(shared): State<Arc<Shared>>) -> Response {
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

/// One call, counted in the metrics once its headers are ready.
async fn counted(
    shared: &Shared,
    format: Format,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = std::time::Instant::now();
    let route = match format {
        Format::OpenAi => "/v1/chat/completions",
        Format::Anthropic => "/v1/messages",
    };
    // The root of the request's spans (to its headers: a stream's GenAI span outlives it).
    let span = request_span::open(route, headers);
    // Looked up once: the handler serves under it, the metrics and the log name it.
    let tenant = shared.tenant(headers);
    let tally = Arc::new(timing::Tally::default());
    let handled = timing::scoped(tally.clone(), handle(shared, format, tenant, headers, body));
    let response = handled.instrument(span.clone()).await;
    let tenant = tenant.ok().flatten().map_or("-", |t| t.label.as_str());
    let took = started.elapsed();
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

/// One call, in either format: read, route, run through the stack, answer.
async fn handle(
    shared: &Shared,
    format: Format,
    tenant: Result<Option<&Tenant>, &'static str>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // Shed, not queued: a queue behind calls of seconds each only makes every client late.
    let Ok(permit) = shared.in_flight.clone().try_acquire_owned() else {
        let message = "the server is at its concurrency limit: retry shortly";
        let mut out = error(format, StatusCode::SERVICE_UNAVAILABLE, message);
        out.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return out;
    };
    let tenant = match tenant {
        Ok(tenant) => tenant,
        Err(why) => return error(format, StatusCode::UNAUTHORIZED, why),
    };
    let body = match body {
        Ok(body) => body,
        // Over the body limit (413), or a body that could not be read.
        Err(rejection) => return error(format, rejection.status(), &rejection.body_text()),
    };
    let (mut req, stream, include_usage) = match read(format, &body) {
        Ok(read) => read,
        Err(why) => return error(format, StatusCode::BAD_REQUEST, &why),
    };
    if let Some(session) = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
        req = req.with_session(session);
    }
    if let Some(tenant) = tenant {
        req = req.with_scope(tenant.scope.clone());
    }
    if let Some(redis) = &shared.redis {
        load_cuts(redis, &mut req).await;
    }
    let stacks = tenant.map_or(0, |t| t.stacks);
    let upstream = match shared.upstream(stacks, &req.model) {
        Ok(u) => u.clone(),
        Err(why) => return error(format, StatusCode::BAD_REQUEST, &why),
    };
    let model = req.model.clone();
    if stream {
        return match upstream.streamed.oneshot(Streaming(req)).await {
            Ok(stream) => {
                let report = stream.report().cloned();
                let mut out = match format {
                    Format::OpenAi => sse(stream, model, created(), include_usage, permit),
                    Format::Anthropic => anthropic_sse(stream, model, permit),
                };
                if let Some(report) = report {
                    report_headers(&mut out, &report);
                }
                out
            }
            Err(e) => failure(format, &e),
        };
    }
    match upstream.plain.oneshot(req).await {
        Ok(response) => {
            let body = match format {
                Format::OpenAi => openai_wire::completion(&response, &model, created()),
                Format::Anthropic => anthropic_wire::message(&response, &model),
            };
            let mut out = axum::Json(body).into_response();
            report_headers(&mut out, &response.report);
            out
        }
        Err(e) => failure(format, &e),
    }
}

/// The request in a body of `format`, whether it asks for a stream, and whether a
/// Chat Completions stream should end with usage; or why the body cannot be read.
fn read(format: Format, body: &[u8]) -> Result<(ChatRequest, bool, bool), String> {
    let not_json = |e: &dyn std::fmt::Display| format!("the body is not JSON: {e}");
    match format {
        // Straight from the text into the model, in one pass: a JSON tree of a
        // megabyte-long transcript first would cost more than preparing it.
        Format::OpenAi => {
            let text = std::str::from_utf8(body).map_err(|e| not_json(&e))?;
            let (req, _) = request_from_str(text).map_err(|e| {
                if e.is_syntax() {
                    not_json(&e)
                } else {
                    e.to_string()
                }
            })?;
            let extra = &req.params.extra;
            let stream = extra.get("stream") == Some(&Value::Bool(true));
            let include_usage = extra
                .get("stream_options")
                .and_then(|o| o.get("include_usage"))
                == Some(&Value::Bool(true));
            Ok((req, stream, include_usage))
        }
        Format::Anthropic => {
            let body: Value = serde_json::from_slice(body).map_err(|e| not_json(&e))?;
            let req = anthropic_wire::request(&body)?;
            Ok((req, body["stream"] == json!(true), false))
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

/// Now, in seconds since the epoch (a completion's `created`).
fn created() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The stream as the Messages API's server-sent events. A failure after the stream
/// began is an `error` event, and the stream ends without `message_stop`.
fn anthropic_sse(stream: ChatStream, model: String, permit: OwnedSemaphorePermit) -> Response {
    let mut events = anthropic_wire::Events::new(model);
    let body = stream.flat_map(move |item| {
        // The stream holds its place in the concurrency limit to its end.
        let _held = &permit;
        let lines: Vec<Result<Bytes, std::convert::Infallible>> = match item {
            Ok(event) => events
                .on(&event)
                .into_iter()
                .map(|(name, data)| Ok(Bytes::from(format!("event: {name}\ndata: {data}\n\n"))))
                .collect(),
            Err(e) => {
                let status = classify(&e);
                let data = anthropic_body(&e, status);
                vec![Ok(Bytes::from(format!("event: error\ndata: {data}\n\n")))]
            }
        };
        futures_util::stream::iter(lines)
    });
    event_stream(Body::from_stream(body))
}

/// A `text/event-stream` response.
fn event_stream(body: Body) -> Response {
    let mut response = Response::new(body);
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The stream as server-sent `chat.completion.chunk` events, then `[DONE]`. A failure
/// after the stream began is an `error` event, and the stream ends without `[DONE]`.
fn sse(
    stream: ChatStream,
    model: String,
    created: u64,
    include_usage: bool,
    permit: OwnedSemaphorePermit,
) -> Response {
    let events = stream.flat_map(move |item| {
        // The stream holds its place in the concurrency limit to its end.
        let _held = &permit;
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
    event_stream(Body::from_stream(events))
}

/// The report of a prepared request, as headers, and for the metrics.
fn report_headers(out: &mut Response, r: &PreparationReport) {
    out.extensions_mut().insert(metrics::Outcome {
        report: Some((r.before_tokens, r.after_tokens, r.memo_hit)),
        upstream_error: None,
    });
    let h = out.headers_mut();
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

/// An error in the format's own shape.
fn error(format: Format, status: StatusCode, message: &str) -> Response {
    let body = match format {
        Format::OpenAi => {
            // OpenAI's own 401 names its code.
            let code = (status == StatusCode::UNAUTHORIZED).then_some("invalid_api_key");
            json!({"error": {"type": openai_error_type(status), "message": message,
                             "param": null, "code": code}})
        }
        Format::Anthropic => {
            anthropic_wire::error(anthropic_wire::error_type(status.as_u16()), message)
        }
    };
    (status, axum::Json(body)).into_response()
}

/// OpenAI's error type for a status this server answers itself.
fn openai_error_type(status: StatusCode) -> &'static str {
    if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    }
}

/// The body of a failure in OpenAI's shape: the context-limit shape, or the provider's
/// error.
fn error_body(e: &BoxError) -> Value {
    if let Some(b) = find::<BudgetExceeded>(e) {
        return json!({
            "error": {"type": "insufficient_quota", "code": "budget_exceeded",
                      "message": b.to_string(), "param": null},
            "llm_context": {"limit": b.limit, "used": b.used, "requested": b.requested,
                            "max": b.max, "resets_at": b.resets_at.map(rfc3339)},
        });
    }
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

/// The body of a failure in Anthropic's shape: the provider's error type when it gave
/// one, else the type of `status`.
fn anthropic_body(e: &BoxError, status: StatusCode) -> Value {
    let kind = anthropic_wire::error_type(status.as_u16());
    if let Some(limit) = e.downcast_ref::<ContextLimitError>() {
        return anthropic_wire::error(kind, &limit.to_string());
    }
    if let Some(b) = find::<BudgetExceeded>(e) {
        return anthropic_wire::error(kind, &b.to_string());
    }
    if let Some(p) = find_provider_error(e) {
        return anthropic_wire::error(p.error_type().unwrap_or(kind), &p.message);
    }
    anthropic_wire::error(kind, &e.to_string())
}

fn find_provider_error(e: &BoxError) -> Option<&ProviderError> {
    find::<ProviderError>(e)
}

/// The first error of type `T` in `e`'s chain of sources.
fn find<T: std::error::Error + 'static>(e: &BoxError) -> Option<&T> {
    crate::error::find_source(&**e)
}

/// The status of a failure: 400 for a request that cannot fit (nothing was sent), the
/// provider's own status for its errors (502 when it gave none), else 500.
fn classify(e: &BoxError) -> StatusCode {
    if find::<BudgetExceeded>(e).is_some() {
        StatusCode::TOO_MANY_REQUESTS
    } else if e.downcast_ref::<ContextLimitError>().is_some()
        || e.downcast_ref::<crate::PairingError>().is_some()
    {
        StatusCode::BAD_REQUEST
    } else if find::<tower::timeout::error::Elapsed>(e).is_some() {
        StatusCode::GATEWAY_TIMEOUT
    } else if let Some(p) = find_provider_error(e) {
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

/// A failure before any answer, in the format's shape.
fn failure(format: Format, e: &BoxError) -> Response {
    let status = classify(e);
    let body = match format {
        Format::OpenAi => error_body(e),
        Format::Anthropic => anthropic_body(e, status),
    };
    let mut out = (status, axum::Json(body)).into_response();
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
        find_provider_error(e).map(|p| format!("{:?}", p.kind))
    };
    out.extensions_mut().insert(metrics::Outcome {
        report: None,
        upstream_error: kind,
    });
    out
}
