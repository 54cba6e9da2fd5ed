//! The `Anthropic` service and its builder.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use tower::Service;

use crate::catalog::Provider;
pub use crate::client::ResponseFuture;
use crate::client::{
    ConfigError, Reading, Settings, base_url, exchange, log_request, poll_transport, post_json,
};
use crate::error::ProviderError;
use crate::sse;
pub use crate::sse::StreamFuture;
use crate::transport::{
    HttpRequest, HttpResponse, HttpStreamResponse, ReqwestTransport, TransportError,
};
use crate::wire::messages::convert;
use crate::wire::messages::stream::AnthropicDecoder;
use crate::wire::messages::types::MessageResponse;
use llm_context_layers::stream::{ChatStream, Streaming};
use llm_context_layers::{ChatRequest, ChatResponse};

/// Anthropic's API, the default base URL (without `/v1`, as in Anthropic's SDKs).
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The environment variable holding the API key.
pub const API_KEY_VAR: &str = "ANTHROPIC_API_KEY";
/// The environment variable holding the base URL.
pub const BASE_URL_VAR: &str = "ANTHROPIC_BASE_URL";
/// The environment variable holding a bearer token, sent as `Authorization: Bearer …`
/// (what Anthropic-compatible gateways take), as Anthropic's SDKs read it.
pub const AUTH_TOKEN_VAR: &str = "ANTHROPIC_AUTH_TOKEN";
/// The headers this client sets itself; [`AnthropicBuilder::header`] refuses them.
const OWN_HEADERS: &[&str] = &["x-api-key", "authorization", "anthropic-version"];
/// The `anthropic-version` header sent.
pub const API_VERSION: &str = "2023-06-01";
/// The output limit sent when the request sets none (the API requires one).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4_096;

/// An Anthropic Messages client: a `Service<ChatRequest>`. See the [module docs](super).
#[derive(Clone)]
pub struct Anthropic<T = ReqwestTransport> {
    pub(super) transport: T,
    pub(super) shared: Arc<ClientState>,
}

pub(super) struct ClientState {
    base_url: String,
    /// `base_url` as it may be shown (its password masked).
    shown_url: String,
    api_key: Option<SecretString>,
    auth_token: Option<SecretString>,
    /// Extra headers (`anthropic-beta`, a gateway's own).
    headers: http::HeaderMap,
    default_max_tokens: u32,
    reading: Reading,
}

impl<T> std::fmt::Debug for Anthropic<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anthropic")
            .field("base_url", &self.shared.shown_url)
            .field("api_key", &"[REDACTED]")
            .field("default_max_tokens", &self.shared.default_max_tokens)
            .field(
                "max_response_bytes",
                &self.shared.reading.max_response_bytes,
            )
            .finish_non_exhaustive()
    }
}

impl Anthropic {
    /// A client configured from `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` (default
    /// [`DEFAULT_BASE_URL`]): [`AnthropicBuilder::from_env`], built.
    pub fn from_env() -> Result<Self, ConfigError> {
        AnthropicBuilder::from_env().build()
    }

    /// A builder.
    pub fn builder() -> AnthropicBuilder {
        AnthropicBuilder::default()
    }
}

impl<T> Anthropic<T> {
    /// The base URL requests go to (`{base}/v1/messages`), as configured: with its
    /// password, if it has one. `Debug` output and errors show it masked.
    pub fn base_url(&self) -> &str {
        &self.shared.base_url
    }

    /// The same client over another transport.
    pub fn with_transport<U>(self, transport: U) -> Anthropic<U> {
        Anthropic {
            transport,
            shared: self.shared,
        }
    }

    /// The transport.
    pub fn get_ref(&self) -> &T {
        &self.transport
    }

    /// The transport, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// The transport, consuming the client.
    pub fn into_inner(self) -> T {
        self.transport
    }

    /// A JSON POST to `{base}{path}` with the credentials, version and extra headers.
    pub(super) fn post(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<HttpRequest, ProviderError> {
        let mut headers = Vec::with_capacity(3);
        if let Some(key) = &self.shared.api_key {
            headers.push(("x-api-key", key.expose_secret().to_owned(), true));
        }
        if let Some(token) = &self.shared.auth_token {
            headers.push((
                "authorization",
                format!("Bearer {}", token.expose_secret()),
                true,
            ));
        }
        headers.push(("anthropic-version", API_VERSION.to_owned(), false));
        let url = format!("{}{path}", self.shared.base_url);
        post_json(
            Provider::Anthropic,
            &url,
            &headers,
            &self.shared.headers,
            body,
        )
    }

    /// The `POST /v1/messages` of `req`, asking for a stream when `stream`.
    fn messages_request(
        &self,
        req: &ChatRequest,
        stream: bool,
    ) -> Result<HttpRequest, ProviderError> {
        let mut body = convert::request(req, self.shared.default_max_tokens)?;
        if stream {
            body.extra
                .insert("stream".into(), serde_json::Value::Bool(true));
        }
        self.post("/v1/messages", &body)
    }

    /// What this client reads its answers with (redaction, body limit).
    pub(super) fn reading(&self) -> &Reading {
        &self.shared.reading
    }
}

/// Builds an [`Anthropic`] client.
#[derive(Debug)]
pub struct AnthropicBuilder {
    settings: Settings,
    auth_token: Option<SecretString>,
    default_max_tokens: u32,
}

impl Default for AnthropicBuilder {
    fn default() -> Self {
        Self {
            settings: Settings::default(),
            auth_token: None,
            default_max_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
        }
    }
}

impl AnthropicBuilder {
    /// A builder with the base URL from [`BASE_URL_VAR`], the API key from
    /// [`API_KEY_VAR`] and a bearer token from [`AUTH_TOKEN_VAR`], each when set and not
    /// blank; the other settings can still be changed. Building fails with neither a key
    /// nor a token ([`ConfigError::MissingApiKey`]).
    pub fn from_env() -> Self {
        Self {
            settings: Settings::from_env(BASE_URL_VAR, API_KEY_VAR),
            auth_token: crate::client::env(AUTH_TOKEN_VAR).map(SecretString::from),
            ..Self::default()
        }
    }

