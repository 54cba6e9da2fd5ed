//! The `OpenAi` service and its builder.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
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
use crate::wire::chat_completions::convert;
use crate::wire::chat_completions::stream::OpenAiDecoder;
use crate::wire::chat_completions::types::CreateChatCompletionResponse;
use llm_context_layers::stream::{ChatStream, Streaming};
use llm_context_layers::{ChatRequest, ChatResponse};

/// OpenAI's API, the default base URL (it includes `/v1`, as in OpenAI's SDKs).
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
/// The environment variable holding the API key.
pub const API_KEY_VAR: &str = "OPENAI_API_KEY";
/// The environment variable holding the base URL.
pub const BASE_URL_VAR: &str = "OPENAI_BASE_URL";
/// The environment variable holding the organization sent as `OpenAI-Organization`.
pub const ORG_ID_VAR: &str = "OPENAI_ORG_ID";
/// The environment variable holding the project sent as `OpenAI-Project`.
pub const PROJECT_ID_VAR: &str = "OPENAI_PROJECT_ID";
/// The headers this client sets itself; [`OpenAiBuilder::header`] refuses them.
const OWN_HEADERS: &[&str] = &["authorization"];

/// An OpenAI-compatible Chat Completions client: a `Service<ChatRequest>`. See the
/// [module docs](super).
#[derive(Clone)]
pub struct OpenAi<T = ReqwestTransport> {
    transport: T,
    shared: Arc<ClientState>,
}

struct ClientState {
    base_url: String,
    /// `base_url` as it may be shown (its password masked).
    shown_url: String,
    endpoint: String,
    api_key: Option<SecretString>,
    /// Extra headers (organization, project, the caller's own).
    headers: http::HeaderMap,
    reading: Reading,
}

impl<T> std::fmt::Debug for OpenAi<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAi")
            .field("base_url", &self.shared.shown_url)
            .field(
                "api_key",
                &self.shared.api_key.as_ref().map(|_| "[REDACTED]"),
            )
            .field(
                "max_response_bytes",
                &self.shared.reading.max_response_bytes,
            )
            .finish_non_exhaustive()
    }
}

impl OpenAi {
    /// A client configured from `OPENAI_API_KEY` and `OPENAI_BASE_URL` (default
    /// [`DEFAULT_BASE_URL`]): [`OpenAiBuilder::from_env`], built. The key may be missing
    /// only when the base URL points elsewhere (a local server that needs none).
    pub fn from_env() -> Result<Self, ConfigError> {
        OpenAiBuilder::from_env().build()
    }

    /// A builder.
    pub fn builder() -> OpenAiBuilder {
        OpenAiBuilder::default()
    }
}

impl<T> OpenAi<T> {
    /// The base URL requests go to (`{base}/chat/completions`), as configured: with its
    /// password, if it has one. `Debug` output and errors show it masked.
    pub fn base_url(&self) -> &str {
        &self.shared.base_url
    }

    /// The same client over another transport.
    pub fn with_transport<U>(self, transport: U) -> OpenAi<U> {
        OpenAi {
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
}

/// Builds an [`OpenAi`] client.
#[derive(Debug, Default)]
pub struct OpenAiBuilder {
    settings: Settings,
}

impl OpenAiBuilder {
    /// A builder with the base URL from [`BASE_URL_VAR`] and the API key from
    /// [`API_KEY_VAR`], each when set and not blank; the other settings can still be
    /// changed. As with any builder, a missing key is an error
    /// ([`ConfigError::MissingApiKey`]) only when the base URL is [`DEFAULT_BASE_URL`]:
    /// a local server (vLLM, Ollama, …) may need none.
    ///
    /// [`ORG_ID_VAR`] and [`PROJECT_ID_VAR`], when set, are sent as the
    /// `OpenAI-Organization` and `OpenAI-Project` headers, as OpenAI's SDKs do.
    pub fn from_env() -> Self {
        let mut builder = Self {
            settings: Settings::from_env(BASE_URL_VAR, API_KEY_VAR),
        };
        if let Some(org) = crate::client::env(ORG_ID_VAR) {
            builder = builder.organization(org);
        }
        if let Some(project) = crate::client::env(PROJECT_ID_VAR) {
            builder = builder.project(project);
        }
        builder
    }

    /// The organization requests are billed to, sent as `OpenAI-Organization`.
    #[must_use]
    pub fn organization(self, id: impl Into<String>) -> Self {
        self.header("openai-organization", id.into())
    }

    /// The project requests are billed to, sent as `OpenAI-Project`.
    #[must_use]
    pub fn project(self, id: impl Into<String>) -> Self {
        self.header("openai-project", id.into())
    }

    /// A header sent with every request (a gateway's own, for example). Its value is
    /// treated as a secret: never shown in `Debug` output. Building fails when the name
    /// or value cannot be sent, or names `authorization` or `content-type`, which the
    /// client sets ([`ConfigError::InvalidHeader`]).
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings
            .headers
            .push((name.into(), SecretString::from(value.into())));
        self
    }

    /// The base URL, including `/v1` (`http://localhost:11434/v1` for Ollama,
    /// `http://localhost:8000/v1` for vLLM).
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.settings.base_url = Some(url.into());
        self
    }

