//! The cache-stable prefix: inject a frozen [`PrefixContext`] and mark where the provider
//! should cache.
//!
//! ```
//! use std::sync::Arc;
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::prefix::PrefixLayer;
//! use llm_context_layers::{CacheTtl, ChatRequest, Message, PrefixContext};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let handbook = Arc::new(PrefixContext::new("You answer questions about the handbook.")
//!     .with_grounding(vec![Message::system("handbook text ".repeat(2_000))]));
//! let model = MockModel::echo();
//! let stack = PrefixLayer::new().with_prefix(handbook.clone()).layer(model.clone());
//!
//! let transcript = vec![
//!     Message::user("Who approves leave?"),
//!     Message::assistant("Your manager."),
//!     Message::user("And expenses?"),
//! ];
//! stack.oneshot(ChatRequest::new("claude-sonnet-4-6", transcript)).await.unwrap();
//!
//! let sent = model.last_request().unwrap();
//! assert_eq!(sent.prefix.as_deref(), Some(&*handbook));      // injected
//! assert_eq!(sent.cache.prefix, Some(CacheTtl::FiveMinutes)); // after the prefix
//! assert_eq!(sent.cache.history, Some(CacheTtl::FiveMinutes)); // before "And expenses?"
//! assert_eq!(sent.cache.last, Some(CacheTtl::FiveMinutes));    // on "And expenses?"
//! assert_eq!(sent.cache.tools, None);                          // no tools to cache
//! # }
//! ```
//!
//! The layer only rewrites the request: it sets [`ChatRequest::prefix`] when the request
//! carries none, and it sets [`ChatRequest::cache`], the breakpoints *as data*. Provider
//! clients render the prefix ahead of the tail in its fixed order (system prompt,
//! grounding in order, schema block; [`PrefixContext::as_messages`]) and turn each
//! breakpoint into their own mechanism (Anthropic `cache_control`, OpenAI
//! `prompt_cache_key`).
//!
//! # Which breakpoints
//!
//! The four places, in the providers' cache order, are: after the tool definitions;
//! after the prefix (prefix plus the leading system messages of the tail); after the
//! stable history (the last message before the newest real user request); and on the
//! last block of the request. The last one *rolls*: the next call (the next tool round of
//! an agent loop, or the next turn) extends this request, finds this breakpoint's entry
//! within the provider's 20-block lookback and reads everything this call wrote, so the
//! newest turn is paid once, not again at the write price on every call. The history
//! breakpoint stays for the case where a turn adds more than 20 blocks. Each is set when
//! it is configured ([`PrefixLayer::with_breakpoints`], all four with a 5-minute TTL by
//! default), its part is not empty, and everything up to it is at least the model's
//! minimum cacheable length ([`Catalog::cache_min_tokens`], measured with the crate's
//! estimate): below that a provider silently caches nothing and the marker would only
//! waste a slot. So there are never more than four (Anthropic's limit), and configured
//! TTLs must not grow along the cache order (a 1-hour entry must come before any
//! 5-minute one).
//!
//! # Where it goes in a stack
//!
//! The prune layer counts `request.prefix` in the allowance. A prefix this layer injects
//! *inside* a pruning layer is not seen by it; put this layer outside the pruning layer
//! (or set the prefix on the request) so the prefix is counted, or use the composite
//! [`ContextPolicyLayer`](crate::ContextPolicyLayer), which does both in order.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use crate::catalog::Catalog;
use crate::model::Message;
use crate::model::PrefixContext;
use crate::model::{CacheHints, CacheTtl, ChatRequest};
use crate::policy::PolicyError;
use crate::stream::Streaming;
use crate::tokens::{estimate_message_tokens, estimate_one, estimate_tool_tokens};

/// Injects a prefix and marks cache breakpoints. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct PrefixLayer {
    prefix: Option<Arc<PrefixContext>>,
    breakpoints: CacheHints,
    catalog: Arc<Catalog>,
}

