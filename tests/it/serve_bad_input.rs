//! Wrongly typed fields on both routes of `serve`: each is refused with 400 in the
//! route's error shape, naming the field and the type it must have, and the upstream is
//! sent nothing; never dropped and answered 200. The same fields well typed still pass,
//! and arrive upstream as the client wrote them.

use crate::support::proxy::{
    anthropic_proxy, anthropic_upstream, json_of, openai_proxy, openai_upstream,
};
use serde_json::{Value, json};
use wiremock::MockServer;

fn chat() -> Value {
    json!({
        "model": "gpt-5.4",
        "messages": [
            {"role": "system", "content": "You are an SRE assistant."},
            {"role": "user", "content": "Warum schlug das Deployment fehl? なぜ?\nE 接続拒否"}
        ],
        "tools": [{"type": "function", "function": {
            "name": "fetch_logs", "description": "Fetch a unit's logs",
            "parameters": {"type": "object", "properties": {"unit": {"type": "string"}}}}}]
    })
}

fn messages() -> Value {
    json!({
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are an SRE assistant."}],
        "tools": [{"name": "fetch_logs", "description": "Fetch a unit's logs",
                   "input_schema": {"type": "object", "properties": {"unit": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": "Warum schlug das Deployment fehl? なぜ?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Die Logs zuerst."},
                {"type": "tool_use", "id": "toolu_1", "name": "fetch_logs", "input": {"unit": "api"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "E connexion refusée 接続拒否"}]},
                {"type": "text", "text": "Und jetzt?"}
            ]}
        ]
    })
}

async fn post(url: &str, route: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}{route}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// `body` with the value at `pointer` (a JSON pointer) set to `value`.
fn with(mut body: Value, pointer: &str, value: Value) -> Value {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let parent = body.pointer_mut(parent).unwrap();
    match parent {
        Value::Array(items) => items[key.parse::<usize>().unwrap()] = value,
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
        }
        _ => panic!("{pointer} is not in an object or array"),
    }
    body
}

