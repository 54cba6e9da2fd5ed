//! The Anthropic client against a real HTTP server on 127.0.0.1: every body it sends
//! validates against Anthropic's schema (closed) and rules, cache breakpoints land where
//! the hints say, responses map back, errors are typed and retried when they should be,
//! a conversation keeps a byte-identical prefix, and the token-counting endpoint counts.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::rules::{anthropic_markers, anthropic_request};
use crate::support::schema::{Root, assert_valid, validator};
use crate::support::servers::mock_post;
use crate::support::{fixture, prefix, tools, transcript};
use llm_context::anthropic::{Anthropic, AnthropicTokenCounter};
use llm_context::error::{ProviderError, ProviderErrorKind};
use llm_context::prefix::PrefixLayer;
use llm_context::retry::RetryPolicy;
use llm_context::tokens::TokenCounter;
use llm_context::{
    CacheHints, CacheTtl, Catalog, ChatRequest, ChatResponse, ConfigError, ContextPolicy,
    ContextPolicyLayer, FinishReason, Message, Usage,
};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tower::{Service, ServiceBuilder, ServiceExt};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const KEY: &str = "sk-ant-api03-TEST-0123456789abcdefghijklmnop";
const SCHEMA: &str = "anthropic-messages.schema.json";
const MESSAGES: &str = "/v1/messages";
const MODEL: &str = "claude-sonnet-4-6";
const MARK_5M: &str = r#","cache_control":{"type":"ephemeral"}"#;

fn client(base: &str) -> Anthropic {
    Anthropic::builder()
        .base_url(base)
        .api_key(KEY)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

fn ok_text() -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_raw(fixture("anthropic-response-text.json"), "application/json")
}

fn stack(
    base: &str,
    prefix_layer: PrefixLayer,
) -> impl Service<ChatRequest, Response = ChatResponse, Error = llm_context::BoxError> + Clone + use<>
{
    let policy = ContextPolicy::default().with_max_context_tokens(1_000_000);
    ServiceBuilder::new()
        .layer(ContextPolicyLayer::new(policy).unwrap())
        .layer(prefix_layer)
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
    let broken = anthropic_request(body);
    assert!(broken.is_empty(), "rules broken: {broken:?}\n{body:#}");
}

fn full_request() -> ChatRequest {
    ChatRequest::new(MODEL, transcript())
        .with_prefix(prefix())
        .with_tools(tools())
}

#[tokio::test]
async fn sends_a_valid_body_with_system_tools_and_results_in_place() {
    let server = mock_post(MESSAGES, ok_text()).await;
    let mut req = full_request().with_temperature(0.3);
    req.params.tool_choice = Some(llm_context::ToolChoice::Required);
    req.params.extra.insert("seed".into(), json!(7)); // OpenAI-only: not sent
    let reply = stack(&server.uri(), PrefixLayer::new())
        .oneshot(req)
        .await
        .unwrap();

    let received = server.received_requests().await.unwrap();
    let r = &received[0];
    assert_eq!(r.url.path(), "/v1/messages");
    assert_eq!(r.headers["x-api-key"], KEY);
    assert_eq!(r.headers["anthropic-version"], "2023-06-01");
    assert!(r.headers.get("authorization").is_none());
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    check_body(&body);

    // System: the prefix in its fixed order, then the leading system message.
    let p = prefix();
    let system: Vec<&str> = body["system"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    let grounding = p.grounding()[0].text();
    assert_eq!(
        system,
        [
            p.system_prompt().unwrap(),
            grounding.as_ref(),
            p.schema_block().unwrap(),
            "Answer in one sentence."
        ]
    );
    let m = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
            "user"
        ]
    );
    assert_eq!(
        m[0]["content"][1]["source"],
        json!({"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="})
    );
    // Two calls, no empty text block; both results in the next user message.
    assert_eq!(m[3]["content"].as_array().unwrap().len(), 2);
    assert_eq!(m[3]["content"][0]["type"], "tool_use");
    assert_eq!(m[3]["content"][0]["input"], json!({"city": "Oslo"}));
    assert_eq!(m[4]["content"][0]["tool_use_id"], "call_1");
    assert_eq!(m[4]["content"][1]["tool_use_id"], "call_2");
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
    assert_eq!(body["max_tokens"], 4_096);
    // Neither OpenAI-only fields nor sampling fields, which this API refuses.
    assert!(body.get("seed").is_none());
    assert!(body.get("temperature").is_none());

    // claude-sonnet-4-6 caches from 2,048 tokens: the ~60-token tools alone are too
    // short for a breakpoint; the prefix, the history and the whole request are not.
    assert_eq!(
        anthropic_markers(&body),
        [
            ("system[3]".to_owned(), "5m".to_owned()),
            ("messages[5].content[0]".to_owned(), "5m".to_owned()),
            ("messages[6].content[0]".to_owned(), "5m".to_owned())
        ]
    );

    assert_eq!(
        reply.message.text(),
        "Rule 17: members log hike 17 in the club book within a week."
    );
    assert_eq!(reply.finish_reason, FinishReason::Stop);
    assert_eq!(
        reply.usage,
        Usage::new(50, 120, 20_000, 3_000).with_cache_write_1h(2_000)
    );
}

