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

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::ops::Range;

use bytes::Bytes;
use foldhash::quality::RandomState;
use llm_context_layers::prefix::{leading_system_end, stable_history_end};
use llm_context_layers::{CacheHints, ChatRequest, Message};
use serde::Deserialize;
use serde::ser::Error as _;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::convert::{blocks, cache_control, merge, system_blocks, system_texts, tool, ttl_order};
use super::types::{InputMessage, InputRole, ToolParam};
use crate::catalog::Provider;
use crate::client::unsupported;
use crate::error::ProviderError;
use crate::transport::RequestBody;
use crate::wire::pieces::Pieces;

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

/// Where a Messages body's parts lie in its bytes: see [`Kept::layout`].
pub(crate) struct Layout<'a> {
    pub(crate) body: &'a Bytes,
    pub(crate) tools: Vec<Range<usize>>,
    pub(crate) system: Option<Range<usize>>,
    pub(crate) messages: Vec<Range<usize>>,
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
    /// The body as read, and where its tools, its top-level `system` and its messages
    /// lie in it (the ledger's chain reads each part from there, not the body again).
    pub(crate) fn layout(&self) -> Layout<'_> {
        Layout {
            body: &self.body,
            tools: self.tools.iter().map(|(_, r)| r.clone()).collect(),
            system: self.system.clone(),
            messages: self.messages.iter().map(|(r, _)| r.clone()).collect(),
        }
    }

    /// What to keep of `body` (`text` is its bytes, checked as UTF-8; already read into
    /// `req`, whose messages after the system head came from the wire messages `owners`
    /// gives, one entry each), or `None` when the body's parts cannot be located.
    pub(crate) fn new(
        body: &Bytes,
        text: &str,
        parsed: &Value,
        req: &ChatRequest,
        owners: &[usize],
    ) -> Option<Self> {
        let spans: Spans<'_> = serde_json::from_str(text).ok()?;
        let base = text.as_ptr() as usize;
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
        let located = Parts {
            messages,
            tools,
            system: spans.system.map(range),
            rest: rest_of(parsed)?,
            markers: has_markers(parsed),
            results,
        };
        Self::assemble(body, located, req, owners)
    }

    /// What to keep of `body`, from where its parts were found (`located`) and the
    /// request read from it (see [`Kept::new`]).
    pub(crate) fn assemble(
        body: &Bytes,
        located: Parts,
        req: &ChatRequest,
        owners: &[usize],
    ) -> Option<Self> {
        let Parts {
            messages,
            tools,
            system,
            rest,
            markers,
            results,
        } = located;
        let keys = RandomState::default();
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
        let mut parts = vec![0; messages.len()];
        let mut digests: HashMap<u64, Vec<usize>> = HashMap::new();
        for &w in &owners[..in_head] {
            *parts.get_mut(w)? += 1;
        }
        for (m, &w) in req.messages[head_end..].iter().zip(&owners[in_head..]) {
            *parts.get_mut(w)? += 1;
            digests.entry(keys.hash_one(m)).or_default().push(w);
        }
        Some(Self {
            body: body.clone(),
            messages,
            tools,
            system,
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

    /// The text of `range` (a part of the body, which was checked as UTF-8 when read).
    fn text(&self, range: &Range<usize>) -> Result<&str, serde_json::Error> {
        simdutf8::basic::from_utf8(&self.body[range.clone()])
            .map_err(|_| serde_json::Error::custom("a kept part is not UTF-8"))
    }

    /// The part at `range` as written with `edits`, parsed (the slow way, for a part the
    /// splices cannot edit).
    fn value(&self, range: &Range<usize>, edits: &[Edit]) -> Value {
        let mut out = Pieces::new(&self.body);
        spliced(range, edits, &mut out);
        serde_json::from_slice(&out.finish().to_bytes()).unwrap_or(Value::Null)
    }
}

/// The spans of a JSON text at `start` in the body.
struct Located<'a, T> {
    spans: T,
    text: std::marker::PhantomData<&'a str>,
    /// Where the text lies in memory, and in the body.
    base: usize,
    start: usize,
}

impl<'a, T: Deserialize<'a>> Located<'a, T> {
    /// The spans of `text`, which lies at `start` in the body.
    fn read(text: &'a str, start: usize) -> Result<Self, serde_json::Error> {
        Ok(Self {
            spans: serde_json::from_str(text)?,
            text: std::marker::PhantomData,
            base: text.as_ptr() as usize,
            start,
        })
    }

    /// Where `raw` (borrowed from the text) lies in the body.
    fn span(&self, raw: &RawValue) -> Range<usize> {
        let start = raw.get().as_ptr() as usize - self.base + self.start;
        start..start + raw.get().len()
    }
}

