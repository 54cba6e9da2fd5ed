//! What tells one provider API from another: the [`Api`] a [`Client`](super::Client)
//! speaks.

use std::fmt::Debug;

use secrecy::SecretString;
use serde::de::DeserializeOwned;

use super::{ConfigError, Settings};
use crate::catalog::Provider;
use crate::error::ProviderError;
use crate::sse::Decoder;
use crate::transport::RequestBody;
use llm_context_layers::{ChatRequest, ChatResponse, WireFormat};

/// A provider API a [`Client`](super::Client) speaks: where it is, how it authenticates,
/// and how the neutral request and response map to its format.
///
/// Implemented by [`openai::ChatCompletionsApi`] and [`anthropic::MessagesApi`]; sealed,
/// because what it requires is this crate's wiring (its stream decoder, its settings).
///
/// [`openai::ChatCompletionsApi`]: crate::openai::ChatCompletionsApi
/// [`anthropic::MessagesApi`]: crate::anthropic::MessagesApi
// The supertrait is crate-private on purpose: that is the seal.
#[allow(private_bounds)]
pub trait Api: Speaks + Debug + Send + Sync + 'static {}

/// What an [`Api`] is, in this crate's terms. Everything a client does beyond the
/// shared HTTP handling is one of these items, so that a new API is one implementation.
pub(crate) trait Speaks {
    /// The client's name in `Debug` output.
    const NAME: &'static str;
    /// Who is called, for errors, logs and the proxy's table.
    const PROVIDER: Provider;
    /// The base URL when none is set.
    const DEFAULT_BASE_URL: &'static str;
    /// The environment variable holding the API key.
    const API_KEY_VAR: &'static str;
    /// The environment variable holding the base URL.
    const BASE_URL_VAR: &'static str;
    /// The headers the client sets itself (lowercase), which an extra header may not name.
    const OWN_HEADERS: &'static [&'static str];
    /// The path of the call, appended to the base URL.
    const PATH: &'static str;
    /// The wire format of its bodies: the caller's pass-through fields, headers and query
    /// tagged with it are sent on whole.
    const FORMAT: WireFormat;

    /// The API's own settings, beyond those every builder has.
    type Options: Default + Debug + Send + Sync + 'static;
    /// The request body written.
    type Body;
    /// The response body read.
    type Response: DeserializeOwned + Send + 'static;
    /// The reader of its stream events.
    type Decoder: Decoder + Default;

    /// Reads what the API takes from the environment beyond the base URL and key.
    fn from_env(settings: &mut Settings, options: &mut Self::Options);

    /// A secret of `options` to hide from errors and logs, besides the key.
    fn secret(_options: &Self::Options) -> Option<&SecretString> {
        None
    }

    /// Whether a client with these settings, calling `url`, may be built: the rule for a
    /// missing credential.
    fn check(settings: &Settings, options: &Self::Options, url: &str) -> Result<(), ConfigError>;

    /// The credential and version headers: `(name, value, sensitive)`.
    fn credentials(
        api_key: Option<&SecretString>,
        options: &Self::Options,
    ) -> Vec<(&'static str, String, bool)>;

    /// The body of `req`, asking for a stream when `stream`.
    fn body(
        req: &ChatRequest,
        options: &Self::Options,
        stream: bool,
    ) -> Result<Self::Body, ProviderError>;

    /// The bytes of `body`, as sent: one buffer, or pieces of buffers already held (a
    /// proxied body's kept spans).
    fn encode(body: Self::Body) -> Result<RequestBody, serde_json::Error>;

    /// The neutral response of a body read.
    fn response(body: Self::Response) -> Result<ChatResponse, ProviderError>;
}
