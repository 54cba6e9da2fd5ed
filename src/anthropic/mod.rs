//! The Anthropic provider: its client and token counter, over the Messages format
//! ([`wire::messages`](crate::wire::messages) holds the format itself).
//!
//! ```no_run
//! use std::sync::Arc;
//! use llm_context::anthropic::Anthropic;
//! use llm_context::prefix::PrefixLayer;
//! use llm_context::{ChatRequest, ContextPolicy, Message, PrefixContext, ServiceBuilderExt};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::BoxError> {
//! let prefix = Arc::new(PrefixContext::new("You are a careful research assistant."));
//! let model = ServiceBuilder::new()
//!     .layer(PrefixLayer::new().with_prefix(prefix))  // inject, then mark breakpoints
//!     .context_policy(ContextPolicy::default().with_context_window(1_000_000))?
//!     .service(Anthropic::from_env()?);                // ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL
//! let reply = model
//!     .oneshot(ChatRequest::new("claude-sonnet-4-6", vec![Message::user("Say hi.")]))
//!     .await?;
//! println!("{} ({:?})", reply.message.text(), reply.usage);
//! # Ok(()) }
//! ```
//!
//! `POST {base}/v1/messages` with `x-api-key` and `anthropic-version: 2023-06-01`
//! (default base `https://api.anthropic.com`).
//!
//! * **System**: the prefix (system prompt, grounding, schema block, in that order) and
//!   the leading system messages become the top-level `system` text blocks. A system
//!   message later in the conversation is sent as user text (there is no system role
//!   among messages).
//! * **Tools**: tool calls become `tool_use` blocks; consecutive tool results become one
//!   user message of `tool_result` blocks, placed before any other block of it.
//! * **Caching**: each breakpoint of [`ChatRequest::cache`](crate::ChatRequest) becomes a
//!   `cache_control: {"type": "ephemeral"}` marker (with `"ttl": "1h"` for an hour): on
//!   the last tool, on the last system block, and on the last block of the message
//!   before the newest user request. At most three markers, never on an empty block, and
//!   a 1h marker never after a 5m one (later ones are shortened).
//! * **Usage**: Anthropic's `input_tokens` already excludes cache reads and writes, as
//!   the neutral [`Usage`](crate::Usage) does; one-hour writes are read from
//!   `cache_creation`.
//! * **Limits**: `max_tokens` is required here: the request's output limit, else the
//!   body's `max_completion_tokens` / `max_tokens`, else the builder's default (4,096).
//!   Fields of an OpenAI-shaped body that Anthropic lacks (`seed`, `response_format`,
//!   …) are not sent, and neither are `temperature` and `top_p`: the Messages API as
//!   described by the official SDK 2.14.0 has no sampling fields and refuses unknown
//!   keys.
//! * **Counting**: [`AnthropicTokenCounter`] counts exactly with the
//!   `/v1/messages/count_tokens` endpoint.

mod client;
mod count;

pub use crate::client::{ResponseFuture, StreamFuture};
pub use client::{
    API_KEY_VAR, API_VERSION, AUTH_TOKEN_VAR, Anthropic, AnthropicBuilder, BASE_URL_VAR,
    DEFAULT_BASE_URL, DEFAULT_MAX_OUTPUT_TOKENS, MessagesApi,
};
pub use count::AnthropicTokenCounter;
