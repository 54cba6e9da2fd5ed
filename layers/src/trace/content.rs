//! Opt-in content capture: the messages of a call in the GenAI conventions' JSON shape
//! (`gen_ai.input.messages`, `gen_ai.output.messages`), cut to a size cap.

use serde_json::{Value, json};

use crate::model::{Content, ContentPart, Message, Reasoning, Role};

fn role(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// The parts of `content`. An inline image's bytes are left out (its media type stays):
/// base64 in a trace is cost without insight.
fn content_parts(content: &Content, parts: &mut Vec<Value>) {
    match content {
        Content::Text(text) if text.is_empty() => {}
        Content::Text(text) => parts.push(json!({"type": "text", "content": text})),
        Content::Parts(list) => {
            for part in list {
                parts.push(match part {
                    ContentPart::Text { text } => json!({"type": "text", "content": text}),
                    ContentPart::Image { url, .. } => match url.strip_prefix("data:") {
                        Some(rest) => json!({
                            "type": "blob",
                            "modality": "image",
                            "mime_type": rest.split([';', ',']).next().unwrap_or_default(),
                        }),
                        None => json!({"type": "uri", "modality": "image", "uri": url}),
                    },
                    ContentPart::Opaque { kind, .. } => json!({"type": kind}),
                });
            }
        }
    }
}

/// One message as the conventions' `{"role", "parts"}`.
fn message(m: &Message) -> Value {
    let mut parts = Vec::new();
    for r in m.reasoning().iter() {
        match r {
            Reasoning::Thinking { thinking: text, .. } | Reasoning::Text { text } => {
                parts.push(json!({"type": "reasoning", "content": text}));
            }
            // Encrypted: nothing a reader could use.
            Reasoning::RedactedThinking { .. } => {}
        }
    }
    if m.role == Role::Tool {
        parts.push(json!({
            "type": "tool_call_response",
            "id": m.tool_call_id,
            "response": m.content.text(),
        }));
    } else {
        content_parts(&m.content, &mut parts);
    }
    for call in &m.tool_calls {
        parts.push(json!({
            "type": "tool_call",
            "id": call.id,
            "name": call.name,
            "arguments": call.arguments_value(),
        }));
    }
    json!({"role": role(m.role), "parts": parts})
}

/// `gen_ai.input.messages`: every message of the request, in order.
pub(super) fn input_messages(messages: &[Message]) -> Value {
    Value::Array(messages.iter().map(message).collect())
}

/// `gen_ai.output.messages`: the answer, with its finish reason.
pub(super) fn output_messages(answer: &Message, finish_reason: &str) -> Value {
    let mut m = message(answer);
    m["finish_reason"] = json!(finish_reason);
    Value::Array(vec![m])
}

/// `value` as JSON text of at most `cap` bytes, cut at a character boundary, and whether
/// it was cut. A cut text is no longer valid JSON; `llm_context.content_truncated` says
/// so.
pub(super) fn capped(value: &Value, cap: usize) -> (String, bool) {
    let mut text = value.to_string();
    if text.len() <= cap {
        return (text, false);
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;

    #[test]
    fn messages_take_the_conventions_shape() {
        let messages = vec![
            Message::system("Sei knapp."),
            Message::user(Content::from(vec![
                ContentPart::Text {
                    text: "Was zeigt das Bild?".into(),
                },
                ContentPart::Image {
                    url: "data:image/png;base64,iVBORw0KGgo=".into(),
                    detail: None,
                },
            ])),
            Message::assistant_tool_calls(
                "",
                vec![ToolCall::new("c1", "fetch_logs", json!({"unit": "api"}))],
            ),
            Message::tool_result("c1", "fetch_logs", "接続拒否"),
        ];
        let v = input_messages(&messages);
        assert_eq!(
            v,
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "Sei knapp."}]},
                {"role": "user", "parts": [
                    {"type": "text", "content": "Was zeigt das Bild?"},
                    {"type": "blob", "modality": "image", "mime_type": "image/png"}]},
                {"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "c1", "name": "fetch_logs", "arguments": {"unit": "api"}}]},
                {"role": "tool", "parts": [
                    {"type": "tool_call_response", "id": "c1", "response": "接続拒否"}]},
            ])
        );
        let out = output_messages(&Message::assistant("Fertig."), "stop");
        assert_eq!(out[0]["finish_reason"], "stop");
        assert_eq!(out[0]["parts"][0]["content"], "Fertig.");
    }

    #[test]
    fn the_cap_cuts_at_a_character_boundary() {
        let v = json!(["ü".repeat(100)]);
        let (whole, cut) = capped(&v, 10_000);
        assert!(!cut);
        assert_eq!(whole, v.to_string());
        // `["` is two bytes, then two-byte characters: 7 bytes would split one.
        let (text, cut) = capped(&v, 7);
        assert!(cut);
        assert_eq!(text, "[\"üü");
    }
}
