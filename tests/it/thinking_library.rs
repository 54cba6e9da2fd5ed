//! The thinking loop of `thinking_loop.rs` through the library instead of `serve`: a Rust
//! agent's stack (the context policy over the Anthropic client) against the enforcing
//! upstream (`support::enforcing`), thinking on, a `run` tool with 2–20 KB results, the
//! whole transcript sent again each call, every other call streamed, 300 calls under a
//! 30,000-token window, under each executor: no request is refused for a broken thinking
//! binding, and every one the model is shown (after the provider's edits) is within the
//! window.

use crate::support::enforcing::start;
use crate::support::proxy::anthropic;
use crate::support::rounds::{agent, answered, round};
use llm_context::{ChatRequest, ContextPolicy, ContextPolicyLayer, Executor};
use serde_json::json;
use tower::Layer;

async fn loop_under(executor: Executor) {
    let upstream = start().await;
    let window = 30_000;
    let policy = ContextPolicy::default()
        .with_max_context_tokens(window)
        .with_executor(executor);
    let mut stack = ContextPolicyLayer::new(policy)
        .unwrap()
        .layer(anthropic(&upstream.url));
    let (tool, mut transcript) = agent();
    for call in 0..300 {
        let mut req = ChatRequest::new("claude-fable-5-1", transcript.clone());
        req.tools = vec![tool.clone()];
        req.params.max_output_tokens = Some(4096);
        req.params.extra.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": 2048}),
        );
        let what = format!("{executor}, call {call}");
        let response = round(&mut stack, req, call % 2 == 1, &what).await;
        answered(&mut transcript, response.message, call);
    }
    let seen = upstream.seen.lock().unwrap();
    assert!(seen.refusals.is_empty(), "{executor}: {:?}", seen.refusals);
    assert_eq!(seen.shown.len(), 300, "{executor}");
    let largest = seen.shown.iter().map(|s| s.tokens).max().unwrap();
    assert!(largest <= window, "{executor}: shown {largest} tokens");
}

#[tokio::test]
async fn a_300_call_thinking_loop_through_the_library_is_never_refused_under_local() {
    loop_under(Executor::Local).await;
}

#[tokio::test]
async fn a_300_call_thinking_loop_through_the_library_is_never_refused_under_delegate() {
    loop_under(Executor::Delegate).await;
}

#[tokio::test]
async fn a_300_call_thinking_loop_through_the_library_is_never_refused_under_auto() {
    loop_under(Executor::Auto).await;
}
