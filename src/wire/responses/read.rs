//! A `CreateResponse` body read into the neutral request, with what the writer needs to
//! send it back as it came ([`Kept`]).
//!
//! Items become neutral messages:
//!
//! - a `message` of role `user` is a user message; `system` and `developer` are system
//!   messages (leading ones are the prefix, after `instructions`);
//! - an `assistant` message, `reasoning` items and tool calls (`function_call`,
//!   `custom_tool_call`) in a row are one assistant message: its text, its reasoning
//!   and every item it cannot model kept whole as opaque parts, in order, and its calls;
//! - a call's output (`function_call_output`, `custom_tool_call_output`) is a tool
//!   result, paired with its call by `call_id`;
//! - any other item (`item_reference`, `compaction`, hosted tools' calls, kinds newer
//!   than this proxy) is an opaque part of the assistant message it stands in.
//!
//! A turn is a user message and everything up to the next one, as in the other formats,
//! so a reasoning item is pruned only with its turn and never cleared on its own.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use foldhash::quality::RandomState;
use llm_context_layers::{
    ChatRequest, Content, ContentPart, Message, OpaqueTool, Reasoning, Role, ToolCall, ToolSpec,
    WireFormat,
};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::wire::checks::{self, Invalid, Kind};

/// Top-level fields read into the neutral request; every other one is carried in
/// `params.extra` and written back in its place.
pub(crate) const READ: &[&str] = &["model", "input", "instructions", "tools", "stream"];

/// What the reader kept of a body: its bytes, where each item, tool and the
/// instructions lie in them, and which items each neutral message was read from.
#[derive(Debug)]
pub(crate) struct Kept {
    pub(super) body: Bytes,
    /// Each input item's bytes (none when `input` is a string).
    pub(super) items: Vec<Range<usize>>,
    /// Each tool's name (a hosted tool's `type`) and bytes.
    pub(super) tools: Vec<(String, Range<usize>)>,
    /// `instructions`' bytes, when it is a string.
    pub(super) instructions: Option<Range<usize>>,
    /// How many neutral messages `instructions` was read into (0 or 1).
    pub(super) top: usize,
    /// Each top-level member's value bytes.
    pub(super) members: HashMap<String, Range<usize>>,
    /// The top-level fields but those of [`READ`] other than `model` and `stream`, as
    /// the caller wrote them: what the writer compares the stack's to.
    pub(super) original: Map<String, Value>,
    /// For each neutral message after the instructions, the items it was read from.
    pub(super) groups: Vec<Range<usize>>,
    /// The groups (ascending) a neutral message of each digest was read from.
    pub(super) digests: HashMap<u64, Vec<usize>>,
    /// The output item of each call id: where a result the stack cleared or offloaded
    /// is edited in place.
    pub(super) outputs: HashMap<String, usize>,
    /// The group of the assistant message that made each call: where a turn whose calls
    /// the stack edited (their inputs cleared) is written from its own items.
    pub(super) calls: HashMap<String, usize>,
    /// The items (ascending) that carry Claude's thinking ([`thinking`](super::thinking)):
    /// read into their message's reasoning, and never sent to OpenAI.
    pub(super) thinking: Vec<usize>,
    /// The caller placed cache breakpoints of its own (`prompt_cache_breakpoint`).
    pub(super) marked: bool,
    pub(super) hasher: RandomState,
}

impl Kept {
    /// Whether the caller asked for a stream.
    pub(crate) fn asks_stream(&self) -> bool {
        self.original.get("stream") == Some(&Value::Bool(true))
    }

    /// Whether item `i` carries Claude's thinking.
    pub(super) fn is_thinking(&self, i: usize) -> bool {
        self.thinking.binary_search(&i).is_ok()
    }

    /// The digest a neutral message is matched by.
    pub(super) fn digest(&self, m: &Message) -> u64 {
        self.hasher.hash_one(m)
    }
}

