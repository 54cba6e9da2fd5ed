//! The stack's cache breakpoints on the Responses API: for a model that takes them
//! ([`CacheHints::on_content_parts`]: OpenAI's GPT-5.6 and later), each breakpoint the
//! stack planned is written as `"prompt_cache_breakpoint": {"mode": "explicit"}` on the
//! last content part of the item it falls on.
//!
//! Only input parts take one (a user, system or developer message's, or a call
//! output's), so a breakpoint planned on an assistant message moves back to the nearest
//! message before it that has such parts: still inside the stable part of the request.
//! At most three are written (prefix, history, last), the most the API writes beside
//! its own implicit one; a caller that placed breakpoints of its own gets none added.

use llm_context_layers::{
    ChatRequest, Role, prefix::leading_system_end, prefix::stable_history_end,
};
use serde_json::{Value, json};

/// The member a breakpoint is written as.
pub(crate) const MEMBER: &str = "prompt_cache_breakpoint";

/// The messages of `req` (indices, ascending, from `first` on) whose last input part
/// gets a breakpoint: the end of the prefix (the leading system messages written as
/// items), of the stable history and of the request, for those the stack planned.
pub(crate) fn messages(req: &ChatRequest, first: usize) -> Vec<usize> {
    let hints = req.cache;
    if !hints.on_content_parts || req.messages.len() <= first {
        return Vec::new();
    }
    let lead = leading_system_end(&req.messages).max(first);
    let back = |k: usize, floor: usize| {
        (floor..=k)
            .rev()
            .find(|&j| req.messages[j].role != Role::Assistant)
    };
    let mut out = Vec::with_capacity(3);
    if hints.prefix.is_some() && lead > first {
        out.extend(back(lead - 1, first));
    }
    if hints.history.is_some()
        && let Some(end) = stable_history_end(&req.messages).filter(|&e| e > lead)
    {
        out.extend(back(end - 1, lead));
    }
    if hints.last.is_some() && req.messages.len() > lead {
        out.extend(back(req.messages.len() - 1, lead));
    }
    out.dedup();
    out
}

/// Adds a breakpoint to `item`'s last input part, when it has one (a string content or
/// output becomes one text part first); whether it did.
pub(crate) fn add(item: &mut Value) -> bool {
    let Some(obj) = item.as_object_mut() else {
        return false;
    };
    let kind = obj.get("type").and_then(Value::as_str);
    let role = obj.get("role").and_then(Value::as_str);
    let field = match (kind, role) {
        (Some("message") | None, Some("user" | "system" | "developer")) => "content",
        (Some("function_call_output" | "custom_tool_call_output"), _) => "output",
        _ => return false,
    };
    let Some(value) = obj.get_mut(field) else {
        return false;
    };
    if let Value::String(text) = value {
        if text.is_empty() {
            return false;
        }
        *value = json!([{"type": "input_text", "text": std::mem::take(text)}]);
    }
    let takes_one = |p: &&mut Value| {
        matches!(
            p.get("type").and_then(Value::as_str),
            Some("input_text" | "input_image" | "input_file")
        ) && p
            .get("text")
            .is_none_or(|t| t.as_str().is_some_and(|t| !t.is_empty()))
    };
    match value
        .as_array_mut()
        .and_then(|parts| parts.iter_mut().rev().find(takes_one))
    {
        Some(part) => {
            part[MEMBER] = json!({"mode": "explicit"});
            true
        }
        None => false,
    }
}

/// Whether any of `items` carries a breakpoint of the caller's own.
#[cfg(feature = "serve")]
pub(crate) fn placed(items: &[Value]) -> bool {
    let marked = |parts: Option<&Value>| {
        parts
            .and_then(Value::as_array)
            .is_some_and(|parts| parts.iter().any(|p| p.get(MEMBER).is_some()))
    };
    items
        .iter()
        .any(|i| marked(i.get("content")) || marked(i.get("output")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use llm_context_layers::{CacheHints, CacheTtl, Message, ToolCall};

    #[test]
    fn a_breakpoint_goes_on_the_last_input_part_and_never_on_an_assistant_item() {
        let mut user = json!({"role": "user", "content": "Warum? 为什么"});
        assert!(add(&mut user));
        assert_eq!(
            user["content"],
            json!([{"type": "input_text", "text": "Warum? 为什么",
                    "prompt_cache_breakpoint": {"mode": "explicit"}}])
        );
        let mut output = json!({"type": "function_call_output", "call_id": "c", "output": [
            {"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": "u"},
            {"type": "input_text", "text": ""}]});
        assert!(add(&mut output));
        assert_eq!(output["output"][1][MEMBER]["mode"], "explicit");
        assert!(output["output"][0].get(MEMBER).is_none());
        for mut other in [
            json!({"type": "message", "role": "assistant", "content": "ok"}),
            json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}),
            json!({"type": "reasoning", "id": "rs", "summary": []}),
            json!({"role": "user", "content": ""}),
        ] {
            let before = other.clone();
            assert!(!add(&mut other));
            assert_eq!(other, before);
        }
        assert!(placed(&[user]));
        assert!(!placed(&[json!({"role": "user", "content": "x"})]));
    }

    #[test]
    fn each_planned_breakpoint_falls_on_the_nearest_message_with_input_parts() {
        let call = ToolCall::from_text("c1", "run", "{}");
        let messages = vec![
            Message::system("instructions"),
            Message::system("<permissions>"),
            Message::user("first"),
            Message::assistant_tool_calls("", vec![call]),
            Message::tool_result("c1", "run", "out"),
            Message::assistant("done"),
            Message::user("next"),
        ];
        let mut req = ChatRequest::new("gpt-5.6-terra", messages);
        req.cache = CacheHints::all(CacheTtl::FiveMinutes);
        // Not a model that takes them: none.
        assert!(messages_of(&req).is_empty());
        req.cache.on_content_parts = true;
        // The developer message (after the instructions), the result before the
        // answer that ends the stable history, and the newest request.
        assert_eq!(messages_of(&req), [1, 4, 6]);
        req.cache.history = None;
        assert_eq!(messages_of(&req), [1, 6]);
    }

    fn messages_of(req: &ChatRequest) -> Vec<usize> {
        messages(req, 1)
    }
}
