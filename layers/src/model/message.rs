//! The provider-neutral message model.
//!
//! ```
//! use llm_context_layers::{Message, Role, ToolCall};
//! use serde_json::json;
//!
//! let call = ToolCall::new("c1", "openssl", json!({"host": "example.com", "port": 443}));
//! let transcript = vec![
//!     Message::user("check the cert"),
//!     Message::assistant_tool_calls("", vec![call]),
//!     Message::tool_result("c1", "openssl", "notAfter=2026-08-01"),
//! ];
//! assert_eq!(transcript[1].role, Role::Assistant);
//! assert!(transcript[2].is_tool_result());
//! assert!(transcript[0].is_user_request());
//! ```
//!
//! Every provider client maps these types to its own wire types; the layers only ever see
//! this model. Tool results are linked to their calls by id, never by position, so a
//! provider that sends results with role `user` (Anthropic) is modelled by setting
//! [`Message::tool_call_id`]: such a message is a tool result, not a new user request.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Text;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Standing instructions.
    System,
    /// The person (or program) driving the agent.
    User,
    /// The model.
    Assistant,
    /// The result of a tool call.
    Tool,
}

impl Role {
    /// The lowercase wire name (`"system"`, `"user"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One part of a multi-part message.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentPart {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, by URL or as a `data:` URL carrying base64 bytes.
    Image {
        /// `https://…` or `data:image/png;base64,…`.
        url: String,
        /// Provider detail hint (`"low"`, `"high"`, `"auto"`), when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A part of a kind the neutral model does not represent (an Anthropic `document`,
    /// `search_result`, a server tool's `server_tool_use` or result, …), kept whole as its
    /// wire format wrote it: a client of that format sends it back as it came; a client
    /// of another format refuses the request, naming its kind, rather than drop it. It is
    /// estimated by the length of its JSON.
    Opaque {
        /// The format it is written in.
        format: crate::model::WireFormat,
        /// Its `type`.
        kind: String,
        /// The part, as JSON text.
        json: String,
    },
}

impl ContentPart {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart::Text { text: text.into() }
    }

    /// An image part from a URL (or a `data:` URL).
    pub fn image_url(url: impl Into<String>) -> Self {
        ContentPart::Image {
            url: url.into(),
            detail: None,
        }
    }
}

/// A message's content: plain text, or a list of parts (text and images).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text; the common case. Owned, or shared where the layers send one text on
    /// every turn (see [`Text`]).
    Text(Text),
    /// Text and image parts, in order (a boxed slice, so that `Content` is as small as a
    /// `String`).
    Parts(Box<[ContentPart]>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Text(Text::new())
    }
}

impl Content {
    /// The text of the content: the string itself, or the text parts joined with no
    /// separator (images are left out).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Content::Text(t) => std::borrow::Cow::Borrowed(t.as_str()),
            Content::Parts(parts) => {
                let mut out = String::new();
                for part in parts {
                    if let ContentPart::Text { text } = part {
                        out.push_str(text);
                    }
                }
                std::borrow::Cow::Owned(out)
            }
        }
    }

    /// Whether there is no text and no image.
    pub fn is_empty(&self) -> bool {
        match self {
            Content::Text(t) => t.is_empty(),
            Content::Parts(parts) => parts.iter().all(|p| match p {
                ContentPart::Text { text } => text.is_empty(),
                ContentPart::Image { .. } | ContentPart::Opaque { .. } => false,
            }),
        }
    }

    /// The content as a `&str` when it is plain text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Content::Text(t) => Some(t.as_str()),
            Content::Parts(_) => None,
        }
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s.into())
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.into())
    }
}

impl From<Text> for Content {
    fn from(t: Text) -> Self {
        Content::Text(t)
    }
}

impl From<Vec<ContentPart>> for Content {
    fn from(parts: Vec<ContentPart>) -> Self {
        Content::Parts(parts.into_boxed_slice())
    }
}

