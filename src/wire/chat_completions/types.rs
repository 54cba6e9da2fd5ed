//! OpenAI Chat Completions wire types: exactly what is sent and what is read.
//!
//! ```
//! use llm_context::wire::chat_completions::types::{CompletionUsage, CreateChatCompletionResponse};
//!
//! let body = r#"{"choices": [{"message": {"role": "assistant", "content": "hi"}}],
//!                "usage": {"prompt_tokens": 2006, "completion_tokens": 3,
//!                          "prompt_tokens_details": {"cached_tokens": 1920}}}"#;
//! let r: CreateChatCompletionResponse = serde_json::from_str(body).unwrap();
//! let usage: CompletionUsage = r.usage.unwrap();
//! assert_eq!(usage.prompt_tokens_details.unwrap().cached_tokens, Some(1920));
//! ```
//!
//! Requests: tagged enums for roles and content parts, "string or parts" untagged, and
//! every optional field skipped when absent, so nothing the schema does not define is
//! sent. Responses: only what the client reads, every field optional where compatible
//! servers omit it (`refusal`, `logprobs`, `usage`, `prompt_tokens_details`), and unknown
//! fields ignored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The body of `POST /chat/completions`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CreateChatCompletionRequest {
    /// The model id.
    pub model: String,
    /// The conversation, prefix first.
    pub messages: Vec<RequestMessage>,
    /// Function tools.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Tool>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// The output limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// Sampling seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// `"auto"`, `"none"`, `"required"` or a named function; only sent with tools.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Routes requests sharing a prefix to the same cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<String>,
    /// Other fields of the caller's request, passed through in key order.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// One message, tagged by `role`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
#[non_exhaustive]
pub enum RequestMessage {
    /// Instructions.
    System {
        /// The text.
        content: TextContent,
        /// A participant name.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// The user.
    User {
        /// Text, or text and image parts.
        content: UserContent,
        /// A participant name.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// The model, earlier in the conversation.
    Assistant {
        /// The text; absent when the message only calls tools.
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<TextContent>,
        /// A participant name.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The tools it called.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<MessageToolCall>,
    },
    /// A tool's result.
    Tool {
        /// The result.
        content: TextContent,
        /// The call it answers.
        tool_call_id: String,
    },
}

/// Text, or text parts.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum TextContent {
    /// A string.
    Text(String),
    /// Text parts.
    Parts(Vec<TextPart>),
}

/// A text part.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename = "text")]
#[non_exhaustive]
pub struct TextPart {
    /// The text.
    pub text: String,
}

/// A user message's content: text, or parts.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum UserContent {
    /// A string.
    Text(String),
    /// Text and image parts.
    Parts(Vec<UserPart>),
}

/// One part of a user message, tagged by `type`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum UserPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    ImageUrl {
        /// Where it is.
        image_url: ImageUrl,
    },
    /// A part of a kind this client does not model (`input_audio`, `file`), sent as the
    /// caller wrote it (its `type` included).
    #[serde(untagged)]
    Other(serde_json::Value),
}

/// An image reference.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ImageUrl {
    /// `https://…` or a `data:` URL.
    pub url: String,
    /// `"low"`, `"high"` or `"auto"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A tool call in an assistant message.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct MessageToolCall {
    /// The call id.
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function and its arguments.
    pub function: FunctionCall,
}

/// A function call: the name and the arguments as JSON text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FunctionCall {
    /// The function name.
    pub name: String,
    /// The arguments, as the model wrote them (JSON text, not always valid).
    #[serde(default)]
    pub arguments: String,
}

/// A function tool.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Tool {
    /// Always `"function"`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function.
    pub function: FunctionObject,
}

/// A function definition.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct FunctionObject {
    /// The name (`^[a-zA-Z0-9_-]{1,64}$`).
    pub name: String,
    /// What it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    /// Whether calls must follow the schema exactly (structured outputs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// The body of a successful response.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct CreateChatCompletionResponse {
    /// The completion id.
    #[serde(default)]
    pub id: Option<String>,
    /// The model that answered.
    #[serde(default)]
    pub model: Option<String>,
    /// The choices; the client reads the first.
    pub choices: Vec<Choice>,
    /// Token usage (some compatible servers omit it).
    #[serde(default)]
    pub usage: Option<CompletionUsage>,
    /// Every other top-level field (`created`, `system_fingerprint`, `service_tier`, a
    /// server's own), kept for the caller.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One choice.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct Choice {
    /// The message.
    pub message: ResponseMessage,
    /// `stop`, `length`, `tool_calls`, `content_filter`, `function_call`.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Its other fields (`index`, `logprobs`, a server's own), kept for the caller.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// The assistant's message.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct ResponseMessage {
    /// The text.
    #[serde(default)]
    pub content: Option<String>,
    /// A refusal, instead of content.
    #[serde(default)]
    pub refusal: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Option<Vec<ResponseToolCall>>,
    /// The reasoning of an OpenAI-compatible reasoning server (vLLM, DeepSeek,
    /// llama.cpp), which OpenAI itself does not return.
    #[serde(default)]
    pub reasoning_content: Option<String>,
    /// Its other fields (`role`, `annotations`, `audio`, a server's own), kept for the
    /// caller.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A tool call in a response.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct ResponseToolCall {
    /// The call id.
    pub id: String,
    /// `"function"` (or `"custom"`, which this client does not send tools for).
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// The function call.
    #[serde(default)]
    pub function: Option<FunctionCall>,
}

/// Token usage. `prompt_tokens` *includes* the cached tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct CompletionUsage {
    /// The whole prompt.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// The output.
    #[serde(default)]
    pub completion_tokens: u64,
    /// How the prompt splits.
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// How the prompt splits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct PromptTokensDetails {
    /// Read from the cache (part of `prompt_tokens`).
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    /// Written to the cache (GPT-5.6 and later; part of `prompt_tokens`).
    #[serde(default)]
    pub cache_write_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn absent_options_are_not_sent() {
        let req = CreateChatCompletionRequest {
            model: "m".into(),
            messages: vec![RequestMessage::Assistant {
                content: None,
                name: None,
                tool_calls: vec![MessageToolCall {
                    id: "c1".into(),
                    kind: "function",
                    function: FunctionCall {
                        name: "f".into(),
                        arguments: "{}".into(),
                    },
                }],
            }],
            tools: vec![],
            temperature: None,
            top_p: None,
            max_completion_tokens: None,
            stop: None,
            seed: None,
            tool_choice: None,
            prompt_cache_key: None,
            extra: BTreeMap::new(),
        };
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]})
        );
    }

    #[test]
    fn compatible_servers_may_omit_fields() {
        let r: CreateChatCompletionResponse = serde_json::from_value(json!({
            "choices": [{"message": {"role": "assistant", "content": "hi"}}]
        }))
        .unwrap();
        assert_eq!(r.choices[0].message.content.as_deref(), Some("hi"));
        assert_eq!(r.usage, None);
    }
}
