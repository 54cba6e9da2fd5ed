//! The OpenAI-compatible client against a real HTTP server on 127.0.0.1: every body it
//! sends validates against OpenAI's schema (closed) and rules, responses map back,
//! errors are typed and retried when they should be, and a conversation keeps a
//! byte-identical prefix from turn to turn.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::rules::openai_request;
use crate::support::schema::{Root, assert_valid, validator};
use crate::support::servers::mock_post;
use crate::support::{fixture, prefix, tools, transcript};
use llm_context::error::{ProviderError, ProviderErrorKind};
use llm_context::openai::OpenAi;
use llm_context::prefix::PrefixLayer;
use llm_context::retry::RetryPolicy;
use llm_context::{
    ChatRequest, ChatResponse, ConfigError, ContextPolicy, ContextPolicyLayer, FinishReason,
    Message, Usage,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tower::{Service, ServiceBuilder, ServiceExt};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

const KEY: &str = "sk-test-OPENAI-0123456789abcdefghijklmnop";
const SCHEMA: &str = "openai-chat-completions.schema.json";
const CHAT: &str = "/v1/chat/completions";

fn client(base: &str) -> OpenAi {
    OpenAi::builder()
        .base_url(format!("{base}/v1"))
        .api_key(KEY)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn ok_text() -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_raw(fixture("openai-response-text.json"), "application/json")
}

/// The stack an application would build: context policy, prefix marks, the client.
fn stack(
    base: &str,
) -> impl Service<ChatRequest, Response = ChatResponse, Error = llm_context::BoxError> + Clone + use<>
{
    let policy = ContextPolicy::default().with_max_context_tokens(200_000);
    ServiceBuilder::new()
        .layer(ContextPolicyLayer::new(policy).unwrap())
        .layer(PrefixLayer::new())
        .service(client(base))
}

async fn bodies(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.body).unwrap())
        .collect()
}

fn check_body(body: &Value) {
    assert_valid(&validator(SCHEMA, Root::Request), body, "the request body");
    let broken = openai_request(body);
    assert!(broken.is_empty(), "rules broken: {broken:?}\n{body:#}");
}

#[tokio::test]
async fn sends_a_valid_body_with_the_prefix_first() {
    let server = mock_post(CHAT, ok_text()).await;
    let mut req = ChatRequest::new("gpt-5.4", transcript())
        .with_prefix(prefix())
        .with_tools(tools())
        .with_temperature(0.2);
    req.params.tool_choice = Some(llm_context::ToolChoice::Auto);
    req.params
        .extra
        .insert("response_format".into(), json!({"type": "json_object"}));

    let reply = stack(&server.uri()).oneshot(req).await.unwrap();

    let received = server.received_requests().await.unwrap();
    assert_eq!(received.len(), 1);
    let r = &received[0];
    assert_eq!(r.url.path(), "/v1/chat/completions");
    assert_eq!(r.headers["authorization"], format!("Bearer {KEY}").as_str());
    assert_eq!(r.headers["content-type"], "application/json");
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    check_body(&body);

    // The prefix in its fixed order, then the leading system message, then the tail.
    let m = body["messages"].as_array().unwrap();
    let p = prefix();
    assert_eq!(
        m[0],
        json!({"role": "system", "content": p.system_prompt().unwrap()})
    );
    assert_eq!(
        m[1],
        json!({"role": "system", "content": p.grounding()[0].text()})
    );
    assert_eq!(
        m[2],
        json!({"role": "system", "content": p.schema_block().unwrap(), "name": "schema"})
    );
    assert_eq!(
        m[3],
        json!({"role": "system", "content": "Answer in one sentence."})
    );
    assert_eq!(m[4]["content"][1]["type"], "image_url");
    assert_eq!(m.len(), 3 + transcript().len());
    assert_eq!(
        m[7]["tool_calls"][0]["function"],
        json!({"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"})
    );
    assert_eq!(
        m[8],
        json!({"role": "tool", "content": "Oslo: dry, 14 °C", "tool_call_id": "call_1"})
    );
    let key = body["prompt_cache_key"].as_str().unwrap();
    assert_eq!(key.len(), 32);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(body["response_format"], json!({"type": "json_object"}));
    assert_eq!(body["tool_choice"], "auto");
    assert!(!String::from_utf8_lossy(&r.body).contains("cache_control"));

    // The fixture's usage: 2,006 prompt tokens of which 1,920 cached.
    assert_eq!(reply.message.text(), "Hikes start at 08:00 sharp.");
    assert_eq!(reply.finish_reason, FinishReason::Stop);
    assert_eq!(reply.usage, Usage::new(86, 300, 1_920, 0));
    assert_eq!(reply.report.prompt_allowance, 200_000 - 2_048);
}

