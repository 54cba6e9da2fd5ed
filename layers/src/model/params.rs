//! Generation parameters: what the provider is asked besides the messages and tools,
//! typed where every format has the field, and the rest passed through, tagged with the
//! wire format it is written in.
//!
//! ```
//! use llm_context_layers::{GenerationParams, ToolChoice, WireFormat};
//!
//! let mut params = GenerationParams::default();
//! params.tool_choice = Some(ToolChoice::tool("get_weather"));
//! params.parallel_tool_calls = Some(false);
//! // A field of an Anthropic body the neutral model does not type: sent on to Anthropic,
//! // never to an OpenAI upstream that has no such field.
//! params.extra.insert("top_k".into(), serde_json::json!(5));
//! params.extra_format = Some(WireFormat::Messages);
//! assert_eq!(
//!     serde_json::to_value(&params.tool_choice).unwrap(),
//!     serde_json::json!({"type": "tool", "name": "get_weather"})
//! );
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Generation parameters, passed to the provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct GenerationParams {
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// The provider's output limit (`max_completion_tokens` / `max_tokens`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Seed for providers that support deterministic sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// How the model may use the tools. Only sent with tools: a request whose tools were
    /// all removed sends none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn (OpenAI
    /// `parallel_tool_calls`; Anthropic's `disable_parallel_tool_use` is its negation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Other fields, passed through (ordered, so bytes are stable).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
    /// The wire format `extra` is written in, when it came from a body of that format. A
    /// client of that format sends every field on; a client of another format sends only
    /// the fields its own format defines (so a Messages body's `top_k` never reaches an
    /// OpenAI upstream). `None`: fields the caller set by hand: the OpenAI client sends
    /// them all (a compatible server may take fields of its own), the Anthropic client
    /// those the Messages API has; tag them `Messages` to send Anthropic a field newer
    /// than its list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_format: Option<WireFormat>,
    /// HTTP headers to pass on to the provider as the caller's client sent them, in order
    /// (a proxy's: `anthropic-beta`, `OpenAI-Organization`, `x-…`, `user-agent`). Written
    /// as `extra` is: every one by a client of `extra_format`'s format; by a client of
    /// another format only those that name no provider (not `anthropic-…` or
    /// `openai-…`), and, when set by hand, those naming its own (see
    /// [`headers_for`](Self::headers_for)).
    /// A client's own credentials and settings win over them. Not serialized; the memo
    /// key holds the `anthropic-…` and `openai-…` ones, which can change the answer, and
    /// not the others (a request id differs on every call).
    #[serde(skip)]
    pub headers: Vec<(String, String)>,
    /// The caller's query string (`beta=true`), passed on by a client of `extra_format`'s
    /// format. Not serialized; in the memo key.
    #[serde(skip)]
    pub query: Option<String>,
    /// The body the request was read from, kept by a proxy's reader for the client of
    /// that body's format, which sends it back as written but for the stack's edits
    /// (removed, cleared and offloaded messages, added tools and breakpoints). Opaque to
    /// the layers; not serialized, not compared, not in the memo key.
    #[serde(skip)]
    pub origin: Option<Origin>,
}

/// What a proxy's reader kept of a request's body, shared by the request's clones: see
/// [`GenerationParams::origin`]. Values of distinct types, each found by its type. Equal
/// to every other (a request's equality is its content's).
///
/// ```
/// use llm_context_layers::Origin;
///
/// let origin = Origin::new(7_u32).with("the body as it came");
/// assert_eq!(origin.get::<u32>(), Some(&7));
/// assert_eq!(origin.get::<&str>(), Some(&"the body as it came"));
/// assert_eq!(origin.get::<u8>(), None);
/// ```
#[derive(Clone)]
pub struct Origin(std::sync::Arc<[Kept]>);

type Kept = std::sync::Arc<dyn std::any::Any + Send + Sync>;

impl Origin {
    /// Keeps `kept`.
    pub fn new(kept: impl std::any::Any + Send + Sync) -> Self {
        Self(std::sync::Arc::new([std::sync::Arc::new(kept) as Kept]))
    }

