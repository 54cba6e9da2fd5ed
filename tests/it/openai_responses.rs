//! The Responses API client (`OpenAiResponses`) against a real HTTP server on 127.0.0.1:
//! a tool loop through the context policy, whose every body validates against OpenAI's
//! schema (closed), with the answer's reasoning items sent back in their place; streamed
//! and not; errors typed.

use crate::support::schema::{Root, assert_valid, validator};
use futures_util::StreamExt;
use llm_context::error::ProviderErrorKind;
use llm_context::openai::OpenAiResponses;
use llm_context::stream::{StreamEvent, Streaming};
use llm_context::{
    ChatRequest, ChatResponse, ContextPolicy, ContextPolicyLayer, FinishReason, Message,
    ProviderError, ToolSpec, Usage,
};
use serde_json::{Value, json};
use tower::{Layer, Service, ServiceExt};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const SCHEMA: &str = "openai-responses.schema.json";

/// The first answer calls the tool (after reasoning), the second says it is done; as
/// JSON, or as the Responses stream when asked.
struct Loop;

fn answer(request: &Value) -> Value {
    let answered = request["input"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["type"] == "function_call_output");
    let output = if answered {
        json!([{"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "Zürich ist erreichbar ✓",
                             "annotations": [], "logprobs": []}]}])
    } else {
        json!([{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA-1"},
               {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup",
                "arguments": "{\"ort\":\"Zürich\"}", "status": "completed"}])
    };
    json!({"id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
           "model": "gpt-5.5", "output": output,
           "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 512},
                     "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 10},
                     "total_tokens": 930}})
}

impl Respond for Loop {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let whole = answer(&body);
        if body["stream"] != true {
            return ResponseTemplate::new(200).set_body_json(whole);
        }
        let mut events = vec![json!({"type": "response.created", "response": {"id": "resp_1"}})];
        for (i, item) in whole["output"].as_array().unwrap().iter().enumerate() {
            if item["type"] == "message" {
                events.push(
                    json!({"type": "response.output_text.delta", "output_index": i,
                                   "delta": item["content"][0]["text"]}),
                );
            }
            if item["type"] == "function_call" {
                events.push(
                    json!({"type": "response.output_item.added", "output_index": i,
                                   "item": {"type": "function_call", "call_id": item["call_id"],
                                            "name": item["name"], "arguments": ""}}),
                );
                events.push(json!({"type": "response.function_call_arguments.delta",
                                   "output_index": i, "delta": item["arguments"]}));
            }
            events.push(
                json!({"type": "response.output_item.done", "output_index": i,
                               "item": item}),
            );
        }
        events.push(json!({"type": "response.completed", "response": whole}));
        let text: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        ResponseTemplate::new(200).set_body_raw(text, "text/event-stream")
    }
}

async fn server() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(Loop)
        .mount(&server)
        .await;
    server
}

fn client(server: &MockServer) -> OpenAiResponses {
    OpenAiResponses::builder()
        .base_url(format!("{}/v1", server.uri()))
        .api_key("sk-test")
        .build()
        .unwrap()
}

fn request() -> ChatRequest {
    let mut req = ChatRequest::new(
        "gpt-5.5",
        vec![
            Message::system("Du bist ein Betriebsassistent."),
            Message::user("Ist die Störung in Zürich behoben?"),
        ],
    );
    req.tools = vec![ToolSpec::new(
        "lookup",
        "Looks up an outage.",
        json!({"type": "object", "properties": {"ort": {"type": "string"}}}),
    )];
    req
}

/// The loop's second request: the first answer appended, with the tool's result.
fn second(first: &ChatResponse) -> ChatRequest {
    let mut req = request();
    let call = first.message.tool_calls[0].clone();
    req.messages.push(first.message.clone());
    req.messages
        .push(Message::tool_result(call.id, call.name, "Störung behoben."));
    req
}

#[tokio::test]
async fn a_tool_loop_sends_the_reasoning_back_in_its_place_and_every_body_validates() {
    let server = server().await;
    let mut stack = ContextPolicyLayer::new(ContextPolicy::default())
        .unwrap()
        .layer(client(&server));
    let first = ServiceExt::<ChatRequest>::ready(&mut stack)
        .await
        .unwrap()
        .call(request())
        .await
        .unwrap();
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    assert_eq!(first.usage, Usage::new(388, 30, 512, 0));
    let done = ServiceExt::<ChatRequest>::ready(&mut stack)
        .await
        .unwrap()
        .call(second(&first))
        .await
        .unwrap();
    assert_eq!(done.message.text(), "Zürich ist erreichbar ✓");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 2);
    let schema = validator(SCHEMA, Root::Request);
    let bodies: Vec<Value> = requests
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    for (i, body) in bodies.iter().enumerate() {
        assert_valid(&schema, body, &format!("request {i}"));
        assert_eq!(body["instructions"], "Du bist ein Betriebsassistent.");
        assert!(body["prompt_cache_key"].is_string());
    }
    let input = bodies[1]["input"].as_array().unwrap();
    let kinds: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call_output"
        ]
    );
    // The reasoning item as the provider gave it, byte for byte in its JSON.
    assert_eq!(
        input[1],
        json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA-1"})
    );
    assert_eq!(input[2]["call_id"], "call_1");
    assert_eq!(input[3]["call_id"], "call_1");
    assert_eq!(input[3]["output"], "Störung behoben.");
}

#[tokio::test]
async fn a_streamed_answer_gives_its_deltas_and_the_whole_answer_at_the_end() {
    let server = server().await;
    let mut client = client(&server);
    let stream = ServiceExt::<Streaming>::ready(&mut client)
        .await
        .unwrap()
        .call(Streaming(request()))
        .await
        .unwrap();
    let events: Vec<StreamEvent> = stream.map(Result::unwrap).collect().await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCall(d) if d.name.as_deref() == Some("lookup")))
    );
    let Some(StreamEvent::Done(first)) = events.last() else {
        panic!("no Done: {events:?}")
    };
    assert_eq!(
        first.message.tool_calls[0].arguments,
        "{\"ort\":\"Zürich\"}"
    );
    // The streamed answer's reasoning goes back with it, as a plain one's does.
    let stream = ServiceExt::<Streaming>::ready(&mut client)
        .await
        .unwrap()
        .call(Streaming(second(first)))
        .await
        .unwrap();
    let done = stream.response().await.unwrap();
    assert_eq!(done.message.text(), "Zürich ist erreichbar ✓");
    let sent: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[1].body).unwrap();
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["input"][1]["encrypted_content"], "gAAA-1");
}

#[tokio::test]
async fn an_error_status_is_a_typed_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"error": {
            "type": "invalid_request_error", "code": "context_length_exceeded",
            "message": "Your input exceeds the context window.", "param": "input"}})))
        .mount(&server)
        .await;
    let err: ProviderError = ServiceExt::<ChatRequest>::oneshot(client(&server), request())
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::ContextLength);
    assert_eq!(err.status, Some(400));
    assert!(err.message.contains("context window"), "{err}");
}