/// The neutral request of a Responses body, and what was kept of it; or what is wrong
/// with it (every field read is checked for its type, and each item for what it needs).
pub(crate) fn request(body: &Bytes) -> Result<(ChatRequest, Kept), Invalid> {
    let text = simdutf8::compat::from_utf8(body).map_err(|e| not_json(&e))?;
    let parsed: Value = serde_json::from_str(text).map_err(|e| not_json(&e))?;
    let Value::Object(obj) = parsed else {
        return Err(Invalid::body(
            "the body must be a JSON object (a Responses request)",
        ));
    };
    // Where each member lies in the bytes; a list's items are found in its own bytes.
    let raw_members: HashMap<String, &RawValue> =
        serde_json::from_str(text).map_err(|e| not_json(&e))?;
    // The input read here, its errors told in their turn (after the fields before it).
    let input = match obj.get("input") {
        None | Some(Value::Null) => Ok(Input::Items(Vec::new(), Vec::new())),
        Some(Value::String(text)) => Ok(Input::Text(text.clone())),
        Some(Value::Array(wire)) => raw_list(&raw_members, "input").and_then(|raw| {
            let pieces = read_items(wire)?;
            Ok(Input::Items(
                raw,
                pieces.into_iter().map(Arc::new).collect(),
            ))
        }),
        Some(other) => Err(Invalid::new(
            "input",
            format!(
                "must be a string or an array of items, not {}",
                checks::what(other)
            ),
        )),
    };
    assemble(body, text, &obj, raw_members, input)
}

/// An answer of 400 for a body that is not JSON.
fn not_json(e: &dyn std::fmt::Display) -> Invalid {
    Invalid::body(format!("the body is not JSON: {e}"))
}

/// The items of the list member `key`, as they lie in the body.
fn raw_list<'a>(
    raw_members: &HashMap<String, &'a RawValue>,
    key: &str,
) -> Result<Vec<&'a RawValue>, Invalid> {
    match raw_members.get(key) {
        Some(raw) => serde_json::from_str(raw.get()).map_err(|e| not_json(&e)),
        None => Ok(Vec::new()),
    }
}

/// A body's `input`, read: a string, or its items as they lie in the body with what each
/// gives.
pub(super) enum Input<'a> {
    Text(String),
    Items(Vec<&'a RawValue>, Vec<Arc<Piece>>),
}

/// The neutral request and what is kept, from a body's members (`obj`: its fields, as
/// values; `input` need not be among them) and where they lie in `text`.
pub(super) fn assemble(
    body: &Bytes,
    text: &str,
    obj: &Map<String, Value>,
    raw_members: HashMap<String, &RawValue>,
    input: Result<Input<'_>, Invalid>,
) -> Result<(ChatRequest, Kept), Invalid> {
    let base = text.as_ptr() as usize;
    let range = |raw: &RawValue| {
        let start = raw.get().as_ptr() as usize - base;
        start..start + raw.get().len()
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err(Invalid::new("model", "is required"));
        }
        Some(other) => {
            return Err(Invalid::new(
                "model",
                format!("must be a string, not {}", checks::what(other)),
            ));
        }
    };
    for (name, kind) in [
        ("max_output_tokens", Kind::Count),
        ("stream", Kind::Bool),
        ("temperature", Kind::Number),
        ("top_p", Kind::Number),
        ("store", Kind::Bool),
        ("parallel_tool_calls", Kind::Bool),
    ] {
        checks::field(obj.get(name), name, kind)?;
    }

    let mut messages = Vec::new();
    let mut instructions = None;
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => {
            messages.push(Message::system(text.as_str()));
            instructions = raw_members.get("instructions").map(|r| range(r));
        }
        // Instructions as items (a stored prompt's form): a prefix the neutral model
        // cannot hold apart; refused rather than sent changed.
        Some(other) => {
            return Err(Invalid::new(
                "instructions",
                format!("must be a string, not {}", checks::what(other)),
            ));
        }
    }
    let top = messages.len();

    let (items, pieces) = match input? {
        Input::Text(text) => {
            messages.push(Message::user(text));
            (Vec::new(), Vec::new())
        }
        Input::Items(raw, pieces) => (raw.into_iter().map(range).collect(), pieces),
    };
    let string_input = messages.len() > top;
    let (read, mut groups, outputs, thinking) = group(&pieces);
    messages.extend(read);
    if string_input {
        // The string's one message has no item of its own.
        groups.insert(0, 0..0);
    }

    let mut tools = Vec::new();
    let mut kept_tools = Vec::new();
    match obj.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(wire)) => {
            let raw = raw_list(&raw_members, "tools")?;
            for (i, t) in wire.iter().enumerate() {
                let spec = tool(t).map_err(|e| e.item("tools", i))?;
                if let Some(r) = raw.get(i) {
                    kept_tools.push((spec.name.clone(), range(r)));
                }
                tools.push(spec);
            }
        }
        Some(other) => {
            return Err(Invalid::new(
                "tools",
                format!("must be an array, not {}", checks::what(other)),
            ));
        }
    }

    let mut req = ChatRequest::new(model, messages);
    req.tools = tools;
    req.params.max_output_tokens = obj
        .get("max_output_tokens")
        .and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok());
    for (k, v) in obj {
        if !READ.contains(&k.as_str()) {
            req.params.extra.insert(k.clone(), v.clone());
        }
    }
    req.params.extra_format = Some(WireFormat::Responses);

    let members = raw_members
        .into_iter()
        .map(|(k, raw)| (k, range(raw)))
        .collect();
    let original = obj
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "input" | "tools" | "instructions"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let hasher = RandomState::default();
    let mut digests: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut calls = HashMap::new();
    for (g, m) in req.messages[top..].iter().enumerate() {
        digests.entry(hasher.hash_one(m)).or_default().push(g);
        for c in m.tool_calls.iter() {
            calls.entry(c.id.clone()).or_insert(g);
        }
    }
    let kept = Kept {
        body: body.clone(),
        items,
        tools: kept_tools,
        instructions,
        top,
        members,
        original,
        groups,
        digests,
        outputs,
        calls,
        thinking,
        marked: pieces.iter().any(|p| p.marked),
        hasher,
    };
    Ok((req, kept))
}

