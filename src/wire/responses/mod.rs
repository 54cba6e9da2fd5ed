//! The OpenAI Responses API: `POST /v1/responses`.
//!
//! - The client's side: a request rendered from the neutral model, the `Response`
//!   object read back (reasoning items and every item the neutral model has no place
//!   for kept whole, in order), and the stream read from the provider.
//! - The proxy's side (crate-private, with `serve`): a `CreateResponse` body read into
//!   the neutral request (items into messages, a turn a user message and everything up
//!   to the next one) and sent back byte for byte but for the stack's edits, answers and
//!   stream events written back.
//!
//! ```
//! use llm_context::wire::responses::output_text;
//! use serde_json::json;
//!
//! let answer = json!({"output": [
//!     {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "…"},
//!     {"type": "message", "role": "assistant", "content": [
//!         {"type": "output_text", "text": "Hallo", "annotations": []}]}]});
//! assert_eq!(output_text(&answer), "Hallo");
//! ```

pub(crate) mod answer;
#[cfg(feature = "serve")]
#[cfg_attr(docsrs, doc(cfg(feature = "serve")))]
pub mod body;
pub(crate) mod breakpoints;
#[cfg(feature = "serve")]
pub(crate) mod faithful;
#[cfg(feature = "serve")]
pub(crate) mod read;
#[cfg(feature = "serve")]
pub(crate) mod reuse;
#[cfg(feature = "serve")]
pub(crate) mod serve;
pub(crate) mod stream;
#[cfg(feature = "serve")]
pub(crate) mod thinking;
pub(crate) mod write;

#[cfg(all(test, feature = "serve"))]
mod tests;

/// The text of a `Response` object's output messages, joined: what OpenAI's SDKs call
/// `output_text`.
pub fn output_text(response: &serde_json::Value) -> String {
    response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().into_iter().flatten())
        .filter(|part| part["type"] == "output_text")
        .filter_map(|part| part["text"].as_str())
        .collect()
}