#[tokio::test]
async fn breakpoints_follow_the_configured_ttls() {
    let server = mock_post(MESSAGES, ok_text()).await;
    // A catalog whose minimum lets even the short tool list be cached.
    let catalog = Catalog::builtin()
        .with_overrides_json(&format!(
            r#"{{"models": {{"{MODEL}": {{"cache_min_tokens": 16}}}}}}"#
        ))
        .unwrap();
    let layer = PrefixLayer::new()
        .with_catalog(Arc::new(catalog))
        .with_breakpoints(
            CacheHints::NONE
                .with_tools(Some(CacheTtl::OneHour))
                .with_prefix(Some(CacheTtl::OneHour))
                .with_history(Some(CacheTtl::FiveMinutes)),
        )
        .unwrap();
    stack(&server.uri(), layer)
        .oneshot(full_request())
        .await
        .unwrap();
    let body: Value = serde_json::from_str(&bodies(&server).await[0]).unwrap();
    check_body(&body);
    let markers = anthropic_markers(&body);
    // The request's two tools, then the stack's read tool: the marker is on the last.
    assert_eq!(body["tools"][2]["name"], "read_context_artifact");
    assert_eq!(
        markers,
        [
            ("tools[2]".to_owned(), "1h".to_owned()),
            ("system[3]".to_owned(), "1h".to_owned()),
            ("messages[5].content[0]".to_owned(), "5m".to_owned())
        ]
    );
}

#[tokio::test]
async fn hints_set_by_hand_are_made_valid() {
    // Straight to the client, with hints no prefix layer would produce: 5m then 1h.
    let server = mock_post(MESSAGES, ok_text()).await;
    let mut req = full_request();
    req.cache = CacheHints::NONE
        .with_tools(Some(CacheTtl::FiveMinutes))
        .with_prefix(Some(CacheTtl::OneHour))
        .with_history(Some(CacheTtl::OneHour));
    client(&server.uri()).oneshot(req).await.unwrap();
    let body: Value = serde_json::from_str(&bodies(&server).await[0]).unwrap();
    check_body(&body);
    assert_eq!(anthropic_markers(&body).len(), 3);
}

