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
//!     .policy(ContextPolicy::default().with_max_context_tokens(100_000))
//!     .openai(OpenAi::from_env()?)
//!     .build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! proxy.serve(listener).await?;
//! # Ok(()) }
//! ```
//!
//! What it does:
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
//! - The session is the `x-llm-context-session` header (one longer than
//!   [`MAX_SESSION_ID_BYTES`] is replaced by its SHA-256 digest), else inferred from the
//!   request's stable head; the tenant is the key's (see below).
//! - A request that cannot fit is answered 400 before any upstream call: on
//!   `/v1/chat/completions` with `{"error": {"type": "invalid_request_error", "code":
//!   "context_length_exceeded", "message", "param": "messages"}, "llm_context":
//!   {"needed_tokens", "allowance", "breakdown"}}`, on `/v1/messages` with Anthropic's
//!   `{"type": "error", "error": {"type": "invalid_request_error", "message"}}`. A
//!   provider's error keeps its status and its message, redacted; every error is in the
//!   route's own shape.
//! - Every answer, streamed or not, carries the report as headers:
//!   `x-llm-context-before-tokens`, `-after-tokens`, `-removed-messages`, `-cleared`,
//!   `-offloaded`, `-thinking-dropped`, `-memo` (`hit` / `miss`). A stream's are what preparation did before
//!   the first event ([`ChatStream::report`]).
//! - A deterministic request (`temperature: 0`) asked again is answered from the memo
//!   ([`ProxyBuilder::memo_store`]; in this process by default).
//! - `GET /healthz` answers `ok`. A body over
//!   [`max_body_bytes`](ProxyBuilder::max_body_bytes) (default 64 MiB) is answered 413.
//!   [`Proxy::serve_until`] drains on a signal (`llm-context serve` on SIGTERM or
//!   Ctrl-C).
//!
//! - Limits: the body size (413; [`tenant_max_body_bytes`](ProxyBuilder::tenant_max_body_bytes)
//!   per tenant), the body bytes read at once
//!   ([`max_inflight_body_bytes`](ProxyBuilder::max_inflight_body_bytes); 503 before
//!   reading), the slowest body ([`min_body_rate`](ProxyBuilder::min_body_rate); 408), the
//!   requests served at once ([`max_concurrency`](ProxyBuilder::max_concurrency); one
//!   more is shed with 503 and `retry-after`), each upstream attempt's time
//!   ([`upstream_timeout`](ProxyBuilder::upstream_timeout); 504 past it), and, for
//!   [`Proxy::serve`], the header (and keep-alive idle) timeout
//!   ([`header_timeout`](ProxyBuilder::header_timeout)) and the connections at once
//!   ([`max_connections`](ProxyBuilder::max_connections), kept below the open-file
//!   limit). The key is checked before the body is read. Any other method on a route is
//!   405, an unknown path 404, in the route's error shape.
//!
//! - Tenants: [`ProxyBuilder::tenant`] adds a client key to the key table by its SHA-256
//!   digest, with its [`Scope`] and optionally its own policy. With a key table, a
//!   request without a known key (`Authorization: Bearer …` or `x-api-key`) is 401 in
//!   the route's shape; without one the server is single-tenant, and [`check_listen`]
//!   keeps it on loopback. [`ProxyBuilder::route`] sends model-name prefixes to a
//!   provider, over the catalog.
//!
//! - `GET /metrics` (with a key table: to loopback peers only, or to the bearer of
//!   [`metrics_key`](ProxyBuilder::metrics_key)): Prometheus (OpenMetrics) text from a
//!   registry the server owns:
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

mod admit;
mod body;
mod by_format;
mod count;
mod decode;
mod failures;
mod handler;
mod keys;
pub mod ledger;
mod listen;
mod metrics;
mod passthrough;
mod plausible;
mod request_span;
mod shed;
mod timing;
mod upstreams;

pub use body::{DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_INFLIGHT_BODY_BYTES, DEFAULT_MIN_BODY_RATE};
pub use keys::{MAX_SESSION_ID_BYTES, check_listen, key_digest, parse_digest, tenant_label};
pub use listen::{DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS};

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use tower::ServiceBuilder;

