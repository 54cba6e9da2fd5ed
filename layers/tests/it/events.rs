//! The `context_compacted` event: emitted when preparation changed something, and only then.

use llm_context_layers::mock::MockModel;
use llm_context_layers::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message};
use tower::{Layer, ServiceExt};
use tracing_test::traced_test;

async fn prepare(max_tokens: usize) {
    let mut messages = Vec::new();
    for t in 0..6 {
        messages.push(Message::user(format!(
            "question {t} {}",
            "words ".repeat(50)
        )));
        messages.push(Message::assistant(format!(
            "answer {t} {}",
            "words ".repeat(50)
        )));
    }
    let policy = ContextPolicy::default()
        .with_max_context_tokens(max_tokens)
        .with_reserve_tokens(100);
    let stack = ContextPolicyLayer::new(policy)
        .unwrap()
        .layer(MockModel::echo());
    stack
        .oneshot(ChatRequest::new("m", messages))
        .await
        .unwrap();
}

#[tokio::test]
#[traced_test]
async fn emitted_when_something_changed() {
    prepare(500).await;
    assert!(logs_contain("context_compacted"));
    assert!(logs_contain("removed_messages=8"));
    assert!(logs_contain("prompt_allowance=400"));
}

#[tokio::test]
#[traced_test]
async fn silent_when_nothing_changed() {
    prepare(100_000).await;
    assert!(!logs_contain("context_compacted"));
}
