//! The Messages API of Anthropic as a [`Client`]'s [`Api`], and its own settings.

use secrecy::{ExposeSecret, SecretString};

use crate::catalog::Provider;
use crate::client::{Api, Builder, Client, ConfigError, Settings, Speaks};
use crate::error::ProviderError;
use crate::transport::{RequestBody, ReqwestTransport};
use crate::wire::messages::convert;
use crate::wire::messages::stream::AnthropicDecoder;
use crate::wire::messages::types::CreateMessageRequest;
#[cfg(not(feature = "serve"))]
use crate::wire::messages::types::MessageResponse;
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
/// The `anthropic-version` header sent.
pub const API_VERSION: &str = "2023-06-01";
/// The output limit sent when the request sets none (the API requires one).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4_096;

/// Anthropic's Messages API, `POST {base}/v1/messages`: the [`Api`] of [`Anthropic`]. A
/// type-level name only (it has no values).
#[derive(Debug)]
pub enum MessagesApi {}

/// An Anthropic Messages client: a `Service<ChatRequest>`. See the [module docs](super),
/// and [`Client`] for its methods.
pub type Anthropic<T = ReqwestTransport> = Client<MessagesApi, T>;

/// Builds an [`Anthropic`] client: see [`Builder`] for the settings every client has.
///
/// [`from_env`](Builder::from_env) reads [`BASE_URL_VAR`], [`API_KEY_VAR`] and a bearer
/// token from [`AUTH_TOKEN_VAR`]. Building fails with neither a key nor a token
/// ([`ConfigError::MissingApiKey`]).
pub type AnthropicBuilder = Builder<MessagesApi>;

/// The Messages API's own settings.
#[derive(Debug)]
pub(crate) struct Options {
    auth_token: Option<SecretString>,
    default_max_tokens: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            auth_token: None,
            default_max_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
        }
    }
}

impl Api for MessagesApi {}

/// A request body: written from the neutral request, or a Messages caller's own.
pub(crate) enum Body {
    Rendered(CreateMessageRequest),
    #[cfg(feature = "serve")]
    Faithful(crate::wire::messages::faithful::Body),
}

impl Speaks for MessagesApi {
    const NAME: &'static str = "Anthropic";
    const PROVIDER: Provider = Provider::Anthropic;
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const API_KEY_VAR: &'static str = API_KEY_VAR;
    const BASE_URL_VAR: &'static str = BASE_URL_VAR;
    const OWN_HEADERS: &'static [&'static str] =
        &["x-api-key", "authorization", "anthropic-version"];
    const PATH: &'static str = "/v1/messages";
    const FORMAT: llm_context_layers::WireFormat = llm_context_layers::WireFormat::Messages;

    type Options = Options;
    type Body = Body;
    #[cfg(feature = "serve")]
    type Response = crate::wire::served::Answered<crate::wire::messages::types::MessageResponse>;
    #[cfg(not(feature = "serve"))]
    type Response = MessageResponse;
    type Decoder = AnthropicDecoder;

    fn from_env(_settings: &mut Settings, options: &mut Options) {
        options.auth_token = crate::client::env(AUTH_TOKEN_VAR).map(SecretString::from);
    }

    fn secret(options: &Options) -> Option<&SecretString> {
        options.auth_token.as_ref()
    }

    fn check(settings: &Settings, options: &Options, _url: &str) -> Result<(), ConfigError> {
        if settings.api_key.is_none() && options.auth_token.is_none() {
            return Err(ConfigError::MissingApiKey { var: API_KEY_VAR });
        }
        Ok(())
    }

    /// Both a key and a token when both are set, as Anthropic's SDKs send them.
    fn credentials(
        api_key: Option<&SecretString>,
        options: &Options,
    ) -> Vec<(&'static str, String, bool)> {
        let mut headers = Vec::with_capacity(3);
        if let Some(key) = api_key {
            headers.push(("x-api-key", key.expose_secret().to_owned(), true));
        }
        if let Some(token) = &options.auth_token {
            headers.push((
                "authorization",
                format!("Bearer {}", token.expose_secret()),
                true,
            ));
        }
        headers.push(("anthropic-version", API_VERSION.to_owned(), false));
        headers
    }

    fn body(req: &ChatRequest, options: &Options, stream: bool) -> Result<Body, ProviderError> {
        // A Messages caller's body, through a proxy: its own bytes but for the edits.
        #[cfg(feature = "serve")]
        if let Some(mut body) = crate::wire::messages::faithful::body(req)? {
            if stream {
                body.stream();
            }
            return Ok(Body::Faithful(body));
        }
        let mut body = convert::request(req, options.default_max_tokens)?;
        if stream {
            body.extra
                .insert("stream".into(), serde_json::Value::Bool(true));
        }
        Ok(Body::Rendered(body))
    }

    fn encode(body: Body) -> Result<RequestBody, serde_json::Error> {
        match body {
            Body::Rendered(body) => serde_json::to_vec(&body).map(RequestBody::from),
            #[cfg(feature = "serve")]
            Body::Faithful(body) => body.pieces(),
        }
    }

    #[cfg(feature = "serve")]
    fn response(body: Self::Response) -> Result<ChatResponse, ProviderError> {
        use crate::wire::served::AsGiven;
        let response = convert::response(body.typed);
        Ok(AsGiven::keep(Self::FORMAT, response, body.raw))
    }

    #[cfg(not(feature = "serve"))]
    fn response(body: MessageResponse) -> Result<ChatResponse, ProviderError> {
        Ok(convert::response(body))
    }
}

impl Builder<MessagesApi> {
    /// A bearer token, sent as `Authorization: Bearer …` (Anthropic-compatible gateways
    /// take one instead of a key); with a key too, both are sent, as Anthropic's SDKs do.
    #[must_use]
    pub fn auth_token(mut self, token: impl Into<SecretString>) -> Self {
        self.options.auth_token = Some(token.into());
        self
    }

    /// The `max_tokens` sent when a request sets no output limit (default
    /// [`DEFAULT_MAX_OUTPUT_TOKENS`]).
    #[must_use]
    pub fn default_max_tokens(mut self, n: u32) -> Self {
        self.options.default_max_tokens = n;
        self
    }
}

impl<T> Anthropic<T> {
    /// A JSON POST to `{base}{path}` (another endpoint of the API: token counting).
    pub(super) fn post(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<crate::transport::HttpRequest, ProviderError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| crate::client::unsupported(Provider::Anthropic, e.to_string()))?;
        self.post_with(
            &format!("{}{path}", self.base_url()),
            (body.into(), None),
            std::iter::empty(),
        )
    }
}
