//! The OpenAI client's streamed calls against a real server on 127.0.0.1 serving
//! recorded-shape `chat.completion.chunk` events: every chunk validated against
//! `CreateChatCompletionStreamResponse`, every request body against the request schema.

use std::time::Duration;

use crate::support::schema::{Root, assert_valid, validator};
use crate::support::stream_server::{Reply, data, start};
use futures_util::StreamExt;
use llm_context::error::{ProviderError, ProviderErrorKind};
use llm_context::openai::OpenAi;
use llm_context::retry::RetryPolicy;
use llm_context::stream::{ChatStream, StreamEvent, Streaming};
use llm_context::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message, ToolCall};
use serde_json::{Value, json};
use tower::{Layer, ServiceBuilder, ServiceExt};

const SCHEMA: &str = "openai-chat-completions.schema.json";

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-9x", "object": "chat.completion.chunk", "created": 1764547200,
        "model": "gpt-5.4-2026-03-05", "system_fingerprint": "fp_8e1",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        "usage": null
    })
}

/// A recorded-shape answer: reasoning, text in pieces, one tool call whose arguments
/// arrive in three pieces, the finish, the usage chunk, `[DONE]`.
fn answer() -> Vec<Value> {
    vec![
        chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        ),
        chunk(json!({"content": "Ich prüfe "}), None),
        chunk(json!({"content": "die Logs — ログ"}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_7", "type": "function",
                   "function": {"name": "fetch_logs", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"unit\": "}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"déploiement\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        json!({
            "id": "chatcmpl-9x", "object": "chat.completion.chunk", "created": 1764547200,
            "model": "gpt-5.4-2026-03-05", "system_fingerprint": "fp_8e1", "choices": [],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 31, "total_tokens": 1231,
                      "prompt_tokens_details": {"cached_tokens": 1024}}
        }),
    ]
}

fn sse(chunks: &[Value]) -> Vec<String> {
    let v = validator(SCHEMA, Root::Stream);
    let mut out: Vec<String> = chunks
        .iter()
        .map(|c| {
            assert_valid(&v, c, "a stream chunk");
            data(c)
        })
        .collect();
    out.push("data: [DONE]\n\n".into());
    out
}

fn client(url: &str) -> OpenAi {
    OpenAi::builder()
        .base_url(format!("{url}/v1"))
        .api_key("sk-test-stream")
        .build()
        .unwrap()
}

fn request() -> ChatRequest {
    ChatRequest::new(
        "gpt-5.4",
        vec![
            Message::system("You are an SRE assistant."),
            Message::user("Why did the deploy fail?"),
        ],
    )
}

async fn all(stream: ChatStream) -> Vec<Result<StreamEvent, llm_context::BoxError>> {
    stream.collect().await
}

#[tokio::test]
async fn text_tool_calls_and_usage_stream_and_add_up_to_the_response() {
    let server = start(vec![Reply::events(sse(&answer()))]).await;
    let stream = client(&server.url)
        .oneshot(Streaming(request()))
        .await
        .unwrap();
    let events: Vec<StreamEvent> = all(stream).await.into_iter().map(Result::unwrap).collect();
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Ich prüfe die Logs — ログ");
    let calls = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::ToolCall(_)))
        .count();
    assert_eq!(calls, 3, "the call's pieces pass through as they came");
    let done = events.last().unwrap().as_done().unwrap();
    assert_eq!(
        done.message.tool_calls.to_vec(),
        // The arguments as they streamed, spaces and all.
        vec![ToolCall::from_text(
            "call_7",
            "fetch_logs",
            r#"{"unit": "déploiement"}"#
        )]
    );
    assert_eq!(done.finish_reason, llm_context::FinishReason::ToolCalls);
    assert_eq!(done.usage.cache_read_tokens, 1024);
    assert_eq!(done.usage.input_tokens, 176);
    assert_eq!(done.usage.output_tokens, 31);
    assert_eq!(done.provider_fields["id"], "chatcmpl-9x");
    assert_eq!(done.provider_fields["system_fingerprint"], "fp_8e1");
    assert!(
        !done.provider_fields.contains_key("choices")
            && !done.provider_fields.contains_key("usage"),
        "what the response models is not kept twice: {:?}",
        done.provider_fields.keys()
    );

    let body = server.bodies.lock().unwrap()[0].clone();
    assert_valid(
        &validator(SCHEMA, Root::Request),
        &body,
        "the streamed request",
    );
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn an_error_status_is_the_futures_error() {
    let mut reply = Reply::events(vec![
        r#"{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}"#.into(),
    ]);
    reply.status = 429;
    let server = start(vec![reply]).await;
    let err = client(&server.url)
        .oneshot(Streaming(request()))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::RateLimited, "{err}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn an_error_event_mid_stream_is_a_typed_error_item() {
    let mut pieces = sse(&answer()[..2]);
    pieces.pop();
    pieces.push(data(
        &json!({"error": {"message": "The server had an error", "type": "server_error"}}),
    ));
    let server = start(vec![Reply::events(pieces)]).await;
    let stream = client(&server.url)
        .oneshot(Streaming(request()))
        .await
        .unwrap();
    let items = all(stream).await;
    let err = items.last().unwrap().as_ref().unwrap_err();
    let err = err
        .downcast_ref::<ProviderError>()
        .expect("a ProviderError");
    assert_eq!(err.kind, ProviderErrorKind::Server);
    assert!(
        items
            .iter()
            .all(|i| i.as_ref().map_or(true, |e| e.as_done().is_none()))
    );
}

