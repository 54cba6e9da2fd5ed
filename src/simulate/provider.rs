//! The provider's side of a delegated request: its `clear_tool_uses` edits applied to
//! what the stack sent, so that the cache model bills what the model is shown. The
//! cleared region moving is what a delegated run pays for: every cache entry after the
//! newest result the provider cleared is written again.

use llm_context_layers::executor::edits::CLEAR_TOOL_USES;
use llm_context_layers::tokens::{
    estimate_message_tokens, estimate_text_tokens, estimate_tool_tokens,
};
use llm_context_layers::{ChatRequest, Content};
use serde_json::Value;

/// What the simulated provider leaves in place of a result it cleared.
pub(crate) const PLACEHOLDER: &str = "[tool result cleared by context management]";

/// Applies the request's `clear_tool_uses_20250919` edits as the provider does: when the
/// prompt is over the trigger (input tokens, 100,000 by default), every tool result but
/// the newest `keep` (3 by default) and those of `exclude_tools` is cleared, unless that
/// frees fewer tokens than `clear_at_least`. Returns how many results were cleared.
pub(crate) fn apply(req: &mut ChatRequest) -> usize {
    let edits: Vec<Value> = req
        .params
        .extra
        .get("context_management")
        .and_then(|cm| cm.get("edits"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e.get("type").and_then(Value::as_str) == Some(CLEAR_TOOL_USES))
        .cloned()
        .collect();
    edits.iter().map(|edit| clear(req, edit)).sum()
}

fn clear(req: &mut ChatRequest, edit: &Value) -> usize {
    let number = |field: &str, default: usize| -> usize {
        edit.get(field)
            .and_then(|v| v.get("value"))
            .and_then(Value::as_u64)
            .map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX))
    };
    let tokens = estimate_message_tokens(&req.messages) + estimate_tool_tokens(&req.tools);
    if tokens <= number("trigger", 100_000) {
        return 0;
    }
    let excluded: Vec<&str> = edit
        .get("exclude_tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let results: Vec<usize> = req
        .messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m.is_tool_result())
        .filter(|(_, m)| m.name().is_none_or(|n| !excluded.contains(&n)))
        .filter(|(_, m)| m.content.as_str() != Some(PLACEHOLDER))
        .map(|(i, _)| i)
        .collect();
    let clear = results.len().saturating_sub(number("keep", 3));
    if clear == 0 {
        return 0;
    }
    // What clearing frees, measured on the results alone before any is touched: clearing
    // that frees less than `clear_at_least` is not done.
    let placeholder = estimate_text_tokens(PLACEHOLDER);
    let freed: usize = results[..clear]
        .iter()
        .map(|&i| estimate_text_tokens(&req.messages[i].content.text()).saturating_sub(placeholder))
        .sum();
    if freed < number("clear_at_least", 0) {
        return 0;
    }
    for &i in &results[..clear] {
        req.messages[i].content = Content::from(PLACEHOLDER);
    }
    clear
}

#[cfg(test)]
mod tests {
    use super::*;
    use llm_context_layers::{ContextPolicy, Message, ToolCall};

    fn transcript(results: usize) -> Vec<Message> {
        let mut m = vec![Message::user("go")];
        for i in 0..results {
            let id = format!("c{i}");
            let name = if i == 0 { "plan" } else { "run" };
            m.push(Message::assistant_tool_calls(
                "",
                vec![ToolCall::new(&id, name, serde_json::json!({}))],
            ));
            m.push(Message::tool_result(&id, name, "x".repeat(4_000)));
        }
        m
    }

    #[test]
    fn over_the_trigger_all_but_the_newest_kept_are_cleared_and_excluded_tools_stay() {
        let policy = ContextPolicy::default().with_never_clear("plan");
        let mut req = ChatRequest::new("claude-sonnet-4-6", transcript(10));
        llm_context_layers::executor::edits::delegate(&mut req, &policy, 5_000);
        assert_eq!(apply(&mut req), 7);
        let shown: Vec<bool> = req
            .messages
            .iter()
            .filter(|m| m.is_tool_result())
            .map(|m| m.content.as_str() == Some(PLACEHOLDER))
            .collect();
        // The plan tool's result stays; of the rest, the newest 2 stay.
        assert_eq!(
            shown,
            [
                false, true, true, true, true, true, true, true, false, false
            ]
        );
        // Under the trigger, nothing.
        let mut small = ChatRequest::new("claude-sonnet-4-6", transcript(2));
        llm_context_layers::executor::edits::delegate(&mut small, &policy, 5_000);
        assert_eq!(apply(&mut small), 0);
    }

    #[test]
    fn clearing_that_frees_less_than_clear_at_least_is_not_done() {
        let policy = ContextPolicy::default().with_clear_at_least_tokens(50_000);
        let mut req = ChatRequest::new("claude-sonnet-4-6", transcript(10));
        llm_context_layers::executor::edits::delegate(&mut req, &policy, 5_000);
        assert_eq!(apply(&mut req), 0);
    }
}
