//! Who edits the context, through `ContextPolicyLayer`: a delegated request goes out with
//! its results unchanged and the provider's clearing edit, pruned only where that
//! clearing would not make it fit; `off` sends a request as it came.

use llm_context_layers::{
    ChatRequest, ContextPolicy, Executor, Message, PreparationReport, ToolCall,
};
use serde_json::json;

/// Allowance 5,500 tokens: a turn is about 640 tokens, almost all of it one tool result.
fn policy(executor: Executor) -> ContextPolicy {
    ContextPolicy::default()
        .with_max_context_tokens(6_000)
        .with_reserve_tokens(500)
        .with_executor(executor)
}

/// A turn: a question, a call, its result (2,400 characters of log), an answer.
fn turn(n: usize, question: &str) -> Vec<Message> {
    let id = format!("call_{n}");
    vec![
        Message::user(format!("step {n}: {question}")),
        Message::assistant_tool_calls("", vec![ToolCall::new(&id, "check", json!({}))]),
        Message::tool_result(&id, "check", format!("{n}: ok\n").repeat(400)),
        Message::assistant(format!("step {n} done")),
    ]
}

fn is_stub(m: &Message) -> bool {
    m.content
        .as_str()
        .is_some_and(|t| t.starts_with("{\"context_cleared\":true"))
}

/// Sends `turns` turns on `model_id` (see `support::converse`), each asking `question`.
async fn converse(
    policy: ContextPolicy,
    model_id: &str,
    turns: usize,
    question: &str,
) -> Vec<(ChatRequest, PreparationReport)> {
    crate::support::converse(policy, model_id, turns, |n| turn(n, question)).await
}

#[tokio::test]
async fn a_delegated_request_keeps_its_results_and_carries_the_providers_clearing() {
    let sent = converse(policy(Executor::Delegate), "claude-sonnet-4-6", 20, "check").await;
    for (req, report) in &sent {
        assert_eq!(report.executor, Some(Executor::Delegate));
        assert_eq!(report.cleared_results, 0);
        assert!(!req.messages.iter().any(is_stub));
        assert_eq!(
            req.params.extra["context_management"]["edits"][0],
            json!({"type": "clear_tool_uses_20250919",
                   "trigger": {"type": "input_tokens", "value": 5_500},
                   "keep": {"type": "tool_uses", "value": 2}})
        );
        let betas: Vec<_> = req
            .params
            .headers
            .iter()
            .filter(|(n, _)| n == "anthropic-beta")
            .collect();
        assert_eq!(betas.len(), 1);
        assert_eq!(betas[0].1, "context-management-2025-06-27");
        // What the model is shown once the provider cleared fits.
        assert!(report.after_tokens <= 5_500, "{}", report.after_tokens);
    }
    // 20 turns of 640 tokens: nothing fits without clearing, and clearing is enough,
    // so no turn was pruned.
    let (last, report) = sent.last().unwrap();
    assert_eq!(report.removed_messages, 0, "{report:?}");
    assert_eq!(last.messages.len(), 19 * 4 + 3);
    assert!(report.before_tokens > 10_000);
    // The same conversation, local, clearing first as the provider does: the stack
    // clears it itself.
    let local_policy = policy(Executor::Local).with_clear_before_prune(true);
    let local = converse(local_policy, "claude-sonnet-4-6", 20, "check").await;
    let (req, report) = local.last().unwrap();
    assert_eq!(report.executor, Some(Executor::Local));
    assert!(report.cleared_results > 0);
    assert!(req.messages.iter().any(is_stub));
    assert!(!req.params.extra.contains_key("context_management"));
}

#[tokio::test]
async fn a_delegated_request_is_pruned_where_the_providers_clearing_would_not_fit() {
    // Long questions: clearing every old result still leaves too much.
    let question = "why? ".repeat(300);
    let sent = converse(
        policy(Executor::Delegate),
        "claude-sonnet-4-6",
        20,
        &question,
    )
    .await;
    let (req, report) = sent.last().unwrap();
    assert_eq!(report.executor, Some(Executor::Delegate));
    assert!(report.pruned_turns > 0);
    assert_eq!(report.cleared_results, 0);
    assert!(!req.messages.iter().any(is_stub));
    assert!(report.after_tokens <= 5_500);
}

#[tokio::test]
async fn a_model_whose_provider_does_not_edit_context_stays_local() {
    let clearing_first = policy(Executor::Delegate).with_clear_before_prune(true);
    let sent = converse(clearing_first, "gpt-5.5", 20, "check").await;
    let (req, report) = sent.last().unwrap();
    assert_eq!(report.executor, Some(Executor::Local));
    assert!(report.cleared_results > 0);
    assert!(!req.params.extra.contains_key("context_management"));
}

#[tokio::test]
async fn off_sends_the_request_as_it_came_even_over_the_allowance() {
    let sent = converse(policy(Executor::Off), "claude-sonnet-4-6", 20, "check").await;
    let (req, report) = sent.last().unwrap();
    assert_eq!(report.executor, Some(Executor::Off));
    assert!(!report.changed());
    assert_eq!(req.messages.len(), 19 * 4 + 3);
    assert!(!req.messages.iter().any(is_stub));
    assert!(req.tools.is_empty());
    assert!(!req.params.extra.contains_key("context_management"));
}
