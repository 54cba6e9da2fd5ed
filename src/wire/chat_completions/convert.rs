//! The neutral model ↔ OpenAI Chat Completions wire types.

use std::collections::BTreeMap;

use serde_json::Value;

use super::params::{FIELDS, tool_choice_to_wire};
use super::types::{
    CompletionUsage, CreateChatCompletionRequest, CreateChatCompletionResponse, FunctionCall,
    FunctionObject, ImageUrl, MessageToolCall, RequestMessage, TextContent, TextPart, Tool,
    UserContent, UserPart,
};
use crate::catalog::Provider;
use crate::client::unsupported;
use crate::error::{ProviderError, ProviderErrorKind};
use crate::wire::extra::PassThrough;
use llm_context_layers::{
    ChatRequest, ChatResponse, Content, ContentPart, FinishReason, Message, Reasoning, Role,
    ToolCall, ToolSpec, Usage, WireFormat,
};

/// Fields this client sets itself: never passed through.
const SET_HERE: &[&str] = &[
    "model",
    "messages",
    "tools",
    // The client sets these itself, for a `Streaming` request only.
    "stream",
    "stream_options",
];

/// Which pass-through fields this client sends: untagged ones all (a compatible server
/// may take fields of its own), another format's only where Chat Completions has them.
const PASS_THROUGH: PassThrough = PassThrough {
    format: WireFormat::ChatCompletions,
    untagged_are_own: true,
    set_here: SET_HERE,
    fields: FIELDS,
};

/// The request body for `req`: the prefix rendered first, then the tail.
/// The `prompt_cache_key` the client sets: the stable head (tools, prefix, leading system
/// messages) routes requests that share it to one cache; a request with no head has
/// nothing stable to key on.
pub(crate) fn cache_key(req: &ChatRequest) -> Option<String> {
    let has_head = req.prefix.as_ref().is_some_and(|p| !p.is_empty())
        || req.messages.first().is_some_and(|m| m.role == Role::System)
        || !req.tools.is_empty();
    has_head.then(|| req.stable_head_key())
}

pub(crate) fn request(req: &ChatRequest) -> Result<CreateChatCompletionRequest, ProviderError> {
    crate::client::cannot_cross(req, WireFormat::ChatCompletions, Provider::OpenAi, |_| {
        false
    })?;
    let mut messages = Vec::with_capacity(req.messages.len() + 3);
    if let Some(prefix) = &req.prefix {
        for m in prefix.as_messages() {
            messages.push(message(&m)?);
        }
    }
    for m in &req.messages {
        messages.push(message(m)?);
    }
    let p = &req.params;
    let mut extra: BTreeMap<String, Value> = PASS_THROUGH
        .sent(p)
        .into_iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // A typed field wins over the same key passed through, so no key is written twice.
    let mut typed = |key: &str, set: bool| {
        if set {
            extra.remove(key);
        }
    };
    typed("temperature", p.temperature.is_some());
    typed("top_p", p.top_p.is_some());
    typed("max_completion_tokens", p.max_output_tokens.is_some());
    typed("stop", !p.stop.is_empty());
    typed("seed", p.seed.is_some());
    typed("tool_choice", p.tool_choice.is_some());
    let cache_key = if extra.contains_key("prompt_cache_key") {
        None
    } else {
        cache_key(req)
    };
    let mut tool_choice = p.tool_choice.as_ref().map(tool_choice_to_wire);
    if let Some(parallel) = p.parallel_tool_calls {
        extra.insert("parallel_tool_calls".into(), Value::Bool(parallel));
    }
    if req.tools.is_empty() {
        // Only valid with tools; a body whose tools were all removed must drop them.
        tool_choice = None;
        extra.remove("tool_choice");
        extra.remove("parallel_tool_calls");
    }
    Ok(CreateChatCompletionRequest {
        model: req.model.clone(),
        messages,
        tools: req.tools.iter().map(tool).collect(),
        temperature: p.temperature,
        top_p: p.top_p,
        max_completion_tokens: p.max_output_tokens,
        stop: (!p.stop.is_empty()).then(|| p.stop.clone()),
        seed: p.seed,
        tool_choice,
        prompt_cache_key: cache_key,
        extra,
    })
}

fn tool(t: &ToolSpec) -> Tool {
    Tool {
        kind: "function",
        function: FunctionObject {
            name: t.name.clone(),
            description: (!t.description.is_empty()).then(|| t.description.clone()),
            parameters: t.parameters.clone(),
            strict: t.strict,
        },
    }
}