#[tokio::test]
async fn tool_calls_map_back_and_go_out_again() {
    let server = mock_post(
        CHAT,
        ResponseTemplate::new(200).set_body_raw(
            fixture("openai-response-tool-calls.json"),
            "application/json",
        ),
    )
    .await;
    let svc = stack(&server.uri());
    let mut messages = vec![Message::user("Weather in Oslo and Bergen?")];
    let req = ChatRequest::new("gpt-5.4", messages.clone()).with_tools(tools());
    let reply = svc.clone().oneshot(req).await.unwrap();

    assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
    let calls = &reply.message.tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[0].arguments_value(),
        json!({"city": "Oslo", "unit": "celsius"})
    );
    // Broken JSON from the model is kept as the string it wrote.
    assert_eq!(calls[1].arguments_value(), json!("{\"city\": \"Bergen\""));
    // 5,000 prompt tokens = 1,024 read + 3,000 written + 976 fresh.
    assert_eq!(reply.usage, Usage::new(976, 41, 1_024, 3_000));

    messages.push(reply.message.clone());
    messages.push(Message::tool_result(&calls[0].id, "get_weather", "dry"));
    messages.push(Message::tool_result(&calls[1].id, "get_weather", "rain"));
    svc.oneshot(ChatRequest::new("gpt-5.4", messages).with_tools(tools()))
        .await
        .unwrap();
    let sent = bodies(&server).await;
    check_body(&serde_json::from_str(&sent[0]).unwrap());
    let second: Value = serde_json::from_str(&sent[1]).unwrap();
    check_body(&second);
    assert_eq!(
        second["messages"][1]["tool_calls"][1]["function"]["arguments"],
        "{\"city\": \"Bergen\""
    );
}

#[tokio::test]
async fn accepts_what_compatible_servers_omit() {
    // No id, created, refusal, logprobs or usage: what llama.cpp and others may send.
    let server = mock_post(CHAT, ResponseTemplate::new(200).set_body_json(
        json!({"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}]}),
    ))
    .await;
    let reply = client(&server.uri())
        .oneshot(ChatRequest::new("llama3.2", vec![Message::user("hello")]))
        .await
        .unwrap();
    assert_eq!(reply.message.text(), "hi");
    assert_eq!(reply.finish_reason, FinishReason::Length);
    assert_eq!(reply.usage, Usage::default());
}

#[derive(Deserialize)]
struct RawBody<'a> {
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
    #[serde(borrow)]
    tools: &'a RawValue,
    prompt_cache_key: String,
}

#[tokio::test]
async fn a_conversation_keeps_a_byte_identical_prefix() {
    let server = mock_post(CHAT, ok_text()).await;
    let mut svc = stack(&server.uri());
    let mut messages = vec![
        Message::system("Answer in one sentence."),
        Message::user("q0"),
    ];
    for turn in 1..=4 {
        let req = ChatRequest::new("gpt-5.4", messages.clone())
            .with_prefix(prefix())
            .with_tools(tools());
        let reply = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(reply.report.removed_messages, 0, "nothing needs pruning");
        messages.push(reply.message);
        messages.push(Message::user(format!("q{turn}")));
    }
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 4);
    check_body(&serde_json::from_str(&sent[0]).unwrap());
    for pair in sent.windows(2) {
        let a: RawBody<'_> = serde_json::from_str(&pair[0]).unwrap();
        let b: RawBody<'_> = serde_json::from_str(&pair[1]).unwrap();
        check_body(&serde_json::from_str(&pair[1]).unwrap());
        assert_eq!(b.messages.len(), a.messages.len() + 2);
        // Every message sent before is sent again, byte for byte, in the same place.
        for (x, y) in a.messages.iter().zip(&b.messages) {
            assert_eq!(x.get(), y.get());
        }
        assert_eq!(a.tools.get(), b.tools.get());
        assert_eq!(a.prompt_cache_key, b.prompt_cache_key);
    }
    // And everything before the end of the first body's messages (the model, the prefix
    // and the history) is a byte prefix of every later body. Tools follow the messages;
    // inside a JSON string this sequence would be escaped, so the match is the array end.
    let end = sent[0].find("],\"tools\":").unwrap();
    for later in &sent[1..] {
        assert!(later.starts_with(&sent[0][..end]));
    }
}

