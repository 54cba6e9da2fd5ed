//! OpenAI Chat Completions request bodies ↔ [`ChatRequest`].
//!
//! ```
//! use llm_context::openai::body::{body_from_request, request_from_body};
//! use serde_json::json;
//!
//! let body = json!({
//!     "model": "gpt-5.4",
//!     "temperature": 0,
//!     "messages": [
//!         {"role": "developer", "content": "Be terse."},
//!         {"role": "user", "content": "hi"}
//!     ]
//! });
//! let (request, ctx) = request_from_body(&body).unwrap();
//! assert_eq!(request.messages.len(), 2);
//! // Unchanged messages and unknown fields come back byte for byte.
//! assert_eq!(body_from_request(&request, &ctx), body);
//! ```
//!
//! The mapping keeps what it does not model: every top-level field other than `model`,
//! `messages` and `tools` is carried in [`GenerationParams`] (the common ones typed, the
//! rest in `extra`), and the original JSON of every message is kept in a [`BodyContext`],
//! so a message the layers did not change is written back exactly as it came (a
//! `developer` role, `refusal`, `audio` and fields added after this crate was written
//! included). A changed message (a cleared or offloaded tool result) keeps its other
//! fields and gets the new content.
//!
//! The client (`OpenAi`, feature `openai`) writes its typed request from the same neutral
//! model and reads and writes tool-call arguments with the same [`arguments_from_wire`]
//! and [`arguments_to_wire`]. This module is compiled with the `openai` feature or the
//! `cli` feature: the command-line tool reads and writes request bodies with it, with or
//! without the client.

use serde_json::{Map, Value, json};

use llm_context_layers::prefix::leading_system_end;
use llm_context_layers::{
    ChatRequest, Content, ContentPart, GenerationParams, Message, Role, ToolCall, ToolSpec,
};

/// A request body that does not have the shape the provider defines.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
#[non_exhaustive]
pub struct WireError {
    /// Where in the body, as a JSON path (`messages[3].role`).
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl WireError {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// What [`request_from_body`] keeps so that [`body_from_request`] loses nothing.
#[derive(Clone, Debug, Default)]
pub struct BodyContext {
    messages: Vec<(Message, Map<String, Value>)>,
}

/// Reads an OpenAI Chat Completions request body.
pub fn request_from_body(body: &Value) -> Result<(ChatRequest, BodyContext), WireError> {
    let obj = body
        .as_object()
        .ok_or_else(|| WireError::new("$", "the request body must be a JSON object"))?;
    let model = match obj.get("model") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(WireError::new("model", "must be a string")),
        None => return Err(WireError::new("model", "is required")),
    };
    let wire_messages = match obj.get("messages") {
        Some(Value::Array(a)) => a,
        Some(_) => return Err(WireError::new("messages", "must be an array")),
        None => return Err(WireError::new("messages", "is required")),
    };
    let mut ctx = BodyContext::default();
    let mut messages = Vec::with_capacity(wire_messages.len());
    for (i, wm) in wire_messages.iter().enumerate() {
        let m = message_from_wire(wm)
            .map_err(|e| WireError::new(format!("messages[{i}]{}", e.path), e.reason))?;
        ctx.messages
            .push((m.clone(), wm.as_object().cloned().unwrap_or_default()));
        messages.push(m);
    }
    let tools = match obj.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, t)| {
                tool_from_wire(t)
                    .map_err(|e| WireError::new(format!("tools[{i}]{}", e.path), e.reason))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(WireError::new("tools", "must be an array")),
    };
    let mut params = GenerationParams::default();
    for (k, v) in obj {
        match k.as_str() {
            "model" | "messages" | "tools" => {}
            "temperature" if v.is_number() => params.temperature = v.as_f64(),
            "top_p" if v.is_number() => params.top_p = v.as_f64(),
            "seed" if v.is_i64() => params.seed = v.as_i64(),
            _ => {
                params.extra.insert(k.clone(), v.clone());
            }
        }
    }
    let request = ChatRequest::new(model, messages)
        .with_tools(tools)
        .with_params(params);
    Ok((request, ctx))
}

