//! A fake OpenAI-compatible provider for span tests: it fails once, reads the artifact it
//! is shown, then answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// [`provider`] on a fresh server on 127.0.0.1.
pub(crate) async fn server() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(provider(Arc::new(AtomicUsize::new(0))))
        .mount(&server)
        .await;
    server
}

/// Fails the first call with 500; then reads the first artifact it is shown; then answers.
pub(crate) fn provider(calls: Arc<AtomicUsize>) -> impl Fn(&Request) -> ResponseTemplate {
    move |req: &Request| {
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return ResponseTemplate::new(500)
                .set_body_json(json!({"error": {"message": "boom", "type": "server_error"}}));
        }
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let text = body["messages"].to_string();
        let last = &body["messages"].as_array().unwrap().last().unwrap().clone();
        let message = match text.find("art_") {
            Some(at) if last["role"] != "tool" || last["tool_call_id"] != "call_read" => {
                let id: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_read", "type": "function",
                       "function": {"name": "read_context_artifact", "arguments": json!({"artifact_id": id}).to_string()}}]})
            }
            _ => json!({"role": "assistant", "content": "Die Logs zeigen einen Pool-Fehler."}),
        };
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-7", "object": "chat.completion", "created": 1, "model": "gpt-5.4-2026-03-05",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": if message["tool_calls"].is_null() { "stop" } else { "tool_calls" }}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 20, "total_tokens": 1220}}))
    }
}

/// A tool result the default policy offloads: 400 JSON log lines, in French and Japanese.
pub(crate) fn logs() -> String {
    (0..400)
        .map(|i| {
            format!("{{\"level\":\"error\",\"i\":{i},\"msg\":\"connexion refusée — 接続拒否\"}}\n")
        })
        .collect()
}
