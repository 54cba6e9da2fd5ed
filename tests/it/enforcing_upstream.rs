//! The enforcing fake Anthropic upstream (`support::enforcing`) enforces what the
//! provider enforces on binding-thinking models, and nothing more: an edited prefix is
//! refused, an appended one, thinking removed from the start and moved markers are not;
//! `context_management` is checked and its edits reported.

use crate::support::enforcing::{Enforcing, start};
use serde_json::{Value, json};

const BETA: &str = "context-management-2025-06-27";

fn first() -> Value {
    json!({"model": "claude-fable-5-1", "max_tokens": 1024,
           "thinking": {"type": "enabled", "budget_tokens": 512},
           "system": [{"type": "text", "text": "Du bist ein SRE-Agent."}],
           "tools": [{"name": "run", "input_schema": {"type": "object"}}],
           "messages": [{"role": "user", "content": "Warum fällt die API aus? なぜ"}]})
}

async fn post(up: &Enforcing, body: &Value, betas: &[&str]) -> (u16, Value) {
    let mut r = reqwest::Client::new()
        .post(format!("{}/v1/messages", up.url))
        .header("content-type", "application/json")
        .body(body.to_string());
    for beta in betas {
        r = r.header("anthropic-beta", *beta);
    }
    let r = r.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `body` with the answer appended and its tool result after it.
fn next(mut body: Value, answer: &Value, result: &str) -> Value {
    let id = answer["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap()["id"]
        .clone();
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": answer["content"]}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": id, "content": result}]}));
    body
}

/// Three rounds: the request carrying three signed thinking blocks.
async fn three_rounds(up: &Enforcing) -> Value {
    let mut body = first();
    for round in 0..3 {
        let (status, answer) = post(up, &body, &[]).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["content"][0]["type"], "thinking");
        body = next(
            body,
            &answer,
            &format!("Ausgabe {round}: connexion refusée"),
        );
    }
    body
}

fn assistant_indexes(body: &Value) -> Vec<usize> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, m)| m["role"] == "assistant")
        .map(|(i, _)| i)
        .collect()
}

#[tokio::test]
async fn an_appended_history_passes_and_an_edited_prefix_is_refused() {
    let up = start().await;
    let body = three_rounds(&up).await;
    assert_eq!(post(&up, &body, &[]).await.0, 200);
    // A tool result before the newest thinking block, edited (as clearing does).
    let mut edited = body.clone();
    edited["messages"][2]["content"][0]["content"] = json!("[cleared]");
    let (status, error) = post(&up, &edited, &[]).await;
    assert_eq!(status, 400);
    assert_eq!(error["type"], "error");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("thinking block is bound to a different conversation prefix"),
        "{message}"
    );
    assert!(message.starts_with("messages.3.content.0"), "{message}");
    // The system prompt changed: every block is bound to it.
    let mut system = body.clone();
    system["system"][0]["text"] = json!("Du bist ein anderer Agent.");
    assert_eq!(post(&up, &system, &[]).await.0, 400);
    // A turn pruned from the start (its thinking with it) changes the later prefixes.
    let mut pruned = body.clone();
    pruned["messages"].as_array_mut().unwrap().drain(1..3);
    assert_eq!(post(&up, &pruned, &[]).await.0, 400);
}

