//! Anthropic Messages wire types: exactly what is sent and what is read.
//!
//! ```
//! use llm_context::wire::messages::types::{CacheControl, TextBlockParam};
//!
//! let block = TextBlockParam::new("You are terse.").with_cache_control(CacheControl::ONE_HOUR);
//! assert_eq!(
//!     serde_json::to_string(&block).unwrap(),
//!     r#"{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral","ttl":"1h"}}"#
//! );
//! ```
//!
//! Content blocks are tagged by `type`; `cache_control` is skipped when absent, so only
//! the breakpoints asked for are sent. Responses read only what the client uses and
//! keep thinking blocks; they ignore other block types (server tools, kinds added later)
//! and keep unknown top-level fields for
//! [`ChatResponse::provider_fields`](llm_context_layers::ChatResponse::provider_fields).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of `POST /v1/messages`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CreateMessageRequest {
    /// The model id.
    pub model: String,
    /// The output limit (required by the API).
    pub max_tokens: u32,
    /// The conversation after the system prompt.
    pub messages: Vec<InputMessage>,
    /// The system prompt as text blocks: the prefix, then the leading system messages.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<TextBlockParam>,
    /// Tools.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolParam>,
    /// How the model may use tools; only sent with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// The caller's other body fields (`metadata`, `service_tier`, a field newer than this
    /// client), passed through as they are.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The body of `POST /v1/messages/count_tokens`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CountTokensRequest {
    /// The model id.
    pub model: String,
    /// The conversation.
    pub messages: Vec<InputMessage>,
    /// The system prompt.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub system: Vec<TextBlockParam>,
    /// Tools.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolParam>,
}

/// The answer of `count_tokens`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct CountTokensResponse {
    /// Tokens of the whole prompt.
    pub input_tokens: u64,
}

/// Who wrote a message (the system prompt at the top is not a message here).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum InputRole {
    /// The user, and tool results.
    User,
    /// The model.
    Assistant,
    /// A system message inside the conversation (the `mid-conversation-system` beta),
    /// where the caller put it.
    System,
}

/// One message: a role and its blocks.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct InputMessage {
    /// Who.
    pub role: InputRole,
    /// The blocks, never empty.
    pub content: Vec<ContentBlockParam>,
}

/// A cache breakpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CacheControl {
    /// Always `"ephemeral"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `"1h"`; absent for the default 5 minutes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<&'static str>,
}

impl CacheControl {
    /// The default 5-minute breakpoint.
    pub const FIVE_MINUTES: CacheControl = CacheControl {
        kind: "ephemeral",
        ttl: None,
    };
    /// A one-hour breakpoint.
    pub const ONE_HOUR: CacheControl = CacheControl {
        kind: "ephemeral",
        ttl: Some("1h"),
    };
}

/// A text block of the system prompt.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename = "text")]
#[non_exhaustive]
pub struct TextBlockParam {
    /// The text, never empty.
    pub text: String,
    /// A breakpoint after this block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

impl TextBlockParam {
    /// A text block without a breakpoint.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            cache_control: None,
        }
    }

    /// Sets the breakpoint after this block.
    #[must_use]
    pub fn with_cache_control(mut self, cc: CacheControl) -> Self {
        self.cache_control = Some(cc);
        self
    }
}

/// A block of a message, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ContentBlockParam {
    /// Text, never empty.
    Text {
        /// The text.
        text: String,
        /// A breakpoint after this block.
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    /// An image.
    Image {
        /// Where it comes from.
        source: ImageSource,
        /// A breakpoint after this block.
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    /// A tool call the model made earlier.
    ToolUse {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// The arguments (a JSON object).
        input: Value,
        /// A breakpoint after this block.
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    /// Extended thinking the model did earlier, sent back unchanged before the blocks it
    /// led to. It cannot carry a breakpoint.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// Its signature, as the provider sent it.
        signature: String,
    },
    /// Encrypted thinking, sent back unchanged. It cannot carry a breakpoint.
    RedactedThinking {
        /// The encrypted data.
        data: String,
    },
    /// A tool's result.
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// The result; absent when empty.
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<ToolResultContent>,
        /// A breakpoint after this block.
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl>,
    },
    /// A block of a kind this client does not model (a document, a server tool's call or
    /// result), sent as the caller wrote it (its `type` included).
    #[serde(untagged)]
    Other(Value),
}

impl ContentBlockParam {
    /// Sets the breakpoint after this block; returns `false` for a block that cannot
    /// carry one (thinking), which is left as it is.
    pub fn set_cache_control(&mut self, cc: CacheControl) -> bool {
        match self {
            ContentBlockParam::Text { cache_control, .. }
            | ContentBlockParam::Image { cache_control, .. }
            | ContentBlockParam::ToolUse { cache_control, .. }
            | ContentBlockParam::ToolResult { cache_control, .. } => {
                *cache_control = Some(cc);
                true
            }
            ContentBlockParam::Thinking { .. } | ContentBlockParam::RedactedThinking { .. } => {
                false
            }
            // A block as the caller wrote it is not marked: not every kind takes one.
            ContentBlockParam::Other(_) => false,
        }
    }

