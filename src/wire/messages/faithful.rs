//! A Messages body sent back as the client wrote it, but for the stack's edits: what the
//! proxy's Anthropic client sends for a Messages caller.
//!
//! The proxy's reader keeps the client's body ([`Kept`]: its bytes, where each message,
//! tool and the system prompt lie in them, the other top-level fields, and a digest of
//! every neutral message it read, with the wire message it came from). The writer then
//! sends each wire message whose neutral messages all reached it unchanged as its own
//! bytes, byte for byte (unknown fields, block kinds the neutral model has no place for,
//! `is_error`, the client's `cache_control` and the string-or-blocks form included). A
//! result the stack stubbed or previewed has its content replaced in its message, the rest
//! of which is kept; only what the stack added is rendered: the artifact rounds' messages,
//! the read tool. Removed messages are left out. A thinking
//! block stays valid, for everything before it is byte-unchanged.
//!
//! The stack's cache breakpoints are added only when the client placed none of its own
//! (its markers win, and it may have used all four).

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::ops::Range;

use bytes::Bytes;
use llm_context_layers::prefix::{leading_system_end, stable_history_end};
use llm_context_layers::{CacheHints, ChatRequest, Message};
use serde::ser::{Error as _, SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::convert::{blocks, cache_control, merge, system_blocks, system_texts, tool, ttl_order};
use super::types::{InputMessage, InputRole, ToolParam};
use crate::error::ProviderError;

/// What the reader kept of a Messages body.
pub(crate) struct Kept {
    body: Bytes,
    /// Each wire message's bytes, and its role.
    messages: Vec<(Range<usize>, InputRole)>,
    /// Each tool's name and bytes.
    tools: Vec<(String, Range<usize>)>,
    /// The top-level `system`'s bytes.
    system: Option<Range<usize>>,
    /// A digest of the system prompt's texts as read; `None` when the head holds wire
    /// messages too (a `system` message before the first user message), which the writer
    /// then writes from the neutral model.
    head: Option<u64>,
    /// How many neutral messages the top-level `system` was read into.
    top: usize,
    /// The other top-level fields (not `model`, `messages`, `tools`, `system`, `stream`).
    rest: Map<String, Value>,
    /// For each wire message, how many neutral messages it was read into.
    parts: Vec<usize>,
    /// The wire messages (ascending) a neutral message of each digest was read from.
    digests: HashMap<u64, Vec<usize>>,
    /// The wire messages (ascending) holding a `tool_result` for each tool use id: where
    /// a result the stack cleared or offloaded is edited in place.
    results: HashMap<String, Vec<usize>>,
    keys: RandomState,
    /// The client placed `cache_control` markers of its own.
    markers: bool,
}

/// Where the parts of a body lie, borrowed from its bytes.
#[derive(Deserialize)]
struct Spans<'a> {
    #[serde(borrow, default)]
    messages: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
}

