//! Anthropic Messages: `POST /v1/messages`.
//!
//! - [`types`]: the request the Anthropic client sends and the response it reads, as
//!   typed wire structs (`count_tokens` too).
//! - The client side's rendering (system blocks, `tool_result` grouping, `cache_control`
//!   markers), its stream decoder, and the proxy's side (a body read into the neutral
//!   request, answers, the stream's events and Anthropic's error shape) are crate-private.
//!
//! ```
//! use llm_context::wire::messages::types::MessageResponse;
//!
//! let answer: MessageResponse = serde_json::from_str(
//!     r#"{"id": "msg_1", "type": "message", "role": "assistant", "content": [],
//!         "stop_reason": "end_turn", "usage": {"input_tokens": 3, "output_tokens": 1}}"#,
//! ).unwrap();
//! assert_eq!(answer.id.as_deref(), Some("msg_1"));
//! assert_eq!(answer.extra["type"], "message");
//! ```

// The simulator renders requests exactly as the client sends them.
pub(crate) mod convert;
#[cfg(feature = "serve")]
pub(crate) mod faithful;
pub(crate) mod params;
#[cfg(feature = "serve")]
pub(crate) mod reuse;
#[cfg(feature = "serve")]
pub(crate) mod serve;
pub(crate) mod stream;
pub mod types;