impl Default for PrefixLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl PrefixLayer {
    /// A layer that injects nothing and asks for all four breakpoints with a 5-minute
    /// TTL, with minimums from the built-in catalog.
    pub fn new() -> Self {
        Self {
            prefix: None,
            breakpoints: CacheHints::all(CacheTtl::FiveMinutes),
            catalog: Catalog::builtin(),
        }
    }

    /// Injects `prefix` into requests that carry none.
    #[must_use]
    pub fn with_prefix(mut self, prefix: Arc<PrefixContext>) -> Self {
        self.prefix = Some(prefix);
        self
    }

    /// Which breakpoints to ask for, and with which TTL. Fails when a longer TTL follows
    /// a shorter one in the cache order (tools → prefix → history → last), which
    /// Anthropic rejects.
    pub fn with_breakpoints(mut self, breakpoints: CacheHints) -> Result<Self, PolicyError> {
        if !breakpoints.ttl_order_ok() {
            return Err(PolicyError::Invalid {
                field: "breakpoints",
                reason:
                    "a 1h breakpoint may not follow a 5m one (order: tools, prefix, history, last)"
                        .into(),
            });
        }
        self.breakpoints = breakpoints;
        Ok(self)
    }

    /// Takes the models' minimum cacheable lengths from `catalog`.
    #[must_use]
    pub fn with_catalog(mut self, catalog: Arc<Catalog>) -> Self {
        self.catalog = catalog;
        self
    }

    /// The prefix injected into requests that carry none.
    pub fn prefix(&self) -> Option<&Arc<PrefixContext>> {
        self.prefix.as_ref()
    }

    /// The breakpoints asked for.
    pub fn breakpoints(&self) -> CacheHints {
        self.breakpoints
    }

    /// The request as this layer sends it: [`inject`](Self::inject), then
    /// [`mark`](Self::mark). Pure and idempotent; [`Prefix`] calls exactly this.
    pub fn prepare(&self, mut req: ChatRequest) -> ChatRequest {
        self.inject(&mut req);
        self.mark(&mut req);
        req
    }

    /// Sets the configured prefix on a request that carries none.
    ///
    /// A composite that prunes should call this *before* planning, so the planner counts
    /// the prefix, and [`mark`](Self::mark) after, so the minimums are checked on what
    /// is sent.
    pub fn inject(&self, req: &mut ChatRequest) {
        if req.prefix.is_none() {
            req.prefix = self.prefix.clone();
        }
    }

    /// Sets the request's breakpoints, replacing any it had: this layer's breakpoints
    /// whose part is present and whose cached prefix reaches the model's minimum from the
    /// catalog.
    pub fn mark(&self, req: &mut ChatRequest) {
        let min = self.catalog.cache_min_tokens(&req.model);
        req.cache = plan_breakpoints(req, self.breakpoints, min);
        req.cache.on_content_parts =
            req.cache.count() > 0 && self.catalog.takes_cache_breakpoints(&req.model);
        tracing::debug!(
            event = "cache_breakpoints",
            model = %req.model,
            tools = ?req.cache.tools,
            prefix = ?req.cache.prefix,
            history = ?req.cache.history,
            last = ?req.cache.last,
            min_cacheable = min,
            "cache breakpoints"
        );
    }
}

impl<S> Layer<S> for PrefixLayer {
    type Service = Prefix<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Prefix {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`PrefixLayer`]: a pure rewrite, so it returns the inner future.
#[derive(Clone, Debug)]
pub struct Prefix<S> {
    inner: S,
    layer: PrefixLayer,
}

impl<S> Prefix<S> {
    /// Wraps `inner` with a configured layer.
    pub fn new(inner: S, layer: PrefixLayer) -> Self {
        layer.layer(inner)
    }

