//! The Anthropic Messages wire format on the server's side: a `/v1/messages` body read
//! into the neutral request, and neutral answers written back as a `message` or as the
//! Messages stream's events.
//!
//! The body is kept beside the request ([`faithful`](super::faithful)): the Anthropic
//! client sends it back as written but for the stack's edits, so unknown fields,
//! `is_error` and the client's `cache_control` markers reach Anthropic unchanged. A
//! content block kind the neutral model does not represent (documents, server tools'
//! blocks) is read as a `ContentPart::Opaque`, and a server tool (no `input_schema`) as a
//! `ToolSpec` with `opaque` set: both kept whole for Anthropic, and refused by name by
//! an OpenAI upstream, never dropped silently.

use std::collections::{BTreeMap, HashMap};

use llm_context_layers::stream::{ReasoningDelta, StreamEvent};
use llm_context_layers::{
    ChatRequest, ChatResponse, Content, ContentPart, FinishReason, GenerationParams, Message,
    OpaqueTool, Reasoning, Role, ToolCall, ToolChoice, ToolSpec, Usage, WireFormat,
};
use serde_json::{Value, json};

use axum::body::Bytes;
use axum::http::StatusCode;

use super::convert::content;
use super::faithful::Kept;
use crate::budget::BudgetExceeded;
use crate::error::ProviderError;
use crate::wire::checks::{self, Invalid, Kind};
use crate::wire::served::{
    AsGiven, EventWriter, Format, Namespaced, Read, Relay, Reuses, StreamOptions, amend_usage,
    find, made_up_id,
};
use crate::{BoxError, ContextLimitError};

/// Top-level fields read into the neutral request; every other one is carried in
/// `params.extra` and passed on where the upstream takes it (`thinking`, `metadata`,
/// `top_k`, …).
const READ: &[&str] = &[
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "stream",
];

/// The neutral request for a Messages body, or what is wrong with it: every field read is
/// checked for its type, so none is read as absent because it was mistyped. With it, for
/// each neutral message after the top-level system prompt's, the wire message it was read
/// from.
///
/// The text of the messages' text blocks and tool results is moved out of `body` into the
/// request, not copied (a transcript's text is most of its bytes, and the body would
/// otherwise hold a second copy until the request is answered); everything else in
/// `body` stays as it came.
fn request(body: &mut Value) -> Result<(ChatRequest, Vec<usize>), Invalid> {
    // Read first, while `body` may be borrowed mutably: the rest reads it as it is.
    let mut wire = match body.get_mut("messages") {
        Some(Value::Array(wire)) => std::mem::take(wire),
        _ => Vec::new(),
    };
    let read = read_messages(&mut wire);
    if let Some(Value::Array(back)) = body.get_mut("messages") {
        *back = wire;
    }
    let (read_messages, owners, _) = read?;
    finish(body, read_messages, owners)
}