/// A model's reasoning, as the provider returned it: kept with the assistant message so it
/// can be sent back unchanged where the provider requires it (Anthropic wants the
/// `thinking` block, signature and all, before the `tool_use` it led to).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reasoning {
    /// Anthropic extended thinking: its text and the signature that vouches for it.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The provider's signature of it.
        signature: String,
    },
    /// Anthropic thinking the provider encrypted: opaque data, sent back as it came.
    RedactedThinking {
        /// The encrypted thinking.
        data: String,
    },
    /// An OpenAI-compatible server's `reasoning_content` (vLLM, DeepSeek, llama.cpp):
    /// plain text, never sent back (those servers refuse it in a request).
    Text {
        /// The reasoning text.
        text: String,
    },
}

impl Reasoning {
    /// The characters the estimate counts: the thinking text, or the redacted data (the
    /// signature vouches for the text and is not counted).
    pub fn counted_text(&self) -> &str {
        match self {
            Reasoning::Thinking { thinking, .. } => thinking,
            Reasoning::RedactedThinking { data } => data,
            Reasoning::Text { text } => text,
        }
    }
}

/// A tool call the model asked for.
///
/// Its arguments are the JSON text the model wrote, as it came (OpenAI's wire form): a
/// tool call read from a transcript holds its arguments once, as text, not as a
/// `serde_json::Value` tree, which costs some 700 bytes for a 30-byte object (a B-tree
/// node), more than the rest of a tool round together. [`ToolCall::arguments_value`]
/// parses them where a value is needed.
///
/// ```
/// use llm_context_layers::ToolCall;
/// use serde_json::json;
///
/// // From a value: written compactly, keys sorted, whatever `serde_json`'s features.
/// let call = ToolCall::new("c1", "fetch", json!({"url": "https://example.com", "depth": 2}));
/// assert_eq!(call.arguments, r#"{"depth":2,"url":"https://example.com"}"#);
/// assert_eq!(call.arguments_value()["depth"], 2);
///
/// // From the wire: the text as the model wrote it, broken JSON too.
/// let call = ToolCall::from_text("c2", "fetch", r#"{"url": "https"#);
/// assert_eq!(call.arguments_value(), json!(r#"{"url": "https"#));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id; the result message carries it as `tool_call_id`.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON text (usually an object), as the model wrote them; text that
    /// is not JSON (models do emit broken JSON) is kept as it came.
    ///
    /// Serialized as the JSON value it holds, or as a string when it holds no JSON value
    /// or a JSON string, so that a stored message reads back the same either way.
    #[serde(with = "arguments_serde")]
    pub arguments: String,
}

impl ToolCall {
    /// A tool call with `arguments` written as compact JSON with sorted keys (the same
    /// text on every build, `serde_json`'s `preserve_order` or not). A string value is
    /// taken as the arguments' text itself.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self::from_text(id, name, arguments_serde::text_of(arguments))
    }

    /// A tool call whose arguments are `text`, kept as it is (not parsed, not checked).
    pub fn from_text(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The arguments parsed: the JSON value the text holds, or the text itself as a
    /// string when it holds no JSON value, or holds a JSON string (so that text which
    /// is not JSON is never lost).
    pub fn arguments_value(&self) -> Value {
        arguments_serde::value_of(&self.arguments)
            .unwrap_or_else(|| Value::String(self.arguments.clone()))
    }

    /// Whether the arguments hold a JSON value other than a string (what
    /// [`arguments_value`](Self::arguments_value) parses rather than keeps as text),
    /// checked without building it.
    pub fn arguments_are_json(&self) -> bool {
        let text = self.arguments.trim_start();
        !text.starts_with('"') && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    }
}

/// [`ToolCall::arguments`] in the serialized form: the value the text holds, or a string.
mod arguments_serde {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    /// The value `text` holds, unless it holds none or a string (then the text is kept).
    pub(super) fn value_of(text: &str) -> Option<Value> {
        serde_json::from_str::<Value>(text)
            .ok()
            .filter(|v| !v.is_string())
    }