    inner_accessors!(inner);
}

impl<S> Service<ChatRequest> for Prefix<S>
where
    S: Service<ChatRequest>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let req = self.layer.prepare(req);
        self.inner.call(req)
    }
}

/// A streamed call: the same rewrite, the inner stream unchanged.
impl<S> Service<Streaming> for Prefix<S>
where
    S: Service<Streaming>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        self.inner.call(Streaming(self.layer.prepare(req.0)))
    }
}

/// The breakpoints to send for `req`: those of `wanted` whose part is present and whose
/// cached prefix (everything up to the breakpoint, in the order tools → prefix →
/// history → last) is at least `min_tokens` by the crate's estimate.
pub(crate) fn plan_breakpoints(
    req: &ChatRequest,
    wanted: CacheHints,
    min_tokens: usize,
) -> CacheHints {
    let head_end = leading_system_end(&req.messages);
    let tools = estimate_tool_tokens(&req.tools);
    let prefix = req.prefix.as_ref().map_or(0, |p| p.estimated_tokens())
        + estimate_message_tokens(&req.messages[..head_end]);
    let has_prefix = req.prefix.as_ref().is_some_and(|p| !p.is_empty()) || head_end > 0;

    let mut out = CacheHints::NONE;
    let mut cumulative = tools;
    if !req.tools.is_empty() && cumulative >= min_tokens {
        out.tools = wanted.tools;
    }
    cumulative += prefix;
    if has_prefix && cumulative >= min_tokens {
        out.prefix = wanted.prefix;
    }
    // The messages a cached part must hold to reach the minimum: counted once, and only
    // until it is reached, so a long history is not measured again on every request.
    let reached = if cumulative >= min_tokens {
        Some(head_end)
    } else {
        req.messages[head_end..]
            .iter()
            .position(|m| {
                cumulative += estimate_one(m);
                cumulative >= min_tokens
            })
            .map(|i| head_end + i + 1)
    };
    if let (Some(end), Some(r)) = (stable_history_end(&req.messages), reached)
        && r <= end
    {
        out.history = wanted.history;
    }
    if req.messages.len() > head_end && reached.is_some() {
        out.last = wanted.last;
    }
    out
}

pub use crate::model::leading_system_end;

