//! Provider wire formats and their mapping to the neutral model.
//!
//! ```
//! use llm_context::wire::openai::{request_from_body, body_from_request};
//! use serde_json::json;
//!
//! let body = json!({
//!     "model": "gpt-5.4",
//!     "temperature": 0,
//!     "messages": [
//!         {"role": "developer", "content": "Be terse."},
//!         {"role": "user", "content": "hi"}
//!     ]
//! });
//! let (request, ctx) = request_from_body(&body).unwrap();
//! assert_eq!(request.messages.len(), 2);
//! // Unchanged messages and unknown fields come back byte for byte.
//! assert_eq!(body_from_request(&request, &ctx), body);
//! ```

pub mod openai;

/// A request body that does not have the shape the provider defines.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
#[non_exhaustive]
pub struct WireError {
    /// Where in the body, as a JSON path (`messages[3].role`).
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl WireError {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
