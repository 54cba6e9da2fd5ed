//! The Chat Completions API of OpenAI as a [`Client`]'s [`Api`], and its own settings.

use secrecy::{ExposeSecret, SecretString};

use crate::catalog::Provider;
use crate::client::{Api, Builder, Client, ConfigError, Settings, Speaks};
use crate::error::ProviderError;
use crate::transport::ReqwestTransport;
use crate::wire::chat_completions::convert;
use crate::wire::chat_completions::stream::OpenAiDecoder;
use crate::wire::chat_completions::types::{
    CreateChatCompletionRequest, CreateChatCompletionResponse,
};
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

/// OpenAI's Chat Completions API, `POST {base}/chat/completions`: the [`Api`] of
/// [`OpenAi`]. A type-level name only (it has no values).
#[derive(Debug)]
pub enum ChatCompletionsApi {}

/// An OpenAI-compatible Chat Completions client: a `Service<ChatRequest>`. See the
/// [module docs](super), and [`Client`] for its methods.
pub type OpenAi<T = ReqwestTransport> = Client<ChatCompletionsApi, T>;

/// Builds an [`OpenAi`] client: see [`Builder`] for the settings every client has.
///
/// [`from_env`](Builder::from_env) reads [`BASE_URL_VAR`] and [`API_KEY_VAR`], and
/// [`ORG_ID_VAR`] and [`PROJECT_ID_VAR`] as the `OpenAI-Organization` and
/// `OpenAI-Project` headers, as OpenAI's SDKs do. A missing key is an error
/// ([`ConfigError::MissingApiKey`]) only when the base URL is [`DEFAULT_BASE_URL`]: a
/// local server (vLLM, Ollama, …) may need none.
pub type OpenAiBuilder = Builder<ChatCompletionsApi>;

impl Api for ChatCompletionsApi {}

/// A request body: written from the neutral request, or a Chat Completions caller's own.
#[derive(serde::Serialize)]
#[serde(untagged)]
pub(crate) enum Body {
    Rendered(Box<CreateChatCompletionRequest>),
    #[cfg(feature = "serve")]
    Faithful(serde_json::Map<String, serde_json::Value>),
}

/// The body of a request a proxy read from a Chat Completions caller, written back as it
/// came but for the stack's edits, with the stack's `prompt_cache_key` when the caller
/// set none and the request has a stable head.
#[cfg(feature = "serve")]
fn faithful(req: &ChatRequest) -> Option<serde_json::Map<String, serde_json::Value>> {
    use crate::wire::chat_completions::body::{BodyContext, body_from_request};
    if req.params.extra_format != Some(llm_context_layers::WireFormat::ChatCompletions) {
        return None;
    }
    let ctx = req.params.origin.as_ref()?.get::<BodyContext>()?;
    let serde_json::Value::Object(mut body) = body_from_request(req, ctx) else {
        return None;
    };
    if !body.contains_key("prompt_cache_key")
        && let Some(key) = convert::cache_key(req)
    {
        body.insert("prompt_cache_key".into(), key.into());
    }
    if req.tools.is_empty() {
        // Only valid with tools; a body whose tools were all removed must drop them.
        body.remove("tool_choice");
        body.remove("parallel_tool_calls");
    }
    Some(body)
}

impl Speaks for ChatCompletionsApi {
    const NAME: &'static str = "OpenAi";
    const PROVIDER: Provider = Provider::OpenAi;
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const API_KEY_VAR: &'static str = API_KEY_VAR;
    const BASE_URL_VAR: &'static str = BASE_URL_VAR;
    const OWN_HEADERS: &'static [&'static str] = &["authorization"];
    const PATH: &'static str = "/chat/completions";
    const FORMAT: llm_context_layers::WireFormat = llm_context_layers::WireFormat::ChatCompletions;

    type Options = ();
    type Body = Body;
    #[cfg(feature = "serve")]
    type Response = crate::wire::served::Answered<CreateChatCompletionResponse>;
    #[cfg(not(feature = "serve"))]
    type Response = CreateChatCompletionResponse;
    type Decoder = OpenAiDecoder;

    fn from_env(settings: &mut Settings, (): &mut ()) {
        for (var, header) in [
            (ORG_ID_VAR, "openai-organization"),
            (PROJECT_ID_VAR, "openai-project"),
        ] {
            if let Some(value) = crate::client::env(var) {
                settings
                    .headers
                    .push((header.to_owned(), SecretString::from(value)));
            }
        }
    }

    fn check(settings: &Settings, (): &(), url: &str) -> Result<(), ConfigError> {
        if settings.api_key.is_none() && url == DEFAULT_BASE_URL {
            return Err(ConfigError::MissingApiKey { var: API_KEY_VAR });
        }
        Ok(())
    }

    fn credentials(api_key: Option<&SecretString>, (): &()) -> Vec<(&'static str, String, bool)> {
        api_key
            .map(|key| {
                (
                    "authorization",
                    format!("Bearer {}", key.expose_secret()),
                    true,
                )
            })
            .into_iter()
            .collect()
    }

    /// With `stream`, usage is asked for too (`stream_options.include_usage`).
    fn body(req: &ChatRequest, (): &(), stream: bool) -> Result<Body, ProviderError> {
        // A Chat Completions caller's body, through a proxy: written back with what the
        // reader kept beside each message (unknown fields, `developer`, …).
        #[cfg(feature = "serve")]
        if let Some(mut body) = faithful(req) {
            // A streamed call asks for the usage, which the proxy meters, whatever the
            // caller asked (its other stream options kept); an unstreamed one is sent as
            // the caller wrote it, `"stream": false` included.
            if stream {
                body.insert("stream".into(), serde_json::Value::Bool(true));
                let options = body
                    .entry("stream_options")
                    .or_insert_with(|| serde_json::json!({}));
                if !options.is_object() {
                    *options = serde_json::json!({});
                }
                options["include_usage"] = serde_json::Value::Bool(true);
            } else if body.get("stream") == Some(&serde_json::Value::Bool(true)) {
                body.remove("stream");
                body.remove("stream_options");
            }
            return Ok(Body::Faithful(body));
        }
        let mut body = convert::request(req)?;
        if stream {
            body.extra
                .insert("stream".into(), serde_json::Value::Bool(true));
            body.extra.insert(
                "stream_options".into(),
                serde_json::json!({"include_usage": true}),
            );
        }
        Ok(Body::Rendered(Box::new(body)))
    }

    fn encode(body: &Body) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(body)
    }

    #[cfg(feature = "serve")]
    fn response(body: Self::Response) -> Result<ChatResponse, ProviderError> {
        use crate::wire::served::AsGiven;
        let response = convert::response(body.typed)?;
        Ok(AsGiven::keep(Self::FORMAT, response, body.raw))
    }

    #[cfg(not(feature = "serve"))]
    fn response(body: CreateChatCompletionResponse) -> Result<ChatResponse, ProviderError> {
        convert::response(body)
    }
}

impl Builder<ChatCompletionsApi> {
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
}
