//! One `tracing` span per call, with the OpenTelemetry GenAI attributes and what the stack
//! did to the request.
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::trace::GenAiSpanLayer;
//! use llm_context_layers::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // Outermost, so the span covers preparation and every call the stack makes inside it.
//! let agent = ServiceBuilder::new()
//!     .layer(GenAiSpanLayer::new())
//!     .layer(ContextPolicyLayer::new(ContextPolicy::default()).unwrap())
//!     .service(MockModel::echo());
//! let reply = agent
//!     .oneshot(ChatRequest::new("claude-sonnet-4-6", vec![Message::user("hi")]))
//!     .await
//!     .unwrap();
//! # let _ = reply; }
//! ```
//!
//! The span is named `chat {model}` (the `otel.name` field, which `tracing-opentelemetry`
//! takes as the span's name) at `INFO` level, target `llm_context::gen_ai`, and carries,
//! following the GenAI semantic conventions as of semantic-conventions v1.42.0 (schema
//! `gen-ai/1.42.0`, status Development):
//!
//! - `gen_ai.operation.name` (`chat`), `gen_ai.provider.name` (`openai` / `anthropic`,
//!   from the catalog; absent for a model it does not know), `gen_ai.request.model`;
//! - once answered: `gen_ai.response.model`, `gen_ai.response.id` (when the provider
//!   sent them), `gen_ai.response.finish_reasons`, `gen_ai.usage.input_tokens` (every
//!   prompt token, cached ones included, as the conventions ask),
//!   `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens`,
//!   `gen_ai.usage.cache_creation.input_tokens`;
//! - the report: `llm_context.before_tokens`, `llm_context.after_tokens`,
//!   `llm_context.removed_messages`, `llm_context.cleared`, `llm_context.offloaded`,
//!   `llm_context.cut_moved`, `llm_context.memo_hit`;
//! - on failure, `error.type` (the error's kind, never its message).
//!
//! Child spans, all under the call's: `llm_context.summary` for each summary call of the
//! summarize layer (`llm_context.folded_messages`), `llm_context.artifact_round` for
//! each round that answers the model's artifact reads (`llm_context.round`; a streamed
//! round lasts until its stream ends), and, with
//! `llm_context::attempt::AttemptSpanLayer` under a retry layer, `gen_ai.attempt` for
//! each attempt (`error.type` when it failed).
//!
//! No prompt or completion content is recorded unless asked for:
//! [`GenAiSpanLayer::with_content_capture`] adds `gen_ai.input.messages` and
//! `gen_ai.output.messages`, cut to a size cap. With no subscriber listening, the span is
//! disabled and recording is skipped: the cost is one check of the callsite.
//!
//! Every store call the stack bounds by a timeout (the memo's `get`, `put`, `claim`,
//! `renew` and `release`; the proxy's load of a session's cuts) is an `llm_context.store`
//! span of its own, with `error.type` when it failed or timed out: see [`store_call`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tower::{Layer, Service};
use tracing::Span;
use tracing::field::Empty;
use tracing::instrument::{Instrument, Instrumented};

use crate::BoxError;
use crate::catalog::{Catalog, Provider};
use crate::model::{ChatRequest, ChatResponse, FinishReason};
use crate::stream::{ChatStream, StreamFuture, Streaming};

mod content;
mod store;

pub use store::store_call;

/// Opens a GenAI span around each call. See the [module documentation](self).
#[derive(Clone, Debug)]
pub struct GenAiSpanLayer {
    catalog: Arc<Catalog>,
    /// The size cap of captured content, in bytes; `None`: no content.
    content: Option<usize>,
}

impl Default for GenAiSpanLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl GenAiSpanLayer {
    /// A layer naming providers from the built-in catalog.
    pub fn new() -> Self {
        Self::with_catalog(Catalog::builtin())
    }

    /// A layer naming providers from `catalog`.
    pub fn with_catalog(catalog: Arc<Catalog>) -> Self {
        Self {
            catalog,
            content: None,
        }
    }

