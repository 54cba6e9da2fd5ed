//! A client's request body as the provider's cache sees it: a chain of blocks, each hashed
//! with everything before it, with the client's own cache markers. What the pass-through
//! model replays: the body as it came, not as the stack sent it.
//!
//! Read from the raw JSON (each block's members as the client wrote them), so that the
//! chain is the client's bytes and not a rendering of them; a block's `cache_control` is
//! left out of its hash, as the provider's prefix match leaves it out.
//!
//! A Messages body is read as units, one a tool, the system prompt or a message, each
//! summed up on its own (its blocks' tokens, markers and content digests) and the chain
//! hashed over the sums. A session's next body is its last one plus a round, so the units
//! are kept by a digest of their bytes ([`Units`]) and found where the reader already
//! located them ([`Layout`]): only new units are parsed, and the body is not scanned
//! again.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

use llm_context_layers::CacheTtl;
use llm_context_layers::hash::StableHasher;
use llm_context_layers::tokens::{OVERHEAD_TOKENS, char_count};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::simulate::{Block, Chain};
use crate::wire::messages::faithful::Layout;

/// The wire format a body is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// Anthropic's Messages: tools, system blocks, each message's content blocks.
    Messages,
    /// Chat Completions: tools, then each message.
    ChatCompletions,
    /// The Responses API: tools, instructions, then each input item.
    Responses,
}

impl Shape {
    /// The shape of the bodies a route takes.
    pub(crate) fn of_route(route: &str) -> Self {
        match route {
            "/v1/messages" => Self::Messages,
            "/v1/responses" => Self::Responses,
            _ => Self::ChatCompletions,
        }
    }
}

/// The chain of `body`, in the provider's cache order, or why it is not JSON of the shape.
pub(crate) fn blocks(shape: Shape, body: &[u8]) -> Result<Vec<Block>, serde_json::Error> {
    use serde::de::Error as _;
    // Checked once, at memory speed: read from bytes, serde_json checks every string
    // (and every raw member) again with `std`'s slower check.
    let body = simdutf8::basic::from_utf8(body)
        .map_err(|_| serde_json::Error::custom("the body is not UTF-8"))?;
    let mut chain = Chain::new("llm-context/ledger/v1");
    match shape {
        Shape::Messages => {
            let b: MessagesBody<'_> = serde_json::from_str(body)?;
            let units = (b.tools.iter().map(|t| (Kind::Tool, *t)))
                .chain(b.system.map(|s| (Kind::System, s)))
                .chain(b.messages.iter().map(|m| (Kind::Message, *m)));
            let mut sums = Vec::new();
            for (kind, raw) in units {
                sums.extend(sum(kind, raw.get())?);
            }
            return Ok(chain_of(&sums));
        }
        Shape::ChatCompletions => {
            let b: ListBody<'_> = serde_json::from_str(body)?;
            for tool in &b.tools {
                unit(&mut chain, "tool", tool);
            }
            for m in &b.messages {
                unit(&mut chain, "message", m);
            }
        }
        Shape::Responses => {
            let b: ResponsesBody<'_> = serde_json::from_str(body)?;
            for tool in &b.tools {
                unit(&mut chain, "tool", tool);
            }
            if let Some(instructions) = b.instructions {
                unit(&mut chain, "instructions", instructions);
            }
            match b.input {
                Some(input) if input.get().starts_with('[') => {
                    let items: Vec<&RawValue> = serde_json::from_str(input.get())?;
                    for item in items {
                        unit(&mut chain, "item", item);
                    }
                }
                Some(input) => unit(&mut chain, "item", input),
                None => {}
            }
        }
    }
    Ok(chain.finish())
}

/// The chain of a Messages body the reader laid out, each unit summed up once and found
/// again in `units` by a digest of its bytes: the same chain as [`blocks`] gives for the
/// body, with only the units not seen before parsed.
pub(crate) fn messages_blocks(
    layout: &Layout<'_>,
    units: &mut Units,
) -> Result<Vec<Block>, serde_json::Error> {
    use serde::de::Error as _;
    let body = layout.body;
    let text = |r: &Range<usize>| {
        body.get(r.clone())
            .and_then(|b| simdutf8::basic::from_utf8(b).ok())
            .ok_or_else(|| serde_json::Error::custom("a part is not UTF-8"))
    };
    let mut sums = Vec::new();
    for r in &layout.tools {
        sums.extend_from_slice(&units.get_or(Kind::Tool, text(r)?)?);
    }
    if let Some(r) = &layout.system {
        sums.extend_from_slice(&units.get_or(Kind::System, text(r)?)?);
    }
    for r in &layout.messages {
        sums.extend_from_slice(&units.get_or(Kind::Message, text(r)?)?);
    }
    Ok(chain_of(&sums))
}