#[tokio::test]
async fn tool_use_responses_map_back() {
    let server = mock_post(
        MESSAGES,
        ResponseTemplate::new(200).set_body_raw(
            fixture("anthropic-response-tool-use.json"),
            "application/json",
        ),
    )
    .await;
    let svc = stack(&server.uri(), PrefixLayer::new());
    let mut messages = vec![Message::user("Weather in Oslo and Bergen?")];
    let reply = svc
        .clone()
        .oneshot(ChatRequest::new(MODEL, messages.clone()).with_tools(tools()))
        .await
        .unwrap();
    assert_eq!(reply.finish_reason, FinishReason::ToolCalls);
    assert_eq!(reply.message.text(), "Checking both cities.");
    let calls = reply.message.tool_calls.clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].arguments_value(), json!({"city": "Bergen"}));
    // Null cache fields read as 0.
    assert_eq!(reply.usage, Usage::new(812, 95, 0, 0));

    // The results go back as one user message of tool_result blocks.
    messages.push(reply.message);
    messages.push(Message::tool_result(&calls[0].id, "get_weather", "dry"));
    messages.push(Message::tool_result(&calls[1].id, "get_weather", "rain"));
    svc.oneshot(ChatRequest::new(MODEL, messages).with_tools(tools()))
        .await
        .unwrap();
    let sent = bodies(&server).await;
    check_body(&serde_json::from_str(&sent[0]).unwrap());
    let second: Value = serde_json::from_str(&sent[1]).unwrap();
    check_body(&second);
    let last = second["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"].as_array().unwrap().len(), 2);
}

#[derive(Deserialize)]
struct RawBody<'a> {
    #[serde(borrow)]
    system: &'a RawValue,
    #[serde(borrow)]
    tools: &'a RawValue,
    #[serde(borrow)]
    messages: Vec<&'a RawValue>,
}

#[tokio::test]
async fn a_conversation_keeps_a_byte_identical_prefix_and_breakpoints() {
    let server = mock_post(MESSAGES, ok_text()).await;
    let mut svc = stack(&server.uri(), PrefixLayer::new());
    let mut messages = vec![
        Message::system("Answer in one sentence."),
        Message::user("q0"),
    ];
    for turn in 1..=4 {
        let req = ChatRequest::new(MODEL, messages.clone())
            .with_prefix(prefix())
            .with_tools(tools());
        let reply = svc.ready().await.unwrap().call(req).await.unwrap();
        assert_eq!(reply.report.removed_messages, 0, "nothing needs pruning");
        messages.push(reply.message);
        messages.push(Message::user(format!("q{turn}")));
    }
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 4);
    for (turn, text) in sent.iter().enumerate() {
        let body: Value = serde_json::from_str(text).unwrap();
        check_body(&body);
        // Same places every turn: the end of the system prompt, the message before the
        // newest request (none on the first turn: there is no history yet), and the
        // newest request, the rolling breakpoint the next turn reads from.
        let n = body["messages"].as_array().unwrap().len();
        let mut expected = vec![("system[3]".to_owned(), "5m".to_owned())];
        if turn > 0 {
            // The model's answer, its two text blocks kept apart: the last of them.
            let last = body["messages"][n - 2]["content"].as_array().unwrap().len() - 1;
            expected.push((
                format!("messages[{}].content[{last}]", n - 2),
                "5m".to_owned(),
            ));
        }
        expected.push((format!("messages[{}].content[0]", n - 1), "5m".to_owned()));
        assert_eq!(anthropic_markers(&body), expected, "turn {turn}");
    }
    for pair in sent.windows(2) {
        let a: RawBody<'_> = serde_json::from_str(&pair[0]).unwrap();
        let b: RawBody<'_> = serde_json::from_str(&pair[1]).unwrap();
        // Tools and system, markers included, are the same bytes.
        assert_eq!(a.tools.get(), b.tools.get());
        assert_eq!(a.system.get(), b.system.get());
        // The history is the same bytes but for where its moving marker sits.
        assert_eq!(b.messages.len(), a.messages.len() + 2);
        for (x, y) in a.messages.iter().zip(&b.messages) {
            assert_eq!(x.get().replace(MARK_5M, ""), y.get().replace(MARK_5M, ""));
        }
    }
}

