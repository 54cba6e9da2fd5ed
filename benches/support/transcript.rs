//! The tool-heavy transcript the benchmarks share.

use llm_context::{Message, ToolCall};
use serde_json::json;

/// A deterministic transcript: a system prompt, then turns of a user request, four tool
/// rounds and an answer; about 730 characters a message on average, one tool result in
/// eight about 8,000 characters.
pub(crate) fn tool_heavy(messages: usize) -> Vec<Message> {
    let mut out = vec![Message::system("You are a careful SRE agent. ".repeat(8))];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut turn = 0;
    while out.len() < messages {
        out.push(Message::user(format!(
            "Incident {turn}: {}",
            "what failed and why? ".repeat(14)
        )));
        for r in 0..4 {
            let id = format!("call_{turn}_{r}");
            out.push(Message::assistant_tool_calls(
                "Checking the logs.",
                vec![ToolCall::new(
                    &id,
                    "read_log",
                    json!({"service": "orders", "page": r, "q": "status:500"}),
                )],
            ));
            let len = if next() % 8 == 0 { 8_000 } else { 600 };
            let line = "2026-11-29T12:00:00Z GET /api/orders/4412 500 12ms trace=4f2a ";
            let body: String = line.chars().cycle().take(len).collect();
            out.push(Message::tool_result(&id, "read_log", body));
        }
        out.push(Message::assistant(
            "The deploy at 12:00 broke the orders service. ".repeat(9),
        ));
        turn += 1;
    }
    out.truncate(messages);
    out
}
