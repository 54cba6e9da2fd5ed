//! The Chat Completions format as the proxy serves it: the request read from the body
//! ([`body`](super::body)), neutral answers written back as a whole `chat.completion` or as
//! `chat.completion.chunk` events, and OpenAI's error shape.

use axum::body::Bytes;
use axum::http::StatusCode;
use llm_context_layers::stream::{ReasoningDelta, StreamEvent, WireEvent};
use llm_context_layers::{
    ChatRequest, ChatResponse, FinishReason, Reasoning, ToolChoice, Usage, WireFormat,
};
use serde_json::{Value, json};

use super::body::{message_to_wire, request_from_str};
use crate::budget::{BudgetExceeded, rfc3339};
use crate::error::ProviderError;
use crate::wire::checks::{self, Invalid, Kind};
use crate::wire::served::{
    AsGiven, EventWriter, Format, Namespaced, Read, Relay, StreamOptions, amend_usage, find,
    hidden_rounds, made_up_id,
};
use crate::{BoxError, ContextLimitError};

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

/// The top-level fields of a completion the provider names and the proxy passes on as
/// it gave them, when it gave them (an Anthropic answer has none of them).
const PASSED_ON: &[&str] = &["system_fingerprint", "service_tier"];

/// The answer's opening: its `id`, `model` and `created` as the provider gave them (else
/// a unique id, the model asked for, and now), and the fields of [`PASSED_ON`] it gave.
#[derive(Clone, Debug)]
struct Head {
    id: Value,
    model: Value,
    created: Value,
    passed_on: Vec<(&'static str, Value)>,
}

impl Head {
    fn of(fields: &std::collections::BTreeMap<String, Value>, model: &str, created: u64) -> Self {
        let id = fields
            .get("id")
            .filter(|id| id.is_string())
            .cloned()
            .unwrap_or_else(|| json!(made_up_id("chatcmpl-")));
        Self {
            id,
            model: fields.get("model").cloned().unwrap_or_else(|| json!(model)),
            created: fields
                .get("created")
                .filter(|c| c.is_u64())
                .cloned()
                .unwrap_or_else(|| json!(created)),
            passed_on: PASSED_ON
                .iter()
                .filter_map(|k| fields.get(*k).map(|v| (*k, v.clone())))
                .collect(),
        }
    }

    /// `object` with the head's fields.
    fn object(&self, object: &str) -> serde_json::Map<String, Value> {
        let mut out = serde_json::Map::new();
        out.insert("id".into(), self.id.clone());
        out.insert("object".into(), json!(object));
        out.insert("created".into(), self.created.clone());
        out.insert("model".into(), self.model.clone());
        for (k, v) in &self.passed_on {
            out.insert((*k).to_owned(), v.clone());
        }
        out
    }
}

/// A whole `chat.completion` for `r`, asked of `model`.
fn completion(r: &ChatResponse, model: &str, created: u64) -> Value {
    let mut message = message_to_wire(&r.message);
    // An answer's content is a string in Chat Completions: several text blocks (an
    // Anthropic answer's) join into one.
    if message["content"].is_array() {
        message["content"] = json!(r.message.text());
    }
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
    let mut out = Head::of(&r.provider_fields, model, created).object("chat.completion");
    out.insert(
        "choices".into(),
        json!([{"index": 0, "message": message, "logprobs": null,
                "finish_reason": finish(&r.finish_reason)}]),
    );
    out.insert("usage".into(), usage(&r.usage));
    Value::Object(out)
}

/// The `chat.completion.chunk` for one event, if it has one (`Started` and `Usage` have
/// none: the usage goes into the last chunk, as `include_usage` asks), and the chunks
/// that end the stream for `Done`: the finish reason, and the usage when the client asked
/// for it.
fn chunks(event: &StreamEvent, head: &Head, include_usage: bool) -> Vec<Value> {
    let chunk = |delta: Value, finish_reason: Value| {
        let mut out = head.object("chat.completion.chunk");
        out.insert(
            "choices".into(),
            json!([{"index": 0, "delta": delta, "logprobs": null,
                    "finish_reason": finish_reason}]),
        );
        Value::Object(out)
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
                let mut last = head.object("chat.completion.chunk");
                last.insert("choices".into(), json!([]));
                last.insert("usage".into(), usage(&r.usage));
                out.push(Value::Object(last));
            }
            out
        }
        _ => Vec::new(),
    }
}

/// The typed fields the reader left among the pass-through fields because they had the
/// wrong type (a well-typed `temperature` is read into the request), and those only the
/// proxy reads (`stream`, `stream_options`, the token caps): each refused by name.
const TYPED: &[(&str, Kind)] = &[
    ("stream", Kind::Bool),
    ("stream_options", Kind::Object),
    ("max_tokens", Kind::Count),
    ("max_completion_tokens", Kind::Count),
    ("temperature", Kind::Number),
    ("top_p", Kind::Number),
    ("seed", Kind::Integer),
    ("parallel_tool_calls", Kind::Bool),
    ("stop", Kind::StringOrStrings),
];