/// Writes a request back as an OpenAI Chat Completions body. Messages found unchanged in
/// `ctx` are written as they came; others are written from the neutral model.
pub fn body_from_request(req: &ChatRequest, ctx: &BodyContext) -> Value {
    let mut out = Map::new();
    out.insert("model".into(), Value::String(req.model.clone()));
    let mut messages = Vec::new();
    if let Some(prefix) = &req.prefix {
        messages.extend(prefix.as_messages().iter().map(message_to_wire));
    }
    let counterparts = counterparts(&ctx.messages, &req.messages);
    for (m, found) in req.messages.iter().zip(counterparts) {
        messages.push(match found.map(|i| &ctx.messages[i]) {
            Some((orig, raw)) if orig == m => Value::Object(raw.clone()),
            Some((_, raw)) => {
                let mut raw = raw.clone();
                raw.insert("content".into(), content_to_wire(&m.content));
                Value::Object(raw)
            }
            None => message_to_wire(m),
        });
    }
    out.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        out.insert(
            "tools".into(),
            Value::Array(req.tools.iter().map(tool_to_wire).collect()),
        );
    }
    let p = &req.params;
    if let Some(t) = p.temperature {
        out.insert("temperature".into(), number(t));
    }
    if let Some(t) = p.top_p {
        out.insert("top_p".into(), number(t));
    }
    if let Some(s) = p.seed {
        out.insert("seed".into(), json!(s));
    }
    if let Some(n) = p.max_output_tokens {
        out.insert("max_completion_tokens".into(), json!(n));
    }
    if !p.stop.is_empty() {
        out.insert("stop".into(), json!(p.stop));
    }
    if let Some(tc) = &p.tool_choice {
        out.insert("tool_choice".into(), tc.clone());
    }
    for (k, v) in &p.extra {
        out.insert(k.clone(), v.clone());
    }
    Value::Object(out)
}

/// For each sent message, the index of the message it came from in `originals`, or
/// `None` for one the stack added.
///
/// The layers keep order and only drop or rewrite, so the sent messages are a subsequence
/// of the originals. Which copy of two identical messages survived follows from what the
/// layers drop: never the leading system messages, which are matched in place; otherwise
/// the oldest turns and the oldest rounds of a turn, so the rest is matched from the
/// newest end, each message to the newest original before the one matched after it.
fn counterparts(
    originals: &[(Message, Map<String, Value>)],
    sent: &[Message],
) -> Vec<Option<usize>> {
    let mut out = vec![None; sent.len()];
    let in_head = originals
        .iter()
        .position(|(m, _)| m.role != Role::System)
        .unwrap_or(originals.len());
    let out_head = leading_system_end(sent).min(in_head);
    let mut head_matched = 0;
    for (i, m) in sent[..out_head].iter().enumerate() {
        if same_message(&originals[i].0, m) {
            out[i] = Some(i);
            head_matched = i + 1;
        }
    }
    let mut end = originals.len();
    for (i, m) in sent.iter().enumerate().skip(out_head).rev() {
        let found = originals[head_matched..end]
            .iter()
            .rposition(|(orig, _)| same_message(orig, m));
        if let Some(j) = found {
            end = head_matched + j;
            out[i] = Some(end);
        }
    }
    out
}

/// Whether `new` is `orig`, possibly with its content rewritten by a layer. The layers
/// rewrite only tool results, and a tool result is known by its `tool_call_id`: any
/// other message must be unchanged to be the same, whatever its content looks like (a
/// user message can quote a preview).
fn same_message(orig: &Message, new: &Message) -> bool {
    let same_head = orig.role == new.role
        && orig.name == new.name
        && orig.tool_call_id == new.tool_call_id
        && orig.tool_calls == new.tool_calls;
    same_head
        && (orig.content == new.content
            || (new.is_tool_result()
                && new.tool_call_id.is_some()
                && new.content.as_str().is_some_and(|t| {
                    llm_context_layers::artifact::is_stub(t)
                        || llm_context_layers::artifact::is_preview(t)
                })))
}

