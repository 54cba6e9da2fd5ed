//! The Chat Completions API of OpenAI as a [`Client`]'s [`Api`], and its own settings.

use secrecy::{ExposeSecret, SecretString};

use crate::catalog::Provider;
use crate::client::{Api, Builder, Client, ConfigError, Settings, Speaks};
use crate::error::ProviderError;
use crate::transport::{RequestBody, ReqwestTransport};
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
pub(crate) enum Body {
    Rendered(Box<CreateChatCompletionRequest>),
    #[cfg(feature = "serve")]
    Faithful(Faithful),
}

/// A Chat Completions caller's body as it goes back: its top-level fields, which the
/// client still edits (the stream's options, the cache key), and its messages already
/// written as JSON text, straight from the model: a tree of a transcript's messages
/// (written, read back and written again) cost more than the rest of the proxy's work on
/// an agent's request.
#[cfg(feature = "serve")]
pub(crate) struct Faithful {
    fields: serde_json::Map<String, serde_json::Value>,
    messages: Vec<u8>,
}

#[cfg(feature = "serve")]
impl Faithful {
    /// The body's bytes: the fields, then the messages (where the tree put them).
    fn to_vec(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut out = Vec::with_capacity(self.messages.len() + 4096);
        out.push(b'{');
        for (k, v) in &self.fields {
            serde_json::to_writer(&mut out, k)?;
            out.push(b':');
            serde_json::to_writer(&mut out, v)?;
            out.push(b',');
        }
        out.extend_from_slice(b"\"messages\":");
        out.extend_from_slice(&self.messages);
        out.push(b'}');
        Ok(out)
    }
}