async fn failure(template: ResponseTemplate) -> (ProviderError, usize) {
    let server = mock_post(MESSAGES, template).await;
    let retry = RetryPolicy::default()
        .with_max_retries(1)
        .with_base_delay(Duration::from_millis(1));
    let err = ServiceBuilder::new()
        .retry(retry)
        .service(client(&server.uri()))
        .oneshot(ChatRequest::new(MODEL, vec![Message::user("hi")]))
        .await
        .unwrap_err();
    let sent = bodies(&server).await;
    for body in &sent {
        check_body(&serde_json::from_str(body).unwrap());
    }
    (err, sent.len())
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"})
}

#[tokio::test]
async fn errors_are_typed_and_only_the_right_ones_retried() {
    use ProviderErrorKind::*;
    let cases: Vec<(ResponseTemplate, ProviderErrorKind, Option<&str>, usize)> = vec![
        (
            ResponseTemplate::new(400).set_body_json(error_body(
                "invalid_request_error",
                "messages: text content blocks must be non-empty",
            )),
            InvalidRequest,
            Some("invalid_request_error"),
            1,
        ),
        (
            ResponseTemplate::new(400).set_body_json(error_body(
                "invalid_request_error",
                "prompt is too long: 1012345 tokens > 1000000 maximum",
            )),
            ContextLength,
            Some("invalid_request_error"),
            1,
        ),
        (
            ResponseTemplate::new(401)
                .set_body_json(error_body("authentication_error", "invalid x-api-key")),
            Authentication,
            Some("authentication_error"),
            1,
        ),
        (
            ResponseTemplate::new(404)
                .set_body_json(error_body("not_found_error", "model: claude-9")),
            NotFound,
            Some("not_found_error"),
            1,
        ),
        (
            ResponseTemplate::new(413).set_body_json(error_body(
                "request_too_large",
                "Request exceeds the maximum allowed number of bytes.",
            )),
            PayloadTooLarge,
            Some("request_too_large"),
            1,
        ),
        (
            ResponseTemplate::new(429)
                .insert_header("retry-after", "0")
                .insert_header("request-id", "req_429")
                .set_body_json(error_body(
                    "rate_limit_error",
                    "Number of request tokens has exceeded your per-minute rate limit",
                )),
            RateLimited,
            Some("rate_limit_error"),
            2,
        ),
        (
            ResponseTemplate::new(500)
                .set_body_json(error_body("api_error", "Internal server error")),
            Server,
            Some("api_error"),
            2,
        ),
        (
            ResponseTemplate::new(529).set_body_json(error_body("overloaded_error", "Overloaded")),
            Overloaded,
            Some("overloaded_error"),
            2,
        ),
        (
            ResponseTemplate::new(200).set_body_raw("{\"content\": [", "application/json"),
            InvalidResponse,
            None,
            1,
        ),
    ];
    for (template, kind, error_type, requests) in cases {
        let (err, seen) = failure(template).await;
        assert_eq!(err.kind, kind, "{err}");
        assert_eq!(err.error_type(), error_type, "{err}");
        assert_eq!(seen, requests, "{kind:?}: {err}");
        if kind == RateLimited {
            assert_eq!(err.retry_after, Some(Duration::ZERO));
            assert_eq!(err.request_id(), Some("req_429"));
        }
    }
}

