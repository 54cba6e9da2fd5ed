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
//!   removed from anywhere but the start;
//! - `context_management` is checked as the provider checks it (only `edits`; known edit
//!   types; `clear_thinking_20251015` first and only with thinking on; each edit's beta
//!   in `anthropic-beta`), and the edits it is sent are reported in `applied_edits`
//!   (the binding check compares what the client sent, not an edited copy).
//!
//! It answers every request by calling the first tool declared (`{"step": n}`), with a
//! signed thinking block first when thinking is on, or with text when no tool is
//! declared; streamed when asked.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

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
    Router::new()
        .route(
            "/v1/messages",
            post(move |headers: HeaderMap, body: Bytes| {
                let seen = seen.clone();
                async move { answer(&seen, &headers, &body) }
            }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(256 * 1024 * 1024))
}

fn refuse(seen: &Mutex<Seen>, message: String) -> Response {
    seen.lock().unwrap().refusals.push(message.clone());
    let body = json!({"type": "error",
                      "error": {"type": "invalid_request_error", "message": message}});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

fn answer(seen: &Mutex<Seen>, headers: &HeaderMap, body: &[u8]) -> Response {
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
    let applied = match check_edits(&body, &betas) {
        Ok(applied) => applied,
        Err(why) => return refuse(seen, why),
    };
    if let Err(why) = check_binding(&body) {
        return refuse(seen, why);
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let thinking_on = matches!(
        body["thinking"]["type"].as_str(),
        Some("enabled" | "adaptive")
    );
    let mut content = Vec::new();
    if thinking_on {
        let before = messages.iter().map(thinking_count).sum::<usize>();
        let digest = prefix_digest(&body, &messages, &[]);
        content.push(
            json!({"type": "thinking", "thinking": "Den nächsten Schritt planen.",
                            "signature": format!("sig1.{digest}.{before}")}),
        );
    }
    let tool = body["tools"].as_array().and_then(|t| t.first()).cloned();
    let stop = match &tool {
        Some(tool) => {
            let step = messages.len();
            content.push(json!({"type": "tool_use", "id": format!("toolu_{step:06}"),
                                "name": tool["name"], "input": {"step": step}}));
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

/// `context_management` checked as the provider checks it; the edits applied, reported.
fn check_edits(body: &Value, betas: &[String]) -> Result<Option<Vec<Value>>, String> {
    let Some(cm) = body.get("context_management") else {
        return Ok(None);
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
            let keep = edit["keep"]["value"].as_u64().unwrap_or(3) as usize;
            let results: Vec<usize> = body["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .filter(|b| b["type"] == "tool_result")
                .map(|b| b["content"].to_string().len())
                .collect();
            let cleared = results.len().saturating_sub(keep);
            let tokens: usize = results[..cleared].iter().sum::<usize>() / 4;
            applied.push(json!({"type": kind, "cleared_tool_uses": cleared,
                                "cleared_input_tokens": tokens}));
        } else {
            applied.push(json!({"type": kind}));
        }
    }
    Ok(Some(applied))
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

/// Every thinking block's signature checked against the request it is carried in.
fn check_binding(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
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
                return Err(format!(
                    "{at}: thinking block is bound to a different conversation prefix"
                ));
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
    Ok(())
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
    for part in [&body["system"], &body["tools"]] {
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

/// `v` without thinking blocks and `cache_control` members, at any depth.
fn stripped(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| (k.clone(), stripped(v)))
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
