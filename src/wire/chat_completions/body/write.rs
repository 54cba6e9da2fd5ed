//! Writing a body: from the model, with what was kept beside it put back.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::super::params::tool_choice_to_wire;
use super::residue::{
    BodyContext, CallKept, ContentAs, Digests, Kept, NO_CALL, NO_PART, NOTHING, PartKept,
};
use llm_context_layers::prefix::leading_system_end;
use llm_context_layers::{ChatRequest, Content, ContentPart, Message, ToolCall, ToolSpec};

/// Writes a request back as an OpenAI Chat Completions body: each message from the model,
/// with what `ctx` kept beside it when it is one of the messages received (see the
/// [module documentation](super)).
///
/// As a JSON tree, it cannot hold what a tree cannot: a message with a member kept as
/// the client wrote it that no tree reads (a number past `f64`, a lone surrogate escape)
/// is `null` here. [`write_body`] writes such a member's bytes as they came.
pub fn body_from_request(req: &ChatRequest, ctx: &BodyContext) -> Value {
    let mut out = top_level(req);
    let mut text = Vec::new();
    let mut messages = Vec::new();
    for_each_message(req, ctx, |m, kept, changed| {
        text.clear();
        write_message(&mut text, m, kept, changed)?;
        // Read back from text this module wrote: it is JSON.
        messages.push(serde_json::from_slice(&text).unwrap_or(Value::Null));
        Ok(())
    })
    // Writing to a `Vec` cannot fail.
    .unwrap_or(());
    out.insert("messages".into(), Value::Array(messages));
    Value::Object(out)
}

/// The `messages` array of [`body_from_request`] as JSON text, written straight from the
/// model (no JSON tree of a message): what a proxy sends upstream beside the top-level
/// fields ([`fields_of_request`]), which it may still edit.
#[cfg(feature = "serve")]
pub(crate) fn messages_text(req: &ChatRequest, ctx: &BodyContext, out: &mut Vec<u8>) {
    out.push(b'[');
    let mut first = true;
    for_each_message(req, ctx, |m, kept, changed| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        write_message(&mut *out, m, kept, changed)
    })
    // Writing to a `Vec` cannot fail.
    .unwrap_or(());
    out.push(b']');
}

/// Every top-level field of [`body_from_request`] but `messages`.
#[cfg(feature = "serve")]
pub(crate) fn fields_of_request(req: &ChatRequest) -> Map<String, Value> {
    top_level(req)
}

/// [`body_from_request`] written to `out` as JSON text, without building the body or any
/// message as a JSON tree.
pub fn write_body(req: &ChatRequest, ctx: &BodyContext, mut out: impl Write) -> io::Result<()> {
    out.write_all(b"{\"messages\":[")?;
    let mut first = true;
    for_each_message(req, ctx, |m, kept, changed| {
        if !std::mem::take(&mut first) {
            out.write_all(b",")?;
        }
        write_message(&mut out, m, kept, changed)
    })?;
    out.write_all(b"]")?;
    for (k, v) in top_level(req) {
        out.write_all(b",")?;
        serde_json::to_writer(&mut out, &k)?;
        out.write_all(b":")?;
        serde_json::to_writer(&mut out, &v)?;
    }
    out.write_all(b"}")
}

/// Calls `write` with each message of the body and what to write with it: the prefix's
/// (from the model), then each of `req.messages` — with what it had beside when it is
/// one of the messages received, and whether a layer rewrote its content.
fn for_each_message(
    req: &ChatRequest,
    ctx: &BodyContext,
    mut write: impl FnMut(&Message, Option<&Kept>, bool) -> io::Result<()>,
) -> io::Result<()> {
    for m in req.prefix.iter().flat_map(|p| p.as_messages()) {
        write(&m, None, false)?;
    }
    if ctx.kept.is_empty() {
        // Nothing to put back: every message is written from the model as it is.
        for m in &req.messages {
            write(m, None, false)?;
        }
        return Ok(());
    }
    let digests: Vec<Digests> = req
        .messages
        .iter()
        .map(|m| Digests::of(&ctx.keys, m))
        .collect();
    let found = counterparts(ctx, &req.messages, &digests);
    for ((m, digests), found) in req.messages.iter().zip(&digests).zip(found) {
        match found {
            Some(i) => write(m, ctx.kept(i), ctx.digests[i] != *digests)?,
            None => write(m, None, false)?,
        }
    }
    Ok(())
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
        out.insert("tool_choice".into(), tool_choice_to_wire(tc));
    }
    if let Some(parallel) = p.parallel_tool_calls {
        out.insert("parallel_tool_calls".into(), Value::Bool(parallel));
    }
    for (k, v) in &p.extra {
        out.insert(k.clone(), v.clone());
    }
    out
}

/// For each sent message, the index of the message it came from among the messages
/// received, or `None` for one the stack added.
///
/// The layers keep order and only drop or rewrite, so the sent messages are a subsequence
/// of the originals. Which copy of two identical messages survived follows from what the
/// layers drop: never the leading system messages, which are matched in place; otherwise
/// the oldest turns and the oldest rounds of a turn, so the rest is matched from the
/// newest end, each message to the newest original before the one matched after it.
fn counterparts(ctx: &BodyContext, sent: &[Message], digests: &[Digests]) -> Vec<Option<usize>> {
    let originals = &ctx.digests;
    let mut out = vec![None; sent.len()];
    let in_head = ctx.head.min(originals.len());
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

/// Whether `new` (with `digests`) is the original with digests `orig`, possibly with its
/// content rewritten by a layer. The layers rewrite only tool results, and a tool result
/// is known by its `tool_call_id`: any other message must be unchanged to be the same,
/// whatever its content looks like (a user message can quote a preview).
fn same_message(orig: &Digests, new: &Message, digests: &Digests) -> bool {
    orig.head == digests.head
        && (orig.content == digests.content
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

/// Writes one tool definition.
pub fn tool_to_wire(t: &ToolSpec) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), Value::String(t.name.clone()));
    if !t.description.is_empty() {
        f.insert("description".into(), Value::String(t.description.clone()));
    }
    f.insert("parameters".into(), t.parameters.clone());
    if let Some(strict) = t.strict {
        f.insert("strict".into(), Value::Bool(strict));
    }
    json!({"type": "function", "function": f})
}