    /// A bearer token, sent as `Authorization: Bearer …` (Anthropic-compatible gateways
    /// take one instead of a key); with a key too, both are sent, as Anthropic's SDKs do.
    #[must_use]
    pub fn auth_token(mut self, token: impl Into<SecretString>) -> Self {
        self.auth_token = Some(token.into());
        self
    }

    /// A header sent with every request, such as `anthropic-beta`. Its value is treated
    /// as a secret: never shown in `Debug` output. Building fails when the name or value
    /// cannot be sent, or names one the client sets (`x-api-key`, `authorization`,
    /// `anthropic-version`, `content-type`): [`ConfigError::InvalidHeader`].
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings
            .headers
            .push((name.into(), SecretString::from(value.into())));
        self
    }

    /// The base URL, without `/v1`.
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.settings.base_url = Some(url.into());
        self
    }

    /// The API key, sent as `x-api-key`.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<SecretString>) -> Self {
        self.settings.api_key = Some(key.into());
        self
    }

    /// A limit on each whole call; none by default. Timeouts are retryable.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = Some(timeout);
        self
    }

    /// The `max_tokens` sent when a request sets no output limit (default
    /// [`DEFAULT_MAX_OUTPUT_TOKENS`]).
    #[must_use]
    pub fn default_max_tokens(mut self, n: u32) -> Self {
        self.default_max_tokens = n;
        self
    }

    /// The most bytes of a response body the client reads (default
    /// [`DEFAULT_MAX_RESPONSE_BYTES`](crate::transport::DEFAULT_MAX_RESPONSE_BYTES),
    /// 16 MiB). A longer body is a [`ResponseTooLarge`] error, not retried; the default
    /// transport stops reading at the limit, so it never holds more.
    ///
    /// [`ResponseTooLarge`]: crate::ProviderErrorKind::ResponseTooLarge
    #[must_use]
    pub fn max_response_bytes(mut self, limit: usize) -> Self {
        self.settings.max_response_bytes = limit;
        self
    }

    /// The client, over reqwest (following no redirect). Fails without an API key or
    /// with an invalid base URL.
    pub fn build(self) -> Result<Anthropic, ConfigError> {
        let transport = self.settings.transport()?;
        self.build_with_transport(transport)
    }

    /// The client over another transport (the body limit is still checked on the body
    /// it returns).
    pub fn build_with_transport<T>(self, transport: T) -> Result<Anthropic<T>, ConfigError> {
        let redactor = self
            .settings
            .redactor(DEFAULT_BASE_URL)
            .with_secret(self.auth_token.as_ref());
        let url = base_url(
            self.settings
                .base_url
                .as_deref()
                .unwrap_or(DEFAULT_BASE_URL),
            &redactor,
        )?;
        if self.settings.api_key.is_none() && self.auth_token.is_none() {
            return Err(ConfigError::MissingApiKey { var: API_KEY_VAR });
        }
        let headers = self.settings.header_map(OWN_HEADERS)?;
        Ok(Anthropic {
            transport,
            shared: Arc::new(ClientState {
                shown_url: redactor.url(&url),
                base_url: url,
                api_key: self.settings.api_key,
                auth_token: self.auth_token,
                headers,
                default_max_tokens: self.default_max_tokens,
                reading: Reading {
                    redactor,
                    max_response_bytes: self.settings.max_response_bytes,
                },
            }),
        })
    }
}

impl AsRef<Reading> for ClientState {
    fn as_ref(&self) -> &Reading {
        &self.reading
    }
}

/// A streamed call (`stream: true`): see [`stream`](llm_context_layers::stream). The
/// future resolves once the first event has been read; what fails before that (an
/// error status, a cut connection) is its error, so a retry layer retries only before
/// anything reached the caller. An `error` event is a typed error item.
impl<T> Service<Streaming> for Anthropic<T>
where
    T: Service<Streaming<HttpRequest>, Response = HttpStreamResponse, Error = TransportError>,
    T::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = ProviderError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        poll_transport(
            &mut self.transport,
            cx,
            Provider::Anthropic,
            &self.shared.reading.redactor,
        )
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let http = self.messages_request(&req.0, true);
        let shared = self.shared.clone();
        let decoder = AnthropicDecoder::default();
        sse::call(
            Provider::Anthropic,
            &mut self.transport,
            &req.0,
            http,
            shared,
            decoder,
        )
    }
}

impl<T> Service<ChatRequest> for Anthropic<T>
where
    T: Service<HttpRequest, Response = HttpResponse, Error = TransportError>,
    T::Future: Send + 'static,
{
    type Response = ChatResponse;
    type Error = ProviderError;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        poll_transport(
            &mut self.transport,
            cx,
            Provider::Anthropic,
            &self.shared.reading.redactor,
        )
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let http = match self.messages_request(&req, false) {
            Ok(h) => h,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        log_request(Provider::Anthropic, &req, false);
        let sent = self.transport.call(http);
        let shared = self.shared.clone();
        Box::pin(async move {
            let body: MessageResponse =
                exchange(Provider::Anthropic, sent, &shared.reading).await?;
            Ok(convert::response(body))
        })
    }
}
