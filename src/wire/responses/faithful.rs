//! A Responses caller's body sent back as it came but for the stack's edits: what the
//! proxy's Responses client sends for a Responses caller.
//!
//! Each item whose neutral message reached the writer unchanged goes as the caller's
//! own bytes (unknown fields and item kinds, `phase`, a reasoning item's
//! `encrypted_content`, all byte for byte). A call output the stack stubbed or
//! previewed keeps its item, with `output` replaced; removed messages' items are left
//! out; only what the stack added is rendered (its artifact rounds, the read tool). The
//! top-level members stay the caller's bytes unless the stack changed them.

use std::collections::HashMap;
use std::ops::Range;

use llm_context_layers::{ChatRequest, Message, Role, prefix::leading_system_end};
use serde_json::{Map, Value};

use super::breakpoints;
use super::read::{Kept, READ};
use super::write::{render_message, render_tool};
use crate::error::ProviderError;

/// The body for `req`, read from a Responses caller's body (`kept`), asking for a
/// stream when `stream`: the caller's bytes, with only what the stack changed spliced
/// in (the `input` and `tools` lists when they changed, a field it set), and with
/// `cache_key` as its `prompt_cache_key` when the caller set none.
pub(crate) fn faithful(
    req: &ChatRequest,
    kept: &Kept,
    stream: bool,
    cache_key: Option<String>,
) -> Result<Vec<u8>, ProviderError> {
    let body = &kept.body[..];
    let bytes = |r: &Range<usize>| &body[r.clone()];
    let top = kept.top.min(leading_system_end(&req.messages));

    // Input: each message as its own items when it reached here unchanged.
    let mut input = Items::default();
    if let Some(prefix) = req.prefix.as_ref().filter(|p| !p.is_empty()) {
        for m in prefix.as_messages() {
            input.render(&m)?;
        }
    }
    // The messages whose last input part gets one of the stack's breakpoints.
    let marks = if kept.marked {
        Vec::new()
    } else {
        breakpoints::messages(req, top)
    };
    // The next unused group of each digest.
    let mut used: HashMap<u64, usize> = HashMap::new();
    for (k, m) in req.messages.iter().enumerate().skip(top) {
        if marks.contains(&k) {
            input.marking = true;
        }
        let digest = kept.digest(m);
        let next = used.entry(digest).or_default();
        let group = kept
            .digests
            .get(&digest)
            .and_then(|groups| groups.get(*next))
            .map(|&g| &kept.groups[g]);
        match group {
            // The string input's message: the string, if nothing else is sent.
            Some(items) if items.is_empty() => {
                *next += 1;
                input.string = true;
                input.render(m)?;
            }
            Some(items) => {
                *next += 1;
                for i in items.clone() {
                    input.own_item(kept, i, true);
                }
            }
            None => match edited_output(kept, m) {
                Some(item) => input.changed(&item),
                None => match edited_turn(kept, m) {
                    // A turn whose calls the stack edited: its own items, in their order,
                    // with their ids, the edited calls' inputs replaced.
                    Some(items) => {
                        for item in items {
                            match item {
                                Ok(i) => input.own_item(kept, i, false),
                                Err(edited) => input.changed(&edited),
                            }
                        }
                    }
                    None => input.render(m)?,
                },
            },
        }
        input.end_message();
    }

    // Tools: the client's as it wrote them; the stack's rendered.
    let mut tools = Items::default();
    let mut taken = vec![false; kept.tools.len()];
    for t in &req.tools {
        let own = kept
            .tools
            .iter()
            .enumerate()
            .find(|(j, (name, _))| !taken[*j] && *name == t.name);
        match own {
            Some((j, (_, range))) => {
                taken[j] = true;
                tools.own(j, bytes(range));
            }
            None => tools.changed(&render_tool(t)?),
        }
    }

    let mut splice = Splice::default();
    let member = |key: &str| kept.members.get(key);
    if let Some(r) = member("model")
        && kept.original.get("model").and_then(Value::as_str) != Some(req.model.as_str())
    {
        splice.replace(r, json_str(&req.model));
    }
    let instructions = req.messages[..top].first();
    match (member("instructions"), instructions) {
        (Some(r), Some(m)) if changed_head(kept, m) => splice.replace(r, json_str(&m.text())),
        (None, Some(m)) => splice.add("instructions", json_str(&m.text())),
        _ => {}
    }
    let whole_input = input.verbatim(kept.items.len()) || input.is_string_alone(req, top);
    match member("input") {
        Some(_) if whole_input => {}
        Some(r) => splice.replace(r, input.array()),
        None if input.written > 0 => splice.add("input", input.array()),
        None => {}
    }
    match member("tools") {
        Some(_) if tools.verbatim(kept.tools.len()) => {}
        Some(r) => splice.replace(r, tools.array()),
        None if !req.tools.is_empty() => splice.add("tools", tools.array()),
        None => {}
    }
    // A streamed call says so; an unstreamed one is sent as the caller wrote it, but
    // never asking for a stream.
    let asked = kept.original.get("stream") == Some(&Value::Bool(true));
    match member("stream") {
        Some(r) if stream != asked => splice.replace(r, stream.to_string().into_bytes()),
        None if stream => splice.add("stream", b"true".to_vec()),
        _ => {}
    }
    // Every other field as the stack left it: the caller's bytes when it is unchanged.
    // Without tools (the stack's own summary request), the tool choice goes too: the
    // API refuses one with nothing to choose from.
    let toolless =
        |key: &str| req.tools.is_empty() && matches!(key, "tool_choice" | "parallel_tool_calls");
    for (key, before) in &kept.original {
        if READ.contains(&key.as_str()) {
            continue;
        }
        let now = req.params.extra.get(key).filter(|_| !toolless(key));
        if now != Some(before)
            && let Some(r) = member(key)
        {
            match now {
                Some(v) => splice.replace(r, v.to_string().into_bytes()),
                // Left out by the stack: the member goes, with one comma beside it.
                None => splice.replace(&whole_member(body, r), Vec::new()),
            }
        }
    }
    // What the stack added (`prompt_cache_key`, a provider edit of its own).
    for (key, v) in &req.params.extra {
        if !kept.original.contains_key(key) && !READ.contains(&key.as_str()) {
            splice.add(key, v.to_string().into_bytes());
        }
    }
    let has = |k: &str| kept.original.contains_key(k) || req.params.extra.contains_key(k);
    if let Some(key) = cache_key.filter(|_| !has("prompt_cache_key")) {
        splice.add("prompt_cache_key", json_str(&key));
    }
    Ok(splice.apply(body))
}