#[tokio::test]
async fn a_truncated_body_and_a_timeout_are_retried() {
    let (base, count) = crate::support::servers::truncating_server().await;
    let retry = RetryPolicy::default()
        .with_max_retries(1)
        .with_base_delay(Duration::from_millis(1));
    let err = ServiceBuilder::new()
        .retry(retry.clone())
        .service(client(&base))
        .oneshot(ChatRequest::new(MODEL, vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Connection, "{err}");
    assert_eq!(count.load(Ordering::SeqCst), 2);

    let server = mock_post(MESSAGES, ok_text().set_delay(Duration::from_secs(3))).await;
    let slow = Anthropic::builder()
        .base_url(server.uri())
        .api_key(KEY)
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = ServiceBuilder::new()
        .retry(retry)
        .service(slow)
        .oneshot(ChatRequest::new(MODEL, vec![Message::user("hi")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Timeout, "{err}");
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn counts_tokens_with_the_endpoint() {
    let server = MockServer::start().await;
    // 1,200 tokens for a request without tools, 1,500 with them.
    Mock::given(method("POST"))
        .and(path("/v1/messages/count_tokens"))
        .respond_with(|req: &Request| {
            let body: Value = serde_json::from_slice(&req.body).unwrap();
            let n = if body.get("tools").is_some() {
                1_500
            } else {
                1_200
            };
            ResponseTemplate::new(200).set_body_json(json!({"input_tokens": n}))
        })
        .mount(&server)
        .await;
    let counter = AnthropicTokenCounter::new(client(&server.uri()), MODEL);
    assert_eq!(counter.count_messages(&transcript()).await.unwrap(), 1_200);
    assert_eq!(counter.count_tools(&tools()).await.unwrap(), 300);
    assert_eq!(counter.count_messages(&[]).await.unwrap(), 0);
    assert_eq!(counter.count_tools(&[]).await.unwrap(), 0);

    let sent = server.received_requests().await.unwrap();
    assert_eq!(sent.len(), 3, "empty inputs make no call");
    let first: Value = serde_json::from_slice(&sent[0].body).unwrap();
    assert_eq!(sent[0].headers["x-api-key"], KEY);
    assert_eq!(first["model"], MODEL);
    assert_eq!(first["system"][0]["text"], "Answer in one sentence.");
    assert!(first.get("max_tokens").is_none());
    assert!(!String::from_utf8_lossy(&sent[0].body).contains("cache_control"));
}

#[tokio::test]
async fn counting_failures_are_errors() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(401)
                .set_body_json(error_body("authentication_error", "invalid x-api-key")),
        )
        .mount(&server)
        .await;
    let counter = AnthropicTokenCounter::new(client(&server.uri()), MODEL);
    let err = counter
        .count_messages(&[Message::user("hi")])
        .await
        .unwrap_err();
    let err = err.downcast_ref::<ProviderError>().unwrap();
    assert_eq!(err.kind, ProviderErrorKind::Authentication);
}

#[test]
fn the_key_is_required_and_never_shown() {
    assert!(matches!(
        Anthropic::builder().build(),
        Err(ConfigError::MissingApiKey {
            var: "ANTHROPIC_API_KEY"
        })
    ));
    let shown = format!("{:?}", client("http://127.0.0.1:9"));
    assert!(
        !shown.contains(KEY) && shown.contains("[REDACTED]"),
        "{shown}"
    );
}

#[tokio::test]
async fn extra_headers_are_sent_and_the_clients_own_are_refused() {
    let server = mock_post(MESSAGES, ok_text()).await;
    let client = Anthropic::builder()
        .base_url(server.uri())
        .api_key(KEY)
        .header("anthropic-beta", "context-management-2025-06-27")
        .header("x-gateway-route", "eu-1")
        .build()
        .unwrap();
    // Values may be credentials: never in Debug output.
    assert!(!format!("{client:?}").contains("eu-1"));
    client
        .oneshot(ChatRequest::new(MODEL, vec![Message::user("hi")]))
        .await
        .unwrap();
    let received = &server.received_requests().await.unwrap()[0];
    assert_eq!(
        received.headers.get("anthropic-beta").unwrap(),
        "context-management-2025-06-27"
    );
    assert_eq!(received.headers.get("x-gateway-route").unwrap(), "eu-1");
    assert_eq!(received.headers.get("x-api-key").unwrap(), KEY);

    for (name, value, reason) in [
        ("x-api-key", "other", "sets this header itself"),
        ("Authorization", "Bearer x", "sets this header itself"),
        ("anthropic-version", "2099-01-01", "sets this header itself"),
        ("bad name", "v", "not a valid header name"),
        ("x-ok", "line\nbreak-secret", "not a valid header value"),
    ] {
        let err = Anthropic::builder()
            .api_key(KEY)
            .header(name, value)
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains(reason) && err.contains(name), "{err}");
        assert!(!err.contains("secret"), "the value is never shown: {err}");
    }
}

#[tokio::test]
async fn a_bearer_token_alone_is_enough_and_never_shown() {
    let server = mock_post(MESSAGES, ok_text()).await;
    let token = "gw-0123456789abcdefghijklmnop";
    let client = Anthropic::builder()
        .base_url(server.uri())
        .auth_token(token)
        .build()
        .unwrap();
    assert!(!format!("{client:?}").contains(token));
    client
        .oneshot(ChatRequest::new(MODEL, vec![Message::user("hi")]))
        .await
        .unwrap();
    let received = &server.received_requests().await.unwrap()[0];
    assert_eq!(
        received.headers.get("authorization").unwrap(),
        &format!("Bearer {token}")
    );
    assert!(received.headers.get("x-api-key").is_none());
    // Neither a key nor a token: refused when built.
    assert!(Anthropic::builder().build().is_err());
}

#[tokio::test]
async fn unmodelled_response_fields_are_kept_for_the_caller() {
    let server = mock_post(MESSAGES, ok_text()).await;
    let reply = client(&server.uri())
        .oneshot(ChatRequest::new(MODEL, vec![Message::user("hi")]))
        .await
        .unwrap();
    let fields = &reply.provider_fields;
    assert_eq!(fields["id"], "msg_01XFDUDYJgAACzvnptvVoYEL");
    assert_eq!(fields["model"], "claude-sonnet-4-6");
    assert_eq!(fields["type"], "message");
    assert_eq!(fields["stop_sequence"], Value::Null);
    assert!(fields.get("content").is_none() && fields.get("usage").is_none());
}

#[tokio::test]
async fn blocks_the_message_has_no_place_for_are_kept_whole() {
    let answer = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "Oslo"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "text", "text": "Oslo."}
        ],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 3}
    });
    let server = mock_post(MESSAGES, ResponseTemplate::new(200).set_body_json(answer)).await;
    let reply = client(&server.uri())
        .oneshot(ChatRequest::new(
            MODEL,
            vec![Message::user("Capital of Norway?")],
        ))
        .await
        .unwrap();
    assert_eq!(reply.message.text(), "Oslo.");
    let kept = reply.provider_fields["content"].as_array().unwrap();
    assert_eq!(kept.len(), 2);
    assert_eq!(kept[0]["input"]["query"], "Oslo");
    assert_eq!(kept[1]["type"], "web_search_tool_result");
}

