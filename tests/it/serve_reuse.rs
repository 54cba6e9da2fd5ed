//! A growing Claude Code-shaped session through `serve`, whose reader takes the
//! messages it read before from its cache: every body the upstream gets is the one a
//! proxy that never saw the session sends (its cache cold), byte for byte, with the
//! cache marker moved every turn and history edited in the middle.

use llm_context::ContextPolicy;
use llm_context::serve::Proxy;
use serde_json::{Value, json};

use crate::support::proxy::{anthropic, anthropic_upstream, serving};

/// Round `r` of a session: the assistant's thinking and call, then the result.
fn round(r: usize) -> [Value; 2] {
    let id = format!("toolu_{r:04}");
    [
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": format!("Runde {r}."), "signature": format!("s{r}")},
            {"type": "tool_use", "id": id, "name": "Read", "input": {"file_path": format!("/{r}.rs")}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
            "content": format!("{r:>6}→{}", "fn main() { println!(\"日本\"); }\n".repeat(20 + r))}]}),
    ]
}

fn body(messages: &[Value]) -> String {
    let mut messages = messages.to_vec();
    // Claude Code's marker, on the newest block.
    if let Some(b) = messages
        .last_mut()
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|b| b.last_mut())
    {
        b["cache_control"] = json!({"type": "ephemeral"});
    }
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages,
    "system": [{"type": "text", "text": "You are Claude Code."}],
    "tools": [{"name": "Read", "description": "Reads.",
               "input_schema": {"type": "object"}}],
    })
    .to_string()
}

async fn proxy(upstream: &str) -> String {
    let proxy = Proxy::builder()
        .policy(ContextPolicy::default())
        .anthropic(anthropic(upstream))
        .build()
        .unwrap();
    serving(proxy).await
}

async fn send(url: &str, body: String) {
    let answer = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.bytes().await.unwrap();
}

#[tokio::test]
async fn a_session_read_from_the_cache_is_sent_as_a_cold_proxy_sends_it() {
    let warm_up = anthropic_upstream().await;
    let cold_up = anthropic_upstream().await;
    let warm = proxy(&warm_up.uri()).await;
    let mut messages = vec![json!({"role": "user", "content": "Warum? 为什么"})];
    let mut bodies = Vec::new();
    for r in 0..24 {
        messages.extend(round(r));
        if r == 12 {
            // History edited in the middle (a client that rewrites a result).
            messages[5]["content"][0]["content"] = json!("gekürzt");
        }
        bodies.push(body(&messages));
    }
    for b in &bodies {
        send(&warm, b.clone()).await;
        // A proxy that never saw the session.
        send(&proxy(&cold_up.uri()).await, b.clone()).await;
    }
    let warm_sent = warm_up.received_requests().await.unwrap();
    let cold_sent = cold_up.received_requests().await.unwrap();
    assert_eq!(warm_sent.len(), bodies.len());
    for (i, (w, c)) in warm_sent.iter().zip(&cold_sent).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(&w.body),
            String::from_utf8_lossy(&c.body),
            "request {i}"
        );
    }
}
