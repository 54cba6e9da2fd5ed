//! Transcript builders shared by the layer tests.
#![allow(dead_code, unreachable_pub)]

use llm_context_layers::{Message, ToolCall};
use serde_json::json;

/// A user request, `rounds` tool rounds of one call each with results of `result_len`
/// characters, and a final answer.
pub fn tool_turn(tag: &str, rounds: usize, result_len: usize) -> Vec<Message> {
    let mut out = vec![Message::user(format!("{tag}: please investigate"))];
    for r in 0..rounds {
        let id = format!("{tag}-call-{r}");
        out.push(Message::assistant_tool_calls(
            "",
            vec![ToolCall::new(&id, "read_log", json!({"page": r}))],
        ));
        out.push(Message::tool_result(
            &id,
            "read_log",
            "x".repeat(result_len),
        ));
    }
    out.push(Message::assistant(format!("{tag}: done")));
    out
}

/// Every tool result follows the assistant message that called it (only results between),
/// and every call that had a result still has it.
pub fn assert_pairing(input: &[Message], output: &[Message]) {
    let answered_in_input: std::collections::BTreeSet<&str> = input
        .iter()
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    let mut open: Vec<&str> = Vec::new();
    for m in output {
        if m.is_tool_result() {
            let id = m.tool_call_id.as_deref().unwrap_or_default();
            assert!(open.contains(&id), "result {id} does not follow its call");
            open.retain(|x| *x != id);
        } else {
            assert!(open.is_empty(), "calls {open:?} lost their results");
            open = m
                .tool_calls
                .iter()
                .map(|c| c.id.as_str())
                .filter(|id| answered_in_input.contains(id))
                .collect();
        }
    }
    assert!(open.is_empty(), "calls {open:?} lost their results");
}