#[tokio::test]
async fn a_tool_loop_with_extended_thinking_sends_the_thinking_back_before_its_tool_use() {
    // Every answer: thinking (signed), then a tool call, as Claude answers with thinking
    // on; the second request must carry that thinking block, unchanged, first.
    let answer = json!({
        "id": "msg_think", "type": "message", "role": "assistant", "model": MODEL,
        "content": [
            {"type": "thinking", "thinking": "The user wants the weather; call the tool.",
             "signature": "EqQBCkgIARABGAIiQL2uSig"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
             "input": {"city": "Oslo"}}
        ],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 40, "output_tokens": 90}
    });
    let server = mock_post(MESSAGES, ResponseTemplate::new(200).set_body_json(answer)).await;
    let mut svc = stack(&server.uri(), PrefixLayer::new());
    let mut params = llm_context::GenerationParams::default();
    params.extra.insert(
        "thinking".into(),
        json!({"type": "enabled", "budget_tokens": 2_048}),
    );
    params.max_output_tokens = Some(4_096);
    let mut messages = vec![Message::user("What is the weather in Oslo?")];
    let first = ChatRequest::new(MODEL, messages.clone())
        .with_tools(tools())
        .with_params(params.clone());
    let reply = svc.ready().await.unwrap().call(first).await.unwrap();
    let thinking = reply.message.reasoning().to_vec();
    assert_eq!(thinking.len(), 2);
    assert!(matches!(
        &thinking[0],
        llm_context::Reasoning::Thinking { signature, .. } if signature == "EqQBCkgIARABGAIiQL2uSig"
    ));
    // The estimate counts the reasoning the message carries.
    let bare = Message::assistant_tool_calls("", reply.message.tool_calls.to_vec());
    assert!(
        llm_context::tokens::estimate_one(&reply.message)
            > llm_context::tokens::estimate_one(&bare)
    );
    messages.push(reply.message);
    messages.push(Message::tool_result(
        "toolu_1",
        "get_weather",
        "Oslo: dry, 14 °C",
    ));
    let second = ChatRequest::new(MODEL, messages)
        .with_tools(tools())
        .with_params(params);
    svc.ready().await.unwrap().call(second).await.unwrap();

    for text in bodies(&server).await {
        let body: Value = serde_json::from_str(&text).unwrap();
        check_body(&body);
        assert_eq!(body["thinking"]["type"], "enabled");
    }
    let body: Value = serde_json::from_str(&bodies(&server).await[1]).unwrap();
    let assistant = &body["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    let content = assistant["content"].as_array().unwrap();
    assert_eq!(
        content[0],
        json!({"type": "thinking", "thinking": "The user wants the weather; call the tool.",
               "signature": "EqQBCkgIARABGAIiQL2uSig"})
    );
    assert_eq!(
        content[1],
        json!({"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"})
    );
    assert_eq!(content[2]["type"], "tool_use");
    assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
}