use self::body::Bodies;
use self::handler::{endpoint, not_allowed};
use self::keys::Tenant;
use self::listen::Connections;
use self::upstreams::{Table, Upstream};
use crate::attempt::AttemptSpanLayer;
use crate::budget::BudgetLayer;
use crate::catalog::Provider;
use crate::client::Relay;
use crate::memo::{LocalMemoStore, MemoLayer, MemoStore};
use crate::redis::RedisStores;
use crate::retry::RetryPolicy;
use crate::stream::{ChatStream, Streaming};
use crate::trace::GenAiSpanLayer;
use crate::wire::chat_completions::serve::ChatCompletions;
use crate::wire::messages::serve::Messages;
use crate::wire::responses::serve::Responses;
use crate::wire::served::Format;
use crate::{
    Anthropic, BoxError, Catalog, ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer,
    OpenAi, PolicyError, Scope,
};
use llm_context_layers::{ArtifactStore, Guard};

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

/// The headers in which agents send their conversation's id, read (in this order) when a
/// request has no [`SESSION_HEADER`]: Claude Code's `x-claude-code-session-id` and the
/// Codex CLI's `session_id`. A request with none of them has its session inferred from
/// its stable head.
pub const AGENT_SESSION_HEADERS: &[&str] = &["x-claude-code-session-id", "session_id"];

/// The stacks of one policy, one per provider.
type Stacks = Table<Upstream>;

pub(crate) struct Shared {
    /// The largest body read, for a tenant without a limit of its own.
    pub(crate) max_body_bytes: usize,
    /// The budget of body bytes in flight and the minimum rate.
    pub(crate) bodies: Bodies,
    /// One permit per request in flight, held to the end of its stream.
    pub(crate) in_flight: Arc<tokio::sync::Semaphore>,
    pub(crate) catalog: Arc<Catalog>,
    /// The default policy's stacks first, then one per tenant with its own policy.
    pub(crate) stacks: Vec<Stacks>,
    /// For each policy of `stacks` whose `guard` is `pass-through`, the stacks of its
    /// [`guarded`](ContextPolicy::guarded) form: what a session costlier than
    /// pass-through is sent through.
    pub(crate) guarded: Vec<Option<Stacks>>,
    /// The context layer of each policy, in the order of `stacks` (which it is part of):
    /// what prepares a request that is counted, not sent.
    pub(crate) contexts: Vec<ContextPolicyLayer>,
    /// The key table, by SHA-256 of the key; `None`: single-tenant, no key asked for.
    pub(crate) keys: Option<HashMap<[u8; 32], Tenant>>,
    /// Model-name prefixes to providers, longest first; they win over the catalog.
    pub(crate) routes: Vec<(String, Provider)>,
    pub(crate) metrics: metrics::Metrics,
    /// Pinged by `/readyz`.
    pub(crate) redis: Option<RedisStores>,
    /// Read by `/metrics` for each tenant's budget use.
    pub(crate) budgets: Option<BudgetLayer>,
    /// The SHA-256 of the key `/metrics` asks for, if any.
    pub(crate) metrics_key: Option<[u8; 32]>,
    /// The providers the routes the proxy does not manage are passed on to.
    pub(crate) relays: Table<Relay>,
    /// The wire messages read before, which a session's next request repeats.
    pub(crate) reuse: crate::wire::served::Reuses,
    /// What every managed request cost, and would have cost passed through.
    pub(crate) ledger: ledger::Ledger,
}