/// Each case: the JSON pointer set, the value, and the words the refusal must hold (the
/// field, then the type it must have).
type Case = (&'static str, Value, &'static str, &'static str);

fn chat_cases() -> Vec<Case> {
    let big = Value::Number(serde_json::Number::from_f64(18_446_744_073_709_551_616.0).unwrap());
    vec![
        ("/stream", json!("true"), "stream", "boolean"),
        ("/stream", json!(1), "stream", "boolean"),
        ("/stream", json!({}), "stream", "boolean"),
        (
            "/stream_options",
            json!("include_usage"),
            "stream_options",
            "object",
        ),
        (
            "/stream_options",
            json!({"include_usage": "yes"}),
            "stream_options.include_usage",
            "boolean",
        ),
        (
            "/tool_choice",
            json!(5),
            "tool_choice",
            "string or an object",
        ),
        ("/tool_choice", json!("bogus"), "tool_choice", "\"auto\""),
        (
            "/tool_choice",
            json!({"type": "function", "function": {"name": "delete_prod"}}),
            "tool_choice",
            "delete_prod",
        ),
        ("/max_tokens", big.clone(), "max_tokens", "integer"),
        ("/max_tokens", json!(100.5), "max_tokens", "integer"),
        ("/max_tokens", json!("100"), "max_tokens", "integer"),
        (
            "/max_completion_tokens",
            big,
            "max_completion_tokens",
            "integer",
        ),
        (
            "/max_completion_tokens",
            json!(-1),
            "max_completion_tokens",
            "integer",
        ),
        ("/temperature", json!("0.2"), "temperature", "number"),
        ("/top_p", json!([1]), "top_p", "number"),
        ("/seed", json!(1.5), "seed", "integer"),
        (
            "/parallel_tool_calls",
            json!("false"),
            "parallel_tool_calls",
            "boolean",
        ),
    ]
}

fn messages_cases() -> Vec<Case> {
    vec![
        ("/temperature", json!("0.2"), "temperature", "number"),
        ("/temperature", json!([0.2]), "temperature", "number"),
        (
            "/temperature",
            json!({"value": 0.2}),
            "temperature",
            "number",
        ),
        ("/top_p", json!("0.9"), "top_p", "number"),
        (
            "/stop_sequences",
            json!("END"),
            "stop_sequences",
            "array of strings",
        ),
        ("/stop_sequences", json!([1]), "stop_sequences[0]", "string"),
        (
            "/max_tokens",
            json!(18_446_744_073_709_551_615u64),
            "max_tokens",
            "integer",
        ),
        ("/max_tokens", json!("1024"), "max_tokens", "integer"),
        ("/stream", json!("true"), "stream", "boolean"),
        ("/stream", json!(1), "stream", "boolean"),
        (
            "/messages/2/content/1/text",
            json!(1),
            "messages[2].content[1].text",
            "string",
        ),
        (
            "/messages/1/content/0/text",
            json!(1),
            "messages[1].content[0].text",
            "string",
        ),
        (
            "/messages/2/content/0/content/0/text",
            json!(1),
            "messages[2].content[0].content[0].text",
            "string",
        ),
        ("/system/0/text", json!(1), "system[0].text", "string"),
        ("/tool_choice", json!(5), "tool_choice", "object"),
        (
            "/tool_choice",
            json!({"type": "tool", "name": "delete_prod"}),
            "tool_choice",
            "delete_prod",
        ),
        (
            "/tool_choice",
            json!({"type": "auto", "disable_parallel_tool_use": "yes"}),
            "tool_choice.disable_parallel_tool_use",
            "boolean",
        ),
    ]
}

/// The refusal's message in the route's error shape, checked as that shape.
fn refusal_message(route: &str, body: &Value) -> String {
    if route == "/v1/messages" {
        assert_eq!(body["type"], "error", "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    } else {
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        assert!(body["error"].get("code").is_some(), "{body}");
    }
    body["error"]["message"].as_str().unwrap().to_owned()
}

async fn refused_each(
    route: &str,
    base: Value,
    cases: Vec<Case>,
    upstream: &MockServer,
    url: &str,
) {
    let mut wrong = Vec::new();
    for (pointer, value, field, expected) in cases {
        let body = with(base.clone(), pointer, value.clone());
        let response = post(url, route, &body).await;
        let status = response.status();
        let answer = json_of(response).await;
        if status != 400 {
            wrong.push(format!("{pointer} = {value}: answered {status} {answer}"));
            continue;
        }
        let message = refusal_message(route, &answer);
        if !message.contains(field) || !message.contains(expected) {
            wrong.push(format!(
                "{pointer} = {value}: {message:?} should name {field:?} and {expected:?}"
            ));
        }
    }
    let sent = upstream.received_requests().await.unwrap();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        sent.is_empty(),
        "the upstream was sent {} requests",
        sent.len()
    );
}

#[tokio::test]
async fn wrongly_typed_chat_completions_fields_are_refused_naming_the_field() {
    let upstream = openai_upstream().await;
    let url = openai_proxy(&upstream).await;
    refused_each(
        "/v1/chat/completions",
        chat(),
        chat_cases(),
        &upstream,
        &url,
    )
    .await;
}

#[tokio::test]
async fn wrongly_typed_messages_fields_are_refused_naming_the_field() {
    let upstream = anthropic_upstream().await;
    let url = anthropic_proxy(&upstream).await;
    refused_each(
        "/v1/messages",
        messages(),
        messages_cases(),
        &upstream,
        &url,
    )
    .await;
}

#[tokio::test]
async fn a_messages_client_is_refused_the_same_in_front_of_openai() {
    // The cross-format path reads the body the same way: nothing reaches GPT either.
    let upstream = openai_upstream().await;
    let url = openai_proxy(&upstream).await;
    let base = with(messages(), "/model", json!("gpt-5.4"));
    let cases = vec![
        ("/temperature", json!("0.2"), "temperature", "number"),
        ("/stop_sequences", json!([1]), "stop_sequences[0]", "string"),
        (
            "/messages/2/content/1/text",
            json!(1),
            "messages[2].content[1].text",
            "string",
        ),
    ];
    refused_each("/v1/messages", base, cases, &upstream, &url).await;
}

#[tokio::test]
async fn well_typed_chat_completions_fields_arrive_as_written() {
    let upstream = openai_upstream().await;
    let url = openai_proxy(&upstream).await;
    let mut body = chat();
    body["stream"] = json!(false);
    body["stream_options"] = Value::Null;
    body["tool_choice"] = json!({"type": "function", "function": {"name": "fetch_logs"}});
    body["max_completion_tokens"] = json!(4096);
    body["temperature"] = json!(0.25);
    body["top_p"] = json!(0.5);
    body["seed"] = json!(7);
    body["parallel_tool_calls"] = json!(false);
    let response = post(&url, "/v1/chat/completions", &body).await;
    assert_eq!(response.status(), 200);
    let sent = upstream.received_requests().await.unwrap();
    assert_eq!(sent.len(), 1);
    let sent: Value = serde_json::from_slice(&sent[0].body).unwrap();
    for field in [
        "tool_choice",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "parallel_tool_calls",
    ] {
        assert_eq!(sent[field], body[field], "{field}: {sent}");
    }
    // Each other typed form of `tool_choice` is taken too.
    for choice in [json!("auto"), json!("none"), json!("required")] {
        let body = with(chat(), "/tool_choice", choice.clone());
        let response = post(&url, "/v1/chat/completions", &body).await;
        assert_eq!(response.status(), 200, "{choice}");
    }
}

#[tokio::test]
async fn well_typed_messages_fields_arrive_as_written() {
    let upstream = anthropic_upstream().await;
    let url = anthropic_proxy(&upstream).await;
    let mut body = messages();
    body["stream"] = json!(false);
    body["stop_sequences"] = json!(["END", "停止"]);
    body["tool_choice"] = json!({"type": "tool", "name": "fetch_logs"});
    let response = post(&url, "/v1/messages", &body).await;
    assert_eq!(response.status(), 200);
    let sent = upstream.received_requests().await.unwrap();
    assert_eq!(sent.len(), 1);
    let sent: Value = serde_json::from_slice(&sent[0].body).unwrap();
    for field in ["max_tokens", "stop_sequences", "tool_choice"] {
        assert_eq!(sent[field], body[field], "{field}: {sent}");
    }
    // Numbers are taken where numbers go (whether the Anthropic client sends sampling
    // fields on is its own rule, not the reader's).
    for (field, v) in [("temperature", json!(0.25)), ("top_p", json!(0.5))] {
        let body = with(messages(), &format!("/{field}"), v);
        let response = post(&url, "/v1/messages", &body).await;
        assert_eq!(response.status(), 200, "{field}");
    }
}