/// The neutral request of a Messages body whose messages were read (`read_messages`,
/// each from the wire message `owners` gives): the rest of the body read and checked.
pub(super) fn finish(
    body: &Value,
    read_messages: Vec<Message>,
    owners: Vec<usize>,
) -> Result<(ChatRequest, Vec<usize>), Invalid> {
    let obj = body
        .as_object()
        .ok_or_else(|| Invalid::body("the body must be a JSON object (a Messages request)"))?;
    let model = checks::string(body, "model")?;
    for (name, kind) in [
        ("max_tokens", Kind::Count),
        ("temperature", Kind::Number),
        ("top_p", Kind::Number),
        ("stop_sequences", Kind::Strings),
        ("stream", Kind::Bool),
    ] {
        checks::field(obj.get(name), name, kind)?;
    }
    match obj.get("messages") {
        Some(Value::Array(_)) => {}
        None => return Err(Invalid::new("messages", "is required (an array)")),
        Some(other) => {
            let why = format!("must be an array, not {}", checks::what(other));
            return Err(Invalid::new("messages", why));
        }
    }
    let mut messages = system(obj.get("system"))?;
    messages.extend(read_messages);
    let tools: Vec<ToolSpec> = match obj.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(tools)) => tools
            .iter()
            .enumerate()
            .map(|(i, t)| tool(t).map_err(|e| e.item("tools", i)))
            .collect::<Result<_, _>>()?,
        Some(other) => {
            let why = format!("must be an array, not {}", checks::what(other));
            return Err(Invalid::new("tools", why));
        }
    };
    let mut params = GenerationParams::default();
    params.max_output_tokens = obj
        .get("max_tokens")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok());
    params.temperature = obj.get("temperature").and_then(Value::as_f64);
    params.top_p = obj.get("top_p").and_then(Value::as_f64);
    if let Some(stop) = obj.get("stop_sequences").and_then(Value::as_array) {
        params.stop = stop
            .iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect();
    }
    if let Some(choice) = obj.get("tool_choice").filter(|c| !c.is_null()) {
        let (choice, parallel) = tool_choice_from_wire(choice, &tools)?;
        params.tool_choice = Some(choice);
        params.parallel_tool_calls = parallel;
    }
    // The fields not read into the request are kept as written, tagged: an OpenAI
    // upstream is sent only those Chat Completions has.
    params.extra_format = Some(WireFormat::Messages);
    for (k, v) in obj {
        if !READ.contains(&k.as_str()) {
            params.extra.insert(k.clone(), v.clone());
        }
    }
    let request = ChatRequest::new(model, messages)
        .with_tools(tools)
        .with_params(params);
    Ok((request, owners))
}

/// The wire messages, as neutral messages (their text moved out), with the wire message
/// each came from and the tool names of the calls.
#[allow(clippy::type_complexity)]
fn read_messages(
    wire: &mut [Value],
) -> Result<(Vec<Message>, Vec<usize>, HashMap<String, String>), Invalid> {
    // A tool result names no tool; its call, earlier in the transcript, does.
    let mut tool_names: HashMap<String, String> = HashMap::new();
    let mut messages = Vec::with_capacity(wire.len());
    let mut owners = Vec::with_capacity(wire.len());
    for (i, m) in wire.iter_mut().enumerate() {
        let before = messages.len();
        read_message(m, &mut messages, &mut tool_names).map_err(|e| e.item("messages", i))?;
        owners.extend(std::iter::repeat_n(i, messages.len() - before));
    }
    Ok((messages, owners, tool_names))
}

/// The string at `key` of `b`, moved out (an empty string left in its place), or the
/// error naming it.
fn take_string(b: &mut Value, key: &str) -> Result<String, Invalid> {
    checks::string(b, key)?;
    match b.get_mut(key) {
        Some(Value::String(s)) => Ok(std::mem::take(s)),
        _ => Ok(String::new()),
    }
}

/// The system prompt, a string or text blocks: one system message per block.
fn system(system: Option<&Value>) -> Result<Vec<Message>, Invalid> {
    match system {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![Message::system(s.as_str())]),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let text = match b.get("type").and_then(Value::as_str) {
                    Some("text") => checks::string(b, "text"),
                    _ => Err(Invalid::new("type", "must be \"text\" in `system`")),
                };
                text.map(Message::system).map_err(|e| e.item("system", i))
            })
            .collect(),
        Some(other) => Err(Invalid::new(
            "system",
            format!(
                "must be a string or an array of text blocks, not {}",
                checks::what(other)
            ),
        )),
    }
}

