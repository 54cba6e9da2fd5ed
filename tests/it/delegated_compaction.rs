//! Summary compaction handed to the provider: a Rust agent's stack (the summarize layer
//! over the context policy over the Anthropic client) on a binding-thinking model,
//! against the enforcing upstream (`support::enforcing`), which compacts as the provider
//! does. The agent appends every answer to its transcript and sends the whole of it
//! again, every other call streamed; the stack never folds locally (that would rewrite
//! history before signed thinking), the provider compacts, and what is before its
//! newest block is left out of every later request.

use std::sync::Arc;

use crate::support::enforcing::start;
use crate::support::proxy::anthropic;
use crate::support::rounds::{agent, answered, round};
use llm_context::summarize::{SummarizeConfig, SummarizeLayer};
use llm_context::{
    Catalog, ChatRequest, Content, ContentPart, ContextPolicy, ContextPolicyLayer, Executor,
    Message,
};
use serde_json::{Value, json};
use tower::ServiceBuilder;

fn has_compaction(m: &Message) -> bool {
    match &m.content {
        Content::Parts(parts) => parts
            .iter()
            .any(|p| matches!(p, ContentPart::Opaque { kind, .. } if kind == "compaction")),
        Content::Text(_) => false,
    }
}

#[tokio::test]
async fn the_provider_compacts_and_what_its_block_stands_in_for_is_never_sent_again() {
    let upstream = start().await;
    let window = 30_000;
    let instructions = "Keep every file path and every error code.";
    let config = SummarizeConfig::new(window).with_compaction_instructions(instructions);
    let threshold = config.threshold();
    let catalog = Catalog::builtin();
    let mut stack = ServiceBuilder::new()
        .layer(
            SummarizeLayer::new(config)
                .unwrap()
                .with_catalog(Arc::clone(&catalog)),
        )
        .layer(
            ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(window))
                .unwrap()
                .with_catalog(catalog),
        )
        .service(anthropic(&upstream.url));
    let (tool, mut transcript) = agent();
    let (mut compacted_reported, mut left_out) = (0, 0);
    for call in 0..120 {
        let mut req = ChatRequest::new("claude-fable-5-1", transcript.clone());
        req.tools = vec![tool.clone()];
        req.params.extra.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": 2048}),
        );
        req.params.max_output_tokens = Some(4096);
        let response = round(&mut stack, req, call % 2 == 1, &format!("call {call}")).await;
        let report = &response.report;
        assert_eq!(report.executor, Some(Executor::Delegate), "call {call}");
        assert_eq!(report.folded_messages, 0, "call {call}: folded locally");
        left_out = left_out.max(report.compacted_messages);
        if let Some(edits) = report.provider_edits {
            compacted_reported += edits.compactions;
        }
        answered(&mut transcript, response.message, call);
    }
    let seen = upstream.seen.lock().unwrap();
    assert!(seen.refusals.is_empty(), "{:?}", seen.refusals);
    assert_eq!(seen.bodies.len(), 120, "one upstream call a call");
    // The provider compacted, more than once, and each time the stack said so.
    assert!(seen.compactions >= 3, "{} compactions", seen.compactions);
    assert_eq!(compacted_reported, seen.compactions);
    assert_eq!(
        transcript.iter().filter(|m| has_compaction(m)).count(),
        seen.compactions
    );
    // What the model was shown stays within the window while the transcript grows.
    let largest = seen.shown.iter().map(|s| s.tokens).max().unwrap();
    assert!(largest <= window, "shown {largest} tokens");
    let chars: usize = transcript.iter().map(|m| m.text().len()).sum();
    assert!(
        chars / 4 > 10 * window,
        "the transcript is only {chars} characters"
    );
    // Every request carried the compaction edit, with the configuration's instructions
    // and its trigger, after nothing of the client's; and none was a summary request.
    for body in &seen.bodies {
        assert_eq!(
            body["context_management"]["edits"],
            json!([{"type": "compact_20260112",
                    "trigger": {"type": "input_tokens", "value": threshold},
                    "instructions": instructions}])
        );
        let system = body["system"].to_string();
        assert!(!system.contains("context_summarizer"));
    }
    // Past the first compaction, no request carried what a block stands in for: each
    // starts with the block (the system prompt is top-level).
    let first = seen
        .bodies
        .iter()
        .position(|b| b["messages"][0]["content"][0]["type"] == "compaction")
        .expect("a request that starts with a block");
    for body in &seen.bodies[first..] {
        let blocks = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b: &Value| b["type"] == "compaction")
            .count();
        assert_eq!(blocks, 1, "one block, the newest, at the start");
        assert_eq!(body["messages"][0]["content"][0]["type"], "compaction");
    }
    assert!(left_out > 0);
}