    /// Keeps `more` too, beside what was kept (a value of a type already kept is found
    /// after it, never by [`get`](Self::get)). The kept values are shared, not copied.
    #[must_use]
    pub fn with(self, more: impl std::any::Any + Send + Sync) -> Self {
        let mut all: Vec<Kept> = self.0.iter().cloned().collect();
        all.push(std::sync::Arc::new(more));
        Self(all.into())
    }

    /// What was kept, if it is a `T`.
    pub fn get<T: std::any::Any>(&self) -> Option<&T> {
        self.0.iter().find_map(|kept| kept.downcast_ref())
    }
}

impl PartialEq for Origin {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Origin(..)")
    }
}

impl GenerationParams {
    /// The headers of [`headers`](Self::headers) that can change an answer: those naming a
    /// provider (`anthropic-beta`, `anthropic-version`, `openai-…`).
    pub fn shaping_headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .filter(|(n, _)| names_a_provider(n))
    }

    /// The headers of [`headers`](Self::headers) a client of `format` sends: all of them
    /// when they came in that format; those that name no provider when they came in
    /// another; and when they were set by hand (`extra_format` unset), those that name no
    /// provider or name `format`'s own (`anthropic-…` to a Messages upstream: a beta set
    /// for the provider's edits).
    ///
    /// ```
    /// use llm_context_layers::{GenerationParams, WireFormat};
    ///
    /// let mut params = GenerationParams::default();
    /// params.headers.push(("anthropic-beta".into(), "context-management-2025-06-27".into()));
    /// params.headers.push(("openai-organization".into(), "org-1".into()));
    /// let names = |p: &GenerationParams, f| p.headers_for(f).map(|(n, _)| n.to_owned()).collect::<Vec<_>>();
    /// assert_eq!(names(&params, WireFormat::Messages), ["anthropic-beta"]);
    /// assert_eq!(names(&params, WireFormat::ChatCompletions), ["openai-organization"]);
    /// // Headers a Chat Completions client sent: no provider gets another's.
    /// params.extra_format = Some(WireFormat::ChatCompletions);
    /// assert!(names(&params, WireFormat::Messages).is_empty());
    /// ```
    pub fn headers_for(&self, format: WireFormat) -> impl Iterator<Item = (&str, &str)> {
        let own = self.extra_format == Some(format);
        let by_hand = self.extra_format.is_none();
        let prefix = match format {
            WireFormat::ChatCompletions | WireFormat::Responses => "openai-",
            WireFormat::Messages => "anthropic-",
        };
        self.headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .filter(move |(n, _)| {
                own || !names_a_provider(n) || by_hand && starts_with_ignore_case(n, prefix)
            })
    }

    /// The query string a client of `format` sends: the caller's, when it came in that
    /// format.
    pub fn query_for(&self, format: WireFormat) -> Option<&str> {
        self.query
            .as_deref()
            .filter(|_| self.extra_format == Some(format))
    }
}

/// Whether a header belongs to one provider's API (`anthropic-…`, `openai-…`).
fn names_a_provider(name: &str) -> bool {
    ["anthropic-", "openai-"]
        .iter()
        .any(|p| starts_with_ignore_case(name, p))
}

fn starts_with_ignore_case(name: &str, prefix: &str) -> bool {
    name.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// How the model may use a request's tools, in terms every format has.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (OpenAI `"auto"`, Anthropic `auto`).
    Auto,
    /// No tool (OpenAI `"none"`, Anthropic `none`).
    None,
    /// At least one tool (OpenAI `"required"`, Anthropic `any`).
    Required,
    /// This tool (OpenAI `{"type": "function", …}`, Anthropic `tool`).
    Tool {
        /// The tool's name.
        name: String,
    },
}

impl ToolChoice {
    /// The choice of the tool named `name`.
    pub fn tool(name: impl Into<String>) -> Self {
        Self::Tool { name: name.into() }
    }
}

/// A wire format a request can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WireFormat {
    /// OpenAI Chat Completions.
    ChatCompletions,
    /// Anthropic Messages.
    Messages,
    /// The OpenAI Responses API.
    Responses,
}