/// Sends one request through a retrying client and returns the error and how many
/// requests the server saw.
async fn failure(template: ResponseTemplate) -> (ProviderError, usize) {
    let server = mock_post(CHAT, template).await;
    let retry = RetryPolicy::default()
        .with_max_retries(1)
        .with_base_delay(Duration::from_millis(1));
    let err = ServiceBuilder::new()
        .retry(retry)
        .service(client(&server.uri()))
        .oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    let sent = bodies(&server).await;
    for body in &sent {
        check_body(&serde_json::from_str(body).unwrap());
    }
    (err, sent.len())
}

fn error_body(kind: &str, code: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

#[tokio::test]
async fn errors_are_typed_and_only_the_right_ones_retried() {
    use ProviderErrorKind::*;
    let cases: Vec<(ResponseTemplate, ProviderErrorKind, usize)> = vec![
        (
            ResponseTemplate::new(400).set_body_json(error_body("invalid_request_error", "invalid_value", "Invalid value for 'temperature'.")),
            InvalidRequest,
            1,
        ),
        (
            ResponseTemplate::new(400).set_body_json(error_body("invalid_request_error", "context_length_exceeded",
                "This model's maximum context length is 272000 tokens. However, your messages resulted in 301234 tokens.")),
            ContextLength,
            1,
        ),
        (
            ResponseTemplate::new(404).set_body_json(error_body("invalid_request_error", "model_not_found", "The model `gpt-9` does not exist.")),
            NotFound,
            1,
        ),
        (
            ResponseTemplate::new(413).set_body_raw("<html><body>413 Request Entity Too Large</body></html>", "text/html"),
            PayloadTooLarge,
            1,
        ),
        (
            ResponseTemplate::new(429).set_body_json(error_body("insufficient_quota", "insufficient_quota", "You exceeded your current quota.")),
            QuotaExceeded,
            1,
        ),
        (
            ResponseTemplate::new(429)
                .insert_header("retry-after", "0")
                .set_body_json(error_body("requests", "rate_limit_exceeded", "Rate limit reached.")),
            RateLimited,
            2,
        ),
        (
            ResponseTemplate::new(500).set_body_json(error_body("server_error", "server_error", "The server had an error.")),
            Server,
            2,
        ),
        (
            ResponseTemplate::new(529).set_body_raw("overloaded", "text/plain"),
            Overloaded,
            2,
        ),
        (
            ResponseTemplate::new(200).set_body_raw("{\"choices\": not json", "application/json"),
            InvalidResponse,
            1,
        ),
    ];
    for (template, kind, requests) in cases {
        let (err, seen) = failure(template).await;
        assert_eq!(err.kind, kind, "{err}");
        assert_eq!(seen, requests, "{kind:?}: {err}");
        assert!(err.status.is_some());
        if kind == PayloadTooLarge || kind == InvalidResponse {
            assert!(err.raw_body().is_some(), "{kind:?} keeps the unparsed body");
        } else if kind != Overloaded {
            assert!(!err.message.is_empty() && err.raw_body().is_none(), "{err}");
        }
    }
}

#[tokio::test]
async fn a_429_waits_for_retry_after_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_json(error_body(
                    "requests",
                    "rate_limit_exceeded",
                    "Rate limit reached.",
                )),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ok_text())
        .mount(&server)
        .await;
    let started = Instant::now();
    let reply = ServiceBuilder::new()
        .retry(RetryPolicy::default().with_base_delay(Duration::from_millis(1)))
        .service(client(&server.uri()))
        .oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hi")]))
        .await
        .unwrap();
    assert_eq!(reply.message.text(), "Hikes start at 08:00 sharp.");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_truncated_body_is_a_retried_connection_error() {
    let (base, count) = crate::support::servers::truncating_server().await;
    let err = ServiceBuilder::new()
        .retry(
            RetryPolicy::default()
                .with_max_retries(1)
                .with_base_delay(Duration::from_millis(1)),
        )
        .service(client(&base))
        .oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Connection, "{err}");
    assert!(err.message.contains("body"), "{err}");
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_timeout_is_typed_and_retried() {
    let server = mock_post(CHAT, ok_text().set_delay(Duration::from_secs(3))).await;
    let slow = OpenAi::builder()
        .base_url(format!("{}/v1", server.uri()))
        .api_key(KEY)
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = ServiceBuilder::new()
        .retry(
            RetryPolicy::default()
                .with_max_retries(1)
                .with_base_delay(Duration::from_millis(1)),
        )
        .service(slow)
        .oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Timeout, "{err}");
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
#[tracing_test::traced_test]
async fn the_key_never_shows() {
    // A 401 that echoes the key, as some servers do.
    let (err, seen) = failure(ResponseTemplate::new(401).set_body_json(error_body(
        "invalid_request_error",
        "invalid_api_key",
        &format!("Incorrect API key provided: {KEY}."),
    )))
    .await;
    assert_eq!((err.kind, seen), (ProviderErrorKind::Authentication, 1));
    assert!(err.message.contains("[REDACTED]"), "{err}");
    for shown in [
        err.to_string(),
        format!("{err:?}"),
        format!("{:?}", client("http://127.0.0.1:9")),
    ] {
        assert!(!shown.contains(KEY), "{shown}");
    }
    // A retried failure is logged; the log must not carry the key either.
    let (err, _) = failure(
        ResponseTemplate::new(500).set_body_raw(format!("upstream said {KEY}"), "text/plain"),
    )
    .await;
    assert!(!format!("{err} {err:?}").contains(KEY));
    assert!(logs_contain("retrying provider call"));
    assert!(!logs_contain(KEY));
    assert!(!logs_contain("0123456789abcdefghijklmnop"));
}