/// The server: build it with [`Proxy::builder`], run it with [`serve`](Self::serve), or
/// take its [`router`](Self::router) to mount it in an axum application of your own.
#[derive(Clone)]
pub struct Proxy {
    shared: Arc<Shared>,
    connections: Connections,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field(
                "providers",
                &self.shared.stacks[0].keys().collect::<Vec<_>>(),
            )
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
    tenant_body_limits: HashMap<[u8; 32], usize>,
    max_inflight_body_bytes: usize,
    body_timeout: Duration,
    min_body_rate: u64,
    header_timeout: Duration,
    max_connections: usize,
    max_concurrency: usize,
    upstream_timeout: Duration,
    policy: ContextPolicy,
    catalog: Option<Arc<Catalog>>,
    /// The providers' clients, each boxed once; the stacks are built in front of them.
    upstreams: Table<Upstream>,
    /// The pass-through of each provider whose client was given as such
    /// ([`openai`](Self::openai), [`anthropic`](Self::anthropic)).
    relays: Table<Relay>,
    memo: Option<Arc<dyn MemoStore>>,
    keys: Vec<([u8; 32], Scope, Option<ContextPolicy>)>,
    routes: Vec<(String, Provider)>,
    artifacts: Option<Arc<dyn ArtifactStore>>,
    redis: Option<RedisStores>,
    budgets: Option<BudgetLayer>,
    metrics_key: Option<[u8; 32]>,
    /// Where the ledger is kept beside memory.
    ledger: Option<ledger::Disk>,
    /// The catalog the OpenAI upstream routes by, set by `build`.
    openai_catalog: by_format::CatalogCell,
}

impl std::fmt::Debug for ProxyBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyBuilder")
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_inflight_body_bytes", &self.max_inflight_body_bytes)
            .field("body_timeout", &self.body_timeout)
            .field("min_body_rate", &self.min_body_rate)
            .field("header_timeout", &self.header_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_concurrency", &self.max_concurrency)
            .field("upstream_timeout", &self.upstream_timeout)
            .field("policy", &self.policy)
            .field("providers", &self.upstreams.keys().collect::<Vec<_>>())
            .field("memo", &self.memo.is_some())
            .field("keys", &self.keys.len())
            .field("routes", &self.routes)
            .field("redis", &self.redis.is_some())
            .field("budgets", &self.budgets)
            .field("metrics_key", &self.metrics_key.is_some())
            .field("ledger", &self.ledger.is_some())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// A builder: the default policy, the built-in catalog, no upstream yet.
    pub fn builder() -> ProxyBuilder {
        ProxyBuilder::default()
    }

    /// The routes, as an axum router, to mount in an application of your own. Bodies
    /// are read as [`serve`](Self::serve) reads them (key first, then the body within its
    /// limit, budget and rate); the connection settings ([`ProxyBuilder::header_timeout`],
    /// [`ProxyBuilder::max_connections`]) are then your server's business.
    pub fn router(self) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(handler::readyz))
            .route("/metrics", get(handler::metrics_text))
            .route(ledger::http::SESSIONS, get(ledger::http::sessions))
            .route(ledger::http::SESSION, get(ledger::http::session))
            .route(ledger::page::UI, get(ledger::page::overview))
            .route(ledger::page::UI_SESSION, get(ledger::page::session))
            .route(
                ChatCompletions::ROUTE,
                post(endpoint::<ChatCompletions>).fallback(not_allowed::<ChatCompletions>),
            )
            .route(
                Messages::ROUTE,
                post(endpoint::<Messages>).fallback(not_allowed::<Messages>),
            )
            .route(
                Responses::ROUTE,
                post(endpoint::<Responses>)
                    .get(handler::no_websocket)
                    .fallback(not_allowed::<Responses>),
            )
            .route(
                count::ROUTE,
                post(count::count_tokens).fallback(not_allowed::<Messages>),
            )
            .route(
                count::RESPONSES_ROUTE,
                post(count::input_tokens).fallback(not_allowed::<Responses>),
            )
            .route(
                "/v1/models",
                get(passthrough::relayed).fallback(passthrough::relayed),
            )
            .route(
                "/v1/models/{id}",
                get(passthrough::relayed).fallback(passthrough::relayed),
            )
            .fallback(passthrough::or_not_found)
            .with_state(self.shared)
    }

    /// Serves on `listener` until the process ends: each connection with the header
    /// timeout, at most [`max_connections`](ProxyBuilder::max_connections) at once.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        let connections = self.connections;
        listen::run(
            listener,
            self.router(),
            connections,
            std::future::pending(),
            None,
        )
        .await
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
        let connections = self.connections;
        listen::run(listener, self.router(), connections, shutdown, Some(drain)).await
    }
}

