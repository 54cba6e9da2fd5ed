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

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{self, Write};

use serde_json::value::RawValue;
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
    /// The text is not JSON at all (from [`request_from_str`]).
    syntax: bool,
}

impl WireError {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            reason: reason.into(),
            syntax: false,
        }
    }

    /// Whether the body is not JSON at all, rather than JSON of the wrong shape.
    pub fn is_syntax(&self) -> bool {
        self.syntax
    }

    /// A `serde_json` error from reading `path`: a syntax error, or the wrong shape.
    fn json(path: &str, e: &serde_json::Error, shape: &str) -> Self {
        match e.classify() {
            serde_json::error::Category::Data => Self::new(path, shape),
            _ => Self {
                syntax: true,
                ..Self::new(path, format!("not valid JSON: {e}"))
            },
        }
    }
}

/// What [`request_from_body`] keeps so that [`body_from_request`] loses nothing: each
/// message's JSON text as it came, and digests that recognise it among the sent messages
/// (not a second copy of the transcript).
#[derive(Clone, Debug, Default)]
pub struct BodyContext {
    messages: Vec<Original>,
}

/// One message as received.
#[derive(Clone, Debug)]
struct Original {
    raw: Box<RawValue>,
    digests: Digests,
    /// A system message (the head is matched in place).
    system: bool,
}

/// What identifies a message for the mapping back: its head (role, name, tool-call id,
/// tool calls) and its content. In-process only, never stored, so the standard hasher
/// serves; two salts make 128 bits, so a false match is not a practical concern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Digests {
    head: u128,
    content: u128,
}

impl Digests {
    fn of(m: &Message) -> Self {
        fn digest(value: &impl Hash) -> u128 {
            let half = |salt: u8| {
                let mut h = DefaultHasher::new();
                salt.hash(&mut h);
                value.hash(&mut h);
                h.finish()
            };
            (u128::from(half(1)) << 64) | u128::from(half(2))
        }
        Self {
            head: digest(&(&m.role, &m.name, &m.tool_call_id, &m.tool_calls)),
            content: digest(&m.content),
        }
    }
}

impl BodyContext {
    fn push(&mut self, raw: Box<RawValue>, m: &Message) {
        self.messages.push(Original {
            raw,
            digests: Digests::of(m),
            system: m.role == Role::System,
        });
    }
}

/// Reads an OpenAI Chat Completions request body. The same reading as
/// [`request_from_str`], which a caller holding the body's text should prefer: a tree is
/// written back to text here so that each message's original JSON can be kept.
pub fn request_from_body(body: &Value) -> Result<(ChatRequest, BodyContext), WireError> {
    request_from_str(&body.to_string())
}

/// Reads an OpenAI Chat Completions request body from its text, keeping each message's
/// text as it came rather than a JSON tree of the whole body: the command-line tool reads
/// transcripts of hundreds of megabytes this way, at a few times their size in memory.
///
/// ```
/// use llm_context::openai::body::{request_from_str, write_body};
///
/// let text = r#"{"model": "m", "messages": [{"role": "user", "content": "hi", "x_note": 1}]}"#;
/// let (request, ctx) = request_from_str(text).unwrap();
/// let mut out = Vec::new();
/// write_body(&request, &ctx, &mut out).unwrap();
/// let out: serde_json::Value = serde_json::from_slice(&out).unwrap();
/// assert_eq!(out["messages"][0]["x_note"], 1);
/// assert!(request_from_str("{not json").unwrap_err().is_syntax());
/// ```
pub fn request_from_str(text: &str) -> Result<(ChatRequest, BodyContext), WireError> {
    let top: BTreeMap<String, &RawValue> = serde_json::from_str(text)
        .map_err(|e| WireError::json("$", &e, "the request body must be a JSON object"))?;
    // The other fields are small: read them as values, as `request_from_body` does.
    let mut obj = Map::new();
    for (k, raw) in &top {
        if k != "messages" {
            let v = serde_json::from_str(raw.get())
                .map_err(|e| WireError::json(k, &e, "is not a JSON value"))?;
            obj.insert(k.clone(), v);
        }
    }
    model_of(&obj)?;
    let Some(raw_messages) = top.get("messages") else {
        return Err(WireError::new("messages", "is required"));
    };
    let raws: Vec<Box<RawValue>> = serde_json::from_str(raw_messages.get())
        .map_err(|e| WireError::json("messages", &e, "must be an array"))?;
    let mut ctx = BodyContext::default();
    let mut messages = Vec::with_capacity(raws.len());
    for (i, raw) in raws.into_iter().enumerate() {
        // One message's tree at a time, dropped as soon as it is read.
        let m = {
            let v: Value = serde_json::from_str(raw.get())
                .map_err(|e| at_message(i, WireError::json("", &e, "is not a JSON value")))?;
            message_from_wire(&v).map_err(|e| at_message(i, e))?
        };
        ctx.push(raw, &m);
        messages.push(m);
    }
    Ok((from_parts(&obj, messages)?, ctx))
}