#[test]
fn building_needs_a_key_for_openai_itself() {
    assert!(matches!(
        OpenAi::builder().build(),
        Err(ConfigError::MissingApiKey {
            var: "OPENAI_API_KEY"
        })
    ));
    // A local server may need none.
    assert!(
        OpenAi::builder()
            .base_url("http://127.0.0.1:11434/v1")
            .build()
            .is_ok()
    );
    assert!(matches!(
        OpenAi::builder()
            .base_url("localhost:11434")
            .api_key("k")
            .build(),
        Err(ConfigError::InvalidBaseUrl { .. })
    ));
}

#[tokio::test]
async fn a_plain_body_gets_a_prompt_cache_key_from_its_stable_head() {
    let server = mock_post(CHAT, ok_text()).await;
    let head = |system: &str| {
        vec![
            Message::system(system.to_owned()),
            Message::user("What is the capital of Norway?"),
        ]
    };
    let mut longer = head("You are terse.");
    longer.extend([Message::assistant("Oslo."), Message::user("And Sweden?")]);
    let requests = [
        ChatRequest::new("gpt-5.4", head("You are terse.")).with_tools(tools()),
        // The same head, a longer tail: the same key.
        ChatRequest::new("gpt-5.4", longer.clone()).with_tools(tools()),
        // Another system prompt: another key.
        ChatRequest::new("gpt-5.4", head("You are verbose.")).with_tools(tools()),
        // No tools, no system message, no prefix: nothing stable to key on.
        ChatRequest::new("gpt-5.4", vec![Message::user("hi")]),
    ];
    for req in requests {
        stack(&server.uri()).oneshot(req).await.unwrap();
    }
    // A key the caller sets wins.
    let mut mine = ChatRequest::new("gpt-5.4", longer).with_tools(tools());
    mine.params
        .extra
        .insert("prompt_cache_key".into(), json!("tenant-7"));
    stack(&server.uri()).oneshot(mine).await.unwrap();

    let keys: Vec<Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap()["prompt_cache_key"].clone())
        .collect();
    assert!(keys[0].is_string());
    assert_eq!(keys[0], keys[1]);
    assert_ne!(keys[0], keys[2]);
    assert_eq!(keys[3], Value::Null);
    assert_eq!(keys[4], "tenant-7");
}

