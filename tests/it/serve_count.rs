//! `POST /v1/messages/count_tokens` counts the request as the stack would send it: Claude
//! Code counts every turn with it, and a count of what the client wrote (the whole
//! transcript, offloaded results and all) was not what the model would be sent. Before,
//! the route was passed through as written.

use crate::support::proxy::{anthropic, json_of, openai, serving};
use llm_context::ContextPolicy;
use llm_context::serve::Proxy;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A large tool result, as an agent's log fetch returns it (~40 KB, quotes, non-ASCII).
fn logs() -> String {
    (0..400)
        .map(|i| format!("{{\"level\":\"error\",\"i\":{i},\"msg\":\"connexion refusée — 接続拒否 \\\"db-{i}\\\"\"}}\n"))
        .collect()
}

/// A turn whose tool result the default policy offloads, as a count body (no
/// `max_tokens`).
fn turn(model: &str) -> Value {
    json!({"model": model,
        "system": [{"type": "text", "text": "Du bist ein SRE-Agent."}],
        "tools": [{"name": "fetch_logs", "description": "Logs einer Unit.",
                   "input_schema": {"type": "object",
                                    "properties": {"unit": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": "Warum fällt die API aus?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_logs",
                "name": "fetch_logs", "input": {"unit": "api"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_logs",
                "content": logs()}, {"type": "text", "text": "Lies die Logs."}]}]})
}

/// A fake Anthropic: counts, and answers calls with a text.
async fn anthropic_up() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages/count_tokens"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("request-id", "req_count_1")
                .set_body_json(json!({"input_tokens": 777})),
        )
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_1", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-6", "content": [{"type": "text", "text": "Moment."}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 700, "output_tokens": 3}})))
        .mount(&server)
        .await;
    server
}

async fn post(url: &str, route: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut r = reqwest::Client::new()
        .post(format!("{url}{route}"))
        .header("content-type", "application/json")
        .header("x-llm-context-session", "agent-count");
    for (name, value) in headers {
        r = r.header(*name, *value);
    }
    r.body(body.to_string()).send().await.unwrap()
}

fn bodies_at(requests: &[wiremock::Request], at: &str) -> Vec<Value> {
    requests
        .iter()
        .filter(|r| r.url.path() == at)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

#[tokio::test]
async fn a_count_is_of_the_request_as_the_stack_would_send_it() {
    let upstream = anthropic_up().await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let headers = [
        ("anthropic-beta", "token-counting-2024-11-01"),
        ("anthropic-version", "2023-06-01"),
    ];
    let r = post(
        &url,
        "/v1/messages/count_tokens?beta=true",
        &turn("claude-sonnet-4-6"),
        &headers,
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-llm-context-offloaded"], "1");
    assert_eq!(
        r.headers()["request-id"],
        "req_count_1",
        "the answer as it came"
    );
    assert_eq!(json_of(r).await, json!({"input_tokens": 777}));

    // The same turn, called: what the count endpoint got is what the call sends, but for
    // the fields a count does not take.
    let mut call = turn("claude-sonnet-4-6");
    call["max_tokens"] = json!(1024);
    assert_eq!(post(&url, "/v1/messages", &call, &[]).await.status(), 200);
    let requests = upstream.received_requests().await.unwrap();
    let counted = bodies_at(&requests, "/v1/messages/count_tokens");
    let sent = bodies_at(&requests, "/v1/messages");
    assert_eq!((counted.len(), sent.len()), (1, 1));
    let (counted, mut sent) = (counted[0].clone(), sent[0].clone());
    assert!(counted.get("max_tokens").is_none() && counted.get("stream").is_none());
    sent.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(counted, sent);
    // Prepared: the result offloaded to a preview, the read tool offered.
    assert!(
        counted.to_string().len() < logs().len(),
        "a preview was counted"
    );
    let tools: Vec<&str> = counted["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["fetch_logs", "read_context_artifact"]);
    // As the client sent it otherwise: its query and headers, the server's key.
    let count = requests
        .iter()
        .find(|r| r.url.path() == "/v1/messages/count_tokens")
        .unwrap();
    assert_eq!(count.url.query(), Some("beta=true"));
    assert_eq!(count.headers["anthropic-beta"], "token-counting-2024-11-01");
    assert_eq!(count.headers["x-api-key"], "sk-ant-upstream");
}

#[tokio::test]
async fn a_count_that_cannot_fit_is_refused_before_anything_is_sent() {
    let upstream = anthropic_up().await;
    let policy = ContextPolicy::default()
        .with_max_context_tokens(2_000)
        .with_reserve_tokens(500);
    let proxy = Proxy::builder()
        .policy(policy)
        .anthropic(anthropic(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let body = json!({"model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": "слово ".repeat(5_000)}]});
    let r = post(&url, "/v1/messages/count_tokens", &body, &[]).await;
    assert_eq!(r.status(), 400);
    let v = json_of(r).await;
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(upstream.received_requests().await.unwrap().is_empty());
    // A body that is not a Messages request: 400 naming the field, nothing sent.
    let r = post(
        &url,
        "/v1/messages/count_tokens",
        &json!({"model": "claude-sonnet-4-6"}),
        &[],
    )
    .await;
    assert_eq!(r.status(), 400);
    let v = json_of(r).await;
    assert!(
        v["error"]["message"].as_str().unwrap().contains("messages"),
        "{v}"
    );
    assert!(upstream.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_count_for_a_model_without_a_count_endpoint_is_the_stacks_estimate() {
    let openai_up = MockServer::start().await;
    let anthropic_up = anthropic_up().await;
    let proxy = Proxy::builder()
        .openai(openai(&openai_up.uri()))
        .anthropic(anthropic(&anthropic_up.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let r = post(&url, "/v1/messages/count_tokens", &turn("gpt-5.4"), &[]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-llm-context-counted-by"], "estimate");
    let after: u64 = r.headers()["x-llm-context-after-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let before: u64 = r.headers()["x-llm-context-before-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        after < before,
        "the offloaded turn counts less than the written one"
    );
    assert_eq!(json_of(r).await, json!({"input_tokens": after}));
    assert!(openai_up.received_requests().await.unwrap().is_empty());
    assert!(anthropic_up.received_requests().await.unwrap().is_empty());
}