    /// Records the call's messages too, opt-in: `gen_ai.input.messages` (the request
    /// as this layer receives it; outermost, that is the agent's, before the stack
    /// prepares it) and `gen_ai.output.messages` (the answer), as JSON in the
    /// conventions' shape, each cut to at most `max_bytes` bytes
    /// (`llm_context.content_truncated` is then `true`). Prompts carry what users and
    /// tools said: turn this on only where the traces may hold it.
    #[must_use]
    pub fn with_content_capture(mut self, max_bytes: usize) -> Self {
        self.content = Some(max_bytes);
        self
    }
}

impl<S> Layer<S> for GenAiSpanLayer {
    type Service = GenAiSpan<S>;

    fn layer(&self, inner: S) -> GenAiSpan<S> {
        GenAiSpan {
            inner,
            catalog: self.catalog.clone(),
            content: self.content,
        }
    }
}

/// The service of [`GenAiSpanLayer`].
#[derive(Clone, Debug)]
pub struct GenAiSpan<S> {
    inner: S,
    catalog: Arc<Catalog>,
    content: Option<usize>,
}

/// The span of a call of `req`, its answer's fields still empty.
fn span_for(req: &ChatRequest, catalog: &Catalog, content: Option<usize>) -> Span {
    let span = tracing::info_span!(
        target: "llm_context::gen_ai",
        "gen_ai.chat",
        otel.name = Empty,
        // A call to a remote service, as the conventions ask of an inference span.
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = Empty,
        gen_ai.request.model = %req.model,
        gen_ai.response.model = Empty,
        gen_ai.response.id = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        llm_context.before_tokens = Empty,
        llm_context.after_tokens = Empty,
        llm_context.removed_messages = Empty,
        llm_context.cleared = Empty,
        llm_context.offloaded = Empty,
        llm_context.cut_moved = Empty,
        llm_context.memo_hit = Empty,
        error.type = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        llm_context.content_truncated = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    span.record("otel.name", format!("chat {}", req.model));
    if let Some(cap) = content {
        record_content(
            &span,
            "gen_ai.input.messages",
            &content::input_messages(&req.messages),
            cap,
        );
    }
    let provider = catalog.get(&req.model).and_then(|m| m.provider);
    if let Some(p) = provider {
        span.record(
            "gen_ai.provider.name",
            match p {
                Provider::OpenAi => "openai",
                Provider::Anthropic => "anthropic",
            },
        );
    }
    span
}

fn finish_reason(f: &FinishReason) -> &str {
    match f {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other(other) => other,
    }
}

/// Records captured content on `span`, cut to `cap` bytes.
fn record_content(span: &Span, field: &'static str, value: &serde_json::Value, cap: usize) {
    let (text, cut) = content::capped(value, cap);
    span.record(field, text.as_str());
    if cut {
        span.record("llm_context.content_truncated", true);
    }
}

/// Records the answer (or the failure) on `span`, and the answer's content when it is
/// captured (`content`: the cap).
fn record(span: &Span, result: Result<&ChatResponse, &BoxError>, content: Option<usize>) {
    if span.is_disabled() {
        return;
    }
    let response = match result {
        Ok(r) => r,
        Err(e) => {
            failed(span, error_type(e));
            return;
        }
    };
    for (field, name) in [
        ("model", "gen_ai.response.model"),
        ("id", "gen_ai.response.id"),
    ] {
        if let Some(v) = response.provider_fields.get(field).and_then(|v| v.as_str()) {
            span.record(name, v);
        }
    }
    // An array of one: the stack asks for one choice.
    span.record(
        "gen_ai.response.finish_reasons",
        format!("[\"{}\"]", finish_reason(&response.finish_reason)).as_str(),
    );
    let u = &response.usage;
    span.record(
        "gen_ai.usage.input_tokens",
        int(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens),
    );
    span.record("gen_ai.usage.output_tokens", int(u.output_tokens));
    span.record(
        "gen_ai.usage.cache_read.input_tokens",
        int(u.cache_read_tokens),
    );
    span.record(
        "gen_ai.usage.cache_creation.input_tokens",
        int(u.cache_write_tokens),
    );
    let r = &response.report;
    span.record("llm_context.before_tokens", int(r.before_tokens));
    span.record("llm_context.after_tokens", int(r.after_tokens));
    span.record("llm_context.removed_messages", int(r.removed_messages));
    span.record("llm_context.cleared", int(r.cleared_results));
    span.record("llm_context.offloaded", int(r.offloaded_results));
    span.record("llm_context.cut_moved", r.cut_moved);
    span.record("llm_context.memo_hit", r.memo_hit);
    if let Some(cap) = content {
        let finish = finish_reason(&response.finish_reason);
        let output = content::output_messages(&response.message, finish);
        record_content(span, "gen_ai.output.messages", &output, cap);
    }
}

/// Marks `span` failed: `error.type` (low in cardinality: a kind, never a message) and
/// the OpenTelemetry status `ERROR`, which `tracing-opentelemetry` reads from
/// `otel.status_code`. Every span of the stack that can fail declares both fields.
pub fn failed(span: &Span, error_type: &str) {
    span.record("error.type", error_type);
    span.record("otel.status_code", "ERROR");
}

/// A count as `i64`: `tracing-opentelemetry` exports an `i64` as an integer attribute and
/// a `u64` as its debug text, and the conventions' token counts are integers.
pub(crate) fn int<T: TryInto<i64>>(n: T) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// The kind of a failure, low in cardinality as `error.type` asks: the error's type name
/// without its path.
fn error_type(e: &BoxError) -> &'static str {
    if e.downcast_ref::<crate::ContextLimitError>().is_some() {
        "context_limit"
    } else if e.downcast_ref::<crate::budget::BudgetExceeded>().is_some() {
        "budget_exceeded"
    } else {
        "_OTHER"
    }
}