/// The assistant message being read, opened at item `i` when none is.
fn assistant(open: &mut Option<Assistant>, i: usize) -> &mut Assistant {
    open.get_or_insert_with(|| Assistant {
        parts: Vec::new(),
        calls: Vec::new(),
        reasoning: Vec::new(),
        from: i,
    })
}

/// An assistant message being read: its parts, its calls, Claude's thinking it
/// carries, and its first item.
struct Assistant {
    parts: Vec<ContentPart>,
    calls: Vec<ToolCall>,
    reasoning: Vec<Reasoning>,
    from: usize,
}

type Items = (
    Vec<Message>,
    Vec<Range<usize>>,
    HashMap<String, usize>,
    Vec<usize>,
);

/// One input item as read on its own: what it gives the neutral messages, which depends
/// on no other item (a call's output is named by its call when the items are grouped).
/// What the reader of what is new keeps, by the item's bytes.
#[derive(Debug)]
pub(crate) struct Piece {
    kind: PieceKind,
    /// It carries a cache breakpoint of the caller's (`prompt_cache_breakpoint`).
    pub(super) marked: bool,
    /// What it costs to keep: an estimate of its structures (and, once kept, its bytes).
    pub(super) size: usize,
}

#[derive(Debug)]
enum PieceKind {
    /// A user message (`user`), or a system one (`system`, `developer`).
    Message(Role, Vec<ContentPart>),
    /// An assistant message's parts.
    Assistant(Vec<ContentPart>),
    /// A tool call.
    Call(ToolCall),
    /// A call's output.
    Output(String, Content),
    /// Claude's thinking, resent.
    Thinking(Reasoning),
    /// An item kept whole, in the assistant message it stands in.
    Opaque(ContentPart),
}