/// One wire message, as neutral messages: a user message's tool results become tool
/// messages (first, as Anthropic requires them), its other blocks a user message.
pub(super) fn read_message(
    m: &mut Value,
    out: &mut Vec<Message>,
    tool_names: &mut HashMap<String, String>,
) -> Result<(), Invalid> {
    if !m.is_object() {
        let why = format!("must be a message object, not {}", checks::what(m));
        return Err(Invalid::body(why));
    }
    let role = checks::string(m, "role")?;
    // A string is one text block; blocks are read where they lie (a transcript's tool
    // results are most of its bytes).
    let role = role.to_owned();
    let role = role.as_str();
    let mut single;
    let blocks: &mut [Value] = match &mut m["content"] {
        Value::String(s) => {
            single = [json!({"type": "text", "text": std::mem::take(s)})];
            &mut single
        }
        Value::Array(blocks) => blocks,
        other => {
            let why = format!(
                "must be a string or an array of blocks, not {}",
                checks::what(other)
            );
            return Err(Invalid::new("content", why));
        }
    };
    let at = |i: usize| move |e: Invalid| e.item("content", i);
    match role {
        "user" => {
            let mut parts = Vec::new();
            for (i, b) in blocks.iter_mut().enumerate() {
                match b["type"].as_str() {
                    Some("tool_result") => out.push(tool_result(b, tool_names).map_err(at(i))?),
                    _ => parts.push(part(b).map_err(at(i))?),
                }
            }
            if !parts.is_empty() {
                out.push(Message::user(content(parts)));
            }
        }
        "assistant" => {
            let mut text = Vec::new();
            let mut calls = Vec::new();
            let mut reasoning = Vec::new();
            for (i, b) in blocks.iter_mut().enumerate() {
                assistant_block(b, &mut text, &mut calls, &mut reasoning, tool_names)
                    .map_err(at(i))?;
            }
            let text = content(text);
            let message = if calls.is_empty() {
                Message::assistant(text)
            } else {
                Message::assistant_tool_calls(text, calls)
            };
            out.push(message.with_reasoning(reasoning));
        }
        // A mid-conversation system message (Anthropic's beta, Claude Code's): it stays
        // where the client put it (see `convert::render`).
        "system" => {
            let parts = blocks
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    match b["type"].as_str() {
                        Some("text") => checks::string(b, "text").map(ContentPart::text),
                        _ => Err(Invalid::new("type", "must be \"text\" in a system message")),
                    }
                    .map_err(at(i))
                })
                .collect::<Result<Vec<_>, _>>()?;
            out.push(Message::system(content(parts)));
        }
        other => {
            let why = format!("must be \"user\", \"assistant\" or \"system\", not {other:?}");
            return Err(Invalid::new("role", why));
        }
    }
    Ok(())
}

/// One block of an assistant message, into its text, calls or reasoning.
fn assistant_block(
    b: &mut Value,
    text: &mut Vec<ContentPart>,
    calls: &mut Vec<ToolCall>,
    reasoning: &mut Vec<Reasoning>,
    tool_names: &mut HashMap<String, String>,
) -> Result<(), Invalid> {
    match b["type"].as_str() {
        Some("text") => text.push(ContentPart::text(take_string(b, "text")?)),
        Some("tool_use") => {
            let id = checks::string(b, "id")?;
            let name = checks::string(b, "name")?;
            checks::value("input", &b["input"], Kind::Object)?;
            tool_names.insert(id.to_owned(), name.to_owned());
            calls.push(ToolCall::new(id, name, b["input"].clone()));
        }
        Some("thinking") => reasoning.push(Reasoning::Thinking {
            thinking: checks::string(b, "thinking")?.to_owned(),
            signature: checks::string(b, "signature")?.to_owned(),
        }),
        Some("redacted_thinking") => reasoning.push(Reasoning::RedactedThinking {
            data: checks::string(b, "data")?.to_owned(),
        }),
        other => text.push(opaque(b, other)?),
    }
    Ok(())
}

/// A text or image block.
fn part(b: &mut Value) -> Result<ContentPart, Invalid> {
    match b["type"].as_str() {
        Some("text") => Ok(ContentPart::text(take_string(b, "text")?)),
        Some("image") => {
            let source = &b["source"];
            let at_source = |e: Invalid| e.within("source");
            match source["type"].as_str() {
                Some("base64") => Ok(ContentPart::image_url(format!(
                    "data:{};base64,{}",
                    checks::string(source, "media_type").map_err(at_source)?,
                    checks::string(source, "data").map_err(at_source)?
                ))),
                Some("url") => Ok(ContentPart::image_url(
                    checks::string(source, "url").map_err(at_source)?,
                )),
                _ => Err(Invalid::new("source.type", "must be \"base64\" or \"url\"")),
            }
        }
        other => opaque(b, other),
    }
}