impl Kept {
    /// What to keep of `body` (already read into `req`, whose messages after the system
    /// head came from the wire messages `owners` gives, one entry each), or `None` when
    /// the body's parts cannot be located.
    pub(crate) fn new(
        body: &Bytes,
        parsed: &Value,
        req: &ChatRequest,
        owners: &[usize],
    ) -> Option<Self> {
        let spans: Spans<'_> = serde_json::from_slice(body).ok()?;
        let base = body.as_ptr() as usize;
        let range = |raw: &RawValue| {
            let start = raw.get().as_ptr() as usize - base;
            start..start + raw.get().len()
        };
        let wire = parsed["messages"].as_array()?;
        if wire.len() != spans.messages.len() {
            return None;
        }
        let messages = spans
            .messages
            .iter()
            .zip(wire)
            .map(|(raw, m)| (range(raw), role_of(m["role"].as_str().unwrap_or_default())))
            .collect();
        let tools = match (&spans.tools, parsed["tools"].as_array()) {
            (Some(raw), Some(tools)) => raw
                .iter()
                .zip(tools)
                .map(|(raw, t)| {
                    (
                        t["name"].as_str().unwrap_or_default().to_owned(),
                        range(raw),
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
        let keys = RandomState::new();
        let head_end = leading_system_end(&req.messages);
        // The messages the top-level `system` was read into; a wire `system` message
        // before the first user message joins them in the head.
        let top = req.messages.len() - owners.len();
        let in_head = head_end.checked_sub(top)?;
        let head = if in_head == 0 {
            Some(head_digest(&keys, &req.messages[..head_end])?)
        } else {
            None
        };
        let mut parts = vec![0; wire.len()];
        let mut digests: HashMap<u64, Vec<usize>> = HashMap::new();
        for &w in &owners[..in_head] {
            parts[w] += 1;
        }
        for (m, &w) in req.messages[head_end..].iter().zip(&owners[in_head..]) {
            parts[w] += 1;
            digests.entry(keys.hash_one(m)).or_default().push(w);
        }
        let rest = parsed
            .as_object()?
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "model" | "messages" | "tools" | "system" | "stream"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let markers = has_markers(parsed);
        let mut results: HashMap<String, Vec<usize>> = HashMap::new();
        for (w, m) in wire.iter().enumerate() {
            for block in m["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result"
                    && let Some(id) = block["tool_use_id"].as_str()
                {
                    results.entry(id.to_owned()).or_default().push(w);
                }
            }
        }
        Some(Self {
            body: body.clone(),
            messages,
            tools,
            system: spans.system.map(range),
            head,
            top,
            rest,
            parts,
            digests,
            results,
            keys,
            markers,
        })
    }

    /// The text of `range`, as it came.
    fn raw(&self, range: &Range<usize>) -> Result<&RawValue, serde_json::Error> {
        let text =
            std::str::from_utf8(&self.body[range.clone()]).map_err(serde_json::Error::custom)?;
        serde_json::from_str(text)
    }

    fn value(&self, range: &Range<usize>) -> Value {
        serde_json::from_slice(&self.body[range.clone()]).unwrap_or(Value::Null)
    }
}

/// Whether the client placed `cache_control` markers of its own, on a tool, a system block,
/// a message's block or a tool result's block: it then manages its cache itself.
fn has_markers(body: &Value) -> bool {
    fn marked(blocks: &Value) -> bool {
        blocks.as_array().is_some_and(|blocks| {
            blocks
                .iter()
                .any(|b| b.get("cache_control").is_some() || marked(&b["content"]))
        })
    }
    marked(&body["tools"])
        || marked(&body["system"])
        || body["messages"]
            .as_array()
            .is_some_and(|ms| ms.iter().any(|m| marked(&m["content"])))
}

/// A digest of the system prompt's texts, or `None` when it holds more than text.
fn head_digest(keys: &RandomState, head: &[Message]) -> Option<u64> {
    let mut texts = Vec::new();
    for m in head {
        texts.extend(system_texts(m).ok()?);
    }
    Some(keys.hash_one(&texts))
}

/// One part of the body written: as it came, or as written here.
enum Part {
    Raw(Range<usize>),
    Value(Value),
    Message(InputMessage),
    Tool(ToolParam),
}

/// The body for a Messages caller's request: its own bytes where the stack changed
/// nothing. `stream`: the call is streamed.
pub(crate) struct Body {
    origin: llm_context_layers::Origin,
    fields: Map<String, Value>,
    system: Option<Part>,
    tools: Vec<Part>,
    messages: Vec<Part>,
}

impl Body {
    /// Asks for a stream.
    pub(crate) fn stream(&mut self) {
        self.fields.insert("stream".into(), Value::Bool(true));
    }

    /// The body of a count (`count_tokens`), which takes neither an output limit nor a
    /// stream.
    pub(crate) fn count(&mut self) {
        self.fields.remove("max_tokens");
        self.fields.remove("stream");
    }
}

/// The faithful body of `req`, when it carries a Messages body kept by the reader.
pub(crate) fn body(req: &ChatRequest) -> Result<Option<Body>, ProviderError> {
    let Some(origin) = req.params.origin.as_ref() else {
        return Ok(None);
    };
    let Some(kept) = origin.get::<Kept>() else {
        return Ok(None);
    };
    let leading = leading_system_end(&req.messages);
    // The system prompt: as it came unless the stack changed it (a prefix of its own).
    // Only the messages it was read into are the head: a mid-conversation system message
    // that pruning brought to the front stays a message, never hoisted into `system`.
    let unchanged = kept.head.is_some()
        && req.prefix.is_none()
        && leading >= kept.top
        && head_digest(&kept.keys, &req.messages[..kept.top]) == kept.head;
    let head_end = if unchanged { kept.top } else { leading };
    let system = if unchanged {
        kept.system.clone().map(Part::Raw)
    } else {
        let blocks = system_blocks(req.prefix.as_deref(), &req.messages[..head_end])?;
        (!blocks.is_empty()).then(|| Part::Value(serde_json::to_value(blocks).unwrap_or_default()))
    };
    let tools: Vec<Part> = req
        .tools
        .iter()
        .map(
            |t| match kept.tools.iter().find(|(name, _)| *name == t.name) {
                Some((_, range)) => Part::Raw(range.clone()),
                None => Part::Tool(tool(t)),
            },
        )
        .collect();
    let (mut messages, owners) = messages(kept, &req.messages[head_end..])?;
    let mut fields = kept.rest.clone();
    fields.insert("model".into(), Value::String(req.model.clone()));
    if let Some(n) = req.params.max_output_tokens {
        fields.insert("max_tokens".into(), n.into());
    }
    if req.tools.is_empty() {
        fields.remove("tool_choice");
    }
    let mut out = Body {
        origin: origin.clone(),
        fields,
        system,
        tools,
        messages: Vec::new(),
    };
    if !kept.markers {
        let history = stable_history_end(&req.messages)
            .and_then(|end| end.checked_sub(head_end + 1))
            .and_then(|at| owners.get(at).copied());
        mark(kept, &mut out, &mut messages, req.cache, history);
    }
    out.messages = messages;
    Ok(Some(out))
}

/// The wire messages for `tail` (the neutral messages after the system head), and for
/// each neutral message the index of the part it went into.
fn messages(kept: &Kept, tail: &[Message]) -> Result<(Vec<Part>, Vec<usize>), ProviderError> {
    let mut w = Written {
        out: Vec::with_capacity(tail.len()),
        roles: Vec::with_capacity(tail.len()),
        owners: Vec::with_capacity(tail.len()),
    };
    // The wire message whose neutral messages are being gathered, and those (each with
    // whether the stack changed it: a cleared or offloaded result, edited in place).
    let mut group: Option<(usize, Vec<(&Message, bool)>)> = None;
    let mut cursor = 0;
    for m in tail {
        let digest = kept.keys.hash_one(m);
        let unchanged = kept
            .digests
            .get(&digest)
            .and_then(|ws| ws.iter().copied().find(|&at| at >= cursor));
        let from = unchanged.map(|at| (at, false)).or_else(|| {
            let id = m.tool_call_id.as_deref()?;
            let at = kept
                .results
                .get(id)?
                .iter()
                .copied()
                .find(|&at| at >= cursor)?;
            Some((at, true))
        });
        match (from, group.as_mut()) {
            (Some((at, edited)), Some((g, members))) if *g == at => members.push((m, edited)),
            (Some((at, edited)), _) => {
                w.flush(kept, group.take())?;
                cursor = at;
                group = Some((at, vec![(m, edited)]));
            }
            (None, _) => {
                w.flush(kept, group.take())?;
                w.render(m)?;
            }
        }
    }
    w.flush(kept, group.take())?;
    Ok((w.out, w.owners))
}

/// The parts written so far, their roles, and for each neutral message its part.
struct Written {
    out: Vec<Part>,
    roles: Vec<InputRole>,
    owners: Vec<usize>,
}

impl Written {
    /// Writes the neutral messages gathered from wire message `at`: as it came when every
    /// one of them reached the writer, with the content of the results the stack changed
    /// replaced in place (the rest of the message, `is_error` and the blocks beside them
    /// kept); else, when some were removed, from the neutral model.
    fn flush(
        &mut self,
        kept: &Kept,
        group: Option<(usize, Vec<(&Message, bool)>)>,
    ) -> Result<(), ProviderError> {
        let Some((at, members)) = group else {
            return Ok(());
        };
        if members.len() == kept.parts[at] {
            let (range, role) = &kept.messages[at];
            let part = if members.iter().any(|(_, edited)| *edited) {
                let mut message = kept.value(range);
                for (m, _) in members.iter().filter(|(_, edited)| *edited) {
                    edit_result(&mut message, m)?;
                }
                Part::Value(message)
            } else {
                Part::Raw(range.clone())
            };
            self.owners
                .extend(std::iter::repeat_n(self.out.len(), members.len()));
            self.out.push(part);
            self.roles.push(*role);
            return Ok(());
        }
        for (m, _) in members {
            self.render(m)?;
        }
        Ok(())
    }

    /// `m` written from the neutral model, merged into the part before when that is a
    /// message written here of the same role.
    fn render(&mut self, m: &Message) -> Result<(), ProviderError> {
        let (mut role, content) = blocks(m)?;
        if m.role == llm_context_layers::Role::System {
            role = InputRole::System;
        }
        if !content.is_empty() {
            match (self.out.last_mut(), self.roles.last()) {
                (Some(Part::Message(last)), Some(&last_role)) if last_role == role => {
                    merge(&mut last.content, content);
                }
                _ => {
                    self.out.push(Part::Message(InputMessage { role, content }));
                    self.roles.push(role);
                }
            }
        }
        self.owners.push(self.out.len().saturating_sub(1));
        Ok(())
    }
}

/// `message` (a wire message) with the content of its `tool_result` for `result` (a
/// neutral tool result the stack cleared or offloaded) replaced by `result`'s. A content
/// of blocks stays blocks, the client's marker on its last block kept.
fn edit_result(message: &mut Value, result: &Message) -> Result<(), ProviderError> {
    let (_, rendered) = blocks(result)?;
    let Some(new) = rendered
        .into_iter()
        .find(super::types::ContentBlockParam::is_tool_result)
        .and_then(|b| serde_json::to_value(b).ok())
        .map(|mut b| b["content"].take())
    else {
        return Ok(());
    };
    let id = result.tool_call_id.as_deref();
    let Some(block) = message["content"].as_array_mut().and_then(|blocks| {
        blocks
            .iter_mut()
            .find(|b| b["type"] == "tool_result" && b["tool_use_id"].as_str() == id)
    }) else {
        return Ok(());
    };
    let new = match (&block["content"], new) {
        (Value::Array(old), Value::String(text)) => {
            let mut text_block = serde_json::json!({"type": "text", "text": text});
            if let Some(marker) = old.iter().rev().find_map(|b| b.get("cache_control")) {
                text_block["cache_control"] = marker.clone();
            }
            Value::Array(vec![text_block])
        }
        (_, new) => new,
    };
    block["content"] = new;
    Ok(())
}

fn role_of(role: &str) -> InputRole {
    match role {
        "assistant" => InputRole::Assistant,
        "system" => InputRole::System,
        _ => InputRole::User,
    }
}

/// The stack's breakpoints, for a client that placed none: on the last tool, the last
/// system block, the message before the newest request (`history`) and the last message.
fn mark(
    kept: &Kept,
    body: &mut Body,
    messages: &mut [Part],
    hints: CacheHints,
    history: Option<usize>,
) {
    let hints = ttl_order(hints);
    let marker = |ttl| serde_json::to_value(cache_control(ttl)).unwrap_or(Value::Null);
    if let (Some(ttl), Some(last)) = (hints.tools, body.tools.last_mut()) {
        set_marker(kept, last, marker(ttl), Marked::Tool);
    }
    if let (Some(ttl), Some(system)) = (hints.prefix, body.system.as_mut()) {
        set_marker(kept, system, marker(ttl), Marked::System);
    }
    if let (Some(ttl), Some(at)) = (hints.history, history)
        && let Some(part) = messages.get_mut(at)
    {
        set_marker(kept, part, marker(ttl), Marked::Message);
    }
    if let (Some(ttl), Some(last)) = (hints.last, messages.last_mut()) {
        set_marker(kept, last, marker(ttl), Marked::Message);
    }
}

/// What a part written with a marker is.
#[derive(Clone, Copy)]
enum Marked {
    /// A tool: the marker on the definition.
    Tool,
    /// The system prompt (a string or text blocks): on its last block.
    System,
    /// A message: on its last block that can carry one (not thinking, not empty text).
    Message,
}

/// `part` as a value with `marker` where `kind` takes it.
fn set_marker(kept: &Kept, part: &mut Part, marker: Value, kind: Marked) {
    let mut value = match std::mem::replace(part, Part::Value(Value::Null)) {
        Part::Raw(range) => kept.value(&range),
        Part::Value(v) => v,
        Part::Message(m) => serde_json::to_value(m).unwrap_or(Value::Null),
        Part::Tool(t) => serde_json::to_value(t).unwrap_or(Value::Null),
    };
    match kind {
        Marked::Tool => value["cache_control"] = marker,
        Marked::System => {
            if let Value::String(text) = &value {
                value = serde_json::json!([{"type": "text", "text": text}]);
            }
            if let Some(last) = value.as_array_mut().and_then(|b| b.last_mut()) {
                last["cache_control"] = marker;
            }
        }
        Marked::Message => {
            if let Some(Value::String(text)) = value.get("content") {
                value["content"] = serde_json::json!([{"type": "text", "text": text}]);
            }
            let takes_one = |b: &&mut Value| {
                !matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking"))
                    && b.get("text")
                        .is_none_or(|t| t.as_str().is_some_and(|t| !t.is_empty()))
            };
            if let Some(block) = value["content"]
                .as_array_mut()
                .and_then(|blocks| blocks.iter_mut().rev().find(takes_one))
            {
                block["cache_control"] = marker;
            }
        }
    }
    *part = Part::Value(value);
}

impl Serialize for Body {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let kept = self
            .origin
            .get::<Kept>()
            .ok_or_else(|| S::Error::custom("the kept body is gone"))?;
        let write = |part| part_out::<S::Error>(kept, part);
        let mut map = serializer.serialize_map(None)?;
        for (k, v) in &self.fields {
            map.serialize_entry(k, v)?;
        }
        if let Some(system) = &self.system {
            map.serialize_entry("system", &write(system)?)?;
        }
        if !self.tools.is_empty() {
            let tools = self
                .tools
                .iter()
                .map(write)
                .collect::<Result<Vec<_>, _>>()?;
            map.serialize_entry("tools", &tools)?;
        }
        let messages = self
            .messages
            .iter()
            .map(write)
            .collect::<Result<Vec<_>, _>>()?;
        map.serialize_entry("messages", &messages)?;
        map.end()
    }
}

/// `part` as it is written.
fn part_out<'a, E: serde::ser::Error>(kept: &'a Kept, part: &'a Part) -> Result<PartOut<'a>, E> {
    Ok(match part {
        Part::Raw(range) => PartOut::Raw(kept.raw(range).map_err(E::custom)?),
        Part::Value(v) => PartOut::Value(v),
        Part::Message(m) => PartOut::Message(m),
        Part::Tool(t) => PartOut::Tool(t),
    })
}

#[derive(Serialize)]
#[serde(untagged)]
enum PartOut<'a> {
    Raw(&'a RawValue),
    Value(&'a Value),
    Message(&'a InputMessage),
    Tool(&'a ToolParam),
}