/// Where a message's content lies.
#[derive(Deserialize)]
struct MessageSpans<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// What the splices read of a block (of a message or a tool result, or the system
/// prompt's), borrowed.
#[derive(Deserialize)]
struct BlockSpans<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

/// A span of the body replaced by new JSON text (inserted, when the span is empty).
#[derive(Clone, Debug)]
struct Edit {
    at: Range<usize>,
    with: String,
}

/// The bytes of `range` of `body`, each of `edits` (ascending, disjoint, within it)
/// replaced by its text, appended to `out`.
fn spliced(range: &Range<usize>, edits: &[Edit], out: &mut Pieces<'_>) {
    let mut at = range.start;
    for edit in edits {
        out.keep(at..edit.at.start);
        out.push(edit.with.as_bytes());
        at = edit.at.end;
    }
    out.keep(at..range.end);
}

/// The edit setting `key` of the object at `object` (its text `text`) to `value`: its
/// value replaced where it has one (`old`), else the member added before the closing
/// brace.
fn set_key(
    object: Range<usize>,
    text: &str,
    old: Option<Range<usize>>,
    key: &str,
    value: String,
) -> Edit {
    match old {
        Some(at) => Edit { at, with: value },
        None => {
            let empty = text[1..text.len() - 1].trim().is_empty();
            let comma = if empty { "" } else { "," };
            let end = object.end - 1;
            Edit {
                at: end..end,
                with: format!("{comma}{}:{value}", Value::from(key)),
            }
        }
    }
}

/// `edit` added to `edits`, kept ascending; one at the same place replaces it. `false`
/// when it overlaps another (the caller then edits the parsed value instead).
fn add_edit(edits: &mut Vec<Edit>, edit: Edit) -> bool {
    if let Some(same) = edits.iter_mut().find(|e| e.at == edit.at) {
        *same = edit;
        return true;
    }
    let within = |point: usize, span: &Range<usize>| span.start < point && point < span.end;
    let overlaps = |e: &Edit| {
        e.at.start.max(edit.at.start) < e.at.end.min(edit.at.end)
            || (e.at.is_empty() && within(e.at.start, &edit.at))
            || (edit.at.is_empty() && within(edit.at.start, &e.at))
    };
    if edits.iter().any(overlaps) {
        return false;
    }
    let key = |e: &Edit| (e.at.start, e.at.end);
    let at = edits.partition_point(|e| key(e) < key(&edit));
    edits.insert(at, edit);
    true
}

/// Where a body's parts lie and what the writer reads of them, however they were found.
pub(crate) struct Parts {
    /// Each wire message's bytes, and its role.
    pub(crate) messages: Vec<(Range<usize>, InputRole)>,
    /// Each tool's name and bytes.
    pub(crate) tools: Vec<(String, Range<usize>)>,
    /// The top-level `system`'s bytes.
    pub(crate) system: Option<Range<usize>>,
    /// The other top-level fields (not `model`, `messages`, `tools`, `system`, `stream`).
    pub(crate) rest: Map<String, Value>,
    /// The client placed `cache_control` markers of its own.
    pub(crate) markers: bool,
    /// The wire messages (ascending) holding a `tool_result` for each tool use id.
    pub(crate) results: HashMap<String, Vec<usize>>,
}

