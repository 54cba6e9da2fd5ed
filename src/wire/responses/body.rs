//! A Responses request body read into the neutral request and written back after the
//! stack prepared it, as the proxy does: what `llm-context prepare` uses for a Responses
//! body.
//!
//! ```
//! use llm_context::wire::responses::body::{read_body, write_body};
//!
//! let body = br#"{"model": "gpt-5.5", "instructions": "Be brief.", "input": [
//!     {"type": "message", "role": "user", "content": "Hallo"},
//!     {"type": "future_item", "kept": true}]}"#;
//! let (request, kept) = read_body(body).unwrap();
//! assert_eq!(request.messages.len(), 3); // the instructions, the user, the unknown item
//! // Nothing changed: the caller's bytes, byte for byte.
//! assert_eq!(write_body(&request, &kept).unwrap(), body.to_vec());
//! assert!(read_body(br#"{"model": "gpt-5.5", "input": [{"type": "function_call"}]}"#)
//!     .unwrap_err()
//!     .to_string()
//!     .contains("input[0].call_id"));
//! ```

use axum::body::Bytes;
use llm_context_layers::ChatRequest;

use super::faithful::faithful;
use super::read::{Kept, request};
use crate::error::ProviderError;

/// What was kept of a Responses body to write it back: its bytes, where its items lie,
/// and which neutral messages came from which items.
#[derive(Debug)]
pub struct ResponsesBody(Kept);

/// Why a body is not a Responses request: where (a JSON path, empty for the whole body)
/// and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BodyError {
    /// Where, as a JSON path (`input[2].call_id`); empty for the whole body.
    pub path: String,
    /// What is wrong there.
    pub reason: String,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "`{}`: {}", self.path, self.reason)
        }
    }
}

impl std::error::Error for BodyError {}

/// The neutral request of a `CreateResponse` body, and what is needed to write it back.
pub fn read_body(bytes: &[u8]) -> Result<(ChatRequest, ResponsesBody), BodyError> {
    let (mut req, kept) = request(&Bytes::copy_from_slice(bytes)).map_err(|e| BodyError {
        path: e.path,
        reason: e.reason,
    })?;
    // Written back by `write_body`, not by a client.
    req.params.origin = None;
    Ok((req, ResponsesBody(kept)))
}

/// The body of `req` (read with [`read_body`], then prepared): the caller's bytes but for
/// what the stack changed, as the proxy sends it.
pub fn write_body(req: &ChatRequest, body: &ResponsesBody) -> Result<Vec<u8>, ProviderError> {
    faithful(req, &body.0, body.0.asks_stream(), None)
}
