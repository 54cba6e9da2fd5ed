//! Requests and responses: what an agent sends through the stack and what comes back.
//!
//! ```
//! use std::sync::Arc;
//! use llm_context_layers::{ChatRequest, Message, PrefixContext, Scope};
//!
//! let request = ChatRequest::new("gpt-5.4", vec![Message::user("What changed?")])
//!     .with_prefix(Arc::new(PrefixContext::new("You are terse.")))
//!     .with_scope(Scope::org("acme"))
//!     .with_session("ticket-4412")
//!     .with_temperature(0.0);
//! assert_eq!(request.session, "ticket-4412");
//! assert_eq!(request.params.temperature, Some(0.0));
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::message::{Message, ToolSpec};
use super::params::GenerationParams;
use super::prefix_context::PrefixContext;
use super::report::PreparationReport;
use super::scope::Scope;

/// The session used when a request names none.
pub const DEFAULT_SESSION: &str = "default";

/// How long a provider should keep a cached prefix.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[non_exhaustive]
pub enum CacheTtl {
    /// Five minutes (Anthropic's default, refreshed on every hit).
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// One hour.
    #[serde(rename = "1h")]
    OneHour,
}

/// Where the provider should cache, as data: no message positions, so nothing breaks
/// when a layer drops or rewrites messages. Provider clients turn each hint into their own
/// mechanism (Anthropic `cache_control` on the last block of that part; OpenAI caches
/// automatically and uses `prompt_cache_key`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct CacheHints {
    /// A breakpoint after the tool definitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<CacheTtl>,
    /// A breakpoint after the prefix (system prompt, grounding, schema block, and the
    /// leading system messages of the tail).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<CacheTtl>,
    /// A breakpoint after the stable part of the history: the last message before the
    /// newest real user request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<CacheTtl>,
    /// A rolling breakpoint on the last block of the request, so the next call (the next
    /// tool round, or the next turn) reads everything this one wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<CacheTtl>,
    /// Whether the model takes explicit breakpoints on content parts (OpenAI's
    /// `prompt_cache_breakpoint`, GPT-5.6 and later; see
    /// [`Catalog::takes_cache_breakpoints`](crate::Catalog::takes_cache_breakpoints)): the
    /// OpenAI clients place the breakpoints above only then. Anthropic's models always take
    /// theirs (`cache_control`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub on_content_parts: bool,
}

impl CacheHints {
    /// No breakpoint.
    pub const NONE: CacheHints = CacheHints {
        tools: None,
        prefix: None,
        history: None,
        last: None,
        on_content_parts: false,
    };

    /// A breakpoint with `ttl` at each of the four places: Anthropic's limit.
    pub fn all(ttl: CacheTtl) -> Self {
        Self {
            tools: Some(ttl),
            prefix: Some(ttl),
            history: Some(ttl),
            last: Some(ttl),
            on_content_parts: false,
        }
    }

    /// Sets the breakpoint after the tool definitions.
    #[must_use]
    pub fn with_tools(mut self, ttl: Option<CacheTtl>) -> Self {
        self.tools = ttl;
        self
    }

    /// Sets the breakpoint after the prefix.
    #[must_use]
    pub fn with_prefix(mut self, ttl: Option<CacheTtl>) -> Self {
        self.prefix = ttl;
        self
    }

    /// Sets the breakpoint after the stable history.
    #[must_use]
    pub fn with_history(mut self, ttl: Option<CacheTtl>) -> Self {
        self.history = ttl;
        self
    }

    /// Sets the rolling breakpoint on the last block of the request.
    #[must_use]
    pub fn with_last(mut self, ttl: Option<CacheTtl>) -> Self {
        self.last = ttl;
        self
    }

    /// The breakpoints in the providers' cache order (tools → prefix → history → last),
    /// absent ones included.
    pub fn in_order(&self) -> [Option<CacheTtl>; 4] {
        [self.tools, self.prefix, self.history, self.last]
    }

    /// How many breakpoints are asked for.
    pub fn count(&self) -> usize {
        self.in_order().iter().flatten().count()
    }