#[tokio::test]
async fn organization_project_and_extra_headers_are_sent() {
    let server = mock_post(CHAT, ok_text()).await;
    let client = llm_context::openai::OpenAi::builder()
        .base_url(format!("{}/v1", server.uri()))
        .api_key("sk-test-0123456789abcdefghijklmnop")
        .organization("org-acme")
        .project("proj_agents")
        .header("x-portkey-provider", "openai")
        .build()
        .unwrap();
    client
        .oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hi")]))
        .await
        .unwrap();
    let received = &server.received_requests().await.unwrap()[0];
    assert_eq!(
        received.headers.get("openai-organization").unwrap(),
        "org-acme"
    );
    assert_eq!(
        received.headers.get("openai-project").unwrap(),
        "proj_agents"
    );
    assert_eq!(
        received.headers.get("x-portkey-provider").unwrap(),
        "openai"
    );
    let err = llm_context::openai::OpenAi::builder()
        .header("authorization", "Bearer other")
        .base_url("http://127.0.0.1:9/v1")
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("sets this header itself"), "{err}");
}

#[tokio::test]
async fn unmodelled_response_fields_are_kept_for_the_caller() {
    let server = mock_post(CHAT, ok_text()).await;
    let reply = client(&server.uri())
        .oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hi")]))
        .await
        .unwrap();
    let fields = &reply.provider_fields;
    assert_eq!(fields["id"], "chatcmpl-CA7x2Lq9ZkR4vYb1TnW0pE3s");
    assert_eq!(fields["model"], "gpt-5.4-mini-2026-03-17");
    assert_eq!(fields["object"], "chat.completion");
    assert_eq!(fields["created"], 1_767_225_600);
    assert_eq!(fields["service_tier"], "default");
    // What the neutral response models is not repeated here.
    assert!(fields.get("choices").is_none() && fields.get("usage").is_none());
}

#[tokio::test]
async fn a_choices_and_a_messages_unmodelled_fields_are_kept_too() {
    let answer = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-5.4",
        "choices": [{"index": 0, "finish_reason": "stop",
            "logprobs": {"content": [{"token": "Oslo", "logprob": -0.01, "bytes": [79, 115, 108, 111], "top_logprobs": []}], "refusal": null},
            "message": {"role": "assistant", "content": "Oslo.", "refusal": null,
                        "annotations": [{"type": "url_citation", "url_citation": {"url": "https://example.org/oslo", "title": "Oslo", "start_index": 0, "end_index": 4}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    });
    assert_valid(
        &validator("openai-chat-completions.schema.json", Root::Response),
        &answer,
        "the answer",
    );
    let server = mock_post(CHAT, ResponseTemplate::new(200).set_body_json(answer)).await;
    let reply = client(&server.uri())
        .oneshot(ChatRequest::new(
            "gpt-5.4",
            vec![Message::user("Capital of Norway?")],
        ))
        .await
        .unwrap();
    let fields = &reply.provider_fields;
    assert_eq!(fields["choice"]["logprobs"]["content"][0]["token"], "Oslo");
    assert_eq!(fields["message"]["annotations"][0]["type"], "url_citation");
    // What the neutral message models, and nulls, are not repeated.
    assert!(fields["choice"].get("index").is_none() && fields["choice"].get("message").is_none());
    assert!(fields["message"].get("role").is_none() && fields["message"].get("refusal").is_none());
}

#[tokio::test]
async fn a_servers_reasoning_content_is_kept_and_never_sent_back() {
    let answer = json!({
        "id": "chatcmpl-r1", "object": "chat.completion", "created": 1, "model": "deepseek-reasoner",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "Oslo.",
            "reasoning_content": "The capital of Norway is Oslo."}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}
    });
    let server = mock_post(CHAT, ResponseTemplate::new(200).set_body_json(answer)).await;
    let mut svc = client(&server.uri());
    let mut messages = vec![Message::user("Capital of Norway?")];
    // The client takes `ChatRequest` and `Streaming` requests: `ready` is told which.
    let reply = ServiceExt::<ChatRequest>::ready(&mut svc)
        .await
        .unwrap()
        .call(ChatRequest::new("deepseek-reasoner", messages.clone()))
        .await
        .unwrap();
    assert_eq!(
        reply.message.reasoning(),
        [llm_context::Reasoning::Text {
            text: "The capital of Norway is Oslo.".into()
        }]
    );
    messages.push(reply.message);
    messages.push(Message::user("And Sweden?"));
    ServiceExt::<ChatRequest>::ready(&mut svc)
        .await
        .unwrap()
        .call(ChatRequest::new("deepseek-reasoner", messages))
        .await
        .unwrap();
    let received = server.received_requests().await.unwrap();
    let body: Value = serde_json::from_slice(&received[1].body).unwrap();
    // DeepSeek refuses reasoning_content in a request: the message goes back without it.
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": "Oslo."})
    );
}
