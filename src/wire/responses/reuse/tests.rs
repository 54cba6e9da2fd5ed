//! The read by what is new gives what the full read gives, byte for byte once written
//! back: on generated growing Codex-shaped sessions, items edited in the middle, sessions
//! sharing a head, two tenants, and bodies it leaves to the full read.

use axum::body::Bytes;
use llm_context_layers::{CacheHints, CacheTtl, ChatRequest, Content};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::wire::messages::reuse::Reuse;
use crate::wire::messages::reuse::tests::nested;
use crate::wire::responses::faithful::faithful;
use crate::wire::responses::read::Kept;
use crate::wire::responses::serve::Responses;
use crate::wire::served::{Format, Read, Reuses};

/// One generated session's items: a question, then rounds of reasoning, text, calls and
/// their outputs, the texts varying with `seed`.
fn session(seed: u64, rounds: usize) -> Vec<Value> {
    let mut out = vec![json!({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": format!("<environment_context>cwd {seed}</environment_context>")},
        {"type": "input_text", "text": format!("Warum schlägt der Build fehl? 为什么 {seed}")}]})];
    for r in 0..rounds {
        let id = format!("call_{seed}_{r}");
        out.push(json!({"type": "reasoning", "summary": [],
            "encrypted_content": format!("gAAAA{seed}{r}{}", "Zm9v".repeat(r * 20))}));
        if r % 3 == 0 {
            out.push(json!({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": format!("Ich sehe nach ({r}).")}]}));
        }
        if r % 4 == 2 {
            // Claude's thinking, as a Responses caller of a Claude model resends it.
            let block = json!({"type": "thinking", "thinking": format!("Runde {r}: erst lesen. {}", "ok ".repeat(r * 10)),
                               "signature": format!("sig{seed}{r}==")});
            out.push(json!({"type": "reasoning", "summary": [],
                            "encrypted_content": block.to_string()}));
        }
        let mut call = json!({"type": "function_call", "call_id": id,
            "name": if r % 2 == 0 { "shell" } else { "apply_patch" },
            "arguments": format!("{{\"command\":[\"cat\",\"src/{r}.rs\"],\"n\":{r}}}")});
        if r % 7 == 3 {
            // A namespaced tool's call (Codex's sub-agent tools).
            call["namespace"] = json!("agents");
        }
        out.push(call);
        let output = if r % 4 == 1 {
            json!([{"type": "input_text", "text": format!("Zeile {r}\n{}", "x".repeat(r * 7))},
                   {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}])
        } else {
            // Short and long outputs: an item under 256 bytes is read again each time,
            // a longer one kept.
            json!(format!(
                "fn main() {{}} // {r} {}",
                "日本 ".repeat((r % 4) * 40)
            ))
        };
        let result = json!({"type": "function_call_output", "call_id": id, "output": output});
        out.push(result.clone());
        if r % 6 == 5 {
            // A repeated output (a client's retry).
            out.push(result);
        }
        if r % 5 == 4 {
            // A long message with a breakpoint of the caller's: kept, and read back
            // marked.
            out.push(json!({"role": "user", "content": [{"type": "input_text",
                "text": format!("Und jetzt {r}? {}", "bitte ".repeat(60)),
                "prompt_cache_breakpoint": {"mode": "explicit"}}]}));
        }
    }
    out
}

/// A Codex-shaped body of `items`, with a breakpoint of the caller's on its last item
/// when `marker`.
fn body_of(items: &[Value], marker: bool) -> Bytes {
    let mut items = items.to_vec();
    if marker
        && let Some(last) = items.last_mut()
        && let Some(parts) = last["content"].as_array_mut()
        && let Some(part) = parts.last_mut()
    {
        part["prompt_cache_breakpoint"] = json!({"mode": "explicit"});
    }
    let body = json!({
        "model": "gpt-5.4",
        "instructions": "You are Codex.",
        "input": items,
        "tools": [{"type": "function", "name": "shell", "description": "Runs.",
                   "strict": false, "parameters": {"type": "object"}},
                  {"type": "function", "name": "apply_patch", "description": "Edits.",
                   "strict": false, "parameters": {"type": "object"}},
                  {"type": "web_search"}],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "s1"
    });
    Bytes::from(serde_json::to_vec(&body).unwrap())
}

/// The upstream bytes `read`'s request is written as: as it came, with an output
/// cleared, with the stack's breakpoints (a model that takes them), and with its oldest
/// round pruned.
fn written(read: &Read) -> Vec<Vec<u8>> {
    let kept = read
        .request
        .params
        .origin
        .as_ref()
        .and_then(|o| o.get::<Kept>())
        .expect("the body is kept");
    let write = |req: &ChatRequest| faithful(req, kept, true, None).unwrap();
    let req = &read.request;
    let mut out = vec![write(req)];
    let mut cleared = req.clone();
    if let Some(m) = cleared
        .messages
        .iter_mut()
        .rev()
        .find(|m| m.is_tool_result())
    {
        m.content = Content::from("[cleared]");
    }
    out.push(write(&cleared));
    let mut marked = req.clone();
    marked.cache = CacheHints::all(CacheTtl::FiveMinutes);
    marked.cache.on_content_parts = true;
    out.push(write(&marked));
    let mut pruned = req.clone();
    if pruned.messages.len() > 5 {
        pruned.messages.drain(2..4);
    }
    out.push(write(&pruned));
    out
}

/// The read by what is new of `bytes` (through `reuse`) agrees with the full read.
fn agrees(bytes: &Bytes, reuse: &Reuses, tenant: &str) {
    let full = Responses::read(bytes);
    let fast = Responses::read_reusing(bytes, reuse, tenant);
    match (full, fast) {
        (Ok(full), Ok(fast)) => {
            assert_eq!(fast.request, full.request);
            assert_eq!(fast.stream, full.stream);
            assert_eq!(written(&fast), written(&full));
        }
        (Err(full), Err(fast)) => assert_eq!(fast.to_string(), full.to_string()),
        (full, fast) => panic!("full {:?}, fast {:?}", full.is_ok(), fast.is_ok()),
    }
}

/// How many items `reuse` keeps.
fn kept_items(reuse: &Reuse<super::Piece>, tenant: &str, keys: &[u128]) -> usize {
    reuse
        .get(tenant, keys)
        .iter()
        .filter(|e| e.is_some())
        .count()
}

#[test]
fn a_growing_session_reads_the_same_and_reuses_what_it_read() {
    let reuse = Reuses::new(1 << 20);
    let all = session(1, 30);
    for n in (1..all.len()).step_by(3) {
        let body = body_of(&all[..n], true);
        agrees(&body, &reuse, "-");
        // Read this way, not left to the full read.
        assert!(super::read(&body, &reuse.responses, "-").is_some());
    }
    // Every item long enough to keep was kept, and only for its tenant.
    let long: Vec<u128> = all
        .iter()
        .map(|i| serde_json::to_string(i).unwrap())
        .filter(|t| t.len() >= super::SMALLEST_KEPT)
        .map(|t| super::key_in("llm-context.responses.reuse", "-", &t))
        .collect();
    assert!(long.len() > 10);
    assert!(kept_items(&reuse.responses, "-", &long) >= long.len() - 3);
    // Each tenant has its own: another tenant finds none of them.
    assert_eq!(kept_items(&reuse.responses, "acme", &long), 0);
    // Salted by the tenant: the same bytes under another tenant are not found.
    let other: Vec<u128> = all
        .iter()
        .map(|i| super::key_in("llm-context.responses.reuse", "acme", &i.to_string()))
        .collect();
    assert_eq!(kept_items(&reuse.responses, "-", &other), 0);
}

#[test]
fn edits_in_the_middle_other_sessions_and_tenants_read_the_same() {
    let reuse = Reuses::new(1 << 20);
    let a = session(2, 16);
    agrees(&body_of(&a, true), &reuse, "-");
    // An item edited in the middle, and a call taken out (its output then names no tool).
    let mut edited = a.clone();
    edited[5]["encrypted_content"] = json!("anders");
    agrees(&body_of(&edited, true), &reuse, "-");
    let call = a.iter().position(|i| i["type"] == "function_call").unwrap();
    let mut cut = a.clone();
    cut.remove(call);
    agrees(&body_of(&cut, false), &reuse, "-");
    // A session sharing the head, and the same bytes for another tenant.
    let mut b = a[..9].to_vec();
    b.extend(session(3, 4).into_iter().skip(1));
    agrees(&body_of(&b, true), &reuse, "-");
    agrees(&body_of(&a, true), &reuse, "acme");
}

#[test]
fn items_and_members_nested_near_the_limit_are_left_to_the_full_read() {
    let reuse = Reuses::new(1 << 20);
    for levels in [95, 120, 124, 125, 126, 127] {
        let item = json!({"type": "function_call_output", "call_id": "c", "output": [
            {"type": "input_text", "text": "x", "deep": nested(levels)}]});
        let body = json!({"model": "m", "input": [
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, item]});
        agrees(&Bytes::from(body.to_string()), &reuse, "-");
        let member = json!({"model": "m", "input": [{"role": "user", "content": "x"}],
                            "metadata": nested(levels)});
        agrees(&Bytes::from(member.to_string()), &reuse, "-");
    }
}

#[test]
fn bodies_the_fast_read_leaves_to_the_full_one_say_the_same() {
    let reuse = Reuses::new(1 << 20);
    for body in [
        r#"{"model":"m","input":"hello"}"#,
        r#"{"model":"m","input":{"role":"user"}}"#,
        r#"{"model":"m","input":[{"role":"robot","content":"x"}]}"#,
        r#"{"model":"m","input":[{"type":"message","role":"user","content":5}]}"#,
        r#"{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f"}]}"#,
        r#"{"model":5,"input":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","input":[],"input":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","input":[{"role":"user","content":"x"}],"stream":"yes"}"#,
        r#"{"model":"m","input":[{"role":"user","content":"x"}],"tools":[{"name":"t"}]}"#,
        r#"{"model":"m","instructions":[1],"input":[{"role":"user","content":"x"}]}"#,
        r#"[1,2]"#,
        r#"{"model":"m","input":[{"role":"user","content":"x"}]"#,
    ] {
        agrees(&Bytes::from(body), &reuse, "-");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random sessions, cut at random points, some items rewritten, read through one
    /// small cache in any order: always the full read's result.
    #[test]
    fn random_sessions_read_the_same(
        seeds in proptest::collection::vec(0u64..6, 1..5),
        cuts in proptest::collection::vec((1usize..40, any::<bool>()), 1..8),
        edit in proptest::option::of(0usize..40),
    ) {
        let reuse = Reuses::new(16 << 10);
        for (i, &seed) in seeds.iter().enumerate() {
            let mut all = session(seed, 12);
            if let Some(at) = edit.filter(|&e| e < all.len() && i % 2 == 1) {
                all[at]["call_id"] = json!("geändert");
            }
            for &(cut, marker) in &cuts {
                agrees(&body_of(&all[..cut.min(all.len())], marker), &reuse, "-");
            }
        }
    }
}