/// A float written as an integer when it is one (`0`, not `0.0`), as users write it.
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        json!(x as i64)
    } else {
        json!(x)
    }
}

/// Reads one OpenAI message. `developer` is read as `system`.
pub fn message_from_wire(v: &Value) -> Result<Message, WireError> {
    let obj = v
        .as_object()
        .ok_or_else(|| WireError::new("", "a message must be an object"))?;
    let role = match obj.get("role").and_then(Value::as_str) {
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        Some(other) => {
            return Err(WireError::new(
                ".role",
                format!(
                    "unknown role {other:?} (expected system, developer, user, assistant or tool)"
                ),
            ));
        }
        None => return Err(WireError::new(".role", "is required and must be a string")),
    };
    let content = match obj.get("content") {
        None | Some(Value::Null) => Content::default(),
        Some(Value::String(s)) => Content::Text(s.clone()),
        Some(Value::Array(parts)) => Content::Parts(
            parts
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    part_from_wire(p)
                        .map_err(|e| WireError::new(format!(".content[{i}]{}", e.path), e.reason))
                })
                .collect::<Result<_, _>>()?,
        ),
        Some(_) => {
            return Err(WireError::new(
                ".content",
                "must be a string, an array of parts or null",
            ));
        }
    };
    let opt_string = |key: &str| -> Result<Option<String>, WireError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(WireError::new(format!(".{key}"), "must be a string")),
        }
    };
    let name = opt_string("name")?;
    let tool_call_id = opt_string("tool_call_id")?;
    if role == Role::Tool && tool_call_id.is_none() {
        return Err(WireError::new(
            ".tool_call_id",
            "is required on a tool message",
        ));
    }
    let tool_calls = match obj.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                call_from_wire(c)
                    .map_err(|e| WireError::new(format!(".tool_calls[{i}]{}", e.path), e.reason))
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(WireError::new(".tool_calls", "must be an array")),
    };
    Ok(Message {
        role,
        content,
        name,
        tool_call_id,
        tool_calls,
    })
}

fn part_from_wire(v: &Value) -> Result<ContentPart, WireError> {
    match v.get("type").and_then(Value::as_str) {
        Some("text") => match v.get("text") {
            Some(Value::String(t)) => Ok(ContentPart::text(t.as_str())),
            _ => Err(WireError::new(".text", "a text part needs a string `text`")),
        },
        Some("image_url") => {
            let url = v
                .get("image_url")
                .and_then(|i| i.get("url"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    WireError::new(".image_url.url", "an image part needs a string url")
                })?;
            let detail = v
                .get("image_url")
                .and_then(|i| i.get("detail"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            Ok(ContentPart::Image {
                url: url.to_owned(),
                detail,
            })
        }
        Some(other) => Err(WireError::new(
            ".type",
            format!("unsupported content part type {other:?}"),
        )),
        None => Err(WireError::new(
            ".type",
            "a content part needs a string `type`",
        )),
    }
}

fn call_from_wire(v: &Value) -> Result<ToolCall, WireError> {
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| WireError::new(".id", "a tool call needs a string id"))?;
    let f = v
        .get("function")
        .ok_or_else(|| WireError::new(".function", "a tool call needs a function"))?;
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| WireError::new(".function.name", "is required and must be a string"))?;
    let arguments = match f.get("arguments") {
        Some(Value::String(s)) => arguments_from_wire(s),
        Some(other) => other.clone(),
        None => Value::Object(Map::new()),
    };
    Ok(ToolCall::new(id, name, arguments))
}

/// Tool-call arguments arrive as JSON text. Valid JSON that is not a string is parsed;
/// anything else (models do emit broken JSON) is kept as the raw string, and written back
/// as that same string.
pub fn arguments_from_wire(s: &str) -> Value {
    match serde_json::from_str::<Value>(s) {
        Ok(v) if !v.is_string() => v,
        _ => Value::String(s.to_owned()),
    }
}

