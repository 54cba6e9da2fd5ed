//! The providers' documented rules that the schemas cannot express, checked
//! on bodies as sent. Each returns the violations found; empty means the body is fine.

use std::collections::BTreeSet;

use serde_json::Value;

fn name_ok(name: &str, max: usize) -> bool {
    (1..=max).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// OpenAI Chat Completions request rules.
pub(crate) fn openai_request(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let messages = body["messages"].as_array().unwrap_or(&empty);
    // Ids of the latest assistant tool calls still waiting for a result.
    let mut open: Option<BTreeSet<String>> = None;
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or("");
            match open.as_mut().map(|ids| ids.remove(id)) {
                Some(true) => {}
                Some(false) => out.push(format!(
                    "messages[{i}]: tool_call_id {id:?} does not answer an open call of the preceding assistant message (or answers it twice)"
                )),
                None => out.push(format!(
                    "messages[{i}]: a tool message that does not follow an assistant message with tool_calls"
                )),
            }
            continue;
        }
        if let Some(ids) = open.take()
            && !ids.is_empty()
        {
            out.push(format!(
                "messages[{i}]: calls {ids:?} were not answered before this message"
            ));
        }
        if role == "assistant" {
            let calls = m["tool_calls"].as_array();
            let has_calls = calls.is_some_and(|c| !c.is_empty());
            if !has_calls && (m.get("content").is_none() || m["content"].is_null()) {
                out.push(format!(
                    "messages[{i}]: an assistant message needs content unless it has tool_calls"
                ));
            }
            if let Some(calls) = calls {
                let mut ids = BTreeSet::new();
                for c in calls {
                    let name = c["function"]["name"].as_str().unwrap_or("");
                    if !name_ok(name, 64) {
                        out.push(format!(
                            "messages[{i}]: function name {name:?} is not allowed"
                        ));
                    }
                    ids.insert(c["id"].as_str().unwrap_or("").to_owned());
                }
                open = Some(ids);
            }
        }
    }
    if let Some(ids) = open
        && !ids.is_empty()
    {
        out.push(format!("calls {ids:?} are never answered"));
    }
    let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    for t in body["tools"].as_array().unwrap_or(&empty) {
        let name = t["function"]["name"].as_str().unwrap_or("");
        if !name_ok(name, 64) {
            out.push(format!("tool name {name:?} is not allowed"));
        }
    }
    for key in ["tool_choice", "parallel_tool_calls"] {
        if body.get(key).is_some() && !has_tools {
            out.push(format!("{key} without tools"));
        }
    }
    if body.get("stream_options").is_some() && body["stream"] != Value::Bool(true) {
        out.push("stream_options without stream: true".into());
    }
    out
}

/// OpenAI response rule: cached tokens are part of the prompt tokens.
pub(crate) fn openai_response(body: &Value) -> Vec<String> {
    let usage = &body["usage"];
    let prompt = usage["prompt_tokens"].as_u64().unwrap_or(0);
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    if cached > prompt {
        vec![format!("cached_tokens {cached} > prompt_tokens {prompt}")]
    } else {
        vec![]
    }
}

/// A cache marker's TTL: `Some("5m")` or `Some("1h")`, `None` when absent.
fn marker(v: &Value) -> Option<&str> {
    let cc = v.get("cache_control")?;
    if cc.is_null() {
        return None;
    }
    Some(cc["ttl"].as_str().unwrap_or("5m"))
}

