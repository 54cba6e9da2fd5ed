//! Clearing in steps through `ContextPolicyLayer`: with `clear_at_least_tokens`, the
//! cleared region grows by large steps and stays put in between, so each request extends
//! the previous one; `clear_tool_inputs` stubs the arguments of the calls it clears.

use llm_context_layers::mock::MockModel;
use llm_context_layers::{
    ChatRequest, ContextPolicy, ContextPolicyLayer, Message, PreparationReport, ToolCall,
};
use serde_json::json;
use tower::{Layer, ServiceExt};

/// Allowance 5,500 tokens, clearing before pruning: a turn is about 640 tokens, almost
/// all of it one tool result, so from the ninth turn on old results must be cleared.
fn policy() -> ContextPolicy {
    ContextPolicy::default()
        .with_max_context_tokens(6_000)
        .with_reserve_tokens(500)
        .with_clear_before_prune(true)
}

/// A turn: a question, a call with a long argument, its result (2,400 characters of log,
/// below the offload threshold), an answer.
fn turn(n: usize) -> Vec<Message> {
    let id = format!("call_{n}");
    let patch = format!(
        "--- a/src/lib.rs\n+++ b/src/lib.rs\n{}",
        "+ line\n".repeat(10)
    );
    vec![
        Message::user(format!("step {n}: run the check")),
        Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(&id, "apply", json!({"patch": patch}))],
        ),
        Message::tool_result(&id, "apply", format!("{n}: ok\n").repeat(400)),
        Message::assistant(format!("step {n} done")),
    ]
}

/// Sends 20 turns, each request the whole transcript so far plus the next question;
/// returns what was sent and the report of each.
async fn converse(policy: ContextPolicy) -> Vec<(ChatRequest, PreparationReport)> {
    crate::support::converse(policy, "mock", 20, turn).await
}

fn moves(turns: &[(ChatRequest, PreparationReport)]) -> usize {
    turns.iter().filter(|(_, r)| r.clear_moved).count()
}

#[tokio::test]
async fn clearing_the_minimum_moves_the_cleared_region_every_turn() {
    let turns = converse(policy()).await;
    let first = turns
        .iter()
        .position(|(_, r)| r.cleared_results > 0)
        .expect("clearing starts");
    // From the first request that clears, each one clears one result more.
    for (i, (_, report)) in turns.iter().enumerate() {
        assert_eq!(report.clear_moved, i >= first, "turn {i}: {report:?}");
        assert_eq!(report.removed_messages, 0, "clearing is enough here");
    }
}

#[tokio::test]
async fn clearing_in_steps_keeps_the_region_and_each_request_extends_the_last() {
    let minimal = moves(&converse(policy()).await);
    let turns = converse(policy().with_clear_at_least_tokens(3_000)).await;
    let stepped = moves(&turns);
    assert!(
        stepped * 3 <= minimal,
        "stepped {stepped}, minimal {minimal}"
    );
    let mut kept = 0;
    for pair in turns.windows(2) {
        let ((before, _), (after, report)) = (&pair[0], &pair[1]);
        assert!(report.after_tokens <= report.prompt_allowance);
        if report.cleared_results > 0 && !report.clear_moved {
            kept += 1;
            // Same region cleared: what was sent before is sent again, byte for byte,
            // so the provider reads it from its cache.
            assert!(after.messages.starts_with(&before.messages), "{report:?}");
        }
    }
    assert!(kept >= 7, "kept {kept}");
}

#[tokio::test]
async fn a_step_clears_at_least_the_given_tokens() {
    let turns = converse(policy().with_clear_at_least_tokens(3_000)).await;
    let (_, first) = turns.iter().find(|(_, r)| r.cleared_results > 0).unwrap();
    // One result is about 600 tokens; a stub about 60: 3,000 tokens is 6 results.
    assert!(first.cleared_results >= 6, "{first:?}");
    assert!(
        first.before_tokens - first.after_tokens >= 3_000,
        "{first:?}"
    );
}

#[tokio::test]
async fn clear_tool_inputs_stubs_the_arguments_of_cleared_calls_only() {
    let turns = converse(policy().with_clear_tool_inputs(true)).await;
    let plain = converse(policy()).await;
    let (sent, report) = turns.last().unwrap();
    let (_, plain_report) = plain.last().unwrap();
    assert!(report.cleared_results > 0);
    let cleared: Vec<&str> = sent
        .messages
        .iter()
        .filter(|m| m.is_tool_result() && m.text().contains("cleared"))
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    assert_eq!(cleared.len(), report.cleared_results);
    for m in sent.messages.iter().filter(|m| m.has_tool_calls()) {
        let call = &m.tool_calls[0];
        if cleared.contains(&call.id.as_str()) {
            assert_eq!(call.arguments_value(), json!({"cleared": true}));
        } else {
            assert!(call.arguments_value()["patch"].is_string(), "{call:?}");
        }
    }
    // The freed tokens are in the report: the arguments were about 25 tokens each.
    assert!(
        report.after_tokens + 15 * cleared.len() <= plain_report.after_tokens,
        "{} vs {}",
        report.after_tokens,
        plain_report.after_tokens
    );
    // Preparing what was sent changes nothing.
    let again = ContextPolicyLayer::new(policy().with_clear_tool_inputs(true))
        .unwrap()
        .layer(MockModel::echo());
    let model = again.get_ref().clone();
    again.oneshot(sent.clone()).await.unwrap();
    assert_eq!(model.last_request().unwrap().messages, sent.messages);
}