impl Default for ProxyBuilder {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            tenant_body_limits: HashMap::new(),
            max_inflight_body_bytes: DEFAULT_MAX_INFLIGHT_BODY_BYTES,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            min_body_rate: DEFAULT_MIN_BODY_RATE,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            upstream_timeout: DEFAULT_UPSTREAM_TIMEOUT,
            policy: ContextPolicy::default(),
            catalog: None,
            upstreams: Table::default(),
            relays: Table::default(),
            memo: None,
            keys: Vec::new(),
            routes: Vec::new(),
            artifacts: None,
            redis: None,
            budgets: None,
            metrics_key: None,
            ledger: None,
            openai_catalog: Default::default(),
        }
    }
}

impl ProxyBuilder {
    /// The largest request body read (default [`DEFAULT_MAX_BODY_BYTES`]); a longer one
    /// is answered 413, before it is read when its `content-length` says so.
    #[must_use]
    pub fn max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body_bytes = limit;
        self
    }

    /// The largest request body read for the tenant of the key `key_sha256` (see
    /// [`tenant`](Self::tenant)), in place of [`max_body_bytes`](Self::max_body_bytes).
    #[must_use]
    pub fn tenant_max_body_bytes(mut self, key_sha256: [u8; 32], limit: usize) -> Self {
        self.tenant_body_limits.insert(key_sha256, limit);
        self
    }

    /// What every request holds at once, together (default
    /// [`DEFAULT_MAX_INFLIGHT_BODY_BYTES`], 256 MiB; never below the largest body
    /// limit): from its body's first byte to its answer's last, its bytes as they
    /// arrive, then, read, three times its bytes and 1 KiB a message (its bytes, its
    /// parsed form, the body written upstream). A request the budget has no room for is shed
    /// with 503 and `retry-after: 1`, before its body is read when its length is
    /// declared (a body of undeclared length takes its share as it arrives); a request
    /// alone is served whatever it holds.
    #[must_use]
    pub fn max_inflight_body_bytes(mut self, limit: usize) -> Self {
        self.max_inflight_body_bytes = limit;
        self
    }

    /// The slowest a request body may arrive: having read `n` bytes, the next must come
    /// within `timeout + n / bytes_per_second` of the first (defaults
    /// [`DEFAULT_BODY_TIMEOUT`], 10 s, and [`DEFAULT_MIN_BODY_RATE`], 64 KiB/s). A slower
    /// body is answered 408.
    #[must_use]
    pub fn min_body_rate(mut self, timeout: Duration, bytes_per_second: u64) -> Self {
        self.body_timeout = timeout;
        self.min_body_rate = bytes_per_second.max(1);
        self
    }

    /// How long a connection may take to send a request's headers (default
    /// [`DEFAULT_HEADER_TIMEOUT`], 30 s), counted from when it opens or from the end of
    /// its last response: so it is the keep-alive idle timeout too. Past it the
    /// connection is closed. Applies to [`Proxy::serve`] and [`Proxy::serve_until`].
    #[must_use]
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// The connections served at once (default [`DEFAULT_MAX_CONNECTIONS`]), lowered
    /// when the server starts to leave a quarter of the process's open-file limit
    /// (`RLIMIT_NOFILE`, at least 64 descriptors) for upstreams, Redis and files. At the
    /// cap, the connection idle longest (no request in flight: still sending its headers,
    /// or kept alive between requests) is closed for a new one, so a flood of idle
    /// connections never delays `/healthz`; a connection with a request in flight is
    /// never shed, and when every one is busy new connections wait in the listen backlog.
    /// Applies to [`Proxy::serve`] and [`Proxy::serve_until`].
    #[must_use]
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// The requests served at once (default [`DEFAULT_MAX_CONCURRENCY`]; a stream counts
    /// until its last event). One more is shed at once: 503 with `retry-after: 1`, in the
    /// route's error shape (`overloaded_error` on `/v1/messages`), rather than queued
    /// behind calls that take seconds each.
    #[must_use]
    pub fn max_concurrency(mut self, n: usize) -> Self {
        self.max_concurrency = n;
        self
    }

    /// How long one upstream attempt may take to answer (default
    /// [`DEFAULT_UPSTREAM_TIMEOUT`]): to the whole answer, or to the stream's headers for
    /// a stream (a stream that has begun is not cut). Past it the answer is 504.
    #[must_use]
    pub fn upstream_timeout(mut self, timeout: Duration) -> Self {
        self.upstream_timeout = timeout;
        self
    }

    /// The context policy every request is prepared under.
    #[must_use]
    pub fn policy(mut self, policy: ContextPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The catalog: context windows (when the policy sets no `max_tokens`), prices and
    /// which provider serves a model.
    #[must_use]
    pub fn catalog(mut self, catalog: Arc<Catalog>) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// The OpenAI(-compatible) upstream: `upstream(Provider::OpenAi, client)`.
    #[must_use]
    pub fn openai(mut self, client: OpenAi) -> Self {
        // Its base URL ends with `/v1`: a caller's `/v1/models` is `{base}/models`.
        self.relays.insert(Provider::OpenAi, client.relay("/v1"));
        // A Responses caller's request goes on over the Responses API, and so does any
        // request for a model served there only (by the catalog `build` is given).
        let catalog = self.openai_catalog.clone();
        self.upstream(
            Provider::OpenAi,
            boxed_errors(by_format::OpenAiByFormat::new(client, catalog)),
        )
    }

    /// The Anthropic upstream: `upstream(Provider::Anthropic, client)`.
    #[must_use]
    pub fn anthropic(mut self, client: Anthropic) -> Self {
        self.relays.insert(Provider::Anthropic, client.relay(""));
        self.upstream(Provider::Anthropic, boxed_errors(client))
    }

    /// The client that calls `provider`, replacing one set before (its errors boxed, as
    /// a tower stack's are; a [`ProviderError`](crate::ProviderError) among them keeps its
    /// status and message in the answer): the models the routes
    /// or the catalog give to `provider` go to it, through the whole stack. A model whose
    /// provider has no client is answered 400, naming the provider; it never goes to
    /// another provider.
    #[must_use]
    pub fn upstream<C>(mut self, provider: Provider, client: C) -> Self
    where
        C: tower::Service<ChatRequest, Response = ChatResponse, Error = BoxError>
            + tower::Service<Streaming, Response = ChatStream, Error = BoxError>
            + Clone
            + Send
            + Sync
            + 'static,
        <C as tower::Service<ChatRequest>>::Future: Send + 'static,
        <C as tower::Service<Streaming>>::Future: Send + 'static,
    {
        self.upstreams.insert(provider, Upstream::new(client));
        self
    }

    /// The memo store: a deterministic request (`temperature: 0`) asked again is
    /// answered from it, with `x-llm-context-memo: hit`. By default a
    /// [`LocalMemoStore`] in this process; a Redis store shares it between replicas.
    #[must_use]
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
    #[must_use]
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
    #[must_use]
    pub fn route(mut self, prefix: impl Into<String>, provider: Provider) -> Self {
        self.routes.push((prefix.into(), provider));
        self
    }

    /// The artifact store offloaded results go to (by default one in this process per
    /// policy). A shared store lets every replica answer the model's reads of what
    /// another offloaded.
    #[must_use]
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
    #[must_use]
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
    #[must_use]
    pub fn budgets(mut self, budgets: BudgetLayer) -> Self {
        self.budgets = Some(budgets);
        self
    }

    /// The key `GET /metrics` asks for, by its SHA-256 digest: a request without
    /// `Authorization: Bearer <key>` is 403. Without one, `/metrics` answers loopback
    /// peers only when there is a key table (its figures name every tenant), and anyone
    /// otherwise (a server without a key table listens on loopback only). Through
    /// [`Proxy::router`] in an application of your own the peer is not known, so with a
    /// key table `/metrics` then needs this key.
    #[must_use]
    pub fn metrics_key(mut self, key_sha256: [u8; 32]) -> Self {
        self.metrics_key = Some(key_sha256);
        self
    }

    /// Keeps the ledger in `file` as well as in memory, so that it survives restarts: its
    /// rows are read back at start, and each non-streamed answer leaves once its row is on
    /// disk (a stream's row is written as its final usage arrives; see [`ledger`]).
    /// Without it, the ledger is in memory only.
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    #[must_use]
    pub fn ledger(mut self, file: ledger::LedgerFile) -> Self {
        self.ledger = Some(file);
        self
    }

    /// The server; fails when a policy does not validate. The upstreams of one policy
    /// share one context layer (one artifact store, one memory of each session's cut);
    /// every stack shares the memo store, whose keys are per tenant.
    pub fn build(self) -> Result<Proxy, PolicyError> {
        let catalog = self.catalog.unwrap_or_else(Catalog::builtin);
        // A builder built twice keeps the catalog of its first build.
        let _ = self.openai_catalog.set(catalog.clone());
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
        let stacks_for =
            |policy: ContextPolicy| -> Result<(Stacks, ContextPolicyLayer), PolicyError> {
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
                let stacks = self
                    .upstreams
                    .iter()
                    .map(|(&provider, client)| {
                        (provider, Upstream::new(stack().service(client.clone())))
                    })
                    .collect();
                Ok((stacks, context))
            };
        let guarded_for = |policy: &ContextPolicy| -> Result<Option<Stacks>, PolicyError> {
            match policy.guard {
                Guard::PassThrough => Ok(Some(stacks_for(policy.guarded())?.0)),
                _ => Ok(None),
            }
        };
        let (first, context) = stacks_for(self.policy.clone())?;
        let mut guarded = vec![guarded_for(&self.policy)?];
        let mut stacks = vec![first];
        let mut contexts = vec![context];
        let keys = if self.keys.is_empty() {
            None
        } else {
            let mut table = HashMap::new();
            for (digest, scope, policy) in self.keys {
                let index = match policy {
                    Some(policy) => {
                        guarded.push(guarded_for(&policy)?);
                        let (tenants, context) = stacks_for(policy)?;
                        stacks.push(tenants);
                        contexts.push(context);
                        stacks.len() - 1
                    }
                    None => 0,
                };
                let label = tenant_label(&scope);
                let tenant = Tenant {
                    scope,
                    label,
                    stacks: index,
                    max_body_bytes: self.tenant_body_limits.get(&digest).copied(),
                };
                table.insert(digest, tenant);
            }
            Some(table)
        };
        let mut routes = self.routes;
        routes.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        let largest_body = self
            .tenant_body_limits
            .values()
            .fold(self.max_body_bytes, |a, &b| a.max(b));
        let metrics = metrics::Metrics::new();
        Ok(Proxy {
            connections: Connections {
                header_timeout: self.header_timeout,
                max_connections: listen::connection_cap(self.max_connections),
            },
            shared: Arc::new(Shared {
                max_body_bytes: self.max_body_bytes,
                // Never below the largest body, which would then always be shed.
                bodies: Bodies::new(
                    self.max_inflight_body_bytes.max(largest_body),
                    self.body_timeout,
                    self.min_body_rate,
                ),
                in_flight: Arc::new(tokio::sync::Semaphore::new(self.max_concurrency)),
                catalog: catalog.clone(),
                stacks,
                guarded,
                contexts,
                keys,
                routes,
                ledger: ledger::Ledger::new(
                    catalog,
                    metrics.ledger_counters(),
                    self.ledger,
                    self.redis.as_ref().map(|r| r.ledger.clone()),
                ),
                metrics,
                redis: self.redis,
                budgets,
                metrics_key: self.metrics_key,
                relays: self.relays,
                reuse: crate::wire::served::Reuses::new(REUSE_BYTES),
            }),
        })
    }
}

/// What each of the two generations of the proxy's read caches weighs at most (the wire
/// messages' or items' bytes and an estimate of what they were read into), one cache per
/// format read by what is new (see `wire::messages::reuse` and `wire::responses::reuse`):
/// some twenty agent sessions at 1 MB a request each, every message kept once however
/// many requests repeat it. At most four generations in all, 128 MiB by that weight.
const REUSE_BYTES: usize = 32 << 20;

/// A provider client whose errors are boxed, as the stack's layers box theirs.
fn boxed_errors<C>(client: C) -> tower::util::MapErr<C, fn(crate::ProviderError) -> BoxError> {
    tower::util::MapErr::new(client, BoxError::from)
}