/// A block of a kind the neutral model does not represent (a document, a search result,
/// a server tool's call or result, a kind newer than this proxy), kept whole: the
/// Anthropic client sends it back as it came, an OpenAI upstream refuses it by name.
fn opaque(b: &Value, kind: Option<&str>) -> Result<ContentPart, Invalid> {
    let kind = kind.ok_or_else(|| Invalid::new("type", "is required (a string)"))?;
    Ok(ContentPart::Opaque {
        format: WireFormat::Messages,
        kind: kind.to_owned(),
        json: b.to_string(),
    })
}

fn tool_result(b: &mut Value, tool_names: &HashMap<String, String>) -> Result<Message, Invalid> {
    let id = checks::string(b, "tool_use_id")?.to_owned();
    let id = id.as_str();
    let content = match &mut b["content"] {
        Value::Null => Content::default(),
        Value::String(s) => Content::Text(std::mem::take(s).into()),
        Value::Array(blocks) => content(
            blocks
                .iter_mut()
                .enumerate()
                .map(|(i, b)| part(b).map_err(|e| e.item("content", i)))
                .collect::<Result<_, _>>()?,
        ),
        other => {
            let why = format!("must be a string or blocks, not {}", checks::what(other));
            return Err(Invalid::new("content", why));
        }
    };
    let mut message = Message::new(Role::Tool, content).with_tool_call_id(id);
    if let Some(name) = tool_names.get(id) {
        message = message.with_name(name.as_str());
    }
    Ok(message)
}

fn tool(t: &Value) -> Result<ToolSpec, Invalid> {
    let name = checks::string(t, "name")?;
    // A server tool (`web_search_20250305`, …): no schema, a `type` of its own. Kept whole,
    // for Anthropic only.
    if let Some(kind) = t
        .get("type")
        .and_then(Value::as_str)
        .filter(|k| *k != "custom")
        && t.get("input_schema").is_none()
    {
        let mut tool = ToolSpec::new(name, "", json!({"type": "object", "properties": {}}));
        tool.opaque = Some(OpaqueTool::new(WireFormat::Messages, kind, t.to_string()));
        return Ok(tool);
    }
    let schema = t
        .get("input_schema")
        .filter(|s| s.is_object())
        .ok_or_else(|| Invalid::new("input_schema", "is required (an object schema)"))?;
    let description = match t.get("description") {
        None | Some(Value::Null) => "",
        Some(_) => checks::string(t, "description")?,
    };
    checks::field(t.get("strict"), "strict", Kind::Bool)?;
    let mut tool = ToolSpec::new(name, description, schema.clone());
    tool.strict = t.get("strict").and_then(Value::as_bool);
    Ok(tool)
}

/// The typed choice and whether parallel calls are allowed, of a Messages `tool_choice`,
/// or what is wrong with it; a named tool must be one of `tools`.
fn tool_choice_from_wire(
    choice: &Value,
    tools: &[ToolSpec],
) -> Result<(ToolChoice, Option<bool>), Invalid> {
    let at = |e: Invalid| e.within("tool_choice");
    checks::value("", choice, Kind::Object).map_err(at)?;
    let parallel = match choice.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => None,
        Some(v) => {
            checks::value("disable_parallel_tool_use", v, Kind::Bool).map_err(at)?;
            v.as_bool().map(|d| !d)
        }
    };
    let typed = match choice["type"].as_str() {
        Some("auto") => ToolChoice::Auto,
        Some("any") => ToolChoice::Required,
        Some("none") => ToolChoice::None,
        Some("tool") => {
            let name = checks::string(choice, "name").map_err(at)?;
            checks::declared("tool_choice", name, tools.iter().map(|t| t.name.as_str()))?;
            ToolChoice::tool(name)
        }
        _ => {
            let why = "must be \"auto\", \"any\", \"tool\" or \"none\"";
            return Err(Invalid::new("tool_choice.type", why));
        }
    };
    Ok((typed, parallel))
}

