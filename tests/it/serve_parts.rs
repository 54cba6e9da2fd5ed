//! Chat Completions content parts the neutral model does not represent (`input_audio`,
//! `file`) through `serve`, over real HTTP on 127.0.0.1: carried to OpenAI as written,
//! a PDF file crossing to Anthropic as a `document`, anything else that cannot cross
//! refused by name with nothing sent.

use crate::support::proxy::{
    anthropic, anthropic_upstream, json_of, openai, openai_upstream, serving,
};
use llm_context::serve::Proxy;
use serde_json::{Value, json};
use wiremock::MockServer;

fn audio() -> Value {
    json!({"type": "input_audio", "input_audio": {
        "data": "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA=", "format": "wav"}})
}

fn pdf() -> Value {
    json!({"type": "file", "file": {"filename": "a.pdf",
                                    "file_data": "data:application/pdf;base64,JVBERi0xLjQKJcfs"}})
}

fn body(model: &str, parts: &[Value]) -> Value {
    let mut content = vec![json!({"type": "text", "text": "Was steht da? 何ですか"})];
    content.extend(parts.iter().cloned());
    json!({"model": model, "max_tokens": 64,
           "messages": [{"role": "user", "content": content}]})
}

async fn both() -> (MockServer, MockServer, String) {
    let (openai_up, anthropic_up) = (openai_upstream().await, anthropic_upstream().await);
    let proxy = Proxy::builder()
        .openai(openai(&openai_up.uri()))
        .anthropic(anthropic(&anthropic_up.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    (openai_up, anthropic_up, url)
}

async fn post(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

async fn sent(up: &MockServer, i: usize) -> Value {
    serde_json::from_slice(&up.received_requests().await.unwrap()[i].body).unwrap()
}

#[tokio::test]
async fn audio_and_file_parts_reach_openai_as_written_and_count_in_the_estimate() {
    let (openai_up, _anthropic_up, url) = both().await;
    let file_id = json!({"type": "file", "file": {"file_id": "file-abc123"}});
    let with = body("gpt-4o-audio-preview", &[audio(), pdf(), file_id]);
    let r = post(&url, &with).await;
    assert_eq!(r.status(), 200);
    let tokens = |r: &reqwest::Response| -> u64 {
        let v = &r.headers()["x-llm-context-before-tokens"];
        v.to_str().unwrap().parse().unwrap()
    };
    let before = tokens(&r);
    assert_eq!(sent(&openai_up, 0).await["messages"], with["messages"]);
    let r = post(&url, &body("gpt-4o-audio-preview", &[])).await;
    let smaller = tokens(&r);
    assert!(before > smaller + 40, "{before} {smaller}");
}

#[tokio::test]
async fn a_pdf_file_crosses_to_anthropic_as_a_document() {
    let (_openai_up, anthropic_up, url) = both().await;
    let r = post(&url, &body("claude-sonnet-4-6", &[pdf()])).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let content = &sent(&anthropic_up, 0).await["messages"][0]["content"];
    assert_eq!(
        content[1],
        json!({"type": "document", "title": "a.pdf", "source": {"type": "base64",
               "media_type": "application/pdf", "data": "JVBERi0xLjQKJcfs"}})
    );
}

#[tokio::test]
async fn parts_that_cannot_cross_are_refused_by_name_and_nothing_is_sent() {
    let (_openai_up, anthropic_up, url) = both().await;
    let png = json!({"type": "file", "file": {"filename": "x.png",
                                              "file_data": "data:image/png;base64,iVBORw0K"}});
    let stored = json!({"type": "file", "file": {"file_id": "file-abc123"}});
    for (part, kind) in [(audio(), "input_audio"), (png, "file"), (stored, "file")] {
        let r = post(&url, &body("claude-sonnet-4-6", &[part])).await;
        assert_eq!(r.status(), 400);
        let error = json_of(r).await;
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("{kind:?}")), "{message}");
    }
    assert!(anthropic_up.received_requests().await.unwrap().is_empty());
}
