//! `llm-context send`: one request through the whole stack to a provider.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use llm_context::retry::RetryPolicy;
use llm_context::usage::{UsageLayer, UsageMeter};
use llm_context::wire::openai::request_from_body;
use llm_context::{
    BoxError, Catalog, ChatRequest, ChatResponse, ContextLimitError, ContextPolicy,
    ContextPolicyLayer, ProviderError, Scope, load_catalog,
};
use serde_json::{Value, json};
use tower::{Service, ServiceBuilder, ServiceExt};

use super::input::{read_body, read_policy};

use super::{EXIT_CONTEXT_LIMIT, EXIT_PROVIDER, Exit};

/// The exit codes, for `--help`.
pub(crate) const EXIT_CODES_HELP: &str = "Exit codes:
  0  the provider answered; {\"response\", \"report\"} on stdout
  2  bad input: unreadable or invalid JSON, policy or catalog, or a missing API key
  3  the request cannot fit the policy's allowance; nothing was sent
     ({\"error\": \"context_limit\", …} on stdout)
  4  the provider (or the network) failed after retries
     ({\"error\": \"provider\", \"kind\", \"status\", \"message\", …} on stdout)

Environment: OPENAI_API_KEY, OPENAI_BASE_URL (with /v1, default https://api.openai.com/v1);
ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL (default https://api.anthropic.com).";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ProviderArg {
    /// OpenAI Chat Completions or a compatible server.
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

#[derive(Args, Debug)]
pub(crate) struct SendArgs {
    /// Which API to call.
    #[arg(long, value_enum)]
    provider: ProviderArg,
    /// Policy file, JSON or TOML, with ContextPolicy fields.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Model catalog overrides (prices, windows, cache minimums), JSON or TOML.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// The tenant (organisation) the request belongs to.
    #[arg(long, value_name = "T")]
    tenant: Option<String>,
    /// The conversation id.
    #[arg(long, value_name = "S")]
    session: Option<String>,
    /// Retries of a retryable failure (429, 5xx, 529, timeouts, resets).
    #[arg(long, value_name = "N", default_value_t = 2)]
    max_retries: u32,
    /// Limit of each attempt, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    timeout: u64,
    /// Share memoized responses and artifacts with every other process using this Redis
    /// (`redis://[:password@]host:port/[db]`). Requests with temperature 0 are memoized.
    #[cfg(feature = "redis")]
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// An OpenAI Chat Completions request body; `-` or nothing reads stdin.
    #[arg(value_name = "REQUEST.json")]
    request: Option<PathBuf>,
}

pub(crate) async fn run(args: SendArgs) -> Result<u8, Exit> {
    let policy = match &args.policy {
        Some(path) => read_policy(path)?,
        None => ContextPolicy::default(),
    };
    let catalog = match &args.catalog {
        Some(path) => Arc::new(load_catalog(path).map_err(|e| Exit::bad_input(e.to_string()))?),
        None => Catalog::builtin(),
    };
    let body = read_body(args.request.as_deref())?;
    let (mut request, _) =
        request_from_body(&body).map_err(|e| Exit::bad_input(format!("bad request body: {e}")))?;
    if let Some(t) = &args.tenant {
        request = request.with_scope(Scope::org(t));
    }
    if let Some(s) = &args.session {
        request = request.with_session(s.as_str());
    }
    // The model's window from the catalog is the ceiling when the policy sets none.
    let context = ContextPolicyLayer::new(policy)
        .map_err(|e| Exit::bad_input(e.to_string()))?
        .with_catalog(catalog.clone());
    #[cfg(feature = "redis")]
    let context = match &args.redis {
        Some(url) => with_redis(context, url).await?,
        None => context,
    };
    let meter = UsageMeter::with_catalog(catalog.clone());
    let retry = RetryPolicy::default().with_max_retries(args.max_retries);
    let timeout = Duration::from_secs(args.timeout.max(1));
    let stack = ServiceBuilder::new()
        .layer(context)
        .layer(UsageLayer::new(meter))
        .retry(retry);

    let model = request.model.clone();
    let result = match args.provider {
        ProviderArg::Openai => {
            let client = openai_client(timeout)?;
            dispatch(stack.service(client), request).await
        }
        ProviderArg::Anthropic => {
            let client = anthropic_client(timeout)?;
            dispatch(stack.service(client), request).await
        }
    };
    match result {
        Ok(response) => {
            let out = json!({
                "response": response_json(&response, catalog.cost(&model, &response.usage)),
                "report": serde_json::to_value(&response.report).unwrap_or_default(),
            });
            println!("{out}");
            Ok(0)
        }
        Err(err) => {
            if let Some(limit) = err.downcast_ref::<ContextLimitError>() {
                let out = json!({
                    "error": "context_limit",
                    "needed_tokens": limit.needed_tokens,
                    "allowance": limit.allowance,
                    "message": limit.to_string(),
                });
                println!("{out}");
                return Ok(EXIT_CONTEXT_LIMIT);
            }
            println!("{}", error_json(&*err));
            eprintln!("llm-context: {}", err.to_string().replace('\n', " "));
            Ok(EXIT_PROVIDER)
        }
    }
}

/// The stack's artifact store and memo on Redis.
#[cfg(feature = "redis")]
async fn with_redis(context: ContextPolicyLayer, url: &str) -> Result<ContextPolicyLayer, Exit> {
    use llm_context::memo::MemoLayer;
    use llm_context::redis::RedisStores;
    // A Redis that cannot be reached at start is a configuration error (exit 2); once
    // connected, an outage degrades to the provider (see `memo`).
    let stores = RedisStores::connect(url)
        .await
        .map_err(|e| Exit::bad_input(format!("--redis: {e}")))?;
    Ok(context
        .with_artifact_store(Arc::new(stores.artifacts))
        .with_memo(MemoLayer::new(Arc::new(stores.memo))))
}

async fn dispatch<S>(service: S, request: ChatRequest) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
{
    service.oneshot(request).await
}

#[cfg(feature = "openai")]
fn openai_client(timeout: Duration) -> Result<llm_context::OpenAi, Exit> {
    use llm_context::openai::{API_KEY_VAR, BASE_URL_VAR, DEFAULT_BASE_URL, OpenAi};
    let mut b = OpenAi::builder().timeout(timeout);
    let base = env_var(BASE_URL_VAR);
    if let Some(url) = &base {
        b = b.base_url(url.as_str());
    }
    if let Some(key) = env_var(API_KEY_VAR) {
        b = b.api_key(key);
    } else if base.is_none() {
        return Err(Exit::bad_input(format!(
            "set {API_KEY_VAR} (or {BASE_URL_VAR} for a server that needs no key; default {DEFAULT_BASE_URL})"
        )));
    }
    b.build().map_err(|e| Exit::bad_input(e.to_string()))
}

#[cfg(not(feature = "openai"))]
fn openai_client(_: Duration) -> Result<NoClient, Exit> {
    Err(Exit::bad_input(
        "this llm-context was built without the `openai` feature",
    ))
}

#[cfg(feature = "anthropic")]
fn anthropic_client(timeout: Duration) -> Result<llm_context::Anthropic, Exit> {
    use llm_context::anthropic::{API_KEY_VAR, Anthropic, BASE_URL_VAR};
    let mut b = Anthropic::builder().timeout(timeout);
    if let Some(url) = env_var(BASE_URL_VAR) {
        b = b.base_url(url);
    }
    let Some(key) = env_var(API_KEY_VAR) else {
        return Err(Exit::bad_input(format!("set {API_KEY_VAR}")));
    };
    b.api_key(key)
        .build()
        .map_err(|e| Exit::bad_input(e.to_string()))
}

#[cfg(not(feature = "anthropic"))]
fn anthropic_client(_: Duration) -> Result<NoClient, Exit> {
    Err(Exit::bad_input(
        "this llm-context was built without the `anthropic` feature",
    ))
}

/// Stands in for a client left out of the build; never constructed.
#[cfg(not(all(feature = "openai", feature = "anthropic")))]
#[derive(Clone)]
enum NoClient {}

#[cfg(not(all(feature = "openai", feature = "anthropic")))]
impl Service<ChatRequest> for NoClient {
    type Response = ChatResponse;
    type Error = ProviderError;
    type Future = std::future::Ready<Result<ChatResponse, ProviderError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), ProviderError>> {
        match *self {}
    }

    fn call(&mut self, _: ChatRequest) -> Self::Future {
        match *self {}
    }
}

fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn response_json(r: &ChatResponse, cost: Option<f64>) -> Value {
    json!({
        "message": r.message,
        "finish_reason": r.finish_reason,
        "usage": r.usage,
        "cost_usd": cost,
    })
}

fn error_json(err: &(dyn std::error::Error + 'static)) -> Value {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(p) = e.downcast_ref::<ProviderError>() {
            return json!({
                "error": "provider",
                "provider": p.provider.to_string(),
                "kind": p.kind.as_str(),
                "status": p.status,
                "type": p.error_type(),
                "code": p.code(),
                "message": p.message,
                "retry_after_seconds": p.retry_after.map(|d| d.as_secs_f64()),
                "request_id": p.request_id(),
            });
        }
        cur = e.source();
    }
    json!({"error": "provider", "kind": "other", "message": err.to_string()})
}
