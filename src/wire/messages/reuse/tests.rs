//! The fast read gives what the full read gives, byte for byte once written back: on
//! generated growing sessions with their cache marker moved every turn, history edited
//! in the middle, sessions sharing a head, two tenants, and bodies the fast read leaves
//! to the full one.

use std::sync::Arc;

use axum::body::Bytes;
use llm_context_layers::{CacheHints, CacheTtl, ChatRequest, Content};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::wire::messages::faithful::{Kept, body};
use crate::wire::messages::serve::Messages;
use crate::wire::served::{Format, Read, Reuses};

/// One generated session's messages: rounds of a question, an assistant turn (thinking,
/// text, calls) and the results, the texts varying with `seed`.
fn session(seed: u64, rounds: usize) -> Vec<Value> {
    let mut out = vec![json!({"role": "user", "content": [
        {"type": "text", "text": format!("<system-reminder>Regeln {seed}</system-reminder>")},
        {"type": "text", "text": format!("Warum schlägt der Build fehl? 为什么 {seed}")}]})];
    for r in 0..rounds {
        let id = format!("toolu_{seed}_{r}");
        let mut blocks = vec![
            json!({"type": "thinking", "thinking": format!("Runde {r}: erst lesen."),
                   "signature": format!("sig{seed}{r}==")}),
            json!({"type": "tool_use", "id": id, "name": if r % 2 == 0 { "Read" } else { "Bash" },
                   "input": {"file_path": format!("/src/{r}.rs"), "n": r}}),
        ];
        if r % 3 == 0 {
            blocks.insert(
                1,
                json!({"type": "text", "text": format!("Ich sehe nach ({r}).")}),
            );
        }
        out.push(json!({"role": "assistant", "content": blocks}));
        let result = if r % 4 == 1 {
            json!([{"type": "text", "text": format!("Zeile {r}\n{}", "x".repeat(r * 7))},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                "data": "iVBORw0KGgo="}}])
        } else {
            // Short and long results: a wire message under 256 bytes is read again each
            // time, a longer one kept.
            json!(format!(
                "     1→fn main() {{}} // {r} {}",
                "日本 ".repeat((r % 4) * 40)
            ))
        };
        let mut user = vec![json!({"type": "tool_result", "tool_use_id": id, "content": result})];
        if r % 5 == 4 {
            user.push(json!({"type": "text", "text": format!("Und jetzt {r}?")}));
        }
        out.push(json!({"role": "user", "content": user}));
    }
    out
}

/// A Claude Code-shaped body of `messages`, with a cache marker on its last block when
/// `marker` (and none elsewhere, so that the marker alone decides whether the stack adds
/// its own).
fn body_of(messages: &[Value], marker: bool) -> Bytes {
    let mut messages = messages.to_vec();
    if marker
        && let Some(last) = messages
            .last_mut()
            .and_then(|m| m["content"].as_array_mut())
            .and_then(|b| b.last_mut())
    {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
    let body = json!({
        "model": "claude-sonnet-4-5",
        "messages": messages,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "tools": [{"name": "Read", "description": "Reads.", "input_schema": {"type": "object"}},
                  {"name": "Bash", "description": "Runs.", "input_schema": {"type": "object"}}],
        "metadata": {"user_id": "u1"},
        "max_tokens": 32000,
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "stream": true
    });
    Bytes::from(serde_json::to_vec(&body).unwrap())
}

/// The upstream bytes `read`'s request is written as: as it came, with a result
/// cleared, with the stack's breakpoints, and with its oldest round pruned.
fn written(read: &Read) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let write = |req: &ChatRequest| match body(req).unwrap() {
        Some(b) => b.to_vec().unwrap(),
        None => b"(not faithful)".to_vec(),
    };
    let req = &read.request;
    out.push(write(req));
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
    out.push(write(&marked));
    let mut pruned = req.clone();
    if pruned.messages.len() > 4 {
        pruned.messages.drain(1..3);
    }
    out.push(write(&pruned));
    out
}

/// The fast read of `bytes` (through `reuse`) agrees with the full read.
fn agrees(bytes: &Bytes, reuse: &Reuses, tenant: &str) {
    let full = Messages::read(bytes);
    let fast = Messages::read_reusing(bytes, reuse, tenant);
    match (full, fast) {
        (Ok(full), Ok(fast)) => {
            assert_eq!(fast.request, full.request);
            assert_eq!(fast.stream, full.stream);
            let kept = |r: &Read| {
                r.request
                    .params
                    .origin
                    .as_ref()
                    .and_then(|o| o.get::<Kept>())
                    .is_some()
            };
            assert_eq!(kept(&fast), kept(&full));
            assert_eq!(written(&fast), written(&full));
        }
        (Err(full), Err(fast)) => assert_eq!(fast.to_string(), full.to_string()),
        (full, fast) => panic!("full {:?}, fast {:?}", full.is_ok(), fast.is_ok()),
    }
}

#[test]
fn a_growing_session_reads_the_same_and_reuses_what_it_read() {
    let reuse = Reuses::new(1 << 20);
    let all = session(1, 40);
    for n in (1..all.len()).step_by(2) {
        agrees(&body_of(&all[..n], true), &reuse, "-");
    }
    // Every message long enough to keep was kept.
    let long = all
        .iter()
        .filter(|m| serde_json::to_string(m).unwrap().len() >= super::SMALLEST_KEPT)
        .count();
    let g = reuse.messages.generations.lock().unwrap();
    let shelf = &g.tenants["-"];
    assert!(long > 10);
    assert!(shelf.newer.len() + shelf.older.len() >= long - 1, "{long}");
}