/// Anthropic's `stop_reason` for the neutral one.
fn stop_reason(reason: &FinishReason) -> Value {
    match reason {
        FinishReason::Stop => json!("end_turn"),
        FinishReason::Length => json!("max_tokens"),
        FinishReason::ToolCalls => json!("tool_use"),
        FinishReason::ContentFilter => json!("refusal"),
        FinishReason::Other(other) => json!(other),
        _ => json!("end_turn"),
    }
}

fn usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
    })
}

/// A `msg_…` id: the provider's when it gave one of that shape, else a unique one (a
/// client such as Claude Code groups content by message id, so two answers must never
/// share one).
fn message_id(fields: &BTreeMap<String, Value>) -> Value {
    fields
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| id.starts_with("msg_"))
        .map_or_else(|| json!(made_up_id("msg_")), |id| json!(id))
}

/// The blocks of an answer, in Anthropic's order: thinking, text, tool uses, then any
/// block the upstream sent that the neutral model does not hold.
fn blocks(r: &ChatResponse) -> Vec<Value> {
    let mut out = Vec::new();
    for reasoning in r.message.reasoning() {
        match reasoning {
            Reasoning::Thinking {
                thinking,
                signature,
            } => {
                out.push(json!({"type": "thinking", "thinking": thinking, "signature": signature}))
            }
            Reasoning::RedactedThinking { data } => {
                out.push(json!({"type": "redacted_thinking", "data": data}))
            }
            // An OpenAI-compatible server's reasoning, unsigned.
            Reasoning::Text { text } => {
                out.push(json!({"type": "thinking", "thinking": text, "signature": ""}))
            }
            _ => {}
        }
    }
    match &r.message.content {
        Content::Parts(parts) => {
            for p in parts {
                match p {
                    ContentPart::Text { text } if !text.is_empty() => {
                        out.push(json!({"type": "text", "text": text}));
                    }
                    ContentPart::Opaque { json, .. } => {
                        out.push(serde_json::from_str(json).unwrap_or(Value::Null));
                    }
                    _ => {}
                }
            }
        }
        Content::Text(text) if !text.is_empty() => {
            out.push(json!({"type": "text", "text": text.as_str()}));
        }
        Content::Text(_) => {}
    }
    for c in &r.message.tool_calls {
        let input = super::convert::tool_input(c.arguments_value());
        out.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
    }
    if let Some(Value::Array(unmodelled)) = r.provider_fields.get("content") {
        out.extend(unmodelled.iter().cloned());
    }
    out
}

/// A whole `message` for `r`, asked of `model`: Anthropic's answer as it came when it
/// gave one (its blocks in their order, `citations`, the `cache_creation` breakdown and
/// every field newer than this proxy), with the usage of the rounds answered inside
/// added; else written from the neutral response.
fn message(r: &ChatResponse, model: &str) -> Value {
    if let Some(given) = AsGiven::of(r, WireFormat::Messages, &usage(&r.usage)) {
        return given;
    }
    let model = r
        .provider_fields
        .get("model")
        .cloned()
        .unwrap_or_else(|| json!(model));
    json!({
        "id": message_id(&r.provider_fields),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks(r),
        "stop_reason": stop_reason(&r.finish_reason),
        "stop_sequence": r.provider_fields.get("stop_sequence").cloned().unwrap_or(Value::Null),
        "usage": usage(&r.usage),
    })
}

/// Which block of the Messages stream is open.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking(usize),
    Text,
    Tool(usize),
}

/// Writes neutral events as the Messages stream's events: `message_start`, each block's
/// `content_block_start` / `_delta` / `_stop`, then `message_delta` and `message_stop`.
pub(crate) struct Events {
    model: String,
    started: bool,
    open: Option<Open>,
    /// The index of the next block.
    next: usize,
    /// Anthropic's own stream, relayed as it came when it is one.
    relay: Relay,
}

impl Events {
    fn new(model: String) -> Self {
        Self {
            model,
            started: false,
            open: None,
            next: 0,
            relay: Relay::new(WireFormat::Messages),
        }
    }