/// Writes a message's content.
pub fn content_to_wire(c: &Content) -> Value {
    let mut text = Vec::new();
    // Writing to a `Vec` cannot fail, and what is written is JSON.
    let _ = write_content(&mut text, c, &[]);
    serde_json::from_slice(&text).unwrap_or(Value::Null)
}

/// Writes one message from the neutral model.
pub fn message_to_wire(m: &Message) -> Value {
    let mut text = Vec::new();
    let _ = write_message(&mut text, m, None, false);
    serde_json::from_slice(&text).unwrap_or(Value::Null)
}

/// A text as a JSON string to `out`: a long one (a tool result, a file) escaped into one
/// buffer and written whole, rather than a write for each run between its escapes; the
/// bytes are `serde_json`'s either way.
fn write_text(out: &mut impl Write, s: &str) -> io::Result<()> {
    if s.len() < 256 {
        return write_json(out, s);
    }
    out.write_all(llm_context_layers::json::to_string(s).as_bytes())
}

/// A JSON value to `out`.
fn write_json(out: &mut impl Write, value: &(impl Serialize + ?Sized)) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}

/// Writes one message as JSON text: from the model, with what `kept` says it had beside;
/// with the model's content and not the form it came in when `changed` (a layer rewrote
/// it).
fn write_message(
    out: &mut impl Write,
    m: &Message,
    kept: Option<&Kept>,
    changed: bool,
) -> io::Result<()> {
    let kept = kept.unwrap_or(&NOTHING);
    out.write_all(b"{\"role\":")?;
    if kept.developer {
        out.write_all(b"\"developer\"")?;
    } else {
        write_json(out, m.role.as_str())?;
    }
    if changed {
        out.write_all(b",\"content\":")?;
        write_content(out, &m.content, &[])?;
    } else {
        match &kept.content {
            ContentAs::Model if m.has_tool_calls() && m.content.is_empty() => {
                out.write_all(b",\"content\":null")?;
            }
            ContentAs::Model => {
                out.write_all(b",\"content\":")?;
                write_content(out, &m.content, &kept.parts)?;
            }
            ContentAs::Absent => {}
            ContentAs::Null => out.write_all(b",\"content\":null")?,
            ContentAs::Given(text) => {
                out.write_all(b",\"content\":")?;
                out.write_all(text)?;
            }
        }
    }
    if let Some(n) = m.name() {
        out.write_all(b",\"name\":")?;
        write_json(out, n)?;
    }
    if let Some(id) = &m.tool_call_id {
        out.write_all(b",\"tool_call_id\":")?;
        write_json(out, id)?;
    }
    if m.has_tool_calls() {
        out.write_all(b",\"tool_calls\":[")?;
        for (i, c) in m.tool_calls.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write_call(out, c, kept.calls.get(i).unwrap_or(&NO_CALL))?;
        }
        out.write_all(b"]")?;
    }
    kept.members.write_after(out)?;
    out.write_all(b"}")
}

/// Writes a message's content, with what each part had beside (`parts`, one a part, or
/// empty).
pub(super) fn write_content(
    out: &mut impl Write,
    c: &Content,
    parts: &[PartKept],
) -> io::Result<()> {
    let parts_of = match c {
        Content::Text(t) => return write_text(out, t),
        Content::Parts(p) => p,
    };
    out.write_all(b"[")?;
    for (i, p) in parts_of.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        let kept = parts.get(i).unwrap_or(&NO_PART);
        match p {
            ContentPart::Text { text } => {
                out.write_all(b"{\"type\":\"text\",\"text\":")?;
                write_text(out, text)?;
            }
            ContentPart::Image { url, detail } => {
                out.write_all(b"{\"type\":\"image_url\",\"image_url\":{\"url\":")?;
                write_json(out, url.as_str())?;
                if let Some(d) = detail {
                    out.write_all(b",\"detail\":")?;
                    write_json(out, d.as_str())?;
                }
                kept.image.write_after(out)?;
                out.write_all(b"}")?;
            }
            // A part kept whole (audio, a file) is written as it came. One of another
            // format never gets here: the body is of this format only.
            ContentPart::Opaque { json, .. } => {
                out.write_all(json.as_bytes())?;
                continue;
            }
            _ => out.write_all(b"{\"type\":\"text\",\"text\":\"\"")?,
        }
        kept.members.write_after(out)?;
        out.write_all(b"}")?;
    }
    out.write_all(b"]")
}

/// Writes one tool call, with what it had beside.
fn write_call(out: &mut impl Write, c: &ToolCall, kept: &CallKept) -> io::Result<()> {
    out.write_all(b"{\"id\":")?;
    write_json(out, c.id.as_str())?;
    if !kept.no_type {
        out.write_all(b",\"type\":\"function\"")?;
    }
    out.write_all(b",\"function\":{\"name\":")?;
    write_json(out, c.name.as_str())?;
    if !kept.no_arguments {
        out.write_all(b",\"arguments\":")?;
        write_text(out, &c.arguments)?;
    }
    kept.function.write_after(out)?;
    out.write_all(b"}")?;
    kept.members.write_after(out)?;
    out.write_all(b"}")
}