    /// Whether a longer TTL never follows a shorter one in the cache order, as Anthropic
    /// requires ("a 1-hour cache entry must appear before any 5-minute cache entries").
    pub fn ttl_order_ok(&self) -> bool {
        let mut shortest = CacheTtl::OneHour;
        for ttl in self.in_order().into_iter().flatten() {
            if ttl > shortest {
                return false;
            }
            shortest = ttl;
        }
        true
    }

    /// Whether no breakpoint is asked for.
    pub fn is_empty(&self) -> bool {
        self.in_order().iter().all(Option::is_none)
    }
}

/// The prefix of [`ChatRequest::inferred_session`]'s ids.
pub const INFERRED_SESSION_PREFIX: &str = "inferred-";

impl ChatRequest {
    /// Whether the request names no session of its own ([`DEFAULT_SESSION`]).
    pub fn has_default_session(&self) -> bool {
        self.session == DEFAULT_SESSION
    }

    /// A session id for a request that names none, from its stable head: the prefix,
    /// the leading system messages and the first real user request (what an agent sends
    /// unchanged on every call of one conversation). Two conversations of one tenant with
    /// different heads get different ids, so they never share a cut, a cleared region or
    /// artifacts; the same conversation gets the same id on every call, on every replica.
    ///
    /// ```
    /// use llm_context_layers::{ChatRequest, Message};
    ///
    /// let first = vec![Message::system("Be brief."), Message::user("Plan the trip")];
    /// let mut later = first.clone();
    /// later.extend([Message::assistant("Where to?"), Message::user("Oslo")]);
    /// let a = ChatRequest::new("m", first).inferred_session();
    /// let b = ChatRequest::new("m", later).inferred_session();
    /// let other = ChatRequest::new("m", vec![Message::user("Fix the build")]);
    /// assert_eq!(a, b);
    /// assert_ne!(a, other.inferred_session());
    /// assert!(a.starts_with("inferred-"));
    /// ```
    pub fn inferred_session(&self) -> String {
        let mut h = crate::hash::StableHasher::new("llm-context/session/v1");
        self.hash_head(&mut h);
        if let Some(first) = self.messages.iter().find(|m| m.is_user_request()) {
            h.message(first);
        }
        format!("{INFERRED_SESSION_PREFIX}{}", &h.finish_hex()[..24])
    }

    /// Sets the session to [`inferred_session`](Self::inferred_session) when the request
    /// names none; returns whether it did. The layers that keep per-session state call
    /// this first, so every layer of a stack agrees on the session.
    pub fn infer_session(&mut self) -> bool {
        if !self.has_default_session() {
            return false;
        }
        self.session = self.inferred_session();
        true
    }

    /// A stable hash of what a provider caches first and a session never changes: the
    /// tools, the prefix and the leading system messages. The OpenAI client sends it as
    /// `prompt_cache_key` when the caller sets none, so requests with the same head are
    /// routed to the same cache.
    pub fn stable_head_key(&self) -> String {
        let mut h = crate::hash::StableHasher::new("llm-context/head/v1");
        h.tools(&self.tools);
        self.hash_head(&mut h);
        h.finish_hex()[..32].to_owned()
    }

    fn hash_head(&self, h: &mut crate::hash::StableHasher) {
        if let Some(prefix) = &self.prefix {
            prefix.hash_into(h);
        }
        h.u64(u64::MAX);
        let head_end = super::message::leading_system_end(&self.messages);
        h.messages(&self.messages[..head_end]);
    }
}

/// Whether a request may be answered from the memo (see [`memo`](crate::memo)).
///
/// This is not a provider field: it is never sent to the model, and it is not part of the
/// memo key, so a request that opts in and one that relies on the default share an entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum MemoHint {
    /// The layer's predicate decides (by default: memoize when `temperature` is 0).
    #[default]
    Default,
    /// Opt in: memoize even without `temperature` 0, unless the predicate refuses.
    Always,
    /// Opt out: neither read nor write the memo, whatever the predicate says.
    Never,
}

impl MemoHint {
    /// Whether this is [`MemoHint::Default`].
    pub fn is_default(&self) -> bool {
        *self == MemoHint::Default
    }
}