    /// Whether this is a tool result.
    pub fn is_tool_result(&self) -> bool {
        matches!(self, ContentBlockParam::ToolResult { .. })
    }
}

/// A tool result's content: text, or text and image blocks.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum ToolResultContent {
    /// A string.
    Text(String),
    /// Blocks.
    Blocks(Vec<ContentBlockParam>),
}

/// An image source, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ImageSource {
    /// Inline bytes.
    Base64 {
        /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
        media_type: String,
        /// The base64 data.
        data: String,
    },
    /// A URL the provider fetches.
    Url {
        /// The URL.
        url: String,
    },
}

/// A tool definition.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ToolParam {
    /// The name (`^[a-zA-Z0-9_-]{1,128}$`, unique).
    pub name: String,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the input (an object schema).
    pub input_schema: Value,
    /// Whether calls must follow the schema exactly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    /// A breakpoint after this tool (and so after every tool before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<CacheControl>,
}

/// How the model may use tools, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides.
    Auto {
        /// One tool call at most.
        #[serde(skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    /// The model must call some tool.
    Any {
        /// One tool call at most.
        #[serde(skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    /// The model must call this tool.
    Tool {
        /// The tool.
        name: String,
        /// One tool call at most.
        #[serde(skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    /// No tool calls.
    None,
}

/// The body of a successful response.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct MessageResponse {
    /// The message id.
    #[serde(default)]
    pub id: Option<String>,
    /// The model that answered.
    #[serde(default)]
    pub model: Option<String>,
    /// The blocks.
    pub content: Vec<ResponseBlock>,
    /// `end_turn`, `max_tokens`, `stop_sequence`, `tool_use`, `pause_turn`, `refusal`, …
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// Token usage.
    pub usage: ResponseUsage,
    /// Every other top-level field (`type`, `role`, `stop_sequence`, `container`, a
    /// field newer than the client), kept for the caller.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A response block; kinds the client does not model are kept whole as `Other`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResponseBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call.
    ToolUse {
        /// The call id.
        id: String,
        /// The tool.
        name: String,
        /// The arguments.
        input: Value,
    },
    /// Extended thinking, with its signature.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// Its signature.
        #[serde(default)]
        signature: String,
    },
    /// Encrypted thinking.
    RedactedThinking {
        /// The encrypted data.
        data: String,
    },
    /// Server tool blocks and kinds added later, as sent (the response keeps them in
    /// [`ChatResponse::provider_fields`](llm_context_layers::ChatResponse::provider_fields)
    /// under `"content"`).
    #[serde(untagged)]
    Other(Value),
}

/// Usage. `input_tokens` counts only the tokens after the last breakpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct ResponseUsage {
    /// Fresh prompt tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Written to the cache (5m and 1h together).
    #[serde(default)]
    pub cache_creation_input_tokens: Option<u64>,
    /// Read from the cache.
    #[serde(default)]
    pub cache_read_input_tokens: Option<u64>,
    /// The writes by TTL.
    #[serde(default)]
    pub cache_creation: Option<CacheCreation>,
}

/// Cache writes by TTL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct CacheCreation {
    /// Written with the 5-minute TTL.
    #[serde(default)]
    pub ephemeral_5m_input_tokens: u64,
    /// Written with the one-hour TTL.
    #[serde(default)]
    pub ephemeral_1h_input_tokens: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_options_are_not_sent() {
        let block = ContentBlockParam::Text {
            text: "hi".into(),
            cache_control: None,
        };
        assert_eq!(
            serde_json::to_value(&block).unwrap(),
            json!({"type": "text", "text": "hi"})
        );
        let mut block = block;
        block.set_cache_control(CacheControl::ONE_HOUR);
        assert_eq!(
            serde_json::to_value(&block).unwrap(),
            json!({"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "1h"}})
        );
        assert_eq!(
            serde_json::to_value(ToolChoice::Auto {
                disable_parallel_tool_use: None
            })
            .unwrap(),
            json!({"type": "auto"})
        );
    }

    #[test]
    fn unknown_blocks_are_kept_whole_and_thinking_is_kept() {
        let r: MessageResponse = serde_json::from_value(json!({
            "content": [{"type": "thinking", "thinking": "…", "signature": "s"},
                        {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                        {"type": "text", "text": "hi", "citations": null}],
            "usage": {"input_tokens": 1, "output_tokens": 2}
        }))
        .unwrap();
        assert_eq!(
            r.content[0],
            ResponseBlock::Thinking {
                thinking: "…".into(),
                signature: "s".into()
            }
        );
        assert_eq!(
            r.content[1],
            ResponseBlock::Other(
                json!({"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}})
            )
        );
        assert_eq!(r.content[2], ResponseBlock::Text { text: "hi".into() });
    }
}
