//! The wire formats, one module each, both directions in one place: the request read from
//! a caller's body and written to a provider, the answer and the stream events both ways,
//! and the format's error bodies.
//!
//! Formats and providers are two axes. A format ([`chat_completions`], [`messages`], the
//! Responses API's, which the proxy serves) is
//! a shape of JSON on the wire; a provider ([`openai`](crate::openai),
//! [`anthropic`](crate::anthropic)) is who is called: a base URL, a key, a transport,
//! retries. The OpenAI client speaks Chat Completions, the Anthropic client Messages, and
//! the proxy serves each format on its route, whichever provider the model belongs to.
//!
//! ```
//! # #[cfg(any(feature = "openai", feature = "cli"))] {
//! use llm_context::wire::chat_completions::body::request_from_str;
//!
//! let body = r#"{"model": "gpt-5.4", "messages": [{"role": "user", "content": "hi"}]}"#;
//! let (request, _kept) = request_from_str(body).unwrap();
//! assert_eq!(request.messages.len(), 1);
//! # }
//! ```

#[cfg(any(feature = "openai", feature = "cli"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "openai", feature = "cli"))))]
pub mod chat_completions;
#[cfg(feature = "serve")]
pub(crate) mod checks;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod extra;
#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub mod messages;
#[cfg(any(feature = "openai", feature = "anthropic"))]
pub(crate) mod namespaces;
#[cfg(feature = "serve")]
pub(crate) mod pieces;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod responses;
#[cfg(feature = "serve")]
pub(crate) mod served;