/// The cache markers of a body in the cache order tools → system → messages, with where
/// each is.
pub(crate) fn anthropic_markers(body: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(t) = marker(body) {
        out.push(("top-level".to_owned(), t.to_owned()));
    }
    let empty = Vec::new();
    for (i, t) in body["tools"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .enumerate()
    {
        if let Some(m) = marker(t) {
            out.push((format!("tools[{i}]"), m.to_owned()));
        }
    }
    if let Some(blocks) = body["system"].as_array() {
        for (i, b) in blocks.iter().enumerate() {
            if let Some(m) = marker(b) {
                out.push((format!("system[{i}]"), m.to_owned()));
            }
        }
    }
    for (i, msg) in body["messages"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .enumerate()
    {
        if let Some(blocks) = msg["content"].as_array() {
            for (j, b) in blocks.iter().enumerate() {
                if let Some(m) = marker(b) {
                    out.push((format!("messages[{i}].content[{j}]"), m.to_owned()));
                }
            }
        }
    }
    out
}

/// Anthropic Messages request rules.
pub(crate) fn anthropic_request(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let messages = body["messages"].as_array().unwrap_or(&empty);

    // Markers: at most 4, and a 1h one never after a 5m one.
    let markers = anthropic_markers(body);
    if markers.len() > 4 {
        out.push(format!(
            "{} cache_control markers (at most 4)",
            markers.len()
        ));
    }
    let mut seen_5m = false;
    for (at, ttl) in &markers {
        if ttl == "1h" && seen_5m {
            out.push(format!("{at}: a 1h marker after a 5m one"));
        }
        seen_5m |= ttl == "5m";
    }

    // System blocks: no empty text.
    if let Some(blocks) = body["system"].as_array() {
        for (i, b) in blocks.iter().enumerate() {
            if b["text"].as_str() == Some("") {
                out.push(format!("system[{i}]: empty text block"));
            }
        }
    }

    let mut names = BTreeSet::new();
    for t in body["tools"].as_array().unwrap_or(&empty) {
        let name = t["name"].as_str().unwrap_or("");
        if !name_ok(name, 128) {
            out.push(format!("tool name {name:?} is not allowed"));
        }
        if !names.insert(name.to_owned()) {
            out.push(format!("tool name {name:?} is not unique"));
        }
    }

    // The tool_use ids of the previous message when it was an assistant message.
    let mut pending: Option<BTreeSet<String>> = None;
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role == "system" {
            out.push(format!("messages[{i}]: system must be the top-level field"));
        }
        let blocks: Vec<&Value> = match &m["content"] {
            Value::String(s) => {
                if s.is_empty() {
                    out.push(format!("messages[{i}]: empty message"));
                }
                vec![]
            }
            Value::Array(a) => {
                if a.is_empty() {
                    out.push(format!("messages[{i}]: empty message"));
                }
                a.iter().collect()
            }
            _ => {
                out.push(format!("messages[{i}]: no content"));
                vec![]
            }
        };
        let mut results_done = false;
        let mut answered = BTreeSet::new();
        for (j, b) in blocks.iter().enumerate() {
            let kind = b["type"].as_str().unwrap_or("");
            if kind == "text" && b["text"].as_str() == Some("") {
                out.push(format!("messages[{i}].content[{j}]: empty text block"));
            }
            if kind == "thinking" && b.get("cache_control").is_some() {
                out.push(format!(
                    "messages[{i}].content[{j}]: cache_control on a thinking block"
                ));
            }
            if kind == "tool_result" {
                if results_done {
                    out.push(format!(
                        "messages[{i}].content[{j}]: tool_result after another kind of block"
                    ));
                }
                let id = b["tool_use_id"].as_str().unwrap_or("").to_owned();
                let ok = role == "user" && pending.as_ref().is_some_and(|p| p.contains(&id));
                if !ok {
                    out.push(format!(
                        "messages[{i}].content[{j}]: tool_result {id:?} does not answer the immediately previous assistant message"
                    ));
                }
                answered.insert(id);
            } else {
                results_done = true;
            }
        }
        if let Some(p) = pending.take() {
            let missing: Vec<_> = p.difference(&answered).collect();
            if !missing.is_empty() {
                out.push(format!(
                    "messages[{i}]: tool_use ids {missing:?} get no tool_result here"
                ));
            }
        }
        if role == "assistant" {
            let ids: BTreeSet<String> = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| b["id"].as_str().unwrap_or("").to_owned())
                .collect();
            if !ids.is_empty() {
                pending = Some(ids);
            }
        }
    }
    if let Some(p) = pending {
        out.push(format!("tool_use ids {p:?} are never answered"));
    }
    out
}