impl<S> Service<ChatRequest> for GenAiSpan<S>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = SpanFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let span = span_for(&req, &self.catalog, self.content);
        // The inner call runs in the span too: what it does before its future (the
        // synchronous preparation) is inside it.
        let inner = span.in_scope(|| self.inner.call(req));
        SpanFuture {
            inner: inner.instrument(span),
            content: self.content,
        }
    }
}

/// A streamed call: the span lasts to the stream's final event, where the answer is
/// recorded.
impl<S> Service<Streaming> for GenAiSpan<S>
where
    S: Service<Streaming, Response = ChatStream>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = ChatStream;
    type Error = BoxError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let span = span_for(&req.0, &self.catalog, self.content);
        let call = span.in_scope(|| self.inner.call(req));
        let traced = span.clone();
        let content = self.content;
        Box::pin(
            async move {
                match call.await.map_err(Into::into) {
                    Ok(stream) => Ok(stream.map_response(move |response| {
                        record(&traced, Ok(response), content);
                    })),
                    Err(e) => {
                        record(&traced, Err(&e), content);
                        Err(e)
                    }
                }
            }
            .instrument(span),
        )
    }
}

pin_project! {
    /// The response future of [`GenAiSpan`]: the inner call in its span, recorded when it
    /// ends.
    pub struct SpanFuture<F> {
        #[pin]
        inner: Instrumented<F>,
        content: Option<usize>,
    }
}

impl<F> std::fmt::Debug for SpanFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanFuture").finish_non_exhaustive()
    }
}

impl<F, E> Future for SpanFuture<F>
where
    F: Future<Output = Result<ChatResponse, E>>,
    E: Into<BoxError>,
{
    type Output = Result<ChatResponse, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let result = ready!(this.inner.as_mut().poll(cx)).map_err(Into::into);
        record(this.inner.span(), result.as_ref(), *this.content);
        Poll::Ready(result)
    }
}