/// A request's fields as the proxy will act on them, or the first that is wrong.
fn check(request: &ChatRequest) -> Result<(), Invalid> {
    let extra = &request.params.extra;
    for (name, kind) in TYPED {
        checks::field(extra.get(*name), name, *kind)?;
    }
    if let Some(usage) = extra
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
    {
        checks::value("stream_options.include_usage", usage, Kind::Bool)?;
    }
    let tools = || request.tools.iter().map(|t| t.name.as_str());
    if let Some(ToolChoice::Tool { name }) = &request.params.tool_choice {
        checks::declared("tool_choice", name, tools())?;
    }
    match extra.get("tool_choice") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::String(s)) => Err(Invalid::new(
            "tool_choice",
            format!("must be \"none\", \"auto\", \"required\" or an object, not {s:?}"),
        )),
        // The forms the model does not type (`allowed_tools`, custom tools) pass on as
        // written; a named function must be one of the request's.
        Some(choice @ Value::Object(o)) => match o.get("type").and_then(Value::as_str) {
            Some("function") => {
                let function = choice.get("function").unwrap_or(&Value::Null);
                let name = checks::string(function, "name")
                    .map_err(|e| e.within("tool_choice.function"))?;
                checks::declared("tool_choice", name, tools())
            }
            Some("allowed_tools" | "custom") => Ok(()),
            _ => Err(Invalid::new(
                "tool_choice.type",
                "must be \"function\", \"allowed_tools\" or \"custom\"",
            )),
        },
        Some(other) => Err(Invalid::new(
            "tool_choice",
            format!("must be a string or an object, not {}", checks::what(other)),
        )),
    }
}

/// `POST /v1/chat/completions`: OpenAI Chat Completions.
pub(crate) struct ChatCompletions;

impl Format for ChatCompletions {
    const ROUTE: &'static str = "/v1/chat/completions";
    type Events = Chunks;

    fn read(body: &Bytes) -> Result<Read, Invalid> {
        let not_json =
            |e: &dyn std::fmt::Display| Invalid::body(format!("the body is not JSON: {e}"));
        // Straight from the text into the model, in one pass: a JSON tree of a
        // megabyte-long transcript first would cost more than preparing it.
        // Checked at memory speed (`std`'s check was the largest item of an agent's
        // request on this route).
        let text = simdutf8::compat::from_utf8(body).map_err(|e| not_json(&e))?;
        let (mut request, kept) = request_from_str(text).map_err(|e| {
            if e.is_syntax() {
                not_json(&e)
            } else {
                Invalid::new(e.path, e.reason)
            }
        })?;
        check(&request)?;
        let extra = &request.params.extra;
        let stream = extra.get("stream") == Some(&Value::Bool(true));
        let include_usage = extra
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            == Some(&Value::Bool(true));
        // Kept for the OpenAI client, which writes the body back with it.
        request.params.origin = Some(llm_context_layers::Origin::new(kept));
        Ok(Read {
            request,
            stream,
            include_usage,
        })
    }

    /// OpenAI's answer as it came when it gave one (`annotations`, `audio`, `logprobs`,
    /// the usage's details, every field newer than this proxy), with the usage of the
    /// rounds answered inside added; else written from the neutral response.
    fn answer(response: &ChatResponse, model: &str, _tools: &Namespaced) -> Value {
        AsGiven::of(
            response,
            WireFormat::ChatCompletions,
            &usage(&response.usage),
        )
        .unwrap_or_else(|| completion(response, model, crate::wire::served::created()))
    }

    fn events(model: String, options: &StreamOptions) -> Chunks {
        Chunks {
            model,
            created: options.created,
            include_usage: options.include_usage,
            head: None,
            relay: Relay::new(WireFormat::ChatCompletions),
        }
    }

    fn error(status: StatusCode, message: &str) -> Value {
        // OpenAI's own 401 names its code.
        let code = (status == StatusCode::UNAUTHORIZED).then_some("invalid_api_key");
        let kind = if status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        json!({"error": {"type": kind, "message": message, "param": null, "code": code}})
    }

    fn invalid(e: &Invalid) -> Value {
        let param = (!e.path.is_empty()).then_some(e.path.as_str());
        json!({"error": {"type": "invalid_request_error", "message": e.to_string(),
                         "param": param, "code": null}})
    }