fn message(m: &Message) -> Result<RequestMessage, ProviderError> {
    // A result is linked to its call by id, whatever role the transcript gave it.
    if let Some(id) = &m.tool_call_id {
        return Ok(RequestMessage::Tool {
            content: text_content(&m.content, "tool")?,
            tool_call_id: id.to_string(),
        });
    }
    Ok(match m.role {
        Role::System => RequestMessage::System {
            content: text_content(&m.content, "system")?,
            name: m.name().map(str::to_owned),
        },
        Role::User => RequestMessage::User {
            content: user_content(&m.content),
            name: m.name().map(str::to_owned),
        },
        Role::Assistant => {
            let calls: Vec<MessageToolCall> = m
                .tool_calls
                .iter()
                .map(|c| MessageToolCall {
                    id: c.id.clone(),
                    kind: "function",
                    function: FunctionCall {
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    },
                })
                .collect();
            // Content is required unless the message calls tools.
            let content = if calls.is_empty() || !m.content.is_empty() {
                Some(text_content(&m.content, "assistant")?)
            } else {
                None
            };
            RequestMessage::Assistant {
                content,
                name: m.name().map(str::to_owned),
                tool_calls: calls,
            }
        }
        Role::Tool => {
            return Err(unsupported(
                Provider::OpenAi,
                "a tool message has no tool_call_id",
            ));
        }
    })
}

/// Content for roles that take text only. Images there cannot be sent.
fn text_content(c: &Content, role: &str) -> Result<TextContent, ProviderError> {
    match c {
        Content::Text(t) => Ok(TextContent::Text(t.as_str().to_owned())),
        Content::Parts(parts) => {
            let mut out = Vec::with_capacity(parts.len());
            for p in parts {
                match p {
                    ContentPart::Text { text } => out.push(TextPart { text: text.clone() }),
                    ContentPart::Opaque { kind, .. } => {
                        return Err(unsupported(
                            Provider::OpenAi,
                            format!("a {role} message can only carry text, not {kind:?} parts"),
                        ));
                    }
                    _ => {
                        return Err(unsupported(
                            Provider::OpenAi,
                            format!("a {role} message can only carry text, not images"),
                        ));
                    }
                }
            }
            if out.is_empty() {
                // An empty parts array is refused (`minItems: 1`).
                return Ok(TextContent::Text(String::new()));
            }
            Ok(TextContent::Parts(out))
        }
    }
}

fn user_content(c: &Content) -> UserContent {
    match c {
        Content::Text(t) => UserContent::Text(t.as_str().to_owned()),
        Content::Parts(parts) if parts.is_empty() => UserContent::Text(String::new()),
        Content::Parts(parts) => UserContent::Parts(
            parts
                .iter()
                .map(|p| match p {
                    ContentPart::Image { url, detail } => UserPart::ImageUrl {
                        image_url: ImageUrl {
                            url: url.clone(),
                            detail: detail.clone(),
                        },
                    },
                    ContentPart::Text { text } => UserPart::Text { text: text.clone() },
                    // A Chat Completions part kept whole (`cannot_cross` refused any
                    // other format's).
                    ContentPart::Opaque { json, .. } => {
                        UserPart::Other(serde_json::from_str(json).unwrap_or(Value::Null))
                    }
                    // A part kind added to the neutral model later: `Content::text` keeps
                    // only text parts, so it goes as an empty text part.
                    _ => UserPart::Text {
                        text: String::new(),
                    },
                })
                .collect(),
        ),
    }
}

/// The neutral response.
pub(crate) fn response(body: CreateChatCompletionResponse) -> Result<ChatResponse, ProviderError> {
    let Some(choice) = body.choices.into_iter().next() else {
        return Err(ProviderError::new(
            Provider::OpenAi,
            ProviderErrorKind::InvalidResponse,
            "the response has no choices",
        ));
    };
    let msg = choice.message;
    let calls: Vec<ToolCall> = msg
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| {
            let f = c.function?;
            Some(ToolCall::from_text(c.id, f.name, f.arguments))
        })
        .collect();
    let text = msg.content.or(msg.refusal).unwrap_or_default();
    let reasoning = msg
        .reasoning_content
        .filter(|r| !r.is_empty())
        .map(|text| Reasoning::Text { text });
    let message = if calls.is_empty() {
        Message::assistant(text)
    } else {
        Message::assistant_tool_calls(text, calls)
    }
    .with_reasoning(reasoning.into_iter().collect());
    let finish = finish_reason(choice.finish_reason.as_deref());
    let mut fields = crate::client::provider_fields(body.id, body.model, body.extra);
    // What the choice and its message say beyond what the neutral response models.
    for (key, mut extra, modelled) in [
        ("choice", choice.extra, "index"),
        ("message", msg.extra, "role"),
    ] {
        extra.remove(modelled);
        // `"logprobs": null` and the like say nothing.
        extra.retain(|_, v| !v.is_null());
        if !extra.is_empty() {
            fields.insert(key.into(), Value::Object(extra));
        }
    }
    Ok(ChatResponse::new(message)
        .with_finish_reason(finish)
        .with_usage(usage(body.usage.unwrap_or_default()))
        .with_provider_fields(fields))
}

