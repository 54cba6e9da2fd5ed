//! A fake Anthropic Messages upstream on 127.0.0.1 that enforces what the provider
//! enforces on its binding-thinking models ("preserved thinking"), for the tests and for
//! `examples/enforcing_upstream.rs` (which `scripts/` can run):
//!
//! - every thinking block it emits is signed over the request it answers: `system`,
//!   `tools` and every message before it, with thinking blocks and `cache_control`
//!   markers left out (removing thinking from the start and moving markers are allowed),
//!   and with the number of thinking blocks before it;
//! - a later request carrying a block whose prefix changed is answered 400, in the
//!   provider's error shape, naming the block; so is one whose thinking blocks were
//!   removed from anywhere but the start; with `thinking.block_binding:
//!   {prefix_mismatch_behavior: "drop_block"}` (and its beta) such a block is dropped
//!   and reported in `input_transformations` instead;
//! - `context_management` is checked as the provider checks it (only `edits`; known edit
//!   types; `clear_thinking_20251015` first and only with thinking on; each edit's beta
//!   in `anthropic-beta`), and the edits it is sent are applied as the provider applies
//!   them (`clear_tool_uses_20250919`: over its trigger, every result but the newest
//!   `keep` and those of `exclude_tools`, unless that frees less than `clear_at_least`)
//!   to what the model is shown ([`Seen::shown`]), and reported in `applied_edits` (the
//!   binding check compares what the client sent, not the edited copy);
//!   `compact_20260112` over its trigger answers with a `compaction` block first, and
//!   the thinking after it is bound to that block alone;
//! - everything before the newest `compaction` block a request carries is dropped
//!   unseen, before anything is checked, as the provider drops it.
//!
//! It answers every request by calling the first tool declared (`{"step": n}`; a
//! `Bash` tool first when there is one, with `echo step n`), with a signed thinking block
//! first when thinking is on, or with text when no tool is declared (or, with
//! [`router_ending_after`], once the request carries that many tool results); streamed
//! when asked.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The beta `thinking.block_binding` needs.
const BINDING_BETA: &str = "thinking-binding-controls-2026-08-01";

/// The edits the fake knows, and the beta each needs.
const EDITS: &[(&str, &str)] = &[
    ("clear_tool_uses_20250919", "context-management-2025-06-27"),
    ("clear_thinking_20251015", "context-management-2025-06-27"),
    ("compact_20260112", "compact-2026-01-12"),
];

/// What the fake saw.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Every request body, in order.
    pub(crate) bodies: Vec<Value>,
    /// The message of every 400 it answered, in order.
    pub(crate) refusals: Vec<String>,
    /// What the model was shown of every request it answered, in order.
    pub(crate) shown: Vec<Shown>,
    /// The requests it compacted (`compact_20260112` over its trigger).
    pub(crate) compactions: usize,
}

/// What the model was shown of one request, once the provider's edits were applied.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shown {
    /// Its messages' tokens, counted as the stack estimates them (4 a message, a token
    /// for 4 characters of text, thinking, tool input and result).
    pub(crate) tokens: usize,
    /// Tool results shown whole (not cleared by the provider, not a stack's stub).
    pub(crate) whole_results: usize,
    /// Tool results the stack (not the provider) had replaced by its clearing stub.
    pub(crate) stubs: usize,
}

/// The placeholder the provider puts in place of a result it cleared.
const CLEARED: &str = "[cleared by context management]";

fn blocks(m: &Value) -> Vec<Value> {
    m["content"].as_array().cloned().unwrap_or_default()
}

fn is_cleared(result: &Value) -> bool {
    result["content"] == CLEARED || is_local_stub(result)
}

/// The stack's clearing stub (`{"context_cleared":true, …}`), as a string or a text
/// block.
fn is_local_stub(result: &Value) -> bool {
    let text = match &result["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<String>(),
        _ => String::new(),
    };
    text.starts_with("{\"context_cleared\":true")
}