/// Tool-call arguments as JSON text: the raw string kept by [`arguments_from_wire`], or
/// the value written compactly.
pub fn arguments_to_wire(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn tool_from_wire(v: &Value) -> Result<ToolSpec, WireError> {
    let f = v
        .get("function")
        .ok_or_else(|| WireError::new(".function", "only function tools are supported"))?;
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| WireError::new(".function.name", "is required and must be a string"))?;
    let description = f
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let parameters = f
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    Ok(ToolSpec::new(name, description, parameters))
}

/// Writes one tool definition.
pub fn tool_to_wire(t: &ToolSpec) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), Value::String(t.name.clone()));
    if !t.description.is_empty() {
        f.insert("description".into(), Value::String(t.description.clone()));
    }
    f.insert("parameters".into(), t.parameters.clone());
    json!({"type": "function", "function": f})
}

/// Writes a message's content.
pub fn content_to_wire(c: &Content) -> Value {
    match c {
        Content::Text(t) => Value::String(t.clone()),
        Content::Parts(parts) => Value::Array(
            parts
                .iter()
                .map(|p| match p {
                    ContentPart::Text { text } => json!({"type": "text", "text": text}),
                    ContentPart::Image { url, detail } => {
                        let mut img = Map::new();
                        img.insert("url".into(), Value::String(url.clone()));
                        if let Some(d) = detail {
                            img.insert("detail".into(), Value::String(d.clone()));
                        }
                        json!({"type": "image_url", "image_url": img})
                    }
                    _ => json!({"type": "text", "text": ""}),
                })
                .collect(),
        ),
    }
}

/// Writes one message from the neutral model.
pub fn message_to_wire(m: &Message) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), Value::String(m.role.as_str().into()));
    if m.has_tool_calls() && m.content.is_empty() {
        out.insert("content".into(), Value::Null);
    } else {
        out.insert("content".into(), content_to_wire(&m.content));
    }
    if let Some(n) = &m.name {
        out.insert("name".into(), Value::String(n.clone()));
    }
    if let Some(id) = &m.tool_call_id {
        out.insert("tool_call_id".into(), Value::String(id.clone()));
    }
    if m.has_tool_calls() {
        let calls = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": arguments_to_wire(&c.arguments)}})
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_field() {
        let body = json!({
            "model": "gpt-5.4",
            "temperature": 0.2,
            "stream": false,
            "metadata": {"k": "v"},
            "messages": [
                {"role": "developer", "content": "rules"},
                {"role": "user", "content": [{"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}}]},
                {"role": "assistant", "content": null, "refusal": null,
                 "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "f", "arguments": "{\"b\": 1, \"a\": 2}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}
            ],
            "tools": [{"type": "function", "function": {"name": "f", "description": "d",
                       "parameters": {"type": "object"}}}]
        });
        let (req, ctx) = request_from_body(&body).unwrap();
        assert_eq!(req.messages[0].role, Role::System);
        assert_eq!(
            req.messages[2].tool_calls[0].arguments,
            json!({"a": 2, "b": 1})
        );
        assert_eq!(req.params.temperature, Some(0.2));
        assert_eq!(body_from_request(&req, &ctx), body);
    }

    #[test]
    fn broken_arguments_survive() {
        assert_eq!(arguments_to_wire(&arguments_from_wire("{oops")), "{oops");
        assert_eq!(arguments_to_wire(&arguments_from_wire("\"s\"")), "\"s\"");
    }

    #[test]
    fn errors_name_the_path() {
        let bad = json!({"model": "m", "messages": [{"role": "user"}, {"role": "wizard"}]});
        let err = request_from_body(&bad).unwrap_err();
        assert_eq!(err.path, "messages[1].role");
        let bad = json!({"model": "m", "messages": [{"role": "tool", "content": "x"}]});
        assert_eq!(
            request_from_body(&bad).unwrap_err().path,
            "messages[0].tool_call_id"
        );
        assert_eq!(request_from_body(&json!([])).unwrap_err().path, "$");
    }
}