    /// The `(event name, data)` pairs for one event.
    fn on(&mut self, event: &StreamEvent) -> Vec<(&'static str, Value)> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            // The provider's id and model when the stream opens with them.
            let empty = BTreeMap::new();
            let fields = match event {
                StreamEvent::Started(fields) => fields.as_ref(),
                StreamEvent::Done(r) => &r.provider_fields,
                _ => &empty,
            };
            let model = fields
                .get("model")
                .filter(|m| m.is_string())
                .cloned()
                .unwrap_or_else(|| json!(self.model));
            out.push((
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": message_id(fields), "type": "message", "role": "assistant",
                    "model": model, "content": [], "stop_reason": null,
                    "stop_sequence": null,
                    "usage": {"input_tokens": 0, "output_tokens": 0}}}),
            ));
        }
        match event {
            StreamEvent::Text(text) => {
                self.open(Open::Text, json!({"type": "text", "text": ""}), &mut out);
                out.push(self.delta(json!({"type": "text_delta", "text": text})));
            }
            StreamEvent::Reasoning { index, delta } => match delta {
                ReasoningDelta::Thinking(text) | ReasoningDelta::Text(text) => {
                    let block = json!({"type": "thinking", "thinking": "", "signature": ""});
                    self.open(Open::Thinking(*index), block, &mut out);
                    out.push(self.delta(json!({"type": "thinking_delta", "thinking": text})));
                }
                ReasoningDelta::Signature(signature) => {
                    let block = json!({"type": "thinking", "thinking": "", "signature": ""});
                    self.open(Open::Thinking(*index), block, &mut out);
                    out.push(
                        self.delta(json!({"type": "signature_delta", "signature": signature})),
                    );
                }
                ReasoningDelta::Redacted(data) => {
                    self.whole(json!({"type": "redacted_thinking", "data": data}), &mut out);
                }
                _ => {}
            },
            StreamEvent::ToolCall(d) => {
                let block = json!({"type": "tool_use", "id": d.id.as_deref().unwrap_or_default(),
                                   "name": d.name.as_deref().unwrap_or_default(), "input": {}});
                self.open(Open::Tool(d.index), block, &mut out);
                if !d.arguments.is_empty() {
                    out.push(
                        self.delta(
                            json!({"type": "input_json_delta", "partial_json": d.arguments}),
                        ),
                    );
                }
            }
            StreamEvent::Done(r) => {
                self.close(&mut out);
                let usage = usage(&r.usage);
                // What the neutral model does not hold goes out as whole blocks.
                if let Some(Value::Array(unmodelled)) = r.provider_fields.get("content") {
                    for block in unmodelled {
                        self.whole(block.clone(), &mut out);
                    }
                }
                out.push((
                    "message_delta",
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": stop_reason(&r.finish_reason),
                                     "stop_sequence": r.provider_fields.get("stop_sequence")
                                         .cloned().unwrap_or(Value::Null)},
                           "usage": usage}),
                ));
                out.push(("message_stop", json!({"type": "message_stop"})));
            }
            _ => {}
        }
        out
    }

    /// Opens `kind` unless it is the open block, closing the one before.
    fn open(&mut self, kind: Open, block: Value, out: &mut Vec<(&'static str, Value)>) {
        if self.open == Some(kind) {
            return;
        }
        self.close(out);
        self.open = Some(kind);
        out.push(self.start(block));
    }

    /// A block that arrives whole (redacted thinking, an unmodelled block): its start
    /// and its stop, after closing the open one.
    fn whole(&mut self, block: Value, out: &mut Vec<(&'static str, Value)>) {
        self.close(out);
        out.push(self.start(block));
        out.push(self.stop());
        self.next += 1;
    }

    fn start(&self, block: Value) -> (&'static str, Value) {
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": self.next, "content_block": block}),
        )
    }

    fn stop(&self) -> (&'static str, Value) {
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": self.next}),
        )
    }

    fn close(&mut self, out: &mut Vec<(&'static str, Value)>) {
        if self.open.take().is_some() {
            out.push(self.stop());
            self.next += 1;
        }
    }

    fn delta(&self, delta: Value) -> (&'static str, Value) {
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.next, "delta": delta}),
        )
    }
}