/// What a unit of a Messages body is.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Tool,
    System,
    Message,
}

/// One block of a Messages body on its own: its tokens, the client's marker, and a
/// digest of its content (its role for a message's first block, then its members but
/// the marker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sum {
    tokens: u64,
    marker: Option<CacheTtl>,
    digest: u128,
}

/// The chain over `sums`, each block hashed with everything before it.
fn chain_of(sums: &[Sum]) -> Vec<Block> {
    let mut chain = Chain::new("llm-context/ledger/v2");
    for s in sums {
        chain.push(s.tokens, s.marker, |h| h.bytes(&s.digest.to_le_bytes()));
    }
    chain.finish()
}

/// The units' sums by a digest of their bytes, in two generations: the newest
/// [`UNITS_PER_GENERATION`] and the ones before, so that a session's units stay while it
/// runs and a long-gone one's are dropped (a unit found in the old generation moves to
/// the new).
#[derive(Default)]
pub(crate) struct Units {
    now: HashMap<u128, Arc<[Sum]>>,
    old: HashMap<u128, Arc<[Sum]>>,
}

/// Units kept in one generation: a few MB at most (a message's sums are tens of bytes).
pub(crate) const UNITS_PER_GENERATION: usize = 20_000;

impl Units {
    /// The sums of the unit `text` of `kind`, from a unit of the same bytes seen before,
    /// else read now.
    fn get_or(&mut self, kind: Kind, text: &str) -> Result<Arc<[Sum]>, serde_json::Error> {
        let key = {
            let mut h = StableHasher::new("llm-context/ledger/unit");
            h.u64(kind as u64);
            h.str(text);
            h.finish()
        };
        if let Some(sums) = self.now.get(&key) {
            return Ok(sums.clone());
        }
        let sums = match self.old.remove(&key) {
            Some(sums) => sums,
            None => sum(kind, text)?.into(),
        };
        if self.now.len() >= UNITS_PER_GENERATION {
            self.old = std::mem::take(&mut self.now);
        }
        self.now.insert(key, sums.clone());
        Ok(sums)
    }

    /// How many units are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.now.len() + self.old.len()
    }
}

#[derive(Deserialize)]
struct MessagesBody<'a> {
    #[serde(borrow, default)]
    tools: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
struct Turn<'a> {
    role: String,
    #[serde(borrow)]
    content: &'a RawValue,
}

#[derive(Deserialize)]
struct ListBody<'a> {
    #[serde(borrow, default)]
    tools: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
struct ResponsesBody<'a> {
    #[serde(borrow, default)]
    tools: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Marker<'a> {
    #[serde(borrow, default)]
    ttl: Option<&'a str>,
}

/// A message's (or the system prompt's) content: one block for a string, else each of
/// its blocks; whose it is starts the first block's digest.
fn content_sum(role: &str, raw: &RawValue) -> Result<Vec<Sum>, serde_json::Error> {
    if !raw.get().starts_with('[') {
        let mut h = StableHasher::new("llm-context/ledger/block");
        h.str(role);
        h.str(raw.get());
        return Ok(vec![Sum {
            tokens: estimate(raw.get()),
            marker: None,
            digest: h.finish(),
        }]);
    }
    let parts: Vec<&RawValue> = serde_json::from_str(raw.get())?;
    parts
        .into_iter()
        .enumerate()
        .map(|(k, part)| block_sum(if k == 0 { role } else { "" }, part.get()))
        .collect()
}

/// The sums of the unit `text` of `kind`: a tool is one block; the system prompt and a
/// message are their content's blocks, the first tagged with whose it is. Both readings
/// of a body ([`blocks`] and [`messages_blocks`]) sum each unit here.
fn sum(kind: Kind, text: &str) -> Result<Vec<Sum>, serde_json::Error> {
    match kind {
        Kind::Tool => Ok(vec![block_sum("tool", text)?]),
        Kind::System => content_sum("system", serde_json::from_str(text)?),
        Kind::Message => {
            let m: Turn<'_> = serde_json::from_str(text)?;
            content_sum(&m.role, m.content)
        }
    }
}