#[tokio::test]
async fn with_drop_block_an_edited_prefix_drops_its_blocks_and_says_so() {
    const BINDING: &str = "thinking-binding-controls-2026-08-01";
    let up = start().await;
    let body = three_rounds(&up).await;
    let mut edited = body.clone();
    edited["messages"][2]["content"][0]["content"] = json!("[cleared]");
    edited["thinking"]["block_binding"] = json!({"prefix_mismatch_behavior": "drop_block"});
    // Without its beta the field is refused.
    let (status, error) = post(&up, &edited, &[]).await;
    assert_eq!(status, 400);
    assert!(error.to_string().contains(BINDING), "{error}");
    // With it, the blocks after the edit are dropped and reported, the first kept.
    let (status, answer) = post(&up, &edited, &[BINDING]).await;
    assert_eq!(status, 200, "{answer}");
    let paths: Vec<&str> = answer["input_transformations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["messages.3.content.0", "messages.5.content.0"]);
    assert_eq!(
        answer["input_transformations"][0]["type"],
        "thinking_dropped"
    );
    // Streamed, the report is in `message_start`.
    edited["stream"] = json!(true);
    let (status, text) = post(&up, &edited, &[BINDING]).await;
    assert_eq!(status, 200);
    let start_event = text
        .as_str()
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .find(|d| d.contains("message_start"))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .unwrap();
    assert_eq!(
        start_event["message"]["input_transformations"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn thinking_removed_from_the_start_passes_and_from_the_middle_is_refused() {
    let up = start().await;
    let body = three_rounds(&up).await;
    let at = assistant_indexes(&body);
    let without_thinking = |body: &mut Value, i: usize| {
        body["messages"][i]["content"]
            .as_array_mut()
            .unwrap()
            .retain(|b| b["type"] != "thinking");
    };
    let mut start = body.clone();
    without_thinking(&mut start, at[0]);
    assert_eq!(post(&up, &start, &[]).await.0, 200);
    without_thinking(&mut start, at[1]);
    assert_eq!(post(&up, &start, &[]).await.0, 200, "the first two");
    let mut all = start.clone();
    without_thinking(&mut all, at[2]);
    assert_eq!(post(&up, &all, &[]).await.0, 200, "all of them");
    let mut middle = body.clone();
    without_thinking(&mut middle, at[1]);
    let (status, error) = post(&up, &middle, &[]).await;
    assert_eq!(status, 400, "{error}");
    assert!(error.to_string().contains("from the middle"), "{error}");
}

#[tokio::test]
async fn a_content_written_as_a_string_instead_of_its_one_text_block_passes() {
    // Claude Code drops a marker from its `system` message by writing the content as a
    // string: the same text, which the provider reads alike.
    let up = start().await;
    let mut body = first();
    body["messages"][0]["content"] = json!([{"type": "text", "text": "Warum fällt die API aus? なぜ",
                                             "cache_control": {"type": "ephemeral"}}]);
    body["system"] = json!("Du bist ein SRE-Agent.");
    let (status, answer) = post(&up, &body, &[]).await;
    assert_eq!(status, 200, "{answer}");
    let mut body = next(body, &answer, "Ausgabe 0");
    body["messages"][0]["content"] = json!("Warum fällt die API aus? なぜ");
    body["system"] = json!([{"type": "text", "text": "Du bist ein SRE-Agent."}]);
    assert_eq!(post(&up, &body, &[]).await.0, 200);
    // A different text is an edit.
    body["messages"][0]["content"] = json!("Warum fällt die API aus?");
    assert_eq!(post(&up, &body, &[]).await.0, 400);
}

#[tokio::test]
async fn moved_cache_markers_pass() {
    let up = start().await;
    let body = three_rounds(&up).await;
    let mut marked = body.clone();
    marked["system"][0]["cache_control"] = json!({"type": "ephemeral"});
    marked["messages"][2]["content"][0]["cache_control"] =
        json!({"type": "ephemeral", "ttl": "1h"});
    marked["tools"][0]["cache_control"] = json!({"type": "ephemeral"});
    assert_eq!(post(&up, &marked, &[]).await.0, 200);
}

#[tokio::test]
async fn context_management_is_checked_and_its_edits_reported() {
    let up = start().await;
    let body = three_rounds(&up).await;
    let with = |edits: Value| {
        let mut b = body.clone();
        b["context_management"] = json!({"edits": edits});
        b
    };
    // Triggered from the first token, so it is applied.
    let clear_tools = json!({"type": "clear_tool_uses_20250919",
                             "trigger": {"type": "input_tokens", "value": 1},
                             "keep": {"type": "tool_uses", "value": 1}});
    let clear_thinking = json!({"type": "clear_thinking_20251015", "keep": "all"});
    // Without its beta.
    let (status, error) = post(&up, &with(json!([clear_tools])), &[]).await;
    assert_eq!(status, 400, "{error}");
    assert!(error.to_string().contains(BETA), "{error}");
    // clear_thinking second, or without thinking on.
    let both = json!([clear_tools, clear_thinking]);
    assert_eq!(post(&up, &with(both), &[BETA]).await.0, 400);
    let mut off = with(json!([clear_thinking]));
    off.as_object_mut().unwrap().remove("thinking");
    assert_eq!(post(&up, &off, &[BETA]).await.0, 400);
    // An unknown key beside the edits.
    let mut extra = with(json!([]));
    extra["context_management"]["trigger"] = json!(1);
    assert_eq!(post(&up, &extra, &[BETA]).await.0, 400);
    // Well formed: applied and reported, streamed too.
    let (status, answer) = post(&up, &with(json!([clear_thinking, clear_tools])), &[BETA]).await;
    assert_eq!(status, 200, "{answer}");
    let applied = &answer["context_management"]["applied_edits"];
    assert_eq!(applied[0]["type"], "clear_thinking_20251015");
    assert_eq!(applied[1]["cleared_tool_uses"], 2);
    let mut streamed = with(json!([clear_thinking, clear_tools]));
    streamed["stream"] = json!(true);
    let (status, text) = post(&up, &streamed, &[BETA]).await;
    assert_eq!(status, 200);
    let text = text.as_str().unwrap();
    assert!(
        text.contains("signature_delta") && text.contains("applied_edits"),
        "{text}"
    );
    assert_eq!(up.seen.lock().unwrap().refusals.len(), 4);
}