/// The top-level fields of `parsed` the writer passes on as they came.
pub(crate) fn rest_of(parsed: &Value) -> Option<Map<String, Value>> {
    Some(
        parsed
            .as_object()?
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "model" | "messages" | "tools" | "system" | "stream"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

/// Whether the client placed `cache_control` markers of its own, on a tool, a system block,
/// a message's block or a tool result's block: it then manages its cache itself.
pub(crate) fn has_markers(body: &Value) -> bool {
    marked(&body["tools"])
        || marked(&body["system"])
        || body["messages"]
            .as_array()
            .is_some_and(|ms| ms.iter().any(|m| marked(&m["content"])))
}

/// Whether any of `blocks` (or the blocks of a tool result among them) carries a
/// `cache_control` marker.
pub(crate) fn marked(blocks: &Value) -> bool {
    blocks.as_array().is_some_and(|blocks| {
        blocks
            .iter()
            .any(|b| b.get("cache_control").is_some() || marked(&b["content"]))
    })
}

/// A digest of the system prompt's texts, or `None` when it holds more than text.
fn head_digest(keys: &RandomState, head: &[Message]) -> Option<u64> {
    let mut texts = Vec::new();
    for m in head {
        texts.extend(system_texts(m).ok()?);
    }
    Some(keys.hash_one(&texts))
}

/// One part of the body written: as it came, as it came but for some spans, or as
/// written here.
enum Part {
    Raw(Range<usize>),
    /// The bytes of the range with each edit (ascending, disjoint, within it) applied.
    Spliced(Range<usize>, Vec<Edit>),
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
    // A field the stack set or changed wins over the client's (a delegated request's
    // `context_management`, the client's edits and the stack's merged).
    for (k, v) in &req.params.extra {
        if fields.get(k) != Some(v) && super::params::FIELDS.contains(&k.as_str()) {
            fields.insert(k.clone(), v.clone());
        }
    }
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
                let mut edits = Vec::new();
                for (m, _) in members.iter().filter(|(_, edited)| *edited) {
                    edit_result(kept, range, m, &mut edits)?;
                }
                Part::Spliced(range.clone(), edits)
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

/// The edit replacing, in the wire message at `range`, the content of its `tool_result`
/// for `result` (a neutral tool result the stack cleared or offloaded) by `result`'s,
/// added to `edits`. Spliced into the bytes: the message holds the result's whole text,
/// which a parse and a write would copy twice. A content of blocks stays blocks, the
/// client's marker on its last block kept.
fn edit_result(
    kept: &Kept,
    range: &Range<usize>,
    result: &Message,
    edits: &mut Vec<Edit>,
) -> Result<(), ProviderError> {
    let (_, rendered) = blocks(result)?;
    let Some(new) = rendered
        .into_iter()
        .find(super::types::ContentBlockParam::is_tool_result)
        .and_then(|b| serde_json::to_value(b).ok())
        .map(|mut b| b["content"].take())
    else {
        return Ok(());
    };
    let edit = (|| -> Result<Option<Edit>, serde_json::Error> {
        let text = kept.text(range)?;
        let message = Located::<MessageSpans<'_>>::read(text, range.start)?;
        let Some(content) = message.spans.content.filter(|c| c.get().starts_with('[')) else {
            return Ok(None);
        };
        let blocks = Located::<Vec<&RawValue>>::read(content.get(), message.span(content).start)?;
        let id = result.tool_call_id.as_deref();
        for raw in &blocks.spans {
            let block = Located::<BlockSpans<'_>>::read(raw.get(), blocks.span(raw).start)?;
            if block.spans.kind.as_deref() != Some("tool_result")
                || block.spans.tool_use_id.as_deref() != id
            {
                continue;
            }
            let old = block.spans.content;
            let with = match (old.filter(|c| c.get().starts_with('[')), &new) {
                (Some(old), Value::String(text)) => {
                    let marker = serde_json::from_str::<Vec<BlockSpans<'_>>>(old.get())?
                        .iter()
                        .rev()
                        .find_map(|b| b.cache_control)
                        .map(|m| format!(",\"cache_control\":{}", m.get()))
                        .unwrap_or_default();
                    format!(
                        r#"[{{"type":"text","text":{}{marker}}}]"#,
                        Value::from(text.as_str())
                    )
                }
                (_, new) => new.to_string(),
            };
            let at = old.map(|c| block.span(c));
            return Ok(Some(set_key(
                blocks.span(raw),
                raw.get(),
                at,
                "content",
                with,
            )));
        }
        Ok(None)
    })()
    .map_err(|e| unsupported(Provider::Anthropic, format!("the kept body: {e}")))?;
    if let Some(edit) = edit {
        // Results of one message are distinct blocks: their edits never overlap.
        add_edit(edits, edit);
    }
    Ok(())
}

pub(crate) fn role_of(role: &str) -> InputRole {
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

/// `part` with `marker` where `kind` takes it: spliced into a part kept as it came, set
/// on one written here.
fn set_marker(kept: &Kept, part: &mut Part, marker: Value, kind: Marked) {
    if let Part::Raw(range) = part {
        *part = Part::Spliced(range.clone(), Vec::new());
    }
    if let Part::Spliced(range, edits) = part {
        // Overlapping an edit, or not located: the parsed part is edited instead.
        match marker_edit(kept, range, &marker, kind) {
            Ok(new) if new.is_empty() => return,
            Ok(new) => {
                // All of them or none.
                let mut trial = edits.clone();
                if new.into_iter().all(|e| add_edit(&mut trial, e)) {
                    *edits = trial;
                    return;
                }
            }
            Err(_) => {}
        }
    }
    let mut value = match std::mem::replace(part, Part::Value(Value::Null)) {
        Part::Raw(range) => kept.value(&range, &[]),
        Part::Spliced(range, edits) => kept.value(&range, &edits),
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

/// The edits placing `marker` in the part at `range` (as it came) where `kind` takes it:
/// none when nothing in it takes one.
fn marker_edit(
    kept: &Kept,
    range: &Range<usize>,
    marker: &Value,
    kind: Marked,
) -> Result<Vec<Edit>, serde_json::Error> {
    let text = kept.text(range)?;
    let marker = marker.to_string();
    // A string becomes one text block holding it, marked (an empty one takes none): the
    // block is written around the string, which is not copied (it may be megabytes).
    let string = |raw: &RawValue, at: Range<usize>| {
        if raw.get() == r#""""# {
            return Vec::new();
        }
        vec![
            Edit {
                at: at.start..at.start,
                with: r#"[{"type":"text","text":"#.to_owned(),
            },
            Edit {
                at: at.end..at.end,
                with: format!(r#","cache_control":{marker}}}]"#),
            },
        ]
    };
    let whole = range.start..range.end;
    // The last block of `blocks` that takes a marker, marked.
    let in_blocks = |blocks: &RawValue, at: usize, takes: &dyn Fn(&BlockSpans<'_>) -> bool| {
        let blocks = Located::<Vec<&RawValue>>::read(blocks.get(), at)?;
        for raw in blocks.spans.iter().rev() {
            let block = Located::<BlockSpans<'_>>::read(raw.get(), blocks.span(raw).start)?;
            if takes(&block.spans) {
                let old = block.spans.cache_control.map(|c| block.span(c));
                let edit = set_key(
                    blocks.span(raw),
                    raw.get(),
                    old,
                    "cache_control",
                    marker.clone(),
                );
                return Ok(vec![edit]);
            }
        }
        Ok(Vec::new())
    };
    match kind {
        Marked::Tool => {
            let tool = Located::<BlockSpans<'_>>::read(text, range.start)?;
            let old = tool.spans.cache_control.map(|c| tool.span(c));
            Ok(vec![set_key(
                whole,
                text,
                old,
                "cache_control",
                marker.clone(),
            )])
        }
        Marked::System => {
            let system: &RawValue = serde_json::from_str(text)?;
            if system.get().starts_with('"') {
                Ok(string(system, whole))
            } else {
                in_blocks(system, range.start, &|_| true)
            }
        }
        Marked::Message => {
            let message = Located::<MessageSpans<'_>>::read(text, range.start)?;
            let Some(content) = message.spans.content else {
                return Ok(Vec::new());
            };
            let at = message.span(content);
            if content.get().starts_with('"') {
                return Ok(string(content, at));
            }
            let takes = |b: &BlockSpans<'_>| {
                !matches!(b.kind.as_deref(), Some("thinking" | "redacted_thinking"))
                    && b.text.is_none_or(|t| t.get() != r#""""#)
            };
            in_blocks(content, at.start, &takes)
        }
    }
}

impl Body {
    /// The body's bytes in one buffer (the tests').
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Result<Vec<u8>, serde_json::Error> {
        Ok(self.pieces()?.to_bytes().to_vec())
    }

    /// The body as sent: the parts kept as they came are slices of the client's bytes
    /// (never copied; an unedited run of them is one slice), the rest written anew.
    pub(crate) fn pieces(&self) -> Result<RequestBody, serde_json::Error> {
        let kept = self
            .origin
            .get::<Kept>()
            .ok_or_else(|| serde_json::Error::custom("the kept body is gone"))?;
        let mut out = Pieces::new(&kept.body);
        out.push(b"{");
        let mut first = true;
        let mut key = |out: &mut Pieces<'_>, key: &str| -> Result<(), serde_json::Error> {
            if !std::mem::take(&mut first) {
                out.push(b",");
            }
            serde_json::to_writer(&mut *out, key)?;
            out.push(b":");
            Ok(())
        };
        for (k, v) in &self.fields {
            key(&mut out, k)?;
            serde_json::to_writer(&mut out, v)?;
        }
        if let Some(system) = &self.system {
            key(&mut out, "system")?;
            write_part(system, &mut out)?;
        }
        let arrays = [("tools", &self.tools), ("messages", &self.messages)];
        for (name, parts) in arrays {
            if name == "tools" && parts.is_empty() {
                continue;
            }
            key(&mut out, name)?;
            out.push(b"[");
            for (i, part) in parts.iter().enumerate() {
                if i > 0 {
                    out.comma(part.start());
                }
                write_part(part, &mut out)?;
            }
            out.push(b"]");
        }
        out.push(b"}");
        Ok(out.finish())
    }
}

impl Part {
    /// Where the part starts in the client's bytes, when it starts with them.
    fn start(&self) -> Option<usize> {
        match self {
            Part::Raw(range) => Some(range.start),
            Part::Spliced(range, edits) => {
                (edits.first().is_none_or(|e| e.at.start > range.start)).then_some(range.start)
            }
            Part::Value(_) | Part::Message(_) | Part::Tool(_) => None,
        }
    }
}

/// `part` as it is written, appended to `out`.
fn write_part(part: &Part, out: &mut Pieces<'_>) -> Result<(), serde_json::Error> {
    match part {
        Part::Raw(range) => out.keep(range.clone()),
        Part::Spliced(range, edits) => spliced(range, edits, out),
        Part::Value(v) => serde_json::to_writer(out, v)?,
        Part::Message(m) => serde_json::to_writer(out, m)?,
        Part::Tool(t) => serde_json::to_writer(out, t)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::messages::serve::Messages;
    use crate::wire::served::Format;
    use llm_context_layers::{CacheTtl, Content};
    use serde_json::json;

    fn edit(at: Range<usize>, with: &str) -> Edit {
        Edit {
            at,
            with: with.into(),
        }
    }

    fn apply(text: &str, edits: &[Edit]) -> String {
        let body = Bytes::from(text.to_owned());
        let mut out = Pieces::new(&body);
        spliced(&(0..text.len()), edits, &mut out);
        String::from_utf8(out.finish().to_bytes().to_vec()).unwrap()
    }

    #[test]
    fn a_key_is_replaced_where_it_is_and_added_before_the_brace_where_it_is_not() {
        for (text, want) in [
            ("{}", r#"{"k":1}"#),
            ("{ \n }", "{ \n \"k\":1}"),
            (r#"{"a":2}"#, r#"{"a":2,"k":1}"#),
        ] {
            let e = set_key(0..text.len(), text, None, "k", "1".into());
            assert_eq!(apply(text, &[e]), want, "{text}");
        }
        let text = r#"{"k": [1, 2], "b": 3}"#;
        let e = set_key(0..text.len(), text, Some(6..12), "k", "true".into());
        assert_eq!(apply(text, &[e]), r#"{"k": true, "b": 3}"#);
    }

    #[test]
    fn edits_stay_ascending_one_at_the_same_place_replaces_and_overlaps_are_refused() {
        let mut edits = Vec::new();
        assert!(add_edit(&mut edits, edit(6..8, "X")));
        assert!(add_edit(&mut edits, edit(1..2, "Y")));
        // An insertion at the boundary of a replaced span does not overlap it.
        assert!(add_edit(&mut edits, edit(8..8, "Z")));
        assert!(add_edit(&mut edits, edit(1..2, "W")));
        assert_eq!(apply("abcdefghij", &edits), "aWcdefXZij");
        // Inside a replaced span, or across one: refused, nothing changed.
        assert!(!add_edit(&mut edits, edit(7..7, "!")));
        assert!(!add_edit(&mut edits, edit(0..3, "!")));
        assert!(!add_edit(&mut edits, edit(5..7, "!")));
        assert_eq!(apply("abcdefghij", &edits), "aWcdefXZij");
    }

    /// The body sent for `client` (a Messages body) after `edit` changed what was read,
    /// with the stack's breakpoints on every place.
    fn sent(client: &str, edit: impl FnOnce(&mut ChatRequest)) -> String {
        let read = Messages::read(&Bytes::from(client.to_owned())).unwrap();
        let mut req = read.request;
        req.cache = CacheHints::all(CacheTtl::FiveMinutes);
        edit(&mut req);
        let body = body(&req).unwrap().expect("a kept body");
        String::from_utf8(body.to_vec().unwrap()).unwrap()
    }

    const FIVE: &str = r#"{"type":"ephemeral"}"#;

    fn marked(text: &str) -> Value {
        json!({"type": "text", "text": text, "cache_control": {"type": "ephemeral"}})
    }

    #[test]
    fn unmarked_messages_go_byte_for_byte_and_a_string_becomes_one_marked_block() {
        // Odd spacing, an unknown field and a key order no writer would produce.
        let first = r#"{ "content" : "q1",  "x-note": [1,  2], "role":"user" }"#;
        let client = format!(
            r#"{{"model":"claude-sonnet-4-6","max_tokens":64,"system":"be brief",
                "messages":[{first},
                  {{"role":"assistant","content":[{{"type":"text","text":"a1"}}]}},
                  {{"role":"user","content":"q2"}}]}}"#
        );
        let out = sent(&client, |_| {});
        assert!(out.contains(first), "{out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["system"], json!([marked("be brief")]));
        // History: the message before the newest request.
        assert_eq!(v["messages"][1]["content"], json!([marked("a1")]));
        assert_eq!(v["messages"][2]["content"], json!([marked("q2")]));
        assert_eq!(
            v["messages"][0],
            serde_json::from_str::<Value>(first).unwrap()
        );
    }

    #[test]
    fn a_marker_skips_thinking_and_empty_text_and_replaces_none_of_the_clients_fields() {
        let client = r#"{"model":"claude-sonnet-4-6","max_tokens":64,"messages":[
            {"role":"user","content":"q1"},
            {"role":"assistant","content":[{"type":"text","text":"a1"},
               {"type":"thinking","thinking":"t","signature":"s"}]},
            {"role":"user","content":[{"type":"text","text":"q2","x":{}},
               {"type":"text","text":""}]}]}"#;
        let v: Value = serde_json::from_str(&sent(client, |_| {})).unwrap();
        assert_eq!(
            v["messages"][1]["content"],
            json!([marked("a1"), {"type": "thinking", "thinking": "t", "signature": "s"}])
        );
        assert_eq!(
            v["messages"][2]["content"],
            json!([{"type": "text", "text": "q2", "x": {}, "cache_control": {"type": "ephemeral"}},
                   {"type": "text", "text": ""}])
        );
    }

    #[test]
    fn a_cleared_result_and_a_marker_are_both_spliced_into_one_message() {
        let client = r#"{"model":"claude-sonnet-4-6","max_tokens":64,
            "tools":[{"name":"grep","input_schema":{"type":"object"}}],
            "messages":[
            {"role":"user","content":"find it"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"grep","input":{}}]},
            {"role":"user","content":[
               {"type":"tool_result","tool_use_id":"t1","is_error":true,
                "content":[{"type":"text","text":"a long result"}]},
               {"type":"text","text":"and?"}]}]}"#;
        let out = sent(client, |req| {
            let result = req
                .messages
                .iter_mut()
                .find(|m| m.tool_call_id.as_deref() == Some("t1"))
                .unwrap();
            result.content = Content::from("[cleared]");
        });
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["messages"][2]["content"],
            json!([{"type": "tool_result", "tool_use_id": "t1", "is_error": true,
                    "content": [{"type": "text", "text": "[cleared]"}]},
                   marked("and?")])
        );
        assert_eq!(
            v["tools"],
            json!([{"name": "grep", "input_schema": {"type": "object"},
                    "cache_control": {"type": "ephemeral"}}])
        );
        assert!(out.contains(FIVE));
    }

    #[test]
    fn a_result_without_content_gets_one_and_the_clients_own_markers_stop_the_stacks() {
        let client = r#"{"model":"claude-sonnet-4-6","max_tokens":64,"messages":[
            {"role":"user","content":"go"},
            {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ls","input":{}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1"},
               {"type":"text","text":"next","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}"#;
        let out = sent(client, |req| {
            let result = req
                .messages
                .iter_mut()
                .find(|m| m.tool_call_id.as_deref() == Some("t1"))
                .unwrap();
            result.content = Content::from("[offloaded]");
        });
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["messages"][2]["content"],
            json!([{"type": "tool_result", "tool_use_id": "t1", "content": "[offloaded]"},
                   {"type": "text", "text": "next",
                    "cache_control": {"type": "ephemeral", "ttl": "1h"}}])
        );
        // The client manages its cache: none of the stack's markers anywhere.
        assert_eq!(out.matches("cache_control").count(), 1, "{out}");
    }
}
