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
    /// Plain text; the common case.
    Text(String),
    /// Text and image parts, in order (a boxed slice, so that `Content` is as small as a
    /// `String`).
    Parts(Box<[ContentPart]>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Text(String::new())
    }
}

impl Content {
    /// The text of the content: the string itself, or the text parts joined with no
    /// separator (images are left out).
    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Content::Text(t) => std::borrow::Cow::Borrowed(t),
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
                ContentPart::Image { .. } => false,
            }),
        }
    }

    /// The content as a `&str` when it is plain text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Content::Text(t) => Some(t),
            Content::Parts(_) => None,
        }
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s)
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.to_owned())
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
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id; the result message carries it as `tool_call_id`.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as JSON (usually an object).
    pub arguments: Value,
}

impl ToolCall {
    /// A tool call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
        }
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
        }
    }
}

/// One message of a transcript.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its content.
    #[serde(default)]
    pub content: Content,
    /// Optional participant or tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Box<str>>,
    /// For a tool result: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<Box<str>>,
    /// For an assistant message: the tools it calls (empty for any other message).
    #[serde(default, skip_serializing_if = "<[ToolCall]>::is_empty")]
    pub tool_calls: Box<[ToolCall]>,
    /// For an assistant message: the reasoning that preceded its content, in order
    /// (`None` when there is none; boxed so a message without it costs one pointer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Box<[Reasoning]>>,
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
            name: None,
            tool_call_id: None,
            tool_calls: Box::default(),
            reasoning: None,
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
            name: Some(name.into().into_boxed_str()),
            tool_call_id: Some(call_id.into().into_boxed_str()),
            ..Self::new(Role::Tool, content)
        }
    }

    /// Sets the `name` field.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into().into_boxed_str());
        self
    }

    /// Sets the reasoning that preceded the content (none when `reasoning` is empty).
    pub fn with_reasoning(mut self, reasoning: Vec<Reasoning>) -> Self {
        self.reasoning = (!reasoning.is_empty()).then(|| reasoning.into_boxed_slice());
        self
    }

    /// The reasoning that preceded the content (empty when there is none).
    pub fn reasoning(&self) -> &[Reasoning] {
        self.reasoning.as_deref().unwrap_or_default()
    }

    /// Sets the `tool_call_id` field.
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

    #[test]
    fn a_message_takes_96_bytes() {
        // A transcript of a million short messages is mostly these structs: every byte
        // here is a megabyte there (it was 128 with `String`s and `Vec`s).
        assert_eq!(size_of::<Content>(), 24);
        assert_eq!(size_of::<Message>(), 96);
    }
}
