//! The Anthropic client's streamed calls against a real server on 127.0.0.1 serving
//! recorded-shape events, each validated against `RawMessageStreamEvent`: a two-round
//! tool loop with extended thinking whose second request keeps the signed thinking
//! block before its `tool_use`, and error events as typed errors.

use crate::support::schema::{Root, assert_valid, validator};
use crate::support::stream_server::{Reply, named, start};
use futures_util::StreamExt;
use llm_context::anthropic::Anthropic;
use llm_context::error::{ProviderError, ProviderErrorKind};
use llm_context::stream::{StreamEvent, Streaming};
use llm_context::{ChatRequest, FinishReason, Message, Reasoning, ToolSpec};
use serde_json::{Value, json};
use tower::ServiceExt;

const SCHEMA: &str = "anthropic-messages.schema.json";

fn sse(events: &[Value]) -> Vec<String> {
    let v = validator(SCHEMA, Root::Stream);
    events
        .iter()
        .map(|e| {
            // The SDK's event union leaves out `ping` and `error` (it handles them before
            // parsing); their shape is the one Anthropic's streaming docs give.
            if !matches!(e["type"].as_str(), Some("ping" | "error")) {
                assert_valid(&v, e, "a stream event");
            }
            named(e["type"].as_str().unwrap(), e)
        })
        .collect()
}

fn start_event(id: &str) -> Value {
    json!({"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 2100, "output_tokens": 1,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1800}}})
}

fn tool_round() -> Vec<Value> {
    vec![
        start_event("msg_01"),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "thinking_delta", "thinking": "Die Logs zeigen "}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "thinking_delta", "thinking": "接続拒否; check the unit."}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "signature_delta", "signature": "EqQBCkYIBxgCKkA=="}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1,
               "content_block": {"type": "tool_use", "id": "toolu_01", "name": "fetch_logs", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1,
               "delta": {"type": "input_json_delta", "partial_json": "{\"unit\": \"dé"}}),
        json!({"type": "content_block_delta", "index": 1,
               "delta": {"type": "input_json_delta", "partial_json": "ploiement\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
               "usage": {"output_tokens": 87}}),
        json!({"type": "message_stop"}),
    ]
}

fn text_round() -> Vec<Value> {
    vec![
        start_event("msg_02"),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1,
               "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1,
               "delta": {"type": "text_delta", "text": "The database refused "}}),
        json!({"type": "content_block_delta", "index": 1,
               "delta": {"type": "text_delta", "text": "connections (接続拒否)."}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
               "usage": {"output_tokens": 12}}),
        json!({"type": "message_stop"}),
    ]
}

fn client(url: &str) -> Anthropic {
    Anthropic::builder()
        .base_url(url)
        .api_key("sk-ant-test")
        .build()
        .unwrap()
}

fn first_request() -> ChatRequest {
    let mut req = ChatRequest::new(
        "claude-sonnet-4-5",
        vec![
            Message::system("You are an SRE assistant."),
            Message::user("Why did the deploy fail?"),
        ],
    )
    .with_tools(vec![ToolSpec::new(
        "fetch_logs",
        "Fetch a unit's logs",
        json!({"type": "object", "properties": {"unit": {"type": "string"}}}),
    )]);
    req.params.extra.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": 2048}),
    );
    req
}

#[tokio::test]
async fn a_two_round_tool_loop_with_thinking_streams_and_round_trips_the_signature() {
    let server = start(vec![
        Reply::events(sse(&tool_round())),
        Reply::events(sse(&text_round())),
    ])
    .await;
    let stream = client(&server.url)
        .oneshot(Streaming(first_request()))
        .await
        .unwrap();
    let events: Vec<StreamEvent> = stream.map(Result::unwrap).collect().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::Reasoning { .. }))
    );
    let done = events.last().unwrap().as_done().unwrap().clone();
    assert_eq!(done.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        done.message.reasoning(),
        [Reasoning::Thinking {
            thinking: "Die Logs zeigen 接続拒否; check the unit.".into(),
            signature: "EqQBCkYIBxgCKkA==".into()
        }]
    );
    assert_eq!(
        done.message.tool_calls[0].arguments_value(),
        json!({"unit": "déploiement"})
    );
    assert_eq!(done.usage.output_tokens, 87);
    assert_eq!(done.usage.cache_read_tokens, 1800);
    assert_eq!(done.provider_fields["id"], "msg_01");
    // The fields a non-streamed answer keeps: what `message_start` says beyond the model.
    assert_eq!(done.provider_fields["role"], "assistant");
    assert!(!done.provider_fields.contains_key("content"));

    let mut second = first_request();
    second.messages.push(done.message.clone());
    second.messages.push(Message::tool_result(
        "toolu_01",
        "fetch_logs",
        "E connexion refusée (接続拒否)",
    ));
    let stream = client(&server.url)
        .oneshot(Streaming(second))
        .await
        .unwrap();
    let reply = stream.response().await.unwrap();
    assert_eq!(
        reply.message.text(),
        "The database refused connections (接続拒否)."
    );

    let bodies = server.bodies.lock().unwrap().clone();
    let v = validator(SCHEMA, Root::Request);
    for body in &bodies {
        assert_valid(&v, body, "a streamed request");
        assert_eq!(body["stream"], true);
        assert_eq!(body["thinking"]["budget_tokens"], 2048);
    }
    let assistant = &bodies[1]["messages"][1]["content"];
    assert_eq!(assistant[0]["type"], "thinking", "{assistant:#}");
    assert_eq!(assistant[0]["signature"], "EqQBCkYIBxgCKkA==");
    assert_eq!(assistant[1]["type"], "tool_use");
}

#[tokio::test]
async fn an_error_event_is_a_typed_error() {
    let mut events = text_round();
    events.truncate(5); // up to the first text delta
    events.push(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    let server = start(vec![Reply::events(sse(&events))]).await;
    let stream = client(&server.url)
        .oneshot(Streaming(first_request()))
        .await
        .unwrap();
    let items: Vec<_> = stream.collect().await;
    let err = items.last().unwrap().as_ref().unwrap_err();
    let err = err.downcast_ref::<ProviderError>().unwrap();
    assert_eq!(err.kind, ProviderErrorKind::Overloaded);
    assert!(err.message.contains("Overloaded"), "{err}");
}
