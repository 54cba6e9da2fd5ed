//! The OpenAI Responses API: `POST /v1/responses`.
//!
//! - The reader: a `CreateResponse` body into the neutral request (items into messages,
//!   a turn a user message and everything up to the next one; reasoning, compaction
//!   and every item the neutral model has no place for kept whole in its place), with
//!   what is needed to send it back byte for byte.
//! - The writers: that body back, as the caller wrote it but for the stack's edits, or
//!   one rendered from the neutral request; a `Response` object both ways; the stream
//!   read from an upstream and written to a caller.
//!
//! All of it is crate-private: the proxy serves the format, and the OpenAI client
//! speaks it to the provider for a Responses caller.

pub(crate) mod answer;
pub(crate) mod read;
#[cfg(feature = "serve")]
pub(crate) mod serve;
pub(crate) mod stream;
pub(crate) mod write;

#[cfg(test)]
mod tests;
