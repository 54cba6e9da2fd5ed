//! Neutral answers written back in the Chat Completions wire format: a whole
//! `chat.completion`, or `chat.completion.chunk` events.

use llm_context_layers::stream::{ReasoningDelta, StreamEvent};
use llm_context_layers::{ChatResponse, FinishReason, Reasoning, Usage};
use serde_json::{Value, json};

use crate::openai::body::message_to_wire;

/// OpenAI's `finish_reason` for the neutral one.
fn finish(reason: &FinishReason) -> Value {
    match reason {
        FinishReason::Stop => json!("stop"),
        FinishReason::Length => json!("length"),
        FinishReason::ToolCalls => json!("tool_calls"),
        FinishReason::ContentFilter => json!("content_filter"),
        FinishReason::Other(other) => json!(other),
        _ => json!("stop"),
    }
}

/// OpenAI counts cached and written prompt tokens inside `prompt_tokens`.
fn usage(u: &Usage) -> Value {
    let prompt = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": u.output_tokens,
        "total_tokens": prompt + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
    })
}

/// The response's `id` and `model` as the provider gave them, else made up from `model`.
fn id_and_model(r: &ChatResponse, model: &str) -> (Value, Value) {
    let id = r
        .provider_fields
        .get("id")
        .cloned()
        .unwrap_or_else(|| json!("chatcmpl-llm-context"));
    let model = r
        .provider_fields
        .get("model")
        .cloned()
        .unwrap_or_else(|| json!(model));
    (id, model)
}

/// A whole `chat.completion` for `r`, asked of `model`.
pub(crate) fn completion(r: &ChatResponse, model: &str, created: u64) -> Value {
    let mut message = message_to_wire(&r.message);
    // The response schema requires both, null when there is none.
    for key in ["content", "refusal"] {
        if message.get(key).is_none() {
            message[key] = Value::Null;
        }
    }
    // The reasoning of an OpenAI-compatible server, where such clients read it.
    let reasoning: String = r
        .message
        .reasoning()
        .iter()
        .map(Reasoning::counted_text)
        .collect();
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    let (id, model) = id_and_model(r, model);
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null,
                     "finish_reason": finish(&r.finish_reason)}],
        "usage": usage(&r.usage),
    })
}

/// The `chat.completion.chunk` for one event, if it has one (`Usage` has none: the usage
/// goes into the last chunk, as `include_usage` asks), and the chunks that end the
/// stream for `Done`: the finish reason, and the usage when the client asked for it.
pub(crate) fn chunks(
    event: &StreamEvent,
    model: &str,
    created: u64,
    include_usage: bool,
) -> Vec<Value> {
    let chunk = |delta: Value, finish_reason: Value| {
        json!({
            "id": "chatcmpl-llm-context", "object": "chat.completion.chunk",
            "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null,
                         "finish_reason": finish_reason}],
        })
    };
    match event {
        StreamEvent::Text(text) => vec![chunk(json!({"content": text}), Value::Null)],
        StreamEvent::Reasoning {
            delta: ReasoningDelta::Thinking(text) | ReasoningDelta::Text(text),
            ..
        } => vec![chunk(json!({"reasoning_content": text}), Value::Null)],
        StreamEvent::ToolCall(d) => {
            let mut call = json!({"index": d.index, "function": {"arguments": d.arguments}});
            if let Some(id) = &d.id {
                call["id"] = json!(id);
                call["type"] = json!("function");
            }
            if let Some(name) = &d.name {
                call["function"]["name"] = json!(name);
            }
            vec![chunk(json!({"tool_calls": [call]}), Value::Null)]
        }
        StreamEvent::Done(r) => {
            let mut out = vec![chunk(json!({}), finish(&r.finish_reason))];
            if include_usage {
                out.push(json!({
                    "id": "chatcmpl-llm-context", "object": "chat.completion.chunk",
                    "created": created, "model": model, "choices": [],
                    "usage": usage(&r.usage),
                }));
            }
            out
        }
        _ => Vec::new(),
    }
}