    fn failure(e: &BoxError, _status: StatusCode) -> Value {
        if let Some(b) = find::<BudgetExceeded>(e) {
            return json!({
                "error": {"type": "insufficient_quota", "code": "budget_exceeded",
                          "message": b.to_string(), "param": null},
                "llm_context": {"limit": b.limit, "used": b.used, "requested": b.requested,
                                "max": b.max, "resets_at": b.resets_at.map(rfc3339)},
            });
        }
        if let Some(limit) = e.downcast_ref::<ContextLimitError>() {
            return json!({
                "error": {"type": "invalid_request_error", "code": "context_length_exceeded",
                          "message": limit.to_string(), "param": "messages"},
                "llm_context": {"needed_tokens": limit.needed_tokens,
                                "allowance": limit.allowance, "breakdown": limit.breakdown},
            });
        }
        if let Some(p) = find::<ProviderError>(e) {
            return json!({"error": {"type": p.error_type().unwrap_or("upstream_error"),
                                    "message": p.message, "param": null, "code": p.code()}});
        }
        json!({"error": {"type": "server_error", "message": e.to_string(), "param": null,
                         "code": null}})
    }
}

/// A stream as `chat.completion.chunk` events, then `[DONE]`. A failure after the stream
/// began is an `error` event, and the stream ends without `[DONE]`.
pub(crate) struct Chunks {
    model: String,
    created: u64,
    include_usage: bool,
    /// Every chunk's head, set by the first event: the provider's (`Started`) when the
    /// stream opens with it, else made up once.
    head: Option<Head>,
    /// OpenAI's own chunks, relayed as they came when they are.
    relay: Relay,
}

impl EventWriter for Chunks {
    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        // OpenAI's own chunks. The proxy asks for the usage whatever the client asked, so
        // a client that did not gets no usage chunk (and no usage in the last one); one
        // that did gets the usage of rounds answered inside added.
        let include_usage = self.include_usage;
        // OpenAI writes `"usage": null` on every chunk of a stream that asked for the usage;
        // a client that did not ask gets its chunks as OpenAI would have sent it them.
        let unasked;
        let event = match event {
            StreamEvent::Wire(e) if !include_usage && !e.closing => {
                match without_null_usage(&e.data) {
                    Some(data) => {
                        unasked = StreamEvent::Wire(
                            WireEvent::new(e.format, e.event.clone(), data).closing(e.closing),
                        );
                        &unasked
                    }
                    None => event,
                }
            }
            _ => event,
        };
        let relayed = self.relay.event(event, !include_usage, |data, r| {
            if !include_usage {
                if data["choices"].as_array().is_some_and(Vec::is_empty) {
                    return false;
                }
                if let Some(chunk) = data.as_object_mut() {
                    chunk.remove("usage");
                }
            } else if hidden_rounds(r) && data["usage"].is_object() {
                amend_usage(&mut data["usage"], &usage(&r.usage));
            }
            true
        });
        if let Some(frames) = relayed {
            return frames;
        }
        let (model, created) = (&self.model, self.created);
        let head = self.head.get_or_insert_with(|| match event {
            StreamEvent::Started(fields) => Head::of(fields, model, created),
            StreamEvent::Done(r) => Head::of(&r.provider_fields, model, created),
            _ => Head::of(&Default::default(), model, created),
        });
        let mut out: Vec<Bytes> = chunks(event, head, self.include_usage)
            .into_iter()
            .map(|c| Bytes::from(format!("data: {c}\n\n")))
            .collect();
        if matches!(event, StreamEvent::Done(_)) {
            out.push(Bytes::from_static(b"data: [DONE]\n\n"));
        }
        out
    }

    fn failed(&mut self, error: &BoxError, status: StatusCode) -> Bytes {
        Bytes::from(format!(
            "data: {}\n\n",
            ChatCompletions::failure(error, status)
        ))
    }
}

/// A chunk's compact JSON without its `"usage":null` member, if it has one (OpenAI writes
/// it at the top level, before `obfuscation` or last). That text can only be a member:
/// inside a string its quotes are escaped.
fn without_null_usage(data: &str) -> Option<String> {
    const MEMBER: &str = "\"usage\":null";
    let at = data.find(MEMBER)?;
    let end = at + MEMBER.len();
    let (from, to) = if data[end..].starts_with(',') {
        (at, end + 1)
    } else if data[..at].ends_with(',') {
        (at - 1, end)
    } else {
        return None;
    };
    Some([&data[..from], &data[to..]].concat())
}

#[cfg(test)]
mod tests {
    use super::without_null_usage;

    #[test]
    fn a_null_usage_member_is_cut_wherever_it_stands_and_nothing_else() {
        let last = r#"{"id":"c","choices":[{"delta":{"content":"a"}}],"usage":null}"#;
        assert_eq!(
            without_null_usage(last).as_deref(),
            Some(r#"{"id":"c","choices":[{"delta":{"content":"a"}}]}"#)
        );
        let middle = r#"{"id":"c","usage":null,"obfuscation":"x"}"#;
        assert_eq!(
            without_null_usage(middle).as_deref(),
            Some(r#"{"id":"c","obfuscation":"x"}"#)
        );
        // Text that says it, escaped inside a string, is not a member.
        let quoted = r#"{"choices":[{"delta":{"content":"\"usage\":null"}}]}"#;
        assert_eq!(without_null_usage(quoted), None);
        assert_eq!(without_null_usage(r#"{"usage":{"prompt_tokens":1}}"#), None);
    }
}