/// The bytes of the top-level member whose value lies at `value`: from its key's
/// opening quote to the value's end, with the comma before it (or, for the first
/// member, the one after it), so that the object stays valid without it.
fn whole_member(body: &[u8], value: &Range<usize>) -> Range<usize> {
    let space = |b: &u8| b.is_ascii_whitespace();
    // Back over `"key"  :  `: the colon, then the key's closing and opening quotes (a
    // key's own quotes are escaped, so the first unescaped one is its opening).
    let mut at = value.start;
    while at > 0 && (space(&body[at - 1]) || body[at - 1] == b':') {
        at -= 1;
    }
    at = at.saturating_sub(1);
    while at > 0 && !(body[at - 1] == b'"' && (at < 2 || body[at - 2] != b'\\')) {
        at -= 1;
    }
    let key = at.saturating_sub(1);
    let mut before = key;
    while before > 0 && space(&body[before - 1]) {
        before -= 1;
    }
    if before > 0 && body[before - 1] == b',' {
        return before - 1..value.end;
    }
    let mut after = value.end;
    while after < body.len() && space(&body[after]) {
        after += 1;
    }
    if after < body.len() && body[after] == b',' {
        return key..after + 1;
    }
    key..value.end
}

/// `text` as a JSON string.
fn json_str(text: &str) -> Vec<u8> {
    Value::from(text).to_string().into_bytes()
}