#[tokio::test]
async fn reasoning_effort_turns_on_thinking_and_an_explicit_thinking_object_wins() {
    let server = mock_post(MESSAGES, ok_text()).await;
    let send = |extra: Vec<(&str, Value)>| {
        let mut params = llm_context::GenerationParams::default();
        params.max_output_tokens = Some(4_096);
        for (k, v) in extra {
            params.extra.insert(k.into(), v);
        }
        client(&server.uri())
            .oneshot(ChatRequest::new(MODEL, vec![Message::user("hi")]).with_params(params))
    };
    send(vec![("reasoning_effort", json!("high"))])
        .await
        .unwrap();
    send(vec![("reasoning_effort", json!("low"))])
        .await
        .unwrap();
    send(vec![
        ("reasoning_effort", json!("high")),
        (
            "thinking",
            json!({"type": "enabled", "budget_tokens": 2_000}),
        ),
    ])
    .await
    .unwrap();
    send(vec![("reasoning_effort", json!("minimal"))])
        .await
        .unwrap();
    let bodies: Vec<Value> = bodies(&server)
        .await
        .iter()
        .map(|b| serde_json::from_str(b).unwrap())
        .collect();
    for body in &bodies {
        check_body(body);
        assert!(body.get("reasoning_effort").is_none());
    }
    // high: a 16,384-token budget, and the answer keeps its 4,096 on top of it.
    assert_eq!(
        bodies[0]["thinking"],
        json!({"type": "enabled", "budget_tokens": 16_384})
    );
    assert_eq!(bodies[0]["max_tokens"], 16_384 + 4_096);
    // low: 1,024, under the 4,096 already asked for.
    assert_eq!(bodies[1]["thinking"]["budget_tokens"], 1_024);
    assert_eq!(bodies[1]["max_tokens"], 4_096);
    // An explicit object passes through as it is.
    assert_eq!(
        bodies[2]["thinking"],
        json!({"type": "enabled", "budget_tokens": 2_000})
    );
    assert_eq!(bodies[2]["max_tokens"], 4_096);
    assert!(bodies[3].get("thinking").is_none());
}
