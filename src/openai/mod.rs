//! The OpenAI provider: its client, over the Chat Completions format
//! ([`wire::chat_completions`](crate::wire::chat_completions) holds the format itself).
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::BoxError> {
//! use llm_context::openai::OpenAi;
//! use llm_context::{ChatRequest, ContextPolicy, Message, ServiceBuilderExt};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! let model = ServiceBuilder::new()
//!     .context_policy(ContextPolicy::default().with_context_window(272_000))?
//!     .service(OpenAi::from_env()?); // OPENAI_API_KEY, OPENAI_BASE_URL
//! let reply = model
//!     .oneshot(ChatRequest::new("gpt-5.4-mini", vec![Message::user("Say hi.")]))
//!     .await?;
//! println!("{} ({:?})", reply.message.text(), reply.usage);
//! # Ok(()) }
//! ```
//!
//! `POST {base}/chat/completions`, where the base URL includes `/v1` as in OpenAI's own
//! SDKs (default `https://api.openai.com/v1`), so the same client serves vLLM, llama.cpp,
//! Ollama and any compatible server (`OPENAI_BASE_URL=http://localhost:11434/v1`).
//!
//! * **Prefix**: `request.prefix` is rendered first (system prompt, grounding, schema
//!   block), then the tail; tool results go as `tool` messages linked by
//!   `tool_call_id`.
//! * **Caching**: OpenAI caches automatically from 1,024 tokens when the prefix is
//!   byte-identical. The client sends `prompt_cache_key` = a stable hash of the request's
//!   head (tools, prefix, leading system messages:
//!   [`ChatRequest::stable_head_key`](crate::ChatRequest::stable_head_key)), so requests
//!   sharing it, a plain Chat Completions body included, are routed to the same cache (a
//!   key the caller put in the body wins). The breakpoint hints are not sent: Chat Completions has no such
//!   markers before GPT-5.6's explicit mode.
//! * **Usage**: OpenAI's `prompt_tokens` *includes* `cached_tokens` (and
//!   `cache_write_tokens`); the neutral [`Usage`](crate::Usage) keeps them apart, so
//!   `input_tokens = prompt_tokens − cached_tokens − cache_write_tokens`.
//! * **Other fields** of the caller's body (`response_format`, `reasoning_effort`, …) are
//!   passed through; of another format's body, only those Chat Completions has
//!   ([`GenerationParams::extra_format`](crate::GenerationParams::extra_format)); a
//!   `stream` field is dropped: a stream is asked for with a
//!   [`Streaming`](crate::stream::Streaming) request, which sets `stream` and
//!   `stream_options.include_usage` itself.
//!
//! [`OpenAiResponses`] is the same provider over the Responses API (`POST
//! {base}/responses`), which OpenAI recommends for its reasoning models: the same
//! builder settings and environment; reasoning items come back in the message and go
//! back with it.

mod client;
pub(crate) mod responses;

pub use crate::client::{ResponseFuture, StreamFuture};
pub use client::{
    API_KEY_VAR, BASE_URL_VAR, ChatCompletionsApi, DEFAULT_BASE_URL, ORG_ID_VAR, OpenAi,
    OpenAiBuilder, PROJECT_ID_VAR,
};
pub use responses::{OpenAiResponses, OpenAiResponsesBuilder, ResponsesApi};
