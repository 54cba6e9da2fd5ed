//! OpenAI's Responses API as a [`Client`]'s [`Api`]: [`OpenAiResponses`].

use secrecy::SecretString;
use serde_json::Value;

use super::client::{API_KEY_VAR, BASE_URL_VAR, ChatCompletionsApi, DEFAULT_BASE_URL};
use crate::catalog::Provider;
use crate::client::{Api, Builder, Client, ConfigError, Settings, Speaks, unsupported};
use crate::error::ProviderError;
use crate::transport::{RequestBody, ReqwestTransport};
use crate::wire::chat_completions::convert::cache_key;
use crate::wire::responses::answer;
use crate::wire::responses::stream::ResponsesDecoder;
use crate::wire::responses::write::rendered;
use llm_context_layers::{ChatRequest, ChatResponse, WireFormat};

/// OpenAI's Responses API, `POST {base}/responses`: the [`Api`] of [`OpenAiResponses`].
/// A type-level name only (it has no values).
#[derive(Debug)]
pub enum ResponsesApi {}

/// An OpenAI Responses API client: a `Service<ChatRequest>` (and `Service<Streaming>`),
/// with the settings, retries, redaction and response limit every [`Client`] has.
///
/// The request is written as the Responses API takes it: leading system messages (and
/// the prefix's) as `instructions`, the rest as items (a tool call a `function_call`,
/// its result a `function_call_output` paired by `call_id`), and the answer read back
/// with its reasoning items kept whole in the message, so a transcript that appends the
/// message sends them back, as OpenAI asks for its reasoning models. Usage:
/// `input_tokens` includes the cached ones, kept apart in the neutral
/// [`Usage`](crate::Usage).
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::BoxError> {
/// use llm_context::openai::OpenAiResponses;
/// use llm_context::{ChatRequest, ContextPolicy, Message, ServiceBuilderExt};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// let model = ServiceBuilder::new()
///     .context_policy(ContextPolicy::default())?
///     .service(OpenAiResponses::from_env()?); // OPENAI_API_KEY, OPENAI_BASE_URL
/// let reply = model
///     .oneshot(ChatRequest::new("gpt-5.5", vec![Message::user("Say hi.")]))
///     .await?;
/// println!("{} ({:?})", reply.message.text(), reply.usage);
/// # Ok(()) }
/// ```
pub type OpenAiResponses<T = ReqwestTransport> = Client<ResponsesApi, T>;

/// Builds an [`OpenAiResponses`] client: the settings and environment of
/// [`OpenAiBuilder`](super::OpenAiBuilder).
pub type OpenAiResponsesBuilder = Builder<ResponsesApi>;

impl Api for ResponsesApi {}

impl Speaks for ResponsesApi {
    const NAME: &'static str = "OpenAiResponses";
    const PROVIDER: Provider = Provider::OpenAi;
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const API_KEY_VAR: &'static str = API_KEY_VAR;
    const BASE_URL_VAR: &'static str = BASE_URL_VAR;
    const OWN_HEADERS: &'static [&'static str] = ChatCompletionsApi::OWN_HEADERS;
    const PATH: &'static str = "/responses";
    const FORMAT: WireFormat = WireFormat::Responses;

    type Options = ();
    type Body = Vec<u8>;
    type Response = Value;
    type Decoder = ResponsesDecoder;

    fn from_env(settings: &mut Settings, options: &mut ()) {
        ChatCompletionsApi::from_env(settings, options);
    }

    fn check(settings: &Settings, options: &(), url: &str) -> Result<(), ConfigError> {
        ChatCompletionsApi::check(settings, options, url)
    }

    fn credentials(
        api_key: Option<&SecretString>,
        options: &(),
    ) -> Vec<(&'static str, String, bool)> {
        ChatCompletionsApi::credentials(api_key, options)
    }

    /// A Responses caller's body, through a proxy: as it came but for the stack's edits
    /// (with the stack's `prompt_cache_key` when the caller set none). Else one written
    /// from the request, with that key.
    fn body(req: &ChatRequest, (): &(), stream: bool) -> Result<Vec<u8>, ProviderError> {
        #[cfg(feature = "serve")]
        if let Some(kept) = req
            .params
            .origin
            .as_ref()
            .and_then(|o| o.get::<crate::wire::responses::read::Kept>())
            .filter(|_| req.params.extra_format == Some(WireFormat::Responses))
        {
            return crate::wire::responses::faithful::faithful(req, kept, stream, cache_key(req));
        }
        let mut body = rendered(req, stream)?;
        if body.get("prompt_cache_key").is_none()
            && let Some(key) = cache_key(req)
        {
            body["prompt_cache_key"] = key.into();
        }
        serde_json::to_vec(&body).map_err(|e| unsupported(Provider::OpenAi, e.to_string()))
    }

    fn encode(body: Vec<u8>) -> Result<RequestBody, serde_json::Error> {
        Ok(body.into())
    }

    fn response(body: Value) -> Result<ChatResponse, ProviderError> {
        let response = answer::response(&body)?;
        #[cfg(feature = "serve")]
        let response = crate::wire::served::AsGiven::keep(Self::FORMAT, response, body);
        Ok(response)
    }
}

/// The Responses client of an OpenAI client's settings.
#[cfg(feature = "serve")]
pub(crate) fn responses_of<T: Clone>(
    client: &Client<ChatCompletionsApi, T>,
) -> Client<ResponsesApi, T> {
    client.sibling()
}
