//! A Claude Code-like agent on a binding-thinking model through `serve`, against the
//! enforcing upstream (`support::enforcing`): thinking on, a `run` tool with 2–20 KB
//! results, the whole transcript sent again on every call, every other call streamed, 300
//! calls under a 30,000-token window. Every 400 the upstream answers is a call the agent
//! lost because the proxy edited history before a signed thinking block.
//!
//! Issue 44's target: no such 400. It fails until the stack's local preparation is
//! thinking-safe (issue 44, step 2), so it is not run by default:
//! `cargo test --all-features --test it thinking_loop -- --ignored`.

use crate::support::enforcing::start;
use crate::support::proxy::{anthropic, serving};
use llm_context::ContextPolicy;
use llm_context::serve::Proxy;
use serde_json::{Value, json};

/// A tool result of about `n` bytes: log lines with JSON and non-ASCII text.
fn output(call: usize, n: usize) -> String {
    let line = format!(
        "{{\"call\":{call},\"level\":\"error\",\"msg\":\"connexion refusée — 接続拒否\"}}\n"
    );
    line.repeat(n / line.len() + 1)
}

/// The assistant content of a streamed answer, put back together from its events.
fn content_of_stream(text: &str) -> Vec<Value> {
    let mut blocks: Vec<Value> = Vec::new();
    let mut inputs: Vec<String> = Vec::new();
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(event) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        match event["type"].as_str() {
            Some("content_block_start") => {
                blocks.push(event["content_block"].clone());
                inputs.push(String::new());
            }
            Some("content_block_delta") => {
                let i = event["index"].as_u64().unwrap() as usize;
                let delta = &event["delta"];
                let block = &mut blocks[i];
                match delta["type"].as_str() {
                    Some("thinking_delta") => {
                        let t = format!(
                            "{}{}",
                            block["thinking"].as_str().unwrap_or(""),
                            delta["thinking"].as_str().unwrap()
                        );
                        block["thinking"] = json!(t);
                    }
                    Some("signature_delta") => block["signature"] = delta["signature"].clone(),
                    Some("text_delta") => {
                        let t = format!(
                            "{}{}",
                            block["text"].as_str().unwrap_or(""),
                            delta["text"].as_str().unwrap()
                        );
                        block["text"] = json!(t);
                    }
                    Some("input_json_delta") => {
                        inputs[i].push_str(delta["partial_json"].as_str().unwrap())
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    for (block, input) in blocks.iter_mut().zip(inputs) {
        if block["type"] == "tool_use" && !input.is_empty() {
            block["input"] = serde_json::from_str(&input).unwrap();
        }
    }
    blocks
}

#[tokio::test]
#[ignore = "fails until local preparation is thinking-safe (issue 44, step 2)"]
async fn a_300_call_thinking_loop_through_serve_never_breaks_a_signed_thinking_block() {
    let upstream = start().await;
    let proxy = Proxy::builder()
        .policy(ContextPolicy::default().with_max_context_tokens(30_000))
        .anthropic(anthropic(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let client = reqwest::Client::new();
    let mut messages =
        vec![json!({"role": "user", "content": "Finde heraus, warum der Build fehlschlägt."})];
    let mut failed = Vec::new();
    for call in 0..300 {
        let stream = call % 2 == 1;
        let body = json!({"model": "claude-fable-5-1", "max_tokens": 4096, "stream": stream,
                          "thinking": {"type": "enabled", "budget_tokens": 2048},
                          "system": [{"type": "text", "text": "You are Claude Code, a coding agent."}],
                          "tools": [{"name": "run", "description": "Runs a shell command.",
                                     "input_schema": {"type": "object",
                                                      "properties": {"command": {"type": "string"}}}}],
                          "messages": messages});
        let r = client
            .post(format!("{url}/v1/messages"))
            .header("content-type", "application/json")
            .header("x-claude-code-session-id", "thinking-loop")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        if status != 200 {
            failed.push((call, status, text));
            // The agent goes on from where it was: a new request on the same history.
            messages.push(json!({"role": "user", "content": "Weiter."}));
            continue;
        }
        let content = if stream {
            content_of_stream(&text)
        } else {
            serde_json::from_str::<Value>(&text).unwrap()["content"]
                .clone()
                .as_array()
                .unwrap()
                .clone()
        };
        let id = content
            .iter()
            .find(|b| b["type"] == "tool_use")
            .map(|b| b["id"].clone());
        messages.push(json!({"role": "assistant", "content": content}));
        if let Some(id) = id {
            let size = 2_000 + (call * 7_919) % 18_000;
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": output(call, size)}]}));
        }
    }
    let first = failed
        .first()
        .map(|(call, status, text)| format!("call {call}: {status} {text}"));
    assert!(
        failed.is_empty(),
        "{} of 300 calls failed; the first: {}",
        failed.len(),
        first.unwrap_or_default()
    );
}