/// A list being written: the caller's own items, by their bytes, and rendered ones.
#[derive(Default)]
struct Items {
    out: Vec<u8>,
    /// The message being written gets a breakpoint: its items are held in `held` until
    /// it ends, so that its last one with an input part takes it.
    marking: bool,
    held: Vec<Held>,
    /// Only the caller's items so far, each the next in its order.
    unchanged: bool,
    /// How many items were written.
    written: usize,
    /// The string input's message was written (rendered).
    string: bool,
}

impl Items {
    fn comma(&mut self) {
        if self.written > 0 {
            self.out.push(b',');
        } else {
            self.unchanged = true;
        }
        self.written += 1;
    }

    /// The caller's item `i`, as its bytes.
    fn own(&mut self, i: usize, item: &[u8]) {
        if self.marking {
            self.held.push(Held::Own(i, item.to_vec()));
            return;
        }
        let next = self.written;
        self.comma();
        self.unchanged &= i == next;
        self.out.extend_from_slice(item);
    }

    /// The caller's input item `i` (`in_order`: in its place in the caller's list),
    /// unless it carries Claude's thinking, which OpenAI cannot take (the list is then
    /// not the caller's).
    fn own_item(&mut self, kept: &Kept, i: usize, in_order: bool) {
        if kept.is_thinking(i) {
            self.unchanged = false;
        } else {
            let at = if in_order { i } else { usize::MAX };
            self.own(at, &kept.body[kept.items[i].clone()]);
        }
    }

    /// An item the stack changed or added.
    fn changed(&mut self, item: &Value) {
        if self.marking {
            self.held.push(Held::Changed(item.clone()));
            return;
        }
        self.comma();
        self.unchanged = false;
        self.out.extend_from_slice(item.to_string().as_bytes());
    }

    /// The end of a message's items: those held for a breakpoint are written, the last
    /// one that can take it with it.
    fn end_message(&mut self) {
        if !std::mem::take(&mut self.marking) {
            return;
        }
        let mut held = std::mem::take(&mut self.held);
        for h in held.iter_mut().rev() {
            let mut item = match h {
                Held::Own(_, bytes) => match serde_json::from_slice::<Value>(bytes) {
                    Ok(v) => v,
                    Err(_) => continue,
                },
                Held::Changed(v) => v.clone(),
            };
            if breakpoints::add(&mut item) {
                *h = Held::Changed(item);
                break;
            }
        }
        for h in held {
            match h {
                Held::Own(i, bytes) => self.own(i, &bytes),
                Held::Changed(v) => self.changed(&v),
            }
        }
    }

    /// A neutral message's items, rendered.
    fn render(&mut self, m: &Message) -> Result<(), ProviderError> {
        for item in render_message(m)? {
            self.changed(&item);
        }
        Ok(())
    }

    /// Whether the list is the caller's `n` items, in order, unchanged.
    fn verbatim(&self, n: usize) -> bool {
        (self.written == 0 && n == 0) || (self.unchanged && self.written == n)
    }

    /// Whether the request is the caller's string input alone, unchanged.
    fn is_string_alone(&self, req: &ChatRequest, top: usize) -> bool {
        self.string && req.messages.len() == top + 1 && self.written == 1
    }

    fn array(&self) -> Vec<u8> {
        let mut a = Vec::with_capacity(self.out.len() + 2);
        a.push(b'[');
        a.extend_from_slice(&self.out);
        a.push(b']');
        a
    }
}

/// An item of a message held for its breakpoint.
enum Held {
    /// The caller's item, its index and bytes.
    Own(usize, Vec<u8>),
    /// One changed or added.
    Changed(Value),
}