/// Anthropic's error type for an HTTP status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        _ => "api_error",
    }
}

/// An error in Anthropic's shape.
fn error(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// `POST /v1/messages`: Anthropic Messages.
pub(crate) struct Messages;

impl Format for Messages {
    const ROUTE: &'static str = "/v1/messages";
    type Events = Events;

    fn read(bytes: &Bytes) -> Result<Read, Invalid> {
        let not_json =
            |e: &dyn std::fmt::Display| Invalid::body(format!("the body is not JSON: {e}"));
        // The text checked once, at memory speed: parsed from bytes, every string of a
        // transcript would be checked again on its own (a fifth of the read, measured).
        let text = simdutf8::compat::from_utf8(bytes).map_err(|e| not_json(&e))?;
        let mut body: Value = serde_json::from_str(text).map_err(|e| not_json(&e))?;
        let (mut request, owners) = request(&mut body)?;
        // Kept for the Anthropic client, which sends it back as written but for the edits.
        if let Some(kept) = Kept::new(bytes, text, &body, &request, &owners) {
            request.params.origin = Some(llm_context_layers::Origin::new(kept));
        }
        Ok(Read {
            request,
            stream: body["stream"] == json!(true),
            // A Messages stream always carries its usage (`message_delta`).
            include_usage: true,
        })
    }

    /// The fast read of [`reuse`](super::reuse), which parses only the messages it has
    /// not read before; the full read where it cannot (and to say what is wrong).
    fn read_reusing(bytes: &Bytes, reuse: &Reuses, tenant: &str) -> Result<Read, Invalid> {
        let Ok(text) = simdutf8::compat::from_utf8(bytes) else {
            return Self::read(bytes);
        };
        let Some(fast) = super::reuse::read(text, &reuse.messages, tenant) else {
            return Self::read(bytes);
        };
        let Ok((mut request, owners)) = finish(&fast.body, fast.messages, fast.owners) else {
            return Self::read(bytes);
        };
        if let Some(kept) = Kept::assemble(bytes, fast.parts, &request, &owners) {
            request.params.origin = Some(llm_context_layers::Origin::new(kept));
        }
        Ok(Read {
            request,
            stream: fast.body["stream"] == json!(true),
            include_usage: true,
        })
    }

    fn answer(response: &ChatResponse, model: &str, _tools: &Namespaced) -> Value {
        message(response, model)
    }

    fn events(model: String, _options: &StreamOptions) -> Events {
        Events::new(model)
    }

    fn error(status: StatusCode, message: &str) -> Value {
        error(error_type(status.as_u16()), message)
    }

    /// The provider's error type when it gave one, else the type of `status`.
    fn failure(e: &BoxError, status: StatusCode) -> Value {
        let kind = error_type(status.as_u16());
        if let Some(limit) = e.downcast_ref::<ContextLimitError>() {
            return error(kind, &limit.to_string());
        }
        if let Some(b) = find::<BudgetExceeded>(e) {
            return error(kind, &b.to_string());
        }
        if let Some(p) = find::<ProviderError>(e) {
            return error(p.error_type().unwrap_or(kind), &p.message);
        }
        error(kind, &e.to_string())
    }
}

impl EventWriter for Events {
    fn event(&mut self, event: &StreamEvent) -> Vec<Bytes> {
        // Anthropic's own events, the usage of rounds answered inside added to the last.
        let relayed = self.relay.event(event, false, |data, r| {
            if data["type"] == "message_delta" {
                amend_usage(&mut data["usage"], &usage(&r.usage));
            }
            true
        });
        if let Some(frames) = relayed {
            return frames;
        }
        self.on(event)
            .into_iter()
            .map(|(name, data)| Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
            .collect()
    }

    /// An `error` event; the stream then ends without `message_stop`.
    fn failed(&mut self, e: &BoxError, status: StatusCode) -> Bytes {
        let data = Messages::failure(e, status);
        Bytes::from(format!("event: error\ndata: {data}\n\n"))
    }
}
