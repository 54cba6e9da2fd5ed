//! A client's request body as the provider's cache sees it: a chain of blocks, each hashed
//! with everything before it, with the client's own cache markers. What the pass-through
//! model replays: the body as it came, not as the stack sent it.
//!
//! Read from the raw JSON (each block's members as the client wrote them), so that the
//! chain is the client's bytes and not a rendering of them; a block's `cache_control` is
//! left out of its hash, as the provider's prefix match leaves it out.

use std::collections::BTreeMap;

use llm_context_layers::CacheTtl;
use llm_context_layers::hash::StableHasher;
use llm_context_layers::tokens::{OVERHEAD_TOKENS, char_count};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::simulate::{Block, Chain};

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
            for tool in &b.tools {
                block(&mut chain, "tool", tool)?;
            }
            if let Some(system) = b.system {
                content(&mut chain, "system", system)?;
            }
            for m in &b.messages {
                content(&mut chain, &m.role, m.content)?;
            }
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

#[derive(Deserialize)]
struct MessagesBody<'a> {
    #[serde(borrow, default)]
    tools: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Vec<Turn<'a>>,
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
/// its blocks; whose it is starts the first block's hash.
fn content(chain: &mut Chain, role: &str, raw: &RawValue) -> Result<(), serde_json::Error> {
    if !raw.get().starts_with('[') {
        let tokens = estimate(raw.get());
        chain.push(tokens, None, |h| {
            h.str(role);
            h.str(raw.get());
        });
        return Ok(());
    }
    let parts: Vec<&RawValue> = serde_json::from_str(raw.get())?;
    for (k, part) in parts.into_iter().enumerate() {
        block(chain, if k == 0 { role } else { "" }, part)?;
    }
    Ok(())
}

/// One block of the Messages API, its marker apart from its hash.
fn block(chain: &mut Chain, tag: &str, raw: &RawValue) -> Result<(), serde_json::Error> {
    let members: BTreeMap<String, &RawValue> = serde_json::from_str(raw.get())?;
    let marker = match members.get("cache_control") {
        Some(m) => Some(match serde_json::from_str::<Marker<'_>>(m.get())?.ttl {
            Some("1h") => CacheTtl::OneHour,
            _ => CacheTtl::FiveMinutes,
        }),
        None => None,
    };
    let unmarked = members.iter().filter(|(k, _)| *k != "cache_control");
    let chars: usize = unmarked.clone().map(|(_, v)| char_count(v.get())).sum();
    chain.push(
        (OVERHEAD_TOKENS + chars / 4) as u64,
        marker,
        |h: &mut StableHasher| {
            h.str(tag);
            for (key, value) in unmarked {
                h.str(key);
                h.str(value.get());
            }
        },
    );
    Ok(())
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
}