/// Edits of a body's bytes: values replaced in place, members added at its end.
#[derive(Default)]
struct Splice {
    replaced: Vec<(Range<usize>, Vec<u8>)>,
    added: Vec<u8>,
}

impl Splice {
    fn replace(&mut self, at: &Range<usize>, value: Vec<u8>) {
        self.replaced.push((at.clone(), value));
    }

    fn add(&mut self, key: &str, value: Vec<u8>) {
        self.added.push(b',');
        self.added.extend_from_slice(&json_str(key));
        self.added.push(b':');
        self.added.extend_from_slice(&value);
    }

    /// `body` with the edits made: members are added before its closing brace (after
    /// its last member; an empty object takes them without the leading comma).
    fn apply(mut self, body: &[u8]) -> Vec<u8> {
        self.replaced.sort_unstable_by_key(|(r, _)| r.start);
        let close = body.iter().rposition(|&b| b == b'}').unwrap_or(body.len());
        let mut out = Vec::with_capacity(body.len() + self.added.len() + 64);
        let mut at = 0;
        for (r, value) in &self.replaced {
            out.extend_from_slice(&body[at..r.start]);
            out.extend_from_slice(value);
            at = r.end;
        }
        out.extend_from_slice(&body[at..close]);
        let empty = body[..close]
            .iter()
            .rev()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|&b| b == b'{');
        let added = if empty {
            self.added.get(1..).unwrap_or_default()
        } else {
            &self.added[..]
        };
        out.extend_from_slice(added);
        out.extend_from_slice(&body[close..]);
        out
    }
}

/// Whether the instructions' message is not the one read.
fn changed_head(kept: &Kept, m: &Message) -> bool {
    let Some(range) = &kept.instructions else {
        return true;
    };
    let read: Option<String> = serde_json::from_slice(&kept.body[range.clone()]).ok();
    read.as_deref() != Some(m.text().as_ref()) || m.role != Role::System
}

/// The items of the caller's turn that made `m`'s calls, when `m` is that turn with
/// only its calls' inputs changed: each item unchanged as its index (`Ok`), each edited
/// call as the item with its `arguments` (or a custom call's `input`) replaced.
fn edited_turn(kept: &Kept, m: &Message) -> Option<Vec<Result<usize, Value>>> {
    let first = m.tool_calls.first()?;
    let &g = kept.calls.get(first.id.as_str())?;
    let items = kept.groups.get(g)?.clone();
    let mut out = Vec::with_capacity(items.len());
    let mut seen = 0;
    for i in items {
        let raw = &kept.body[kept.items[i].clone()];
        let mut item: Map<String, Value> = serde_json::from_slice(raw).ok()?;
        let field = match item.get("type").and_then(Value::as_str) {
            Some("function_call") => "arguments",
            Some("custom_tool_call") => "input",
            _ => {
                out.push(Ok(i));
                continue;
            }
        };
        let id = item.get("call_id").and_then(Value::as_str)?;
        // Every call of the turn must still be there: else the turn changed otherwise.
        let call = m.tool_calls.iter().find(|c| c.id == id)?;
        seen += 1;
        if item.get(field).and_then(Value::as_str) == Some(call.arguments.as_str()) {
            out.push(Ok(i));
        } else {
            item.insert(field.into(), Value::from(call.arguments.as_str()));
            out.push(Err(Value::Object(item)));
        }
    }
    (seen == m.tool_calls.len()).then_some(out)
}

/// A call output the stack cleared or offloaded: its item with `output` replaced, the
/// rest as the client wrote it.
fn edited_output(kept: &Kept, m: &Message) -> Option<Value> {
    let id = m.tool_call_id.as_deref()?;
    let &i = kept.outputs.get(id)?;
    let mut item: Map<String, Value> =
        serde_json::from_slice(&kept.body[kept.items[i].clone()]).ok()?;
    item.insert("output".into(), Value::from(m.text().as_ref()));
    Some(Value::Object(item))
}