/// One block of the Messages API, its marker apart from its digest.
fn block_sum(tag: &str, text: &str) -> Result<Sum, serde_json::Error> {
    let members: BTreeMap<String, &RawValue> = serde_json::from_str(text)?;
    let marker = match members.get("cache_control") {
        Some(m) => Some(match serde_json::from_str::<Marker<'_>>(m.get())?.ttl {
            Some("1h") => CacheTtl::OneHour,
            _ => CacheTtl::FiveMinutes,
        }),
        None => None,
    };
    let unmarked = members.iter().filter(|(k, _)| *k != "cache_control");
    let chars: usize = unmarked.clone().map(|(_, v)| char_count(v.get())).sum();
    let mut h = StableHasher::new("llm-context/ledger/block");
    h.str(tag);
    for (key, value) in unmarked {
        h.str(key);
        h.str(value.get());
    }
    Ok(Sum {
        tokens: (OVERHEAD_TOKENS + chars / 4) as u64,
        marker,
        digest: h.finish(),
    })
}

/// One unit of a format without markers (its bytes as the client wrote them).
fn unit(chain: &mut Chain, tag: &str, raw: &RawValue) {
    chain.push(estimate(raw.get()), None, |h| {
        h.str(tag);
        h.str(raw.get());
    });
}