#[test]
fn edits_in_the_middle_other_sessions_and_tenants_read_the_same() {
    let reuse = Reuses::new(1 << 20);
    let a = session(2, 20);
    agrees(&body_of(&a, true), &reuse, "-");
    // A message edited in the middle, and one taken out (its results then name no tool).
    let mut edited = a.clone();
    edited[7]["content"][0]["thinking"] = json!("anders");
    agrees(&body_of(&edited, true), &reuse, "-");
    let mut cut = a.clone();
    cut.remove(5);
    agrees(&body_of(&cut, false), &reuse, "-");
    // A session sharing the head, and the same bytes for another tenant.
    let mut b = a[..9].to_vec();
    b.extend(session(3, 4).into_iter().skip(1));
    agrees(&body_of(&b, true), &reuse, "-");
    agrees(&body_of(&a, true), &reuse, "acme");
}

/// `"x"` inside `levels` arrays.
pub(crate) fn nested(levels: usize) -> Value {
    let mut v = json!("x");
    for _ in 0..levels {
        v = json!([v]);
    }
    v
}

#[test]
fn messages_and_members_nested_near_the_limit_are_left_to_the_full_read() {
    let reuse = Reuses::new(1 << 20);
    for levels in [95, 120, 124, 125, 126, 127] {
        let message = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user",
            "content": [{"type": "text", "text": "x", "deep": nested(levels)}]}]});
        agrees(&Bytes::from(message.to_string()), &reuse, "-");
        let member = json!({"model": "m", "max_tokens": 5,
            "messages": [{"role": "user", "content": "x"}], "metadata": nested(levels)});
        agrees(&Bytes::from(member.to_string()), &reuse, "-");
    }
}

#[test]
fn bodies_the_fast_read_leaves_to_the_full_one_say_the_same() {
    let reuse = Reuses::new(1 << 20);
    for body in [
        r#"{"model":"m","messages":{"role":"user"},"max_tokens":5}"#,
        r#"{"model":"m","messages":[{"role":"robot","content":"x"}],"max_tokens":5}"#,
        r#"{"model":"m","messages":[{"role":"user","content":5}],"max_tokens":5}"#,
        r#"{"model":5,"messages":[{"role":"user","content":"x"}],"max_tokens":5}"#,
        r#"{"model":"m","messages":[],"messages":[{"role":"user","content":"x"}],"max_tokens":5}"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":"5"}"#,
        r#"[1,2]"#,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"name":"t","input_schema":{}}],"max_tokens":5}"#,
    ] {
        agrees(&Bytes::from(body), &reuse, "-");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random sessions, cut at random points, some rounds rewritten, read through one
    /// cache in any order: always the full read's result.
    #[test]
    fn random_sessions_read_the_same(
        seeds in proptest::collection::vec(0u64..6, 1..5),
        cuts in proptest::collection::vec((1usize..30, any::<bool>()), 1..8),
        edit in proptest::option::of(0usize..30),
    ) {
        let reuse = Reuses::new(16 << 10);
        for (i, &seed) in seeds.iter().enumerate() {
            let mut all = session(seed, 14);
            if let Some(at) = edit.filter(|&e| e < all.len() && i % 2 == 1) {
                all[at]["content"][0]["text"] = json!("geändert");
            }
            for &(cut, marker) in &cuts {
                agrees(&body_of(&all[..cut.min(all.len())], marker), &reuse, "-");
            }
        }
    }
}

/// An entry of a given weight, for the cache's own tests.
struct Weight(usize);

impl super::Weighed for Weight {
    fn weight(&self) -> usize {
        self.0
    }
}

fn found(reuse: &super::Reuse<Weight>, tenant: &str, keys: std::ops::Range<u128>) -> usize {
    let keys: Vec<u128> = keys.collect();
    reuse.get(tenant, &keys).iter().flatten().count()
}

#[test]
fn one_tenants_large_bodies_age_its_own_entries_before_anothers() {
    let reuse = super::Reuse::new(100);
    // A session of tenant a: 3 entries of 10.
    reuse.put("a", (0..3).map(|k| (k, Arc::new(Weight(10)))).collect());
    // Tenant b reads 20 entries of 10, twice what a generation holds.
    reuse.put("b", (100..120).map(|k| (k, Arc::new(Weight(10)))).collect());
    assert_eq!(found(&reuse, "a", 0..3), 3, "a's session kept");
    // b's own: its newest, its older generation, its oldest dropped.
    assert_eq!(found(&reuse, "b", 113..120), 7);
    assert!(found(&reuse, "b", 100..103) < 3);
    // Alone, a tenant ages its own as before: an entry unused over two generations goes.
    let alone = super::Reuse::new(100);
    alone.put("-", (0..25).map(|k| (k, Arc::new(Weight(10)))).collect());
    assert_eq!(found(&alone, "-", 0..5), 0);
    assert_eq!(found(&alone, "-", 20..25), 5);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever the tenants and weights, everything kept weighs at most two generations.
    #[test]
    fn what_is_kept_is_bounded_by_two_generations(
        puts in proptest::collection::vec((0u8..4, 1usize..40, 1usize..6), 1..60),
    ) {
        let reuse = super::Reuse::new(100);
        let mut next = 0u128;
        for (tenant, weight, n) in puts {
            let entries = (0..n).map(|_| { next += 1; (next, Arc::new(Weight(weight))) }).collect();
            reuse.put(&tenant.to_string(), entries);
            prop_assert!(reuse.kept_bytes() <= 200, "{}", reuse.kept_bytes());
        }
    }
}