    /// The text of `value`: a string is the text itself, anything else is written
    /// canonically (compact, keys sorted).
    pub(super) fn text_of(value: Value) -> String {
        match value {
            Value::String(text) => text,
            other => crate::hash::canonical_json(&other),
        }
    }

    pub(super) fn serialize<S: Serializer>(text: &str, s: S) -> Result<S::Ok, S::Error> {
        match value_of(text) {
            Some(v) => v.serialize(s),
            None => s.serialize_str(text),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Value::deserialize(d).map(text_of)
    }
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// Whether calls must follow the schema exactly (OpenAI's and Anthropic's `strict`),
    /// when the caller said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// A tool the neutral model does not describe (a provider's server tool, such as
    /// Anthropic's `web_search_20250305`), kept whole as its wire format wrote it: a
    /// client of that format sends it as it came; a client of another refuses the request,
    /// naming it, rather than drop it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opaque: Option<OpaqueTool>,
}

/// A tool definition kept whole: see [`ToolSpec::opaque`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OpaqueTool {
    /// The format it is written in.
    pub format: crate::model::WireFormat,
    /// Its `type`.
    pub kind: String,
    /// The definition, as JSON text.
    pub json: String,
}

impl OpaqueTool {
    /// A definition of `kind` written in `format`.
    pub fn new(
        format: crate::model::WireFormat,
        kind: impl Into<String>,
        json: impl Into<String>,
    ) -> Self {
        Self {
            format,
            kind: kind.into(),
            json: json.into(),
        }
    }
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

impl ToolSpec {
    /// A tool definition.
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            strict: None,
            opaque: None,
        }
    }

    /// The same tool, with `strict` set.
    #[must_use]
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = Some(strict);
        self
    }
}

/// One message of a transcript.
///
/// The fields most messages have are public; a participant `name` and the model's
/// `reasoning`, which few messages carry, live behind [`Message::name`] and
/// [`Message::reasoning`] in one optional box, so that a message without them (nearly
/// all) takes 72 bytes: a transcript of a million short messages is mostly these.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(from = "wire::Owned")]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content.
    pub content: Content,
    /// For a tool result: the id of the call it answers.
    pub tool_call_id: Option<Box<str>>,
    /// For an assistant message: the tools it calls (empty for any other message).
    pub tool_calls: Box<[ToolCall]>,
    /// `name` and `reasoning`, when either is set (`None` when neither is, so that equal
    /// messages are equal field by field).
    rare: Option<Box<Rare>>,
}

/// What few messages carry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Rare {
    name: Option<Box<str>>,
    reasoning: Box<[Reasoning]>,
}

impl Rare {
    /// `Some` when it holds anything.
    fn boxed(self) -> Option<Box<Self>> {
        (self.name.is_some() || !self.reasoning.is_empty()).then(|| Box::new(self))
    }
}

/// The serialized form of a [`Message`]: every field at the top level.
mod wire {
    use super::{Content, Reasoning, Role, ToolCall};
    use serde::{Deserialize, Serialize};

    /// Read.
    #[derive(Deserialize)]
    pub(super) struct Owned {
        pub(super) role: Role,
        #[serde(default)]
        pub(super) content: Content,
        #[serde(default)]
        pub(super) name: Option<Box<str>>,
        #[serde(default)]
        pub(super) tool_call_id: Option<Box<str>>,
        #[serde(default)]
        pub(super) tool_calls: Box<[ToolCall]>,
        #[serde(default)]
        pub(super) reasoning: Option<Box<[Reasoning]>>,
    }