/// A provider-neutral chat request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatRequest {
    /// The model id.
    pub model: String,
    /// The frozen, cache-stable head (system prompt, grounding, schema block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<Arc<PrefixContext>>,
    /// The transcript tail.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Generation parameters.
    #[serde(default)]
    pub params: GenerationParams,
    /// The tenant.
    #[serde(default)]
    pub scope: Scope,
    /// The conversation id; artifacts and cuts are kept per (scope, session).
    #[serde(default = "default_session")]
    pub session: String,
    /// Prompt-cache breakpoints, as data.
    #[serde(default, skip_serializing_if = "CacheHints::is_empty")]
    pub cache: CacheHints,
    /// Whether this request may be answered from (and stored in) the memo.
    #[serde(default, skip_serializing_if = "MemoHint::is_default")]
    pub memo: MemoHint,
}

fn default_session() -> String {
    DEFAULT_SESSION.to_owned()
}

impl ChatRequest {
    /// A request for `model` with a transcript, in the shared scope and default session.
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        Self {
            model: model.into(),
            prefix: None,
            messages,
            tools: Vec::new(),
            params: GenerationParams::default(),
            scope: Scope::default(),
            session: default_session(),
            cache: CacheHints::default(),
            memo: MemoHint::Default,
        }
    }

    /// Sets the prefix.
    #[must_use]
    pub fn with_prefix(mut self, prefix: Arc<PrefixContext>) -> Self {
        self.prefix = Some(prefix);
        self
    }

    /// Sets the tools.
    #[must_use]
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the scope.
    #[must_use]
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Sets the session.
    #[must_use]
    pub fn with_session(mut self, session: impl Into<String>) -> Self {
        self.session = session.into();
        self
    }

    /// Sets the temperature.
    #[must_use]
    pub fn with_temperature(mut self, t: f64) -> Self {
        self.params.temperature = Some(t);
        self
    }

    /// Sets the generation parameters.
    #[must_use]
    pub fn with_params(mut self, params: GenerationParams) -> Self {
        self.params = params;
        self
    }

    /// Sets whether the memo may answer this request.
    #[must_use]
    pub fn with_memo(mut self, hint: MemoHint) -> Self {
        self.memo = hint;
        self
    }

    /// A request like this one (model, prefix, tools, parameters, scope, session and
    /// hints) carrying `messages` instead of its own, which are not copied.
    pub(crate) fn envelope(&self, messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: self.model.clone(),
            prefix: self.prefix.clone(),
            messages,
            tools: self.tools.clone(),
            params: self.params.clone(),
            scope: self.scope.clone(),
            session: self.session.clone(),
            cache: self.cache,
            memo: self.memo,
        }
    }
}

