//! Transcript builders and a conversation driver shared by the layer tests.
#![allow(dead_code, unreachable_pub)]

use llm_context_layers::mock::MockModel;
use llm_context_layers::{
    ChatRequest, ContextPolicy, ContextPolicyLayer, Message, PreparationReport, ToolCall,
};
use serde_json::json;
use tower::{Layer, Service, ServiceExt};

/// An agent's conversation through a fresh `ContextPolicyLayer` over an echoing model,
/// one session: for each of `turns` turns, `turn(n)` without its last message is
/// appended and the whole transcript so far sent, then that last message (the turn's
/// answer) appended. Returns what the model was sent and the report of each call.
pub async fn converse(
    policy: ContextPolicy,
    model_id: &str,
    turns: usize,
    turn: impl Fn(usize) -> Vec<Message>,
) -> Vec<(ChatRequest, PreparationReport)> {
    let model = MockModel::echo();
    let mut agent = ContextPolicyLayer::new(policy)
        .unwrap()
        .layer(model.clone());
    let mut history = Vec::new();
    let mut out = Vec::new();
    for n in 0..turns {
        let mut t = turn(n);
        let answer = t.pop().unwrap();
        history.extend(t);
        let req = ChatRequest::new(model_id, history.clone()).with_session("s1");
        let reply = ServiceExt::<ChatRequest>::ready(&mut agent)
            .await
            .unwrap()
            .call(req)
            .await
            .unwrap();
        out.push((model.last_request().unwrap(), reply.report));
        history.push(answer);
    }
    out
}

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

/// A span's or an event's fields by name, for the tests that capture what is traced:
/// strings as written, any other value as `{:?}`.
pub(crate) struct Fields<'a>(pub(crate) &'a mut std::collections::HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// An event's fields as one line, `name=value` in name order.
pub(crate) fn event_line(event: &tracing::Event<'_>) -> String {
    let mut fields = std::collections::HashMap::new();
    event.record(&mut Fields(&mut fields));
    let mut fields: Vec<_> = fields.into_iter().collect();
    fields.sort();
    fields
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}