/// The crate's estimate of a text: 4 + ⌊characters / 4⌋.
fn estimate(text: &str) -> u64 {
    (OVERHEAD_TOKENS + char_count(text) / 4) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(marker_on: usize, turns: usize) -> Vec<u8> {
        let mut messages = Vec::new();
        for i in 0..turns {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            let mut block =
                serde_json::json!({"type": "text", "text": format!("turn {i} ").repeat(50)});
            if i == marker_on {
                block["cache_control"] = serde_json::json!({"type": "ephemeral"});
            }
            messages.push(serde_json::json!({"role": role, "content": [block]}));
        }
        serde_json::to_vec(&serde_json::json!({
            "model": "claude-sonnet-4-6",
            "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            "messages": messages,
        }))
        .unwrap()
    }

    #[test]
    fn a_moved_marker_keeps_the_hashes_and_moves_the_breakpoint() {
        let a = blocks(Shape::Messages, &messages(2, 4)).unwrap();
        let b = blocks(Shape::Messages, &messages(3, 4)).unwrap();
        assert_eq!(a.len(), 5);
        let hashes = |c: &[Block]| c.iter().map(|b| b.hash).collect::<Vec<_>>();
        assert_eq!(hashes(&a), hashes(&b));
        assert_eq!(a[0].breakpoint, Some(CacheTtl::OneHour));
        assert_eq!(a[3].breakpoint, Some(CacheTtl::FiveMinutes));
        assert_eq!(a[4].breakpoint, None);
        assert_eq!(b[4].breakpoint, Some(CacheTtl::FiveMinutes));
    }

    #[test]
    fn an_edit_changes_every_later_hash_and_no_earlier_one() {
        let a = blocks(Shape::Messages, &messages(9, 4)).unwrap();
        let mut edited: serde_json::Value = serde_json::from_slice(&messages(9, 4)).unwrap();
        edited["messages"][1]["content"][0]["text"] = "changed".into();
        let b = blocks(Shape::Messages, &serde_json::to_vec(&edited).unwrap()).unwrap();
        assert_eq!(a[1].hash, b[1].hash);
        assert!((2..5).all(|i| a[i].hash != b[i].hash));
        assert!(b[2].tokens < a[2].tokens);
    }

    #[test]
    fn chat_and_responses_bodies_are_one_unit_per_message_or_item() {
        let chat = br#"{"model":"gpt-5","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}]}"#;
        assert_eq!(blocks(Shape::ChatCompletions, chat).unwrap().len(), 3);
        let responses = br#"{"model":"gpt-5","instructions":"be brief","input":[{"role":"user","content":"a"},{"type":"function_call_output","call_id":"c","output":"o"}]}"#;
        assert_eq!(blocks(Shape::Responses, responses).unwrap().len(), 3);
        let plain = br#"{"model":"gpt-5","input":"hello"}"#;
        assert_eq!(blocks(Shape::Responses, plain).unwrap().len(), 1);
        assert!(blocks(Shape::Messages, b"[1]").is_err());
    }

    /// A Claude Code-like body of `turns` rounds: tools with schemas, a marked system
    /// prompt in blocks, thinking, tool uses and results, strings and blocks, non-ASCII
    /// text, the client's marker on the newest message.
    fn session(turns: usize, edit: Option<usize>) -> serde_json::Value {
        use serde_json::json;
        let mut messages =
            vec![json!({"role": "user", "content": "Warum schlägt der Build fehl? なぜ"})];
        for i in 0..turns {
            let text = if Some(i) == edit {
                "edited".to_owned()
            } else {
                format!("log {i}\n").repeat(40 + i)
            };
            messages.push(json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": format!("step {i}"), "signature": "EqQBsig"},
                {"type": "text", "text": "Ich sehe nach."},
                {"type": "tool_use", "id": format!("toolu_{i}"), "name": "bash", "input": {"cmd": format!("ls {i}")}}]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": text}]}));
        }
        let last = messages.len() - 1;
        if let Some(blocks) = messages[last]["content"].as_array_mut() {
            blocks[0]["cache_control"] = json!({"type": "ephemeral"});
        }
        json!({
            "model": "claude-sonnet-4-6", "max_tokens": 1024, "stream": true,
            "system": [{"type": "text", "text": "You are Claude Code."},
                       {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            "tools": [{"name": "bash", "description": "Run", "input_schema": {"type": "object",
                       "properties": {"cmd": {"type": "string"}}}},
                      {"name": "read", "input_schema": {"type": "object"}}],
            "metadata": {"user_id": "u"},
            "messages": messages,
        })
    }

    /// The chain from the reader's layout, through `units`.
    fn laid_out(body: &[u8], units: &mut Units) -> Vec<Block> {
        use crate::wire::messages::serve::Messages;
        use crate::wire::served::Format;
        let read = Messages::read(&bytes::Bytes::copy_from_slice(body)).unwrap();
        let origin = read.request.params.origin.unwrap();
        let kept = origin
            .get::<crate::wire::messages::faithful::Kept>()
            .unwrap();
        messages_blocks(&kept.layout(), units).unwrap()
    }

    #[test]
    fn the_chain_from_the_readers_layout_is_the_chain_of_the_body_and_parses_only_new_units() {
        let mut units = Units::default();
        for turns in [0, 1, 2, 5, 6, 7] {
            let body = serde_json::to_vec(&session(turns, None)).unwrap();
            let want = blocks(Shape::Messages, &body).unwrap();
            assert_eq!(laid_out(&body, &mut units), want, "{turns} turns");
        }
        // Each unit was read once: two tools, the system prompt, the 15 messages of the
        // last body, and the marked forms of the four results the marker has left (a
        // marked message is other bytes than the same message unmarked).
        assert_eq!(units.len(), 3 + 15 + 4);
        // The marker moved: the hashes before it agree, the breakpoint moved with it.
        let a = laid_out(&serde_json::to_vec(&session(6, None)).unwrap(), &mut units);
        let b = laid_out(&serde_json::to_vec(&session(7, None)).unwrap(), &mut units);
        assert_eq!(
            a.iter().map(|b| b.hash).collect::<Vec<_>>(),
            b[..a.len()].iter().map(|b| b.hash).collect::<Vec<_>>()
        );
        // An edit in the middle: the same chain as the body's, every later hash changed.
        let edited = serde_json::to_vec(&session(7, Some(2))).unwrap();
        let c = laid_out(&edited, &mut units);
        assert_eq!(c, blocks(Shape::Messages, &edited).unwrap());
        let first = c
            .iter()
            .zip(&b)
            .position(|(c, b)| c.hash != b.hash)
            .unwrap();
        assert!(
            c[first..]
                .iter()
                .zip(&b[first..])
                .all(|(c, b)| c.hash != b.hash)
        );
        // A string system prompt, no tools.
        let mut plain = session(1, None);
        plain["system"] = "be brief".into();
        plain.as_object_mut().unwrap().remove("tools");
        let plain = serde_json::to_vec(&plain).unwrap();
        assert_eq!(
            laid_out(&plain, &mut units),
            blocks(Shape::Messages, &plain).unwrap()
        );
    }

    #[test]
    fn the_units_kept_are_bounded_by_two_generations() {
        let mut units = Units::default();
        for i in 0..(2 * UNITS_PER_GENERATION + 10) {
            units
                .get_or(Kind::Tool, &format!(r#"{{"name":"t{i}"}}"#))
                .unwrap();
        }
        assert!(units.len() <= 2 * UNITS_PER_GENERATION);
        assert!(units.len() > UNITS_PER_GENERATION);
    }
}