    /// The API key, sent as `Authorization: Bearer …`.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<SecretString>) -> Self {
        self.settings.api_key = Some(key.into());
        self
    }

    /// A limit on each whole call (connect, send, wait, read); none by default. Timeouts
    /// are retryable ([`RetryPolicy`](crate::retry::RetryPolicy)).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = Some(timeout);
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

    /// The client, over reqwest (following no redirect). Fails without an API key when
    /// the base URL is [`DEFAULT_BASE_URL`] (a server elsewhere may need none), or with
    /// an invalid base URL.
    pub fn build(self) -> Result<OpenAi, ConfigError> {
        let transport = self.settings.transport()?;
        self.build_with_transport(transport)
    }

    /// The client over another transport (the timeout setting is then the transport's
    /// business; the body limit is still checked on the body it returns).
    pub fn build_with_transport<T>(self, transport: T) -> Result<OpenAi<T>, ConfigError> {
        let redactor = self.settings.redactor(DEFAULT_BASE_URL);
        let url = base_url(
            self.settings
                .base_url
                .as_deref()
                .unwrap_or(DEFAULT_BASE_URL),
            &redactor,
        )?;
        if self.settings.api_key.is_none() && url == DEFAULT_BASE_URL {
            return Err(ConfigError::MissingApiKey { var: API_KEY_VAR });
        }
        let headers = self.settings.header_map(OWN_HEADERS)?;
        Ok(OpenAi {
            transport,
            shared: Arc::new(ClientState {
                endpoint: format!("{url}/chat/completions"),
                shown_url: redactor.url(&url),
                base_url: url,
                api_key: self.settings.api_key,
                headers,
                reading: Reading {
                    redactor,
                    max_response_bytes: self.settings.max_response_bytes,
                },
            }),
        })
    }
}

impl<T> Service<ChatRequest> for OpenAi<T>
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
            Provider::OpenAi,
            &self.shared.reading.redactor,
        )
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let http = match self.http_request(&req, false) {
            Ok(h) => h,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        log_request(Provider::OpenAi, &req, false);
        let sent = self.transport.call(http);
        let shared = self.shared.clone();
        Box::pin(async move {
            let body: CreateChatCompletionResponse =
                exchange(Provider::OpenAi, sent, &shared.reading).await?;
            convert::response(body)
        })
    }
}

/// A streamed call (`stream: true`, usage included): see
/// [`stream`](llm_context_layers::stream). The future resolves once the first event has
/// been read; what fails before that (an error status, a cut connection) is its error,
/// so a retry layer retries only before anything reached the caller.
impl<T> Service<Streaming> for OpenAi<T>
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
            Provider::OpenAi,
            &self.shared.reading.redactor,
        )
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let http = self.http_request(&req.0, true);
        let shared = self.shared.clone();
        let decoder = OpenAiDecoder::default();
        sse::call(
            Provider::OpenAi,
            &mut self.transport,
            &req.0,
            http,
            shared,
            decoder,
        )
    }
}

impl AsRef<Reading> for ClientState {
    fn as_ref(&self) -> &Reading {
        &self.reading
    }
}

impl<T> OpenAi<T> {
    /// The `POST {base}/chat/completions` of `req`, asking for a stream (with its
    /// usage) when `stream`.
    fn http_request(&self, req: &ChatRequest, stream: bool) -> Result<HttpRequest, ProviderError> {
        let mut body = convert::request(req)?;
        if stream {
            body.extra
                .insert("stream".into(), serde_json::Value::Bool(true));
            body.extra.insert(
                "stream_options".into(),
                serde_json::json!({"include_usage": true}),
            );
        }
        let mut headers = Vec::with_capacity(1);
        if let Some(key) = &self.shared.api_key {
            headers.push((
                "authorization",
                format!("Bearer {}", key.expose_secret()),
                true,
            ));
        }
        post_json(
            Provider::OpenAi,
            &self.shared.endpoint,
            &headers,
            &self.shared.headers,
            &body,
        )
    }
}