    /// Written, borrowing the message.
    #[derive(Serialize)]
    pub(super) struct Borrowed<'a> {
        pub(super) role: Role,
        pub(super) content: &'a Content,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub(super) name: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub(super) tool_call_id: Option<&'a str>,
        #[serde(skip_serializing_if = "<[ToolCall]>::is_empty")]
        pub(super) tool_calls: &'a [ToolCall],
        #[serde(skip_serializing_if = "<[Reasoning]>::is_empty")]
        pub(super) reasoning: &'a [Reasoning],
    }
}

impl From<wire::Owned> for Message {
    fn from(w: wire::Owned) -> Self {
        Self {
            role: w.role,
            content: w.content,
            tool_call_id: w.tool_call_id,
            tool_calls: w.tool_calls,
            rare: Rare {
                name: w.name,
                reasoning: w.reasoning.unwrap_or_default(),
            }
            .boxed(),
        }
    }
}

impl Serialize for Message {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        wire::Borrowed {
            role: self.role,
            content: &self.content,
            name: self.name(),
            tool_call_id: self.tool_call_id.as_deref(),
            tool_calls: &self.tool_calls,
            reasoning: self.reasoning(),
        }
        .serialize(serializer)
    }
}

/// The end of the leading system messages of a transcript (the "head" that pruning keeps,
/// providers cache with the prefix, and folding never touches).
pub fn leading_system_end(messages: &[Message]) -> usize {
    messages
        .iter()
        .position(|m| m.role != Role::System)
        .unwrap_or(messages.len())
}

impl Message {
    /// A message with the given role and text.
    pub fn new(role: Role, content: impl Into<Content>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_call_id: None,
            tool_calls: Box::default(),
            rare: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<Content>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<Content>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<Content>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// An assistant message that calls tools.
    pub fn assistant_tool_calls(content: impl Into<Content>, calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls: calls.into_boxed_slice(),
            ..Self::new(Role::Assistant, content)
        }
    }

    /// A tool result answering the call `call_id` of tool `name`.
    pub fn tool_result(
        call_id: impl Into<String>,
        name: impl Into<String>,
        content: impl Into<Content>,
    ) -> Self {
        Self {
            tool_call_id: Some(call_id.into().into_boxed_str()),
            ..Self::new(Role::Tool, content)
        }
        .with_name(name)
    }