/// The tokens of `messages` as the stack's estimate counts them.
fn tokens(messages: &[Value]) -> usize {
    let chars = |v: &Value| -> usize {
        match v {
            Value::String(s) => s.chars().count(),
            Value::Null => 0,
            other => other.to_string().chars().count(),
        }
    };
    messages
        .iter()
        .map(|m| match &m["content"] {
            Value::String(s) => 4 + s.chars().count() / 4,
            Value::Array(parts) => {
                let n: usize = parts
                    .iter()
                    .map(|b| match b["type"].as_str() {
                        Some("text") => chars(&b["text"]),
                        Some("thinking") => chars(&b["thinking"]),
                        Some("tool_use") => chars(&b["input"]) + 4 * 4,
                        Some("tool_result") => match &b["content"] {
                            Value::Array(p) => p.iter().map(|p| chars(&p["text"])).sum(),
                            other => chars(other),
                        },
                        _ => chars(b),
                    })
                    .sum();
                4 + n / 4
            }
            _ => 4,
        })
        .sum()
}

/// The provider's `clear_tool_uses_20250919` over `shown`: when the input is over the
/// trigger (100,000 tokens by default), every tool result but the newest `keep` (3 by
/// default) and those of `exclude_tools` is cleared, oldest first, unless that clears
/// less than `clear_at_least`. Returns the tool uses and tokens cleared.
fn clear_tool_uses(edit: &Value, shown: &mut [Value]) -> (usize, usize) {
    let trigger = edit["trigger"]["value"].as_u64().unwrap_or(100_000) as usize;
    if tokens(shown) <= trigger {
        return (0, 0);
    }
    let keep = edit["keep"]["value"].as_u64().unwrap_or(3) as usize;
    let excluded: Vec<&str> = edit["exclude_tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    // Which tool each call id names.
    let mut names = std::collections::HashMap::new();
    for b in shown.iter().flat_map(blocks) {
        if b["type"] == "tool_use" {
            names.insert(
                b["id"].as_str().unwrap_or_default().to_owned(),
                b["name"].clone(),
            );
        }
    }
    let mut at: Vec<(usize, usize)> = Vec::new();
    for (i, m) in shown.iter().enumerate() {
        for (j, b) in blocks(m).iter().enumerate() {
            let name = names.get(b["tool_use_id"].as_str().unwrap_or_default());
            let excluded = name
                .and_then(Value::as_str)
                .is_some_and(|n| excluded.contains(&n));
            if b["type"] == "tool_result" && !excluded && b["content"] != CLEARED {
                at.push((i, j));
            }
        }
    }
    let clear = at.len().saturating_sub(keep);
    let before = tokens(shown);
    let mut edited = shown.to_vec();
    for &(i, j) in &at[..clear] {
        edited[i]["content"][j]["content"] = json!(CLEARED);
    }
    let freed = before - tokens(&edited);
    let least = edit["clear_at_least"]["value"].as_u64().unwrap_or(0) as usize;
    if clear == 0 || freed < least {
        return (0, 0);
    }
    shown.clone_from_slice(&edited);
    (clear, freed)
}

/// A running enforcing upstream.
pub(crate) struct Enforcing {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub(crate) url: String,
    pub(crate) seen: Arc<Mutex<Seen>>,
}

/// Starts one on a free port of 127.0.0.1.
pub(crate) async fn start() -> Enforcing {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = router(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Enforcing { url, seen }
}

/// The fake's routes, recording into `seen`.
pub(crate) fn router(seen: Arc<Mutex<Seen>>) -> Router {
    router_ending_after(seen, None)
}

/// [`router`], answering with text (no tool call) once a request carries `rounds` tool
/// results, so a real agent's loop ends; and with what a real agent calls besides
/// `/v1/messages`: `count_tokens`, a model list, and `GET /seen` (how many requests it
/// answered, the message of every 400, each request's `context_management`), for a
/// script to read.
pub(crate) fn router_ending_after(seen: Arc<Mutex<Seen>>, rounds: Option<usize>) -> Router {
    let answered = seen.clone();
    Router::new()
        .route(
            "/v1/messages",
            post(move |headers: HeaderMap, body: Bytes| {
                let seen = seen.clone();
                async move { answer(&seen, &headers, &body, rounds) }
            }),
        )
        .route(
            "/v1/messages/count_tokens",
            post(|| async { axum::Json(json!({"input_tokens": 1234})) }),
        )
        .route(
            "/seen",
            axum::routing::get(move || {
                let seen = answered.clone();
                async move {
                    let seen = seen.lock().unwrap();
                    let edits: Vec<&Value> = seen
                        .bodies
                        .iter()
                        .map(|b| &b["context_management"])
                        .collect();
                    axum::Json(json!({"requests": seen.bodies.len(),
                                      "refusals": seen.refusals,
                                      "context_management": edits}))
                }
            }),
        )
        .fallback(axum::routing::get(|| async {
            axum::Json(json!({"data": [], "has_more": false}))
        }))
        .layer(axum::extract::DefaultBodyLimit::max(256 * 1024 * 1024))
}

fn refuse(seen: &Mutex<Seen>, message: String) -> Response {
    seen.lock().unwrap().refusals.push(message.clone());
    let body = json!({"type": "error",
                      "error": {"type": "invalid_request_error", "message": message}});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

fn answer(seen: &Mutex<Seen>, headers: &HeaderMap, body: &[u8], rounds: Option<usize>) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return refuse(seen, "the body is not JSON".into());
    };
    seen.lock().unwrap().bodies.push(body.clone());
    let betas: Vec<String> = headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|b| b.trim().to_owned())
        .collect();
    // The provider drops everything before the newest compaction block unseen: the
    // request it checks, edits and answers starts there.
    let body = past_compaction(body);
    let mut shown = body["messages"].as_array().cloned().unwrap_or_default();
    let (applied, compaction) = match check_edits(&body, &betas, &mut shown) {
        Ok(edits) => edits,
        Err(why) => return refuse(seen, why),
    };
    let dropped = match check_binding(&body, &betas) {
        Ok(dropped) => dropped,
        Err(why) => return refuse(seen, why),
    };
    seen.lock().unwrap().shown.push(Shown {
        tokens: tokens(&shown),
        whole_results: shown
            .iter()
            .flat_map(blocks)
            .filter(|b| b["type"] == "tool_result" && !is_cleared(b))
            .count(),
        stubs: shown
            .iter()
            .flat_map(blocks)
            .filter(|b| b["type"] == "tool_result" && is_local_stub(b))
            .count(),
    });
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let thinking_on = matches!(
        body["thinking"]["type"].as_str(),
        Some("enabled" | "adaptive")
    );
    let mut content = Vec::new();
    if let Some(block) = &compaction {
        content.push(block.clone());
        seen.lock().unwrap().compactions += 1;
    }
    if thinking_on {
        // After a compaction the answer's thinking is bound to the block before it
        // alone, which is where the next request's history starts.
        let (before, digest) = match &compaction {
            Some(block) => (0, prefix_digest(&body, &[], std::slice::from_ref(block))),
            None => (
                messages.iter().map(thinking_count).sum::<usize>(),
                prefix_digest(&body, &messages, &[]),
            ),
        };
        content.push(
            json!({"type": "thinking", "thinking": "Den nächsten Schritt planen.",
                            "signature": format!("sig1.{digest}.{before}")}),
        );
    }
    // A shell tool when there is one (a coding agent's), run harmlessly; else the first.
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    let tool = tools
        .iter()
        .find(|t| t["name"] == "Bash")
        .or_else(|| tools.first())
        .cloned();
    let results = messages
        .iter()
        .flat_map(blocks)
        .filter(|b| b["type"] == "tool_result")
        .count();
    let tool = tool.filter(|_| rounds.is_none_or(|r| results < r));
    let stop = match &tool {
        Some(tool) => {
            let step = messages.len();
            let input = if tool["name"] == "Bash" {
                json!({"command": format!("echo step {step}"), "description": "print the step"})
            } else {
                json!({"step": step})
            };
            content.push(json!({"type": "tool_use", "id": format!("toolu_{step:06}"),
                                "name": tool["name"], "input": input}));
            "tool_use"
        }
        None => {
            content.push(json!({"type": "text", "text": "Fertig. 完了。"}));
            "end_turn"
        }
    };
    let input_tokens = serde_json::to_string(&messages).unwrap_or_default().len() / 4;
    let usage = json!({"input_tokens": input_tokens, "output_tokens": 20,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    let mut message = json!({"id": format!("msg_{:06}", messages.len()), "type": "message",
                             "role": "assistant", "model": body["model"], "content": content,
                             "stop_reason": stop, "stop_sequence": null, "usage": usage});
    if let Some(applied) = &applied {
        message["context_management"] = json!({"applied_edits": applied});
    }
    if !dropped.is_empty() {
        message["input_transformations"] = json!(dropped);
    }
    if body["stream"] == json!(true) {
        return streamed(&message);
    }
    axum::Json(message).into_response()
}

/// `message` as the provider streams it.
fn streamed(message: &Value) -> Response {
    let mut events: Vec<(String, Value)> = Vec::new();
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    events.push((
        "message_start".into(),
        json!({"type": "message_start", "message": start}),
    ));
    for (index, block) in message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let (open, deltas) = match block["type"].as_str() {
            Some("thinking") => (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                vec![
                    json!({"type": "thinking_delta", "thinking": block["thinking"]}),
                    json!({"type": "signature_delta", "signature": block["signature"]}),
                ],
            ),
            Some("tool_use") => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                vec![json!({"type": "input_json_delta",
                            "partial_json": block["input"].to_string()})],
            ),
            // The provider's summary arrives in deltas.
            Some("compaction") => (
                json!({"type": "compaction"}),
                vec![json!({"type": "compaction_delta", "content": block["content"]})],
            ),
            _ => (
                json!({"type": "text", "text": ""}),
                vec![json!({"type": "text_delta", "text": block["text"]})],
            ),
        };
        events.push((
            "content_block_start".into(),
            json!({"type": "content_block_start", "index": index, "content_block": open}),
        ));
        for delta in deltas {
            events.push((
                "content_block_delta".into(),
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        events.push((
            "content_block_stop".into(),
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    let mut delta = json!({"type": "message_delta",
                           "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
                           "usage": {"output_tokens": message["usage"]["output_tokens"]}});
    if let Some(cm) = message.get("context_management") {
        delta["context_management"] = cm.clone();
    }
    events.push(("message_delta".into(), delta));
    events.push(("message_stop".into(), json!({"type": "message_stop"})));
    let text: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    ([(header::CONTENT_TYPE, "text/event-stream")], text).into_response()
}

/// `context_management` checked as the provider checks it; the edits applied to
/// `shown` (the messages the model is shown, as sent until then), reported.
/// `body` as the provider reads it: its messages from the one that holds the newest
/// `compaction` block, that message from the block on.
fn past_compaction(mut body: Value) -> Value {
    let Some(messages) = body["messages"].as_array_mut() else {
        return body;
    };
    let holds = |m: &Value| blocks(m).iter().any(|b| b["type"] == "compaction");
    if let Some(at) = messages.iter().rposition(holds) {
        messages.drain(..at);
        let content = messages[0]["content"].as_array_mut().expect("blocks");
        let first = content
            .iter()
            .rposition(|b| b["type"] == "compaction")
            .expect("a block");
        content.drain(..first);
    }
    body
}

/// The provider's `compact_20260112` over `shown`: over its trigger (150,000 input
/// tokens by default), the conversation is summarized into a `compaction` block, which
/// is all the model is shown of it but for the newest message. Returns the block.
fn compact(edit: &Value, shown: &mut Vec<Value>) -> Option<Value> {
    let trigger = edit["trigger"]["value"].as_u64().unwrap_or(150_000) as usize;
    if tokens(shown) <= trigger {
        return None;
    }
    let about = edit["instructions"]
        .as_str()
        .unwrap_or("the provider's own prompt");
    let block = json!({"type": "compaction",
                       "content": format!("Summary of {} messages, as asked: {about}",
                                          shown.len())});
    let newest = shown.pop();
    shown.clear();
    shown.push(json!({"role": "assistant", "content": [block]}));
    shown.extend(newest);
    Some(block)
}

/// The edits applied, and the compaction block when the request was compacted.
type Edits = (Option<Vec<Value>>, Option<Value>);

fn check_edits(body: &Value, betas: &[String], shown: &mut Vec<Value>) -> Result<Edits, String> {
    let Some(cm) = body.get("context_management") else {
        return Ok((None, None));
    };
    let Some(cm) = cm.as_object() else {
        return Err("context_management: must be an object".into());
    };
    if let Some(extra) = cm.keys().find(|k| *k != "edits") {
        return Err(format!(
            "context_management.{extra}: Extra inputs are not permitted"
        ));
    }
    let edits = cm
        .get("edits")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let thinking_on = matches!(
        body["thinking"]["type"].as_str(),
        Some("enabled" | "adaptive")
    );
    let mut applied = Vec::new();
    let mut compaction = None;
    for (i, edit) in edits.iter().enumerate() {
        let kind = edit["type"].as_str().unwrap_or_default();
        let Some((_, beta)) = EDITS.iter().find(|(k, _)| *k == kind) else {
            return Err(format!(
                "context_management.edits.{i}.type: unknown edit {kind:?}"
            ));
        };
        if !betas.iter().any(|b| b == beta) {
            return Err(format!(
                "context_management.edits.{i}: Extra inputs are not permitted (the {beta} beta \
                 is not enabled)"
            ));
        }
        if kind == "clear_thinking_20251015" {
            if i != 0 {
                return Err(format!(
                    "context_management.edits.{i}: clear_thinking_20251015 must come first"
                ));
            }
            if !thinking_on {
                return Err(
                    "context_management.edits.0: clear_thinking_20251015 requires thinking to \
                     be enabled"
                        .into(),
                );
            }
            applied.push(json!({"type": kind, "cleared_thinking_turns": 0,
                                "cleared_input_tokens": 0}));
        } else if kind == "clear_tool_uses_20250919" {
            let (uses, tokens) = clear_tool_uses(edit, shown);
            if uses > 0 {
                applied.push(json!({"type": kind, "cleared_tool_uses": uses,
                                    "cleared_input_tokens": tokens}));
            }
        } else if kind == "compact_20260112" {
            // Reported by the block in the answer, not among the applied edits.
            compaction = compaction.or_else(|| compact(edit, shown));
        }
    }
    Ok((Some(applied), compaction))
}

/// The thinking blocks a message holds.
fn thinking_count(m: &Value) -> usize {
    m["content"]
        .as_array()
        .map_or(0, |b| b.iter().filter(|b| is_thinking(b)).count())
}

fn is_thinking(block: &Value) -> bool {
    matches!(
        block["type"].as_str(),
        Some("thinking" | "redacted_thinking")
    )
}

/// Every thinking block's signature checked against the request it is carried in. With
/// `thinking.block_binding.prefix_mismatch_behavior: "drop_block"` (and its beta) a block
/// that fails is dropped instead, and reported: the transformations are returned.
fn check_binding(body: &Value, betas: &[String]) -> Result<Vec<Value>, String> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let binding = body["thinking"].get("block_binding");
    if binding.is_some() && !betas.iter().any(|b| b == BINDING_BETA) {
        return Err(format!(
            "thinking.block_binding: Extra inputs are not permitted (the {BINDING_BETA} beta \
             is not enabled)"
        ));
    }
    let drop_block = binding.is_some_and(|b| b["prefix_mismatch_behavior"] == "drop_block");
    let mut transformations = Vec::new();
    // How many of the earliest thinking blocks were removed: the same for every block, or
    // one was removed from the middle.
    let mut dropped: Option<usize> = None;
    let mut present = 0;
    // The digest of everything before the message at hand, fed once (a block's digest
    // continues it with the blocks before it in its own message).
    let mut prefix = head(body);
    for (i, m) in messages.iter().enumerate() {
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        for (j, block) in blocks.iter().enumerate() {
            if !is_thinking(block) {
                continue;
            }
            let at = format!("messages.{i}.content.{j}");
            let signature = block["signature"]
                .as_str()
                .or_else(|| block["data"].as_str())
                .unwrap_or_default();
            let mut parts = signature.split('.');
            let (Some("sig1"), Some(digest), Some(before)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!("{at}: invalid signature in thinking block"));
            };
            let before: usize = before
                .parse()
                .map_err(|_| format!("{at}: invalid signature"))?;
            if finish(prefix.clone(), &blocks[..j]) != digest {
                if drop_block {
                    transformations.push(json!({"type": "thinking_dropped", "path": at,
                                                "reason": "prefix_binding_mismatch"}));
                    continue;
                }
                return Err(format!(
                    "{at}: thinking block is bound to a different conversation prefix"
                ));
            }
            if drop_block {
                // Blocks dropped before it are the provider's doing, not the client's.
                continue;
            }
            let gone = before.checked_sub(present);
            match (dropped, gone) {
                (_, None) => return Err(format!("{at}: invalid signature in thinking block")),
                (None, Some(gone)) => dropped = Some(gone),
                (Some(d), Some(gone)) if d != gone => {
                    return Err(format!(
                        "{at}: thinking block is bound to a different conversation prefix \
                         (thinking was removed from the middle of the history)"
                    ));
                }
                _ => {}
            }
            present += 1;
        }
        feed(&mut prefix, m);
    }
    Ok(transformations)
}

/// The digest a thinking block is bound to: `system`, `tools`, the messages before its
/// message and the blocks before it in its own, without thinking blocks or markers.
fn prefix_digest(body: &Value, before: &[Value], blocks: &[Value]) -> String {
    let mut hash = head(body);
    for m in before {
        feed(&mut hash, m);
    }
    finish(hash, blocks)
}

/// A digest fed `system` and `tools`.
fn head(body: &Value) -> Sha256 {
    let mut hash = Sha256::new();
    let system = match &body["system"] {
        Value::String(text) => json!([{"type": "text", "text": text}]),
        other => other.clone(),
    };
    for part in [&system, &body["tools"]] {
        feed(&mut hash, part);
    }
    hash
}

/// `hash` fed one part of the prefix.
fn feed(hash: &mut Sha256, part: &Value) {
    hash.update(canonical(&stripped(part)).as_bytes());
    hash.update(b"\0");
}

/// The digest of a prefix, ended with the blocks before a block in its own message.
fn finish(mut hash: Sha256, blocks: &[Value]) -> String {
    hash.update(canonical(&stripped(&Value::Array(blocks.to_vec()))).as_bytes());
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// `v` without thinking blocks and `cache_control` members, at any depth, and with a
/// string `content` (or `system`) as the one text block it stands for: Claude Code
/// writes a message whose marker it removed as a string, which the provider reads as
/// the same text.
fn stripped(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| match v {
                    Value::String(text) if k == "content" || k == "system" => {
                        (k.clone(), json!([{"type": "text", "text": text}]))
                    }
                    _ => (k.clone(), stripped(v)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|b| !is_thinking(b))
                .map(stripped)
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `v` as JSON text with every object's keys sorted.
fn canonical(v: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                let mut out = Map::new();
                for k in keys {
                    out.insert(k.clone(), sorted(&map[k]));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(v).to_string()
}