/// The body of a request a proxy read from a Chat Completions caller, written back as it
/// came but for the stack's edits, with the stack's `prompt_cache_key` when the caller
/// set none and the request has a stable head.
#[cfg(feature = "serve")]
fn faithful(req: &ChatRequest) -> Option<Faithful> {
    use crate::wire::chat_completions::body::{BodyContext, fields_of_request, messages_text};
    if req.params.extra_format != Some(llm_context_layers::WireFormat::ChatCompletions) {
        return None;
    }
    let ctx = req.params.origin.as_ref()?.get::<BodyContext>()?;
    let mut fields = fields_of_request(req);
    if !fields.contains_key("prompt_cache_key")
        && let Some(key) = convert::cache_key(req)
    {
        fields.insert("prompt_cache_key".into(), key.into());
    }
    if req.tools.is_empty() {
        // Only valid with tools; a body whose tools were all removed must drop them.
        fields.remove("tool_choice");
        fields.remove("parallel_tool_calls");
    }
    let mut messages = Vec::new();
    messages_text(req, ctx, &mut messages);
    Some(Faithful { fields, messages })
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
            let fields = &mut body.fields;
            // A streamed call asks for the usage, which the proxy meters, whatever the
            // caller asked (its other stream options kept); an unstreamed one is sent as
            // the caller wrote it, `"stream": false` included.
            if stream {
                fields.insert("stream".into(), serde_json::Value::Bool(true));
                let options = fields
                    .entry("stream_options")
                    .or_insert_with(|| serde_json::json!({}));
                if !options.is_object() {
                    *options = serde_json::json!({});
                }
                options["include_usage"] = serde_json::Value::Bool(true);
            } else if fields.get("stream") == Some(&serde_json::Value::Bool(true)) {
                fields.remove("stream");
                fields.remove("stream_options");
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

    fn encode(body: Body) -> Result<RequestBody, serde_json::Error> {
        match body {
            Body::Rendered(body) => serde_json::to_vec(&body).map(RequestBody::from),
            #[cfg(feature = "serve")]
            Body::Faithful(body) => body.to_vec().map(RequestBody::from),
        }
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

#[cfg(all(test, feature = "serve"))]
mod tests {
    use super::*;
    use crate::wire::chat_completions::body::{BodyContext, body_from_request, request_from_str};
    use serde_json::{Value, json};

    /// `text` read as the proxy reads it, then edited by `edit`.
    fn read(text: &str, edit: impl FnOnce(&mut ChatRequest)) -> (ChatRequest, BodyContext) {
        let (mut req, ctx) = request_from_str(text).unwrap();
        req.params.origin = Some(llm_context_layers::Origin::new(ctx.clone()));
        edit(&mut req);
        (req, ctx)
    }

    /// The body sent, as bytes: the fields, then the messages written without a tree.
    fn sent(req: &ChatRequest, stream: bool) -> Vec<u8> {
        let body = ChatCompletionsApi::body(req, &(), stream).unwrap();
        assert!(
            matches!(body, Body::Faithful(_)),
            "not written back faithfully"
        );
        ChatCompletionsApi::encode(body)
            .unwrap()
            .to_bytes()
            .to_vec()
    }

    #[test]
    fn the_messages_go_as_the_tree_wrote_them_byte_for_byte() {
        let text = json!({
            "model": "gpt-5.4",
            "messages": [
                {"role": "developer", "content": "Be brief.", "x_note": {"b": 1, "a": [1.5, 2]}},
                {"role": "user", "content": [{"type": "text", "text": "héllo \u{1F600} \"q\""}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
                    "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "x".repeat(3000)},
                {"role": "user", "content": "and now?", "name": "ann"}
            ],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
            "temperature": 0.5,
            "user_field": [1, 2, 3]
        })
        .to_string();
        // Unchanged, a result cleared, and the oldest turn pruned: each as the tree wrote it.
        let edits: [fn(&mut ChatRequest); 3] = [
            |_| {},
            |r| r.messages[3].content = llm_context_layers::Content::Text("[cleared]".into()),
            |r| {
                r.messages.drain(1..4);
            },
        ];
        for edit in edits {
            let (req, ctx) = read(&text, edit);
            let tree = body_from_request(&req, &ctx);
            let bytes = sent(&req, false);
            let got: Value = serde_json::from_slice(&bytes).unwrap();
            // The messages, byte for byte as the tree serialized them.
            let expected = serde_json::to_string(&tree["messages"]).unwrap();
            assert!(
                String::from_utf8_lossy(&bytes).contains(&format!("\"messages\":{expected}}}")),
                "{}",
                String::from_utf8_lossy(&bytes)
            );
            // The fields: the tree's, plus the stack's cache key.
            let mut fields = got.as_object().unwrap().clone();
            fields.remove("prompt_cache_key");
            assert_eq!(Value::Object(fields), tree);
        }
    }

    #[test]
    fn a_members_own_bytes_go_as_written_and_the_body_is_the_clients() {
        // Pretty-printed, with escapes, an exponent and a number past f64: an unknown
        // member is sent as its own bytes, not as a tree's rendering of them.
        let text = r#"{
          "model": "gpt-5.4",
          "messages": [
            {"role": "user", "content": "caf\u00e9", "x_note": { "b" : 1,  "a": [1.5e0, "\u00e9", 1e400] }},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "and?"}
          ]
        }"#;
        let (req, _) = read(text, |_| {});
        let bytes = sent(&req, false);
        let shown = String::from_utf8(bytes).unwrap();
        assert!(
            shown.contains(r#"{ "b" : 1,  "a": [1.5e0, "\u00e9", 1e400] }"#),
            "{shown}"
        );
        // Otherwise the client's body, but for the stack's cache key (compared as trees,
        // 1e400 aside: a tree refuses it as out of range; the old tree-built path sent
        // the whole message as `null` for it).
        let client: Value = serde_json::from_str(&text.replace("1e400", "1")).unwrap();
        let mut got: Value = serde_json::from_str(&shown.replace("1e400", "1")).unwrap();
        got.as_object_mut().unwrap().remove("prompt_cache_key");
        assert_eq!(got, client);
    }

    #[test]
    fn a_stream_asks_for_usage_and_keeps_the_callers_other_stream_options() {
        let text = json!({"model": "gpt-5.4", "stream": true,
            "stream_options": {"include_obfuscation": false},
            "messages": [{"role": "user", "content": "hi"}]})
        .to_string();
        let (req, _) = read(&text, |_| {});
        let streamed: Value = serde_json::from_slice(&sent(&req, true)).unwrap();
        assert_eq!(
            streamed["stream_options"],
            json!({"include_obfuscation": false, "include_usage": true})
        );
        let plain: Value = serde_json::from_slice(&sent(&req, false)).unwrap();
        assert!(plain.get("stream").is_none() && plain.get("stream_options").is_none());
        assert_eq!(
            plain["messages"],
            json!([{"role": "user", "content": "hi"}])
        );
    }
}
