//! A `Response` object both ways: read into the neutral response (the client's side),
//! and written from it (the proxy's, when no provider's answer came in this format).

use llm_context_layers::{
    ChatResponse, Content, ContentPart, FinishReason, Message, ToolCall, Usage, WireFormat,
};
use serde_json::Value;
#[cfg(feature = "serve")]
use serde_json::{Map, json};

#[cfg(feature = "serve")]
use super::write::render_message;
use crate::catalog::Provider;
use crate::error::{ProviderError, ProviderErrorKind};

/// The neutral response of a `Response` object: its output text, tool calls, and every
/// other output item (reasoning above all, resent as it came) as opaque parts in order.
pub(crate) fn response(body: &Value) -> Result<ChatResponse, ProviderError> {
    let invalid = |what: &str| {
        ProviderError::new(
            Provider::OpenAi,
            ProviderErrorKind::InvalidResponse,
            format!("a Responses answer {what}"),
        )
    };
    let output = body["output"]
        .as_array()
        .ok_or_else(|| invalid("has no `output` list"))?;
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    for item in output {
        match item["type"].as_str() {
            Some("message") => {
                for p in item["content"].as_array().into_iter().flatten() {
                    match (p["type"].as_str(), p["text"].as_str()) {
                        (Some("output_text"), Some(text)) => parts.push(ContentPart::text(text)),
                        _ => parts.push(opaque(p)),
                    }
                }
            }
            Some(kind @ ("function_call" | "custom_tool_call")) => {
                let field = if kind == "function_call" {
                    "arguments"
                } else {
                    "input"
                };
                let (Some(id), Some(name)) = (item["call_id"].as_str(), item["name"].as_str())
                else {
                    return Err(invalid("has a tool call without `call_id` or `name`"));
                };
                calls.push(ToolCall::from_text(
                    id,
                    name,
                    item[field].as_str().unwrap_or("{}"),
                ));
                // The call's item too, in its place: sent back, it keeps its id, its
                // kind and its place after the reasoning that led to it.
                parts.push(opaque(item));
            }
            _ => parts.push(opaque(item)),
        }
    }
    let content = match parts.as_slice() {
        [ContentPart::Text { text }] => Content::from(text.as_str()),
        _ => Content::from(parts),
    };
    let message = if calls.is_empty() {
        Message::assistant(content)
    } else {
        Message::assistant_tool_calls(content, calls)
    };
    let finish = finish_reason(body, !message.tool_calls.is_empty());
    let mut fields = std::collections::BTreeMap::new();
    for key in ["id", "model"] {
        if let Some(v) = body.get(key).filter(|v| !v.is_null()) {
            fields.insert(key.to_owned(), v.clone());
        }
    }
    Ok(ChatResponse::new(message)
        .with_finish_reason(finish)
        .with_usage(usage_of(&body["usage"]))
        .with_provider_fields(fields))
}

fn opaque(item: &Value) -> ContentPart {
    ContentPart::Opaque {
        format: WireFormat::Responses,
        kind: item["type"].as_str().unwrap_or_default().to_owned(),
        json: item.to_string(),
    }
}

/// Why a response ended: `incomplete` for its reason, else its calls or a stop.
pub(crate) fn finish_reason(body: &Value, calls: bool) -> FinishReason {
    match (
        body["status"].as_str(),
        body["incomplete_details"]["reason"].as_str(),
    ) {
        (Some("incomplete"), Some("max_output_tokens")) => FinishReason::Length,
        (Some("incomplete"), Some("content_filter")) => FinishReason::ContentFilter,
        (Some("incomplete"), Some(other)) => FinishReason::Other(other.to_owned()),
        _ if calls => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

/// The neutral usage: `input_tokens` includes the cached ones.
pub(crate) fn usage_of(u: &Value) -> Usage {
    let input = u["input_tokens"].as_u64().unwrap_or(0);
    let cached = u["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
        .min(input);
    Usage::new(
        input - cached,
        u["output_tokens"].as_u64().unwrap_or(0),
        cached,
        0,
    )
}

/// The usage as a `Response` writes it.
#[cfg(feature = "serve")]
pub(crate) fn usage(u: &Usage) -> Value {
    let input = u
        .input_tokens
        .saturating_add(u.cache_read_tokens)
        .saturating_add(u.cache_write_tokens);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": u.cache_read_tokens,
                                 "cache_write_tokens": u.cache_write_tokens},
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input.saturating_add(u.output_tokens),
    })
}

/// A `Response` object for `r`, asked of `model`, written from the neutral response:
/// its items with ids, as an answer from the provider has them, a call of a namespaced
/// tool (one of `tools`) by its own name and its namespace.
#[cfg(feature = "serve")]
pub(crate) fn written(
    r: &ChatResponse,
    model: &str,
    created: u64,
    tools: &crate::wire::served::Namespaced,
) -> Value {
    // Claude's thinking first, as reasoning items the caller resends (see `thinking`).
    let mut output: Vec<Value> = r
        .message
        .reasoning()
        .iter()
        .enumerate()
        .filter_map(|(i, t)| super::thinking::item(t, &format!("rs_{i:04}")))
        .collect();
    output.extend(render_message(&r.message).unwrap_or_default());
    for (i, item) in output.iter_mut().enumerate() {
        let Some(obj) = item.as_object_mut() else {
            continue;
        };
        let prefix = match obj.get("type").and_then(Value::as_str) {
            Some("message") => "msg_",
            Some("function_call") => "fc_",
            _ => continue,
        };
        let split = obj
            .get("name")
            .and_then(Value::as_str)
            .and_then(|name| tools.get(name));
        if let Some((namespace, own)) = split {
            obj.insert("name".into(), json!(own));
            obj.insert("namespace".into(), json!(namespace));
        }
        if !obj.contains_key("id") {
            obj.insert("id".into(), json!(format!("{prefix}{i:04}")));
        }
        obj.entry("status").or_insert_with(|| json!("completed"));
        // An output message's text is a list of `output_text` parts.
        if let Some(Value::String(text)) = obj.get("content") {
            let part = json!({"type": "output_text", "text": text, "annotations": [],
                              "logprobs": []});
            obj.insert("content".into(), json!([part]));
        }
    }
    let (status, incomplete) = match &r.finish_reason {
        FinishReason::Length => ("incomplete", json!({"reason": "max_output_tokens"})),
        FinishReason::ContentFilter => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    };
    let id = r
        .provider_fields
        .get("id")
        .and_then(Value::as_str)
        .map_or_else(|| crate::wire::served::made_up_id("resp_"), str::to_owned);
    let model = r
        .provider_fields
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(model);
    let mut out = Map::new();
    for (k, v) in [
        ("id", json!(id)),
        ("object", json!("response")),
        ("created_at", json!(created)),
        ("status", json!(status)),
        ("error", Value::Null),
        ("incomplete_details", incomplete),
        ("instructions", Value::Null),
        ("model", json!(model)),
        ("output", Value::Array(output)),
        ("parallel_tool_calls", json!(true)),
        ("metadata", json!({})),
        ("tool_choice", json!("auto")),
        ("tools", json!([])),
        ("temperature", Value::Null),
        ("top_p", Value::Null),
        ("usage", usage(&r.usage)),
    ] {
        out.insert(k.to_owned(), v);
    }
    Value::Object(out)
}