/// The end (exclusive) of the stable history: the index of the newest real user request,
/// when at least one message after the leading system messages comes before it. The
/// history breakpoint goes on the message just before that index.
pub fn stable_history_end(messages: &[Message]) -> Option<usize> {
    let head_end = leading_system_end(messages);
    let newest = messages.iter().rposition(Message::is_user_request)?;
    (newest > head_end).then_some(newest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::MockModel;
    use crate::model::ChatResponse;
    use crate::model::ToolSpec;
    use serde_json::json;
    use tower::ServiceExt;
    use tower_test::{assert_request_eq, mock};

    fn big(n_chars: usize) -> String {
        "x".repeat(n_chars)
    }

    fn chat() -> Vec<Message> {
        vec![
            Message::user("q1"),
            Message::assistant("a1"),
            Message::user("q2"),
        ]
    }

    #[tokio::test]
    async fn rewrites_and_passes_readiness_and_errors() {
        let prefix = Arc::new(PrefixContext::new(big(20_000)));
        let layer = PrefixLayer::new().with_prefix(prefix.clone());
        let (mut svc, mut handle) = mock::spawn_layer::<ChatRequest, ChatResponse, _>(layer);

        handle.allow(0);
        assert!(svc.poll_ready().is_pending());
        handle.allow(2);
        assert!(svc.poll_ready().is_ready());

        let req = ChatRequest::new("claude-sonnet-4-5", chat());
        let response = svc.call(req.clone());
        let mut expected = req.clone().with_prefix(prefix.clone());
        expected.cache = CacheHints::NONE
            .with_prefix(Some(CacheTtl::FiveMinutes))
            .with_history(Some(CacheTtl::FiveMinutes))
            .with_last(Some(CacheTtl::FiveMinutes));
        assert_request_eq!(handle, expected)
            .send_response(ChatResponse::new(Message::assistant("ok")));
        assert_eq!(response.await.unwrap().message.text(), "ok");

        assert!(svc.poll_ready().is_ready());
        let response = svc.call(req);
        let (_, send) = handle.next_request().await.unwrap();
        send.send_error(crate::mock::MockError("boom".into()));
        let err = response.await.unwrap_err();
        assert_eq!(err.to_string(), "mock model: boom");
    }

    #[test]
    fn a_request_keeps_its_own_prefix() {
        let mine = Arc::new(PrefixContext::new("mine"));
        let layer = PrefixLayer::new().with_prefix(Arc::new(PrefixContext::new("configured")));
        let out = layer.prepare(ChatRequest::new("m", chat()).with_prefix(mine.clone()));
        assert!(Arc::ptr_eq(out.prefix.as_ref().unwrap(), &mine));
    }

    #[test]
    fn nothing_below_the_minimum() {
        // claude-haiku-4-5 caches from 4,096 tokens; a ~2,500-token prefix is too short,
        // a ~5,000-token one is not.
        let layer = PrefixLayer::new();
        let short = ChatRequest::new("claude-haiku-4-5", chat())
            .with_prefix(Arc::new(PrefixContext::new(big(10_000))));
        assert_eq!(layer.prepare(short).cache, CacheHints::NONE);
        let long = ChatRequest::new("claude-haiku-4-5", chat())
            .with_prefix(Arc::new(PrefixContext::new(big(20_000))));
        let hints = layer.prepare(long).cache;
        assert_eq!(hints.prefix, Some(CacheTtl::FiveMinutes));
        assert_eq!(hints.history, Some(CacheTtl::FiveMinutes));
    }

    #[test]
    fn history_counts_towards_the_minimum() {
        // A short prefix, but the history before the newest request takes the cached
        // part over sonnet-4-5's 1,024: only the history breakpoint is worth a slot.
        let mut messages = vec![Message::system("be brief")];
        messages.push(Message::user(big(8_000)));
        messages.push(Message::assistant("ok"));
        messages.push(Message::user("next"));
        let hints = PrefixLayer::new()
            .prepare(ChatRequest::new("claude-sonnet-4-5", messages))
            .cache;
        assert_eq!(hints.prefix, None);
        assert_eq!(hints.history, Some(CacheTtl::FiveMinutes));
    }

    #[test]
    fn tools_breakpoint_needs_tools() {
        let tool = ToolSpec::new("search", big(8_000), json!({"type": "object"}));
        let req = ChatRequest::new("gpt-5.4", chat()).with_tools(vec![tool]);
        let hints = PrefixLayer::new().prepare(req).cache;
        assert_eq!(hints.tools, Some(CacheTtl::FiveMinutes));
        // No prefix and no leading system message: nothing to mark there.
        assert_eq!(hints.prefix, None);
    }

    #[test]
    fn no_history_breakpoint_on_the_first_turn() {
        let req = ChatRequest::new("claude-opus-5", vec![Message::user(big(8_000))])
            .with_prefix(Arc::new(PrefixContext::new(big(8_000))));
        let hints = PrefixLayer::new().prepare(req).cache;
        assert_eq!(hints.prefix, Some(CacheTtl::FiveMinutes));
        assert_eq!(hints.history, None);
    }

    #[test]
    fn tool_results_do_not_open_a_turn() {
        // The newest real request is the first message: tool rounds after it are the
        // current turn, so there is no stable history yet.
        let messages = vec![
            Message::user("go"),
            Message::assistant_tool_calls("", vec![crate::ToolCall::new("c1", "f", json!({}))]),
            Message::tool_result("c1", "f", big(10_000)),
        ];
        assert_eq!(stable_history_end(&messages), None);
    }

    #[test]
    fn the_last_breakpoint_rolls_with_a_tool_loop() {
        // The first turn has no stable history, but its tool rounds are cached as they
        // are sent: each round's request ends with the previous round plus one result.
        let mut messages = vec![Message::user("go")];
        for round in 0..3 {
            let id = format!("c{round}");
            messages.push(Message::assistant_tool_calls(
                "",
                vec![crate::ToolCall::new(&id, "f", json!({}))],
            ));
            messages.push(Message::tool_result(&id, "f", big(3_000)));
            let req = ChatRequest::new("claude-sonnet-4-6", messages.clone())
                .with_prefix(Arc::new(PrefixContext::new(big(9_000))));
            let hints = PrefixLayer::new().prepare(req).cache;
            assert_eq!(hints.history, None, "round {round}");
            assert_eq!(hints.last, Some(CacheTtl::FiveMinutes), "round {round}");
            assert_eq!(hints.count(), 2);
        }
    }

    #[test]
    fn the_last_breakpoint_needs_the_minimum_too() {
        // claude-haiku-4-5 caches from 4,096 tokens: a ~3,000-token request has no
        // breakpoint at all; at ~5,000 only the whole request reaches it.
        let short = ChatRequest::new("claude-haiku-4-5", vec![Message::user(big(12_000))]);
        assert_eq!(PrefixLayer::new().prepare(short).cache, CacheHints::NONE);
        let long = ChatRequest::new(
            "claude-haiku-4-5",
            vec![Message::user(big(8_000)), Message::assistant(big(12_000))],
        );
        assert_eq!(
            PrefixLayer::new().prepare(long).cache,
            CacheHints::NONE.with_last(Some(CacheTtl::FiveMinutes))
        );
    }

    #[test]
    fn never_more_than_four() {
        let tool = ToolSpec::new("search", big(10_000), json!({"type": "object"}));
        let req = ChatRequest::new("claude-sonnet-4-6", chat())
            .with_prefix(Arc::new(PrefixContext::new(big(9_000))))
            .with_tools(vec![tool]);
        let hints = PrefixLayer::new().prepare(req).cache;
        assert_eq!(hints, CacheHints::all(CacheTtl::FiveMinutes));
        assert_eq!(hints.count(), 4);
    }

    #[test]
    fn ttl_order_is_checked() {
        let bad = CacheHints::NONE
            .with_prefix(Some(CacheTtl::FiveMinutes))
            .with_history(Some(CacheTtl::OneHour));
        let err = PrefixLayer::new().with_breakpoints(bad).unwrap_err();
        assert_eq!(err.field(), Some("breakpoints"));
        let good = CacheHints::NONE
            .with_tools(Some(CacheTtl::OneHour))
            .with_prefix(Some(CacheTtl::OneHour))
            .with_history(Some(CacheTtl::FiveMinutes))
            .with_last(Some(CacheTtl::FiveMinutes));
        assert!(PrefixLayer::new().with_breakpoints(good).is_ok());
        let bad = good.with_last(Some(CacheTtl::OneHour));
        assert!(PrefixLayer::new().with_breakpoints(bad).is_err());
    }

    #[test]
    fn idempotent() {
        let layer = PrefixLayer::new().with_prefix(Arc::new(PrefixContext::new(big(9_000))));
        let once = layer.prepare(ChatRequest::new("claude-sonnet-4-6", chat()));
        let twice = layer.prepare(once.clone());
        assert_eq!(once, twice);
    }

    #[tokio::test]
    async fn works_with_the_mock_model() {
        let model = MockModel::echo();
        let svc = PrefixLayer::new()
            .with_prefix(Arc::new(PrefixContext::new("p")))
            .layer(model.clone());
        svc.oneshot(ChatRequest::new("m", chat())).await.unwrap();
        assert_eq!(
            model
                .last_request()
                .unwrap()
                .prefix
                .unwrap()
                .system_prompt(),
            Some("p")
        );
    }
}
