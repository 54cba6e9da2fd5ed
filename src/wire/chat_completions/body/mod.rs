//! OpenAI Chat Completions request bodies ↔ [`ChatRequest`].
//!
//! ```
//! use llm_context::wire::chat_completions::body::{body_from_request, request_from_body};
//! use serde_json::json;
//!
//! let body = json!({
//!     "model": "gpt-5.4",
//!     "temperature": 0,
//!     "messages": [
//!         {"role": "developer", "content": "Be terse."},
//!         {"role": "user", "content": "hi", "x_trace": {"id": 7}},
//!         {"role": "assistant", "content": "hello", "refusal": null}
//!     ]
//! });
//! let (request, ctx) = request_from_body(&body).unwrap();
//! assert_eq!(request.messages.len(), 3);
//! // Unchanged messages come back equal as JSON: unknown fields and the `developer`
//! // role included.
//! assert_eq!(body_from_request(&request, &ctx), body);
//! ```
//!
//! The mapping keeps what it does not model, and only that. Every top-level field other
//! than `model`, `messages` and `tools` is carried in [`GenerationParams`] (the common ones
//! typed, the rest in `extra`). Each message is read once, straight into the neutral
//! [`Message`]; a [`BodyContext`] keeps beside the messages what the model has no place
//! for — fields it does not know (`refusal`, `audio`, vendor `x_*` fields, fields added
//! after this crate was written) as their JSON text, a `developer` role, an explicit
//! `null`, tool-call arguments that came as something other than text —
//! and, when any message has such a field, two digests a message to recognise it among
//! the sent messages. It keeps no copy of any content.
//!
//! A message the layers did not change is written from the model with those fields put
//! back, so it comes back equal as JSON to what came (the same members with the same
//! values; an unknown field's value byte for byte), though not with the same key order or
//! whitespace. A changed message (a cleared or offloaded tool result) keeps its other
//! fields and gets the new content.
//!
//! Tool-call arguments are held as the text that came ([`ToolCall::arguments`]), so they
//! are written back byte for byte, broken JSON too; the client (`OpenAi`, feature
//! `openai`) sends and reads them as that same text. This module is compiled with the `openai` feature or the
//! `cli` feature: the command-line tool reads and writes request bodies with it, with or
//! without the client.
//!
//! [`ChatRequest`]: llm_context_layers::ChatRequest
//! [`GenerationParams`]: llm_context_layers::GenerationParams
//! [`Message`]: llm_context_layers::Message
//! [`ToolCall::arguments`]: llm_context_layers::ToolCall::arguments

mod read;
mod residue;
#[cfg(test)]
mod tests;
mod write;

pub use read::{message_from_wire, request_from_body, request_from_str};
pub use residue::BodyContext;
pub use write::{body_from_request, content_to_wire, message_to_wire, tool_to_wire, write_body};
#[cfg(feature = "serve")]
pub(crate) use write::{fields_of_request, messages_text};

/// A request body that does not have the shape the provider defines.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
#[non_exhaustive]
pub struct WireError {
    /// Where in the body, as a JSON path (`messages[3].role`).
    pub path: String,
    /// What is wrong.
    pub reason: String,
    /// The text is not JSON at all (from [`request_from_str`]).
    syntax: bool,
}

impl WireError {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
            syntax: false,
        }
    }

    /// Whether the body is not JSON at all, rather than JSON of the wrong shape.
    pub fn is_syntax(&self) -> bool {
        self.syntax
    }

    /// A `serde_json` error from reading `path`: a syntax error, or the wrong shape.
    fn json(path: &str, e: &serde_json::Error, shape: &str) -> Self {
        match e.classify() {
            serde_json::error::Category::Data => Self::new(path, shape),
            _ => Self {
                syntax: true,
                ..Self::new(path, format!("not valid JSON: {e}"))
            },
        }
    }
}