/// The body's `model`, which must be a string.
fn model_of(obj: &Map<String, Value>) -> Result<&str, WireError> {
    match obj.get("model") {
        Some(Value::String(m)) => Ok(m),
        Some(_) => Err(WireError::new("model", "must be a string")),
        None => Err(WireError::new("model", "is required")),
    }
}

fn at_message(i: usize, e: WireError) -> WireError {
    WireError::new(format!("messages[{i}]{}", e.path), e.reason)
}

/// The request of a body's top-level fields and its messages, read already.
fn from_parts(obj: &Map<String, Value>, messages: Vec<Message>) -> Result<ChatRequest, WireError> {
    let model = model_of(obj)?.to_owned();
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
    Ok(ChatRequest::new(model, messages)
        .with_tools(tools)
        .with_params(params))
}

/// Writes a request back as an OpenAI Chat Completions body. Messages found unchanged in
/// `ctx` are written as they came; others are written from the neutral model.
pub fn body_from_request(req: &ChatRequest, ctx: &BodyContext) -> Value {
    let mut out = top_level(req);
    let messages = sent_messages(req, ctx)
        .map(|piece| match piece {
            // Read back from text this crate parsed before: it is JSON.
            Piece::Raw(raw) => serde_json::from_str(raw.get()).unwrap_or(Value::Null),
            Piece::Value(v) => v,
        })
        .collect();
    out.insert("messages".into(), Value::Array(messages));
    Value::Object(out)
}

/// [`body_from_request`] written to `out` as JSON text, without building the body in
/// memory: unchanged messages are copied from their original text, byte for byte.
pub fn write_body(req: &ChatRequest, ctx: &BodyContext, mut out: impl Write) -> io::Result<()> {
    out.write_all(b"{\"messages\":[")?;
    for (i, piece) in sent_messages(req, ctx).enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        match piece {
            Piece::Raw(raw) => out.write_all(raw.get().as_bytes())?,
            Piece::Value(v) => serde_json::to_writer(&mut out, &v)?,
        }
    }
    out.write_all(b"]")?;
    for (k, v) in top_level(req) {
        out.write_all(b",")?;
        serde_json::to_writer(&mut out, &k)?;
        out.write_all(b":")?;
        serde_json::to_writer(&mut out, &v)?;
    }
    out.write_all(b"}")
}

/// A sent message as it is written: its original text, or a value.
enum Piece<'a> {
    Raw(&'a RawValue),
    Value(Value),
}

/// The messages of the body: the prefix's, then each of `req.messages` as it came when it
/// is unchanged, with its other fields and the new content when a layer rewrote it, and
/// from the neutral model when the stack added it.
fn sent_messages<'a>(
    req: &'a ChatRequest,
    ctx: &'a BodyContext,
) -> impl Iterator<Item = Piece<'a>> + 'a {
    let prefix = req
        .prefix
        .iter()
        .flat_map(|p| p.as_messages())
        .map(|m| Piece::Value(message_to_wire(&m)));
    let digests: Vec<Digests> = req.messages.iter().map(Digests::of).collect();
    let counterparts = counterparts(&ctx.messages, &req.messages, &digests);
    let tail = req
        .messages
        .iter()
        .zip(digests)
        .zip(counterparts)
        .map(
            |((m, digests), found)| match found.map(|i| &ctx.messages[i]) {
                Some(orig) if orig.digests == digests => Piece::Raw(&orig.raw),
                Some(orig) => match serde_json::from_str::<Map<String, Value>>(orig.raw.get()) {
                    Ok(mut fields) => {
                        fields.insert("content".into(), content_to_wire(&m.content));
                        Piece::Value(Value::Object(fields))
                    }
                    Err(_) => Piece::Value(message_to_wire(m)),
                },
                None => Piece::Value(message_to_wire(m)),
            },
        );
    prefix.chain(tail)
}

/// Every top-level field of the body but `messages`.
fn top_level(req: &ChatRequest) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("model".into(), Value::String(req.model.clone()));
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
    out
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
    originals: &[Original],
    sent: &[Message],
    digests: &[Digests],
) -> Vec<Option<usize>> {
    let mut out = vec![None; sent.len()];
    let in_head = originals
        .iter()
        .position(|o| !o.system)
        .unwrap_or(originals.len());
    let out_head = leading_system_end(sent).min(in_head);
    let mut head_matched = 0;
    for i in 0..out_head {
        if same_message(&originals[i], &sent[i], &digests[i]) {
            out[i] = Some(i);
            head_matched = i + 1;
        }
    }
    let mut end = originals.len();
    for i in (out_head..sent.len()).rev() {
        let found = originals[head_matched..end]
            .iter()
            .rposition(|orig| same_message(orig, &sent[i], &digests[i]));
        if let Some(j) = found {
            end = head_matched + j;
            out[i] = Some(end);
        }
    }
    out
}

/// Whether `new` (with `digests`) is `orig`, possibly with its content rewritten by a
/// layer. The layers rewrite only tool results, and a tool result is known by its
/// `tool_call_id`: any other message must be unchanged to be the same, whatever its
/// content looks like (a user message can quote a preview).
fn same_message(orig: &Original, new: &Message, digests: &Digests) -> bool {
    orig.digests.head == digests.head
        && (orig.digests.content == digests.content
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
