//! `llm-context send`: one request through the whole stack to a provider.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use futures_util::StreamExt;
use llm_context::attempt::AttemptSpanLayer;
use llm_context::budget::{Budget, BudgetExceeded, BudgetLayer, rfc3339};
use llm_context::retry::RetryPolicy;
use llm_context::stream::{ChatStream, ReasoningDelta, StreamEvent, Streaming};
use llm_context::trace::GenAiSpanLayer;
use llm_context::usage::{UsageLayer, UsageMeter};
use llm_context::{
    BoxError, Catalog, ChatRequest, ChatResponse, ContextLimitError, ContextPolicyLayer,
    ProviderError, Scope, load_catalog,
};
use serde_json::{Value, json};
use tower::{Service, ServiceBuilder, ServiceExt};

use super::{
    EXIT_BUDGET, EXIT_CONTEXT_LIMIT, EXIT_PROVIDER, Exit, emit, input, limit_json, warn_line,
};

/// The exit codes, for `--help`.
pub(crate) const EXIT_CODES_HELP: &str = "Exit codes:
  0  the provider answered; {\"response\", \"report\"} on stdout (with --stream: JSON
     lines delta / reasoning / tool_call, then done with the same response and report)
  2  bad input: unreadable or invalid JSON, policy or catalog, a missing API key, or a
     --redis URL that is not valid or whose credentials the server refuses (a Redis
     that cannot be reached is not an error: the request is sent without the memo,
     with a warning on stderr)
  3  the request cannot fit the policy's allowance; nothing was sent
     ({\"error\": \"context_limit\", …} on stdout)
  4  the provider (or the network) failed after retries
     ({\"error\": \"provider\", \"kind\", \"status\", \"message\", …} on stdout; after a
     --stream began, the line {\"type\": \"error\", \"error\": {…}} and no done line)
  5  the call would cross a limit of --budget; nothing was sent
     ({\"error\": \"budget\", \"limit\", \"used\", \"requested\", \"max\", \"resets_at\"} on stdout)

Environment: OPENAI_API_KEY, OPENAI_BASE_URL (with /v1, default https://api.openai.com/v1);
ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL (default https://api.anthropic.com).";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ProviderArg {
    /// OpenAI Chat Completions or a compatible server.
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

/// Which of OpenAI's APIs `--provider openai` calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ApiArg {
    /// `POST {base}/chat/completions` (and compatible servers).
    ChatCompletions,
    /// `POST {base}/responses`, the Responses API.
    Responses,
}

#[derive(Args, Debug)]
pub(crate) struct SendArgs {
    /// Which API to call.
    #[arg(long, value_enum)]
    provider: ProviderArg,
    /// With `--provider openai`: the Chat Completions API (the default) or the Responses
    /// API. The request file is the same either way.
    #[arg(long, value_enum, value_name = "API")]
    api: Option<ApiArg>,
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
    /// (`redis://[:password@]host:port/[db]`). Requests with temperature 0 are memoized,
    /// and identical ones in flight make one provider call. A Redis that cannot be
    /// reached is skipped with a warning; refused credentials are bad input (exit 2).
    #[cfg(feature = "redis")]
    #[arg(long, value_name = "URL")]
    redis: Option<String>,
    /// A budget, TOML: any of `{calls,input_tokens,output_tokens,cost_usd}_per_{session,
    /// hour,day,month}`. The call is checked before it is sent, from its estimate and its
    /// output limit, and refused (exit 5) when it would cross one. The counters are on
    /// --redis when it is given (shared by every process on it), else this process's.
    #[arg(long, value_name = "FILE")]
    budget: Option<PathBuf>,
    /// Stream the answer: one JSON object a line as it arrives (`delta`, `reasoning`,
    /// `tool_call`, then `done` with the same `response` and `report` as without it; a
    /// failure after the stream began is an `error` line and exit 4).
    #[arg(long)]
    stream: bool,
    /// Export the call's spans (the GenAI call, each attempt, each summary call and
    /// artifact round) over OTLP/HTTP (protobuf) to this collector, e.g.
    /// `http://127.0.0.1:4318` (`/v1/traces` is added to a URL without a path). Needs the
    /// `otel` feature.
    #[arg(long, value_name = "URL")]
    pub(crate) otlp_endpoint: Option<String>,
    /// An OpenAI Chat Completions request body; `-` or nothing reads stdin.
    #[arg(value_name = "REQUEST.json")]
    request: Option<PathBuf>,
}

pub(crate) async fn run(args: SendArgs) -> Result<u8, Exit> {
    let policy = input::policy(args.policy.as_deref())?;
    let catalog = match &args.catalog {
        Some(path) => Arc::new(load_catalog(path).map_err(|e| Exit::bad_input(e.to_string()))?),
        None => Catalog::builtin(),
    };
    let (mut request, _) = input::request(args.request.as_deref())?;
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
    let timeout = Duration::from_secs(args.timeout.max(1));
    let client = Client::build(args.provider, args.api, timeout)?;
    // No file: no limit, and the layer passes every call through.
    let budget = match &args.budget {
        Some(path) => read_budget(path)?,
        None => Budget::default(),
    };
    let budget = BudgetLayer::new(&budget).with_catalog(catalog.clone());
    #[cfg(feature = "redis")]
    let (context, budget) = match &args.redis {
        Some(url) => with_redis(context, budget, url, client.upstream()).await?,
        None => (context, budget),
    };
    let meter = UsageMeter::with_catalog(catalog.clone());
    let retry = RetryPolicy::default().with_max_retries(args.max_retries);
    let stack = ServiceBuilder::new()
        .layer(GenAiSpanLayer::with_catalog(catalog.clone()))
        .layer(context)
        // Under the context layer's memo: a memo hit is never charged.
        .layer(budget)
        .layer(UsageLayer::new(meter))
        .retry(retry)
        .layer(AttemptSpanLayer);

    let stream = args.stream;
    let model = request.model.clone();
    let result = match client {
        #[cfg(feature = "openai")]
        Client::OpenAi(client) if stream => {
            streamed(stack.service(client), request, &catalog).await
        }
        #[cfg(feature = "openai")]
        Client::OpenAi(client) => stack.service(client).oneshot(request).await.map(Sent::from),
        #[cfg(feature = "openai")]
        Client::Responses(client) if stream => {
            streamed(stack.service(client), request, &catalog).await
        }
        #[cfg(feature = "openai")]
        Client::Responses(client) => stack.service(client).oneshot(request).await.map(Sent::from),
        #[cfg(feature = "anthropic")]
        Client::Anthropic(client) if stream => {
            streamed(stack.service(client), request, &catalog).await
        }
        #[cfg(feature = "anthropic")]
        Client::Anthropic(client) => stack.service(client).oneshot(request).await.map(Sent::from),
    };
    match result {
        Ok(Sent::Whole(response)) => {
            emit(&format!("{}\n", done_json(&response, &catalog, &model)), 0)
        }
        Ok(Sent::Streamed(written)) => written,
        Err(err) => failed(&*err),
    }
}

/// How a `send` ended without failing before its answer began.
enum Sent {
    /// The whole response, to print.
    Whole(Box<ChatResponse>),
    /// Streamed: the exit code, or why standard output could not be written.
    Streamed(Result<u8, Exit>),
}

impl From<ChatResponse> for Sent {
    fn from(response: ChatResponse) -> Self {
        Sent::Whole(Box::new(response))
    }
}

/// `{"response", "report"}`: what `send` prints, and what `--stream` ends with.
fn done_json(response: &ChatResponse, catalog: &Catalog, model: &str) -> Value {
    let cost = catalog.cost(model, &response.usage);
    json!({
        "response": response_json(response, cost),
        "report": serde_json::to_value(&response.report).unwrap_or_default(),
    })
}

/// The budget file at `path`.
fn read_budget(path: &std::path::Path) -> Result<Budget, Exit> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Exit::bad_input(format!("cannot read {}: {e}", path.display())))?;
    let budget: Budget =
        toml::from_str(&text).map_err(|e| Exit::bad_input(format!("{}: {e}", path.display())))?;
    budget
        .validate()
        .map_err(|e| Exit::bad_input(format!("{}: {e}", path.display())))?;
    Ok(budget)
}

/// A failure before any answer: a request that cannot fit (exit 3), one that would cross
/// its budget (exit 5), a transcript refused for its pairing (bad input), or the
/// provider's (exit 4).
fn failed(err: &(dyn std::error::Error + Send + Sync + 'static)) -> Result<u8, Exit> {
    if let Some(limit) = err.downcast_ref::<ContextLimitError>() {
        return emit(&format!("{}\n", limit_json(limit)), EXIT_CONTEXT_LIMIT);
    }
    // The layers pass the budget layer's error on as it is, as they do the context limit.
    if let Some(b) = err.downcast_ref::<BudgetExceeded>() {
        let out = json!({"error": "budget", "limit": b.limit, "used": b.used,
                         "requested": b.requested, "max": b.max,
                         "resets_at": b.resets_at.map(rfc3339)});
        return emit(&format!("{out}\n"), EXIT_BUDGET);
    }
    // A transcript refused for its pairing (`repair_pairing = false`) is bad input.
    if let Some(pairing) = err.downcast_ref::<llm_context::PairingError>() {
        return Err(Exit::bad_input(pairing.to_string()));
    }
    let code = emit(&format!("{}\n", error_json(err)), EXIT_PROVIDER)?;
    warn_line(&err.to_string());
    Ok(code)
}

/// `--stream`: the answer as JSON lines, each written (and flushed) as it arrives. A
/// reader that goes away (a broken pipe) ends the call, which closes the connection.
async fn streamed<S>(service: S, request: ChatRequest, catalog: &Catalog) -> Result<Sent, BoxError>
where
    S: Service<Streaming, Response = ChatStream, Error = BoxError>,
{
    let model = request.model.clone();
    let mut stream = service.oneshot(Streaming(request)).await?;
    let line = |v: Value| emit(&format!("{v}\n"), 0);
    let written = async {
        while let Some(item) = stream.next().await {
            match item {
                Ok(StreamEvent::Text(text)) => {
                    line(json!({"type": "delta", "text": text}))?;
                }
                Ok(StreamEvent::Reasoning {
                    delta: ReasoningDelta::Thinking(text) | ReasoningDelta::Text(text),
                    ..
                }) => {
                    line(json!({"type": "reasoning", "text": text}))?;
                }
                Ok(StreamEvent::Done(response)) => {
                    // Each call once complete: its arguments parsed.
                    for call in &response.message.tool_calls {
                        line(
                            json!({"type": "tool_call", "id": call.id, "name": call.name,
                                    "arguments": call.arguments_value()}),
                        )?;
                    }
                    let mut done = done_json(&response, catalog, &model);
                    done["type"] = json!("done");
                    return line(done);
                }
                Ok(_) => {}
                Err(err) => {
                    line(json!({"type": "error", "error": error_json(&*err)}))?;
                    warn_line(&err.to_string());
                    return Ok(EXIT_PROVIDER);
                }
            }
        }
        // A `ChatStream` ends with `Done` or an error; say so if one ever does not.
        line(
            json!({"type": "error", "error": {"error": "provider", "kind": "stream_interrupted",
                    "message": "the stream ended before the answer was complete"}}),
        )?;
        Ok(EXIT_PROVIDER)
    };
    Ok(Sent::Streamed(written.await))
}

/// The provider client a `send` calls.
enum Client {
    #[cfg(feature = "openai")]
    OpenAi(llm_context::OpenAi),
    #[cfg(feature = "openai")]
    Responses(llm_context::openai::OpenAiResponses),
    #[cfg(feature = "anthropic")]
    Anthropic(llm_context::Anthropic),
}

impl Client {
    fn build(provider: ProviderArg, api: Option<ApiArg>, timeout: Duration) -> Result<Self, Exit> {
        if api.is_some() && provider != ProviderArg::Openai {
            return Err(Exit::bad_input(
                "--api chooses one of OpenAI's APIs: it goes with --provider openai",
            ));
        }
        match provider {
            #[cfg(feature = "openai")]
            ProviderArg::Openai if api == Some(ApiArg::Responses) => {
                Ok(Self::Responses(responses_client(timeout)?))
            }
            #[cfg(feature = "openai")]
            ProviderArg::Openai => Ok(Self::OpenAi(openai_client(timeout)?)),
            #[cfg(feature = "anthropic")]
            ProviderArg::Anthropic => Ok(Self::Anthropic(anthropic_client(timeout)?)),
            #[allow(unreachable_patterns)]
            other => Err(Exit::bad_input(format!(
                "this llm-context was built without the {other:?} client"
            ))),
        }
    }

    /// Where requests go, for the memo key: the provider and its base URL. The same body
    /// sent to another provider or server is another question.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    fn upstream(&self) -> String {
        match self {
            #[cfg(feature = "openai")]
            Self::OpenAi(c) => format!("openai {}", c.base_url()),
            #[cfg(feature = "openai")]
            Self::Responses(c) => format!("openai-responses {}", c.base_url()),
            #[cfg(feature = "anthropic")]
            Self::Anthropic(c) => format!("anthropic {}", c.base_url()),
        }
    }
}

/// The stack's artifact store and memo on Redis, the memo keyed by `upstream` too.
#[cfg(feature = "redis")]
async fn with_redis(
    context: ContextPolicyLayer,
    budget: BudgetLayer,
    url: &str,
    upstream: String,
) -> Result<(ContextPolicyLayer, BudgetLayer), Exit> {
    use llm_context::memo::MemoLayer;
    use llm_context::redis::RedisStores;
    // Only what the user got wrong fails here (exit 2): a URL that is not valid, or
    // credentials the server refuses. A server that cannot be reached is an outage: the
    // stores start degraded with a warning on stderr and the request goes to the
    // provider.
    let stores = RedisStores::connect(url)
        .await
        .map_err(|e| Exit::bad_input(format!("--redis: {e}")))?;
    let budget = budget.with_store(Arc::new(stores.budgets));
    let context = context
        .with_artifact_store(Arc::new(stores.artifacts))
        .with_memo(MemoLayer::new(Arc::new(stores.memo)).upstream(upstream));
    Ok((context, budget))
}

#[cfg(feature = "openai")]
fn openai_client(timeout: Duration) -> Result<llm_context::OpenAi, Exit> {
    use llm_context::openai::{BASE_URL_VAR, DEFAULT_BASE_URL, OpenAiBuilder};
    let hint =
        format!(" (or {BASE_URL_VAR} for a server that needs no key; default {DEFAULT_BASE_URL})");
    OpenAiBuilder::from_env()
        .timeout(timeout)
        .build()
        .map_err(|e| config_error(e, &hint))
}

#[cfg(feature = "openai")]
fn responses_client(timeout: Duration) -> Result<llm_context::openai::OpenAiResponses, Exit> {
    use llm_context::openai::{BASE_URL_VAR, DEFAULT_BASE_URL, OpenAiResponsesBuilder};
    let hint =
        format!(" (or {BASE_URL_VAR} for a server that needs no key; default {DEFAULT_BASE_URL})");
    OpenAiResponsesBuilder::from_env()
        .timeout(timeout)
        .build()
        .map_err(|e| config_error(e, &hint))
}

#[cfg(feature = "anthropic")]
fn anthropic_client(timeout: Duration) -> Result<llm_context::Anthropic, Exit> {
    llm_context::anthropic::AnthropicBuilder::from_env()
        .timeout(timeout)
        .build()
        .map_err(|e| config_error(e, ""))
}

/// A client that cannot be built from the environment: bad input, saying which variable
/// to set when the key is missing.
fn config_error(e: llm_context::ConfigError, hint: &str) -> Exit {
    match e {
        llm_context::ConfigError::MissingApiKey { var } => {
            Exit::bad_input(format!("set {var}{hint}"))
        }
        e => Exit::bad_input(e.to_string()),
    }
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
