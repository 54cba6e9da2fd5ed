//! OpenAI Chat Completions: `POST /v1/chat/completions`.
//!
//! - [`body`]: a caller's request body read into a [`ChatRequest`](crate::ChatRequest)
//!   and written back, keeping what the neutral model does not hold (the command-line
//!   tool's `prepare` reads and writes bodies with it, so it is there with the `cli`
//!   feature too).
//! - [`types`]: the request the OpenAI client sends and the response it reads, as typed
//!   wire structs.
//! - The client side's conversions and stream decoder, and the proxy's side (answers,
//!   `chat.completion.chunk` events and OpenAI's error shape), are crate-private.
//!
//! ```
//! use llm_context::wire::chat_completions::body::{body_from_request, request_from_str};
//!
//! let body = r#"{"model": "gpt-5.4", "messages": [{"role": "user", "content": "hi"}], "seed": 7}"#;
//! let (request, kept) = request_from_str(body).unwrap();
//! assert_eq!(request.params.seed, Some(7));
//! assert_eq!(body_from_request(&request, &kept)["seed"], 7);
//! ```

pub mod body;
#[cfg(feature = "openai")]
pub(crate) mod convert;
pub(crate) mod params;
#[cfg(feature = "serve")]
pub(crate) mod serve;
#[cfg(feature = "openai")]
pub(crate) mod stream;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub mod types;