/// What one item gives, or what is wrong with it (a path within the item).
pub(super) fn piece(item: &Value) -> Result<Piece, Invalid> {
    let Some(obj) = item.as_object() else {
        return Err(Invalid::body(format!(
            "must be an object (an item), not {}",
            checks::what(item)
        )));
    };
    let kind = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        // An easy input message has no `type`.
        None | Some(Value::Null) if obj.contains_key("role") => "message",
        _ => return Err(Invalid::new("type", "must be a string")),
    };
    let kind = match kind {
        "message" => {
            let role = str_field(obj, "role")?;
            let parts = content(obj.get("content")).map_err(|e| e.within("content"))?;
            match role {
                "assistant" => PieceKind::Assistant(parts),
                "user" => PieceKind::Message(Role::User, parts),
                "system" | "developer" => PieceKind::Message(Role::System, parts),
                other => {
                    return Err(Invalid::new(
                        "role",
                        format!("must be user, assistant, system or developer, not {other:?}"),
                    ));
                }
            }
        }
        "function_call" | "custom_tool_call" => {
            let id = str_field(obj, "call_id")?;
            let name = str_field(obj, "name")?;
            let field = if kind == "function_call" {
                "arguments"
            } else {
                "input"
            };
            let arguments = str_field(obj, field)?;
            // A namespaced tool's call, by the name its tool is sent under elsewhere.
            let name = match obj.get("namespace").and_then(Value::as_str) {
                Some(namespace) => crate::wire::namespaces::qualified(namespace, name),
                None => name.to_owned(),
            };
            PieceKind::Call(ToolCall::from_text(id, name, arguments))
        }
        "function_call_output" | "custom_tool_call_output" => {
            let id = str_field(obj, "call_id")?;
            let output = match obj.get("output") {
                Some(Value::String(s)) => Content::from(s.as_str()),
                Some(Value::Array(_)) => {
                    Content::from(content(obj.get("output")).map_err(|e| e.within("output"))?)
                }
                other => {
                    return Err(Invalid::new(
                        "output",
                        format!(
                            "must be a string or an array of parts, not {}",
                            other.map_or("absent".into(), checks::what)
                        ),
                    ));
                }
            };
            PieceKind::Output(id.to_owned(), output)
        }
        // Reasoning, compaction, references, hosted tools' calls, kinds newer than
        // this proxy: kept whole, in their place, with the turn they belong to.
        other => {
            // Claude's thinking, which a Responses caller of a Claude model resends:
            // the message's reasoning again.
            match (other == "reasoning")
                .then(|| super::thinking::read(obj))
                .flatten()
            {
                Some(r) => PieceKind::Thinking(r),
                None => PieceKind::Opaque(ContentPart::Opaque {
                    format: WireFormat::Responses,
                    kind: other.to_owned(),
                    json: item.to_string(),
                }),
            }
        }
    };
    // An estimate of what the piece holds beside the text it copies: its own slot and
    // every part's, however small (a part of a few bytes still costs its allocations).
    let parts = match &kind {
        PieceKind::Message(_, parts) | PieceKind::Assistant(parts) => parts.len(),
        PieceKind::Output(_, Content::Parts(parts)) => parts.len(),
        _ => 1,
    };
    let size = 256 + 128 * parts;
    Ok(Piece {
        kind,
        marked: super::breakpoints::placed(std::slice::from_ref(item)),
        size,
    })
}

/// The neutral messages of the items' `pieces`, each with the items it was read from,
/// the output item of each call id, and the items that carry Claude's thinking.
pub(super) fn group<P: std::borrow::Borrow<Piece>>(pieces: &[P]) -> Items {
    let mut messages = Vec::new();
    let mut groups = Vec::new();
    let mut outputs = HashMap::new();
    let mut thinking = Vec::new();
    // Each call's tool name, for its result.
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut open: Option<Assistant> = None;
    let close = |open: &mut Option<Assistant>,
                 to: usize,
                 messages: &mut Vec<Message>,
                 groups: &mut Vec<Range<usize>>| {
        if let Some(a) = open.take() {
            let content = Content::from(a.parts);
            let m = if a.calls.is_empty() {
                Message::assistant(content)
            } else {
                Message::assistant_tool_calls(content, a.calls)
            };
            messages.push(m.with_reasoning(a.reasoning));
            groups.push(a.from..to);
        }
    };
    for (i, piece) in pieces.iter().enumerate() {
        match &piece.borrow().kind {
            PieceKind::Assistant(parts) => assistant(&mut open, i).parts.extend_from_slice(parts),
            PieceKind::Message(role, parts) => {
                close(&mut open, i, &mut messages, &mut groups);
                messages.push(Message::new(*role, Content::from(parts.clone())));
                groups.push(i..i + 1);
            }
            PieceKind::Call(call) => {
                names.insert(&call.id, &call.name);
                assistant(&mut open, i).calls.push(call.clone());
            }
            PieceKind::Output(id, output) => {
                close(&mut open, i, &mut messages, &mut groups);
                let name = names.get(id.as_str()).copied().unwrap_or_default();
                messages.push(Message::tool_result(id.as_str(), name, output.clone()));
                groups.push(i..i + 1);
                // A repeated output (a client's retry) keeps its own bytes: the first is
                // the one an edit goes to.
                outputs.entry(id.clone()).or_insert(i);
            }
            PieceKind::Thinking(r) => {
                assistant(&mut open, i).reasoning.push(r.clone());
                thinking.push(i);
            }
            PieceKind::Opaque(part) => assistant(&mut open, i).parts.push(part.clone()),
        }
    }
    close(&mut open, pieces.len(), &mut messages, &mut groups);
    (messages, groups, outputs, thinking)
}