/// The neutral finish reason for OpenAI's.
pub(crate) fn finish_reason(reason: Option<&str>) -> FinishReason {
    match reason {
        None | Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(other) => FinishReason::Other(other.to_owned()),
    }
}

/// OpenAI counts cached and written tokens inside `prompt_tokens`; the neutral `Usage`
/// keeps them apart (`input_tokens` is the fresh part only).
pub(crate) fn usage(u: CompletionUsage) -> Usage {
    let details = u.prompt_tokens_details.unwrap_or_default();
    // A compatible server may report more cached tokens than prompt tokens; never let the
    // parts exceed the whole.
    let read = details.cached_tokens.unwrap_or(0).min(u.prompt_tokens);
    let write = details
        .cache_write_tokens
        .unwrap_or(0)
        .min(u.prompt_tokens - read);
    Usage::new(
        u.prompt_tokens - read - write,
        u.completion_tokens,
        read,
        write,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::chat_completions::types::PromptTokensDetails;
    use serde_json::json;

    /// A request whose pass-through fields are `extra`, written in `format`.
    fn with_extra(format: Option<WireFormat>, extra: serde_json::Value) -> ChatRequest {
        let mut req = ChatRequest::new("gpt-5.4", vec![Message::user("q")]);
        req.params.extra = serde_json::from_value(extra).unwrap();
        req.params.extra_format = format;
        req
    }

    #[test]
    fn another_formats_fields_are_sent_only_when_chat_completions_has_them() {
        let extra = json!({"top_k": 5, "metadata": {"user_id": "u"}, "thinking": {}});
        let sent = |format| {
            let body = request(&with_extra(format, extra.clone())).unwrap();
            let mut keys: Vec<String> = body.extra.keys().cloned().collect();
            keys.sort();
            keys
        };
        assert_eq!(sent(Some(WireFormat::Messages)), ["metadata"]);
        // Its own format's fields, and the caller's own, all go.
        assert_eq!(
            sent(Some(WireFormat::ChatCompletions)),
            ["metadata", "thinking", "top_k"]
        );
        assert_eq!(sent(None), ["metadata", "thinking", "top_k"]);
    }

    #[test]
    fn the_typed_tool_choice_is_written_in_the_chat_completions_form() {
        let mut req = with_extra(None, json!({}));
        req.tools = vec![ToolSpec::new("f", "", json!({"type": "object"}))];
        req.params.tool_choice = Some(llm_context_layers::ToolChoice::tool("f"));
        req.params.parallel_tool_calls = Some(false);
        let body = serde_json::to_value(request(&req).unwrap()).unwrap();
        assert_eq!(
            body["tool_choice"],
            json!({"type": "function", "function": {"name": "f"}})
        );
        assert_eq!(body["parallel_tool_calls"], false);
        // Without tools, neither is sent.
        req.tools.clear();
        let body = serde_json::to_value(request(&req).unwrap()).unwrap();
        assert!(body.get("tool_choice").is_none() && body.get("parallel_tool_calls").is_none());
    }

    #[test]
    fn usage_is_normalised() {
        let u = CompletionUsage {
            prompt_tokens: 2_006,
            completion_tokens: 300,
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: Some(1_920),
                cache_write_tokens: None,
            }),
        };
        assert_eq!(usage(u), Usage::new(86, 300, 1_920, 0));
        let u = CompletionUsage {
            prompt_tokens: 5_000,
            completion_tokens: 1,
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: Some(1_024),
                cache_write_tokens: Some(3_000),
            }),
        };
        assert_eq!(usage(u), Usage::new(976, 1, 1_024, 3_000));
        let odd = CompletionUsage {
            prompt_tokens: 10,
            completion_tokens: 1,
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: Some(50),
                cache_write_tokens: Some(5),
            }),
        };
        assert_eq!(usage(odd).prompt_tokens(), 10);
    }

    #[test]
    fn duplicate_keys_are_not_written() {
        let mut req = ChatRequest::new("m", vec![Message::user("hi")]);
        req.params.max_output_tokens = Some(5);
        req.params
            .extra
            .insert("max_completion_tokens".into(), json!(9));
        req.params.extra.insert("stream".into(), json!(true));
        req.params.extra.insert("tool_choice".into(), json!("auto"));
        let body = serde_json::to_string(&request(&req).unwrap()).unwrap();
        assert_eq!(body.matches("max_completion_tokens").count(), 1);
        assert!(body.contains("\"max_completion_tokens\":5"));
        assert!(!body.contains("stream"));
        assert!(
            !body.contains("tool_choice"),
            "no tools, no tool_choice: {body}"
        );
    }
}