/// Token usage, normalised across providers.
///
/// `input_tokens` is the *uncached* part of the prompt: the whole prompt is
/// `input_tokens + cache_read_tokens + cache_write_tokens` (Anthropic's convention;
/// OpenAI's `prompt_tokens` is converted on the way in). `cache_write_1h_tokens` is the
/// part of `cache_write_tokens` written with a one-hour TTL, which Anthropic bills at a
/// higher rate; it is never added to the total a second time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Usage {
    /// Prompt tokens read fresh (neither read from nor written to the cache).
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache (any TTL).
    pub cache_write_tokens: u64,
    /// Of `cache_write_tokens`, those written with a one-hour TTL (0 when the provider
    /// does not say).
    #[serde(skip_serializing_if = "is_zero")]
    pub cache_write_1h_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// A usage record.
    pub fn new(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Self {
        Self {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: cache_read,
            cache_write_tokens: cache_write,
            cache_write_1h_tokens: 0,
        }
    }

    /// Sets how many of the cache writes used a one-hour TTL (clamped to
    /// `cache_write_tokens`).
    #[must_use]
    pub fn with_cache_write_1h(mut self, tokens: u64) -> Self {
        self.cache_write_1h_tokens = tokens.min(self.cache_write_tokens);
        self
    }

    /// The whole prompt: fresh + cache reads + cache writes.
    pub fn prompt_tokens(&self) -> u64 {
        // Figures come from a server: saturate rather than overflow (a panic in debug).
        self.input_tokens
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Self) {
        // Totals of server-sent figures saturate rather than overflow.
        self.input_tokens = self.input_tokens.saturating_add(o.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(o.output_tokens);
        self.cache_read_tokens = self.cache_read_tokens.saturating_add(o.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.saturating_add(o.cache_write_tokens);
        self.cache_write_1h_tokens = self
            .cache_write_1h_tokens
            .saturating_add(o.cache_write_1h_tokens);
    }
}

/// Why the model stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// A natural end.
    #[default]
    Stop,
    /// The output limit was reached.
    Length,
    /// The model called tools.
    ToolCalls,
    /// Content was filtered.
    ContentFilter,
    /// Anything else the provider said.
    Other(String),
}

/// A provider-neutral response.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChatResponse {
    /// The assistant's message.
    pub message: Message,
    /// Token usage.
    #[serde(default)]
    pub usage: Usage,
    /// Why the model stopped.
    #[serde(default)]
    pub finish_reason: FinishReason,
    /// What the stack did to the request.
    #[serde(default)]
    pub report: PreparationReport,
    /// The provider's top-level response fields the neutral response does not model
    /// (`id`, `model`, `system_fingerprint`, `service_tier`, a field newer than the
    /// client), as sent; empty when no provider answered (the mock model).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provider_fields: BTreeMap<String, Value>,
    /// The provider's answer as it came, kept by a client for a relay of the same format
    /// (a proxy answers a caller with it, unchanged but for what the stack summed).
    /// Opaque to the layers; not serialized (a memo entry holds the neutral response),
    /// not compared.
    #[serde(skip)]
    pub origin: Option<crate::model::Origin>,
}

impl ChatResponse {
    /// A response carrying `message`, with the finish reason implied by its tool calls.
    pub fn new(message: Message) -> Self {
        let finish_reason = if message.has_tool_calls() {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        };
        Self {
            message,
            usage: Usage::default(),
            finish_reason,
            report: PreparationReport::default(),
            provider_fields: BTreeMap::new(),
            origin: None,
        }
    }

    /// Keeps the provider's answer as it came: see [`origin`](Self::origin).
    #[must_use]
    pub fn with_origin(mut self, origin: crate::model::Origin) -> Self {
        self.origin = Some(origin);
        self
    }

    /// Sets the provider's unmodelled fields.
    #[must_use]
    pub fn with_provider_fields(mut self, fields: BTreeMap<String, Value>) -> Self {
        self.provider_fields = fields;
        self
    }

    /// Sets the usage.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = usage;
        self
    }

    /// Sets the finish reason.
    #[must_use]
    pub fn with_finish_reason(mut self, reason: FinishReason) -> Self {
        self.finish_reason = reason;
        self
    }
}

/// Gives a request that names no session the one its stable head implies
/// ([`ChatRequest::inferred_session`]), before anything reads a store with it: otherwise
/// every conversation without an id would share one session's cut, cleared region and
/// artifacts. An outer layer that keeps per-session state (summarize) calls it too, and
/// hands the session on, so both agree even after it folded the head away.
pub(crate) fn infer_session(mut req: ChatRequest) -> ChatRequest {
    if req.infer_session() {
        tracing::debug!(
            event = "session_inferred",
            scope = %req.scope.key(),
            session = %req.session,
            "the request names no session: one is inferred from its stable head"
        );
    }
    req
}

#[cfg(test)]
mod tests {
    use super::Usage;

    #[test]
    fn usage_figures_at_the_top_of_u64_saturate() {
        // A server can send any figure: adding them overflowed (a panic in debug builds).
        let huge = Usage::new(u64::MAX - 1, u64::MAX, u64::MAX / 2 + 1, u64::MAX / 2 + 1);
        assert_eq!(huge.prompt_tokens(), u64::MAX);
        let mut total = huge;
        total += huge;
        assert_eq!(total.input_tokens, u64::MAX);
        assert_eq!(total.output_tokens, u64::MAX);
        let mut small = Usage::new(1, 2, 3, 4);
        small += Usage::new(10, 20, 30, 40);
        assert_eq!(small, Usage::new(11, 22, 33, 44));
        assert_eq!(small.prompt_tokens(), 11 + 33 + 44);
    }
}