/// The pieces of `items`, or the first one's error, at its place.
fn read_items(items: &[Value]) -> Result<Vec<Piece>, Invalid> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| piece(item).map_err(|e| e.item("input", i)))
        .collect()
}

/// The string field `name` of an item.
fn str_field<'a>(obj: &'a Map<String, Value>, name: &str) -> Result<&'a str, Invalid> {
    match obj.get(name) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(Invalid::new(name, "is required")),
        Some(other) => Err(Invalid::new(
            name,
            format!("must be a string, not {}", checks::what(other)),
        )),
    }
}

/// A message's (or an output's) content: a string, or parts. Text parts are read as
/// text; an image given by URL as an image; any other part kept whole.
fn content(v: Option<&Value>) -> Result<Vec<ContentPart>, Invalid> {
    let parts = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::String(s)) => return Ok(vec![ContentPart::text(s.as_str())]),
        Some(Value::Array(parts)) => parts,
        Some(other) => {
            return Err(Invalid::body(format!(
                "must be a string or an array of parts, not {}",
                checks::what(other)
            )));
        }
    };
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let kind = p.get("type").and_then(Value::as_str);
            Ok(match (kind, p.get("text"), p.get("image_url")) {
                (Some("input_text" | "output_text"), Some(Value::String(t)), _)
                    if only(p, &["type", "text", "annotations", "logprobs"]) =>
                {
                    // Annotations and log probabilities are kept by the item's own
                    // bytes; a part that carries any is kept whole.
                    if has_details(p) {
                        opaque(p)
                    } else {
                        ContentPart::text(t.as_str())
                    }
                }
                (Some("input_image"), _, Some(Value::String(url)))
                    if only(p, &["type", "image_url", "detail"]) =>
                {
                    ContentPart::Image {
                        url: url.clone(),
                        detail: p.get("detail").and_then(Value::as_str).map(str::to_owned),
                    }
                }
                (Some(_), _, _) => opaque(p),
                (None, _, _) => {
                    return Err(Invalid::new("type", "must be a string").item("", i));
                }
            })
        })
        .collect()
}

/// Whether `p` has no member but `names`.
fn only(p: &Value, names: &[&str]) -> bool {
    p.as_object()
        .is_some_and(|o| o.keys().all(|k| names.contains(&k.as_str())))
}

/// Whether a text part carries annotations or log probabilities.
fn has_details(p: &Value) -> bool {
    ["annotations", "logprobs"].iter().any(|k| {
        p.get(*k)
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    })
}

fn opaque(p: &Value) -> ContentPart {
    ContentPart::Opaque {
        format: WireFormat::Responses,
        kind: p
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        json: p.to_string(),
    }
}

/// A tool: a function as a neutral tool, anything else (custom tools, hosted tools)
/// kept whole under its name (a hosted tool's `type`).
fn tool(t: &Value) -> Result<ToolSpec, Invalid> {
    let Some(obj) = t.as_object() else {
        return Err(Invalid::body(format!(
            "must be an object (a tool), not {}",
            checks::what(t)
        )));
    };
    let kind = str_field(obj, "type")?;
    if kind == "function" {
        let name = str_field(obj, "name")?;
        let description = obj
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let parameters = obj.get("parameters").cloned().unwrap_or(Value::Null);
        let mut spec = ToolSpec::new(name, description, parameters);
        spec.strict = obj.get("strict").and_then(Value::as_bool);
        return Ok(spec);
    }
    let name = obj.get("name").and_then(Value::as_str).unwrap_or(kind);
    let mut spec = ToolSpec::new(
        name,
        obj.get("description")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        Value::Null,
    );
    spec.opaque = Some(OpaqueTool::new(WireFormat::Responses, kind, t.to_string()));
    Ok(spec)
}
