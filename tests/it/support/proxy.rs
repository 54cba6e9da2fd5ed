//! What the proxy's tests share: a served proxy, upstream clients, an upstream stream.

use llm_context::serve::Proxy;
use llm_context::{Anthropic, OpenAi};
use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

use super::fixture;
use super::servers::mock_post;

/// Serves `proxy` on a free loopback port; its base URL.
pub(crate) async fn serving(proxy: Proxy) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(proxy.serve(listener));
    url
}

/// A response's body, as JSON.
pub(crate) async fn json_of(response: reqwest::Response) -> Value {
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

/// An OpenAI client for a fake provider at `url`.
pub(crate) fn openai(url: &str) -> OpenAi {
    OpenAi::builder()
        .base_url(format!("{url}/v1"))
        .api_key("sk-upstream")
        .build()
        .unwrap()
}

/// An Anthropic client for a fake provider at `url`.
pub(crate) fn anthropic(url: &str) -> Anthropic {
    Anthropic::builder()
        .base_url(url)
        .api_key("sk-ant-upstream")
        .build()
        .unwrap()
}

/// The text OpenAI's stream of [`openai_stream`] carries.
pub(crate) const STREAMED_TEXT: &str = "Die Datenbank verweigert (接続拒否).";

/// An OpenAI stream's SSE pieces: text in two deltas, `stop`, usage (8 completion
/// tokens), `[DONE]`.
pub(crate) fn openai_stream() -> Vec<String> {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5.4",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut pieces: Vec<String> = [
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"content": "Die Datenbank "}), None),
        chunk(json!({"content": "verweigert (接続拒否)."}), None),
        chunk(json!({}), Some("stop")),
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5.4",
               "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38}}),
    ]
    .iter()
    .map(|v| format!("data: {v}\n\n"))
    .collect();
    pieces.push("data: [DONE]\n\n".into());
    pieces
}

/// A fake OpenAI on 127.0.0.1 answering every Chat Completions call with a text answer.
pub(crate) async fn openai_upstream() -> MockServer {
    mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("openai-response-text.json"), "application/json"),
    )
    .await
}

/// A fake Anthropic on 127.0.0.1 answering every Messages call with a text answer.
pub(crate) async fn anthropic_upstream() -> MockServer {
    mock_post(
        "/v1/messages",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("anthropic-response-text.json"), "application/json"),
    )
    .await
}

/// A proxy in front of `upstream`'s OpenAI, served on 127.0.0.1: its base URL.
pub(crate) async fn openai_proxy(upstream: &MockServer) -> String {
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    serving(proxy).await
}

/// A proxy in front of `upstream`'s Anthropic, served on 127.0.0.1: its base URL.
pub(crate) async fn anthropic_proxy(upstream: &MockServer) -> String {
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.uri()))
        .build()
        .unwrap();
    serving(proxy).await
}

/// The text of `url`'s `/metrics`.
pub(crate) async fn metrics_text(url: &str) -> String {
    reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
