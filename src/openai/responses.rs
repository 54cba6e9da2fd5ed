//! OpenAI's Responses API as a [`Client`]'s [`Api`]: what the proxy calls for a caller of
//! that format, so that its body reaches OpenAI as it came but for the stack's edits.

use secrecy::SecretString;
use serde_json::Value;

use super::client::{API_KEY_VAR, BASE_URL_VAR, ChatCompletionsApi, DEFAULT_BASE_URL};
use crate::catalog::Provider;
use crate::client::{Api, Client, ConfigError, Settings, Speaks};
use crate::error::ProviderError;
use crate::wire::chat_completions::convert::cache_key;
use crate::wire::responses::answer;
use crate::wire::responses::read::Kept;
use crate::wire::responses::stream::ResponsesDecoder;
use crate::wire::responses::write::{faithful, rendered};
use crate::wire::served::AsGiven;
use llm_context_layers::{ChatRequest, ChatResponse, WireFormat};

/// OpenAI's Responses API, `POST {base}/responses`. A type-level name only.
#[derive(Debug)]
pub(crate) enum ResponsesApi {}

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

    /// A Responses caller's body, as it came but for the stack's edits (with the stack's
    /// `prompt_cache_key` when the caller set none); else one written from the request.
    fn body(req: &ChatRequest, (): &(), stream: bool) -> Result<Vec<u8>, ProviderError> {
        let kept = req
            .params
            .origin
            .as_ref()
            .and_then(|o| o.get::<Kept>())
            .filter(|_| req.params.extra_format == Some(WireFormat::Responses));
        match kept {
            Some(kept) => faithful(req, kept, stream, cache_key(req)),
            None => {
                let mut body = rendered(req, stream)?;
                if body.get("prompt_cache_key").is_none()
                    && let Some(key) = cache_key(req)
                {
                    body["prompt_cache_key"] = key.into();
                }
                serde_json::to_vec(&body)
                    .map_err(|e| crate::client::unsupported(Provider::OpenAi, e.to_string()))
            }
        }
    }

    fn encode(body: &Vec<u8>) -> Result<Vec<u8>, serde_json::Error> {
        Ok(body.clone())
    }

    fn response(body: Value) -> Result<ChatResponse, ProviderError> {
        let response = answer::response(&body)?;
        Ok(AsGiven::keep(Self::FORMAT, response, body))
    }
}

/// The Responses client of an OpenAI client's settings.
pub(crate) fn responses_of<T: Clone>(
    client: &Client<ChatCompletionsApi, T>,
) -> Client<ResponsesApi, T> {
    client.sibling()
}