    /// Sets the `name` field.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.set_name(Some(name.into()));
        self
    }

    /// The optional participant or tool name.
    pub fn name(&self) -> Option<&str> {
        self.rare.as_ref()?.name.as_deref()
    }

    /// Sets or removes the `name` field.
    pub fn set_name(&mut self, name: Option<String>) {
        let mut rare = self.rare.take().map(|r| *r).unwrap_or_default();
        rare.name = name.map(String::into_boxed_str);
        self.rare = rare.boxed();
    }

    /// Sets the reasoning that preceded the content (none when `reasoning` is empty).
    #[must_use]
    pub fn with_reasoning(mut self, reasoning: Vec<Reasoning>) -> Self {
        self.set_reasoning(reasoning);
        self
    }

    /// Sets the reasoning that preceded the content (none when `reasoning` is empty).
    pub fn set_reasoning(&mut self, reasoning: Vec<Reasoning>) {
        let mut rare = self.rare.take().map(|r| *r).unwrap_or_default();
        rare.reasoning = reasoning.into_boxed_slice();
        self.rare = rare.boxed();
    }

    /// The reasoning that preceded the content (empty when there is none).
    pub fn reasoning(&self) -> &[Reasoning] {
        self.rare.as_ref().map_or(&[], |r| &r.reasoning)
    }

    /// Sets the `tool_call_id` field.
    #[must_use]
    pub fn with_tool_call_id(mut self, id: impl Into<String>) -> Self {
        self.tool_call_id = Some(id.into().into_boxed_str());
        self
    }

    /// Whether this message is a tool result: role `tool`, or any role carrying a
    /// `tool_call_id` (providers such as Anthropic send results as `user` messages).
    pub fn is_tool_result(&self) -> bool {
        self.role == Role::Tool || self.tool_call_id.is_some()
    }

    /// Whether this message is a real user request, the start of a turn: role `user`
    /// and not a tool result.
    pub fn is_user_request(&self) -> bool {
        self.role == Role::User && self.tool_call_id.is_none()
    }

    /// Whether this is an assistant message that calls tools.
    pub fn has_tool_calls(&self) -> bool {
        !self.tool_calls.is_empty()
    }

    /// The content as text (see [`Content::text`]).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        self.content.text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_call_holds_its_arguments_as_text() {
        // Three strings: a 30-byte arguments object is one small allocation, not a
        // 632-byte B-tree node of a `Value` (80 bytes inline, plus the tree).
        assert_eq!(size_of::<ToolCall>(), 72);
        let call = ToolCall::from_text("c1", "f", r#"{"b": 1, "a": [2]}"#);
        assert_eq!(call.arguments, r#"{"b": 1, "a": [2]}"#, "kept as it came");
        assert!(call.arguments_are_json());
        assert_eq!(call.arguments_value(), json!({"a": [2], "b": 1}));
        for text in ["{oops", "\"s\"", "", "  "] {
            let call = ToolCall::from_text("c1", "f", text);
            assert!(!call.arguments_are_json(), "{text:?}");
            assert_eq!(call.arguments_value(), json!(text), "{text:?}");
        }
    }

    #[test]
    fn a_tool_call_serializes_as_before_and_reads_either_form() {
        // Stored as the value the text holds (what records written while the arguments
        // were a `Value` hold), or as a string when the text holds none.
        let call = ToolCall::new("c1", "f", json!({"b": 1, "a": "é"}));
        let stored = serde_json::to_value(&call).unwrap();
        assert_eq!(
            stored,
            json!({"id": "c1", "name": "f", "arguments": {"a": "é", "b": 1}})
        );
        assert_eq!(serde_json::from_value::<ToolCall>(stored).unwrap(), call);
        let broken = ToolCall::from_text("c2", "f", "{oops");
        let stored = serde_json::to_value(&broken).unwrap();
        assert_eq!(stored["arguments"], "{oops");
        assert_eq!(serde_json::from_value::<ToolCall>(stored).unwrap(), broken);
        // A JSON string as the whole arguments stays a string, not its contents.
        let quoted = ToolCall::from_text("c3", "f", "\"s\"");
        let stored = serde_json::to_value(&quoted).unwrap();
        assert_eq!(stored["arguments"], "\"s\"");
        assert_eq!(serde_json::from_value::<ToolCall>(stored).unwrap(), quoted);
    }

    #[test]
    fn a_message_takes_72_bytes() {
        // A transcript of a million short messages is mostly these structs: every byte
        // here is a megabyte there (it was 128 with `String`s, `Vec`s and every field
        // inline).
        assert_eq!(size_of::<Content>(), 24);
        assert_eq!(size_of::<Message>(), 72);
    }

    #[test]
    fn the_rare_fields_round_trip_and_leave_no_empty_box() {
        let thinking = Reasoning::Text { text: "hmm".into() };
        let m = Message::assistant("done")
            .with_name("planner")
            .with_reasoning(vec![thinking]);
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["name"], "planner");
        assert_eq!(json["reasoning"][0]["text"], "hmm");
        assert_eq!(serde_json::from_value::<Message>(json).unwrap(), m);
        // Removing both makes it equal to a message that never had them.
        let mut bare = m;
        bare.set_name(None);
        bare.set_reasoning(Vec::new());
        assert_eq!(bare, Message::assistant("done"));
        assert_eq!(
            serde_json::to_value(&bare).unwrap(),
            serde_json::json!({"role": "assistant", "content": "done"})
        );
        // Read with explicit empties, it is the same message too.
        let read: Message = serde_json::from_value(serde_json::json!(
            {"role": "assistant", "content": "done", "name": null, "reasoning": []}
        ))
        .unwrap();
        assert_eq!(read, Message::assistant("done"));
    }
}