#[tokio::test]
async fn a_cut_before_the_first_event_is_retried_and_after_it_is_not() {
    // First connection: headers, then closed before any event. Second: the answer.
    let cut = Reply::events(vec![]);
    let server = start(vec![cut, Reply::events(sse(&answer()))]).await;
    let model = ServiceBuilder::new()
        .retry(RetryPolicy::default().with_base_delay(Duration::from_millis(1)))
        .service(client(&server.url));
    let stream = model.oneshot(Streaming(request())).await.unwrap();
    assert!(
        all(stream)
            .await
            .last()
            .unwrap()
            .as_ref()
            .unwrap()
            .as_done()
            .is_some()
    );
    assert_eq!(server.bodies.lock().unwrap().len(), 2, "retried once");

    // Cut after two chunks: the caller has text already, so it is an error item.
    let mut pieces = sse(&answer()[..3]);
    pieces.pop();
    let server = start(vec![Reply::events(pieces)]).await;
    let stream = client(&server.url)
        .oneshot(Streaming(request()))
        .await
        .unwrap();
    let items = all(stream).await;
    let err = items.last().unwrap().as_ref().unwrap_err();
    let err = err.downcast_ref::<ProviderError>().unwrap();
    assert_eq!(err.kind, ProviderErrorKind::StreamInterrupted, "{err}");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn dropping_the_stream_closes_the_upstream_connection() {
    let mut pieces = sse(&answer()[..2]);
    pieces.pop();
    let mut reply = Reply::events(pieces);
    reply.close = false;
    let mut server = start(vec![reply]).await;
    let mut stream = client(&server.url)
        .oneshot(Streaming(request()))
        .await
        .unwrap();
    // The provider's opening fields first, then its text.
    assert!(matches!(
        stream.next().await,
        Some(Ok(StreamEvent::Started(fields))) if fields.contains_key("id")
    ));
    assert!(matches!(
        stream.next().await,
        Some(Ok(StreamEvent::Text(_)))
    ));
    drop(stream);
    tokio::time::timeout(Duration::from_secs(5), server.closed.recv())
        .await
        .expect("the server saw the connection close")
        .unwrap();
}

#[tokio::test]
async fn a_stream_dropped_through_the_stack_closes_the_connection_and_stores_nothing() {
    let mut pieces = sse(&answer()[..2]);
    pieces.pop();
    let mut held = Reply::events(pieces);
    held.close = false;
    let mut server = start(vec![held, Reply::events(sse(&answer()))]).await;
    let memo = llm_context::memo::MemoLayer::new(std::sync::Arc::new(
        llm_context::memo::LocalMemoStore::default(),
    ));
    let stack = ContextPolicyLayer::new(ContextPolicy::default().with_max_context_tokens(100_000))
        .unwrap()
        .with_memo(memo)
        .layer(client(&server.url));
    let req = || request().with_temperature(0.0);
    let mut stream = stack.clone().oneshot(Streaming(req())).await.unwrap();
    // The provider's opening fields first, then its text.
    assert!(matches!(
        stream.next().await,
        Some(Ok(StreamEvent::Started(fields))) if fields.contains_key("id")
    ));
    assert!(matches!(
        stream.next().await,
        Some(Ok(StreamEvent::Text(_)))
    ));
    drop(stream);
    tokio::time::timeout(Duration::from_secs(5), server.closed.recv())
        .await
        .expect("the server saw the connection close")
        .unwrap();
    // Nothing was memoized: the same request goes upstream again, and completes.
    let stream = stack.oneshot(Streaming(req())).await.unwrap();
    let done = all(stream).await.pop().unwrap().unwrap();
    assert!(!done.as_done().unwrap().report.memo_hit);
    assert_eq!(server.bodies.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_streamed_call_through_the_stack_carries_the_report() {
    let server = start(vec![Reply::events(sse(&answer()))]).await;
    let policy = ContextPolicy::default().with_max_context_tokens(100_000);
    let stack = ContextPolicyLayer::new(policy)
        .unwrap()
        .layer(client(&server.url));
    let mut req = request();
    req.messages.push(Message::assistant_tool_calls(
        "",
        vec![ToolCall::new("c0", "fetch_logs", json!({"unit": "api"}))],
    ));
    req.messages.push(Message::tool_result(
        "c0",
        "fetch_logs",
        "E connexion refusée\n".repeat(2_000),
    ));
    let stream = stack.oneshot(Streaming(req)).await.unwrap();
    let events = all(stream).await;
    let done = events
        .last()
        .unwrap()
        .as_ref()
        .unwrap()
        .as_done()
        .unwrap()
        .clone();
    assert_eq!(
        done.report.offloaded_results, 1,
        "the long result was offloaded"
    );
    let body = server.bodies.lock().unwrap()[0].clone();
    assert_valid(
        &validator(SCHEMA, Root::Request),
        &body,
        "the prepared streamed request",
    );
    let sent = body["messages"][3]["content"].as_str().unwrap().to_owned();
    assert!(sent.len() < 10_000, "the model was sent the preview");
}
