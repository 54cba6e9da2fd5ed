//! `llm_context::serve` over real HTTP on 127.0.0.1: a client speaking Chat Completions
//! to the proxy, the proxy to a fake provider. Every body the client gets validates
//! against OpenAI's response (or stream-chunk) schema; every body the provider gets,
//! against its request schema.

use std::time::Duration;

use crate::support::fixture;
use crate::support::proxy::{STREAMED_TEXT, json_of, openai, openai_stream, serving};
use crate::support::schema::{Root, assert_valid, validator};
use crate::support::stream_server::{Reply, start};
use llm_context::budget::{Budget, BudgetLayer};
use llm_context::catalog::Provider;
use llm_context::serve::{Proxy, check_listen, key_digest, parse_digest};
use llm_context::{Anthropic, ContextPolicy, Scope};
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

const OPENAI_SCHEMA: &str = "openai-chat-completions.schema.json";

fn body(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "You are an SRE assistant."},
            {"role": "user", "content": "Warum schlug das Deployment fehl? なぜ?"}
        ]
    })
}

async fn post(url: &str, body: &Value, session: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(s) = session {
        req = req.header("x-llm-context-session", s);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn a_plain_completion_goes_through_the_stack_with_the_report_in_headers() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("openai-response-text.json"), "application/json"),
    )
    .await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut request = body("gpt-5.4", false);
    request["messages"][1]["content"] = json!(format!(
        "Logs:\n{}",
        "E connexion refusée 接続拒否\n".repeat(1_000)
    ));
    let response = post(&url, &request, Some("ticket-4412")).await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    let answer = json_of(response).await;
    assert_valid(
        &validator(OPENAI_SCHEMA, Root::Response),
        &answer,
        "the answer",
    );
    assert_eq!(answer["object"], "chat.completion");
    assert!(
        !answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .is_empty()
    );
    for name in [
        "x-llm-context-before-tokens",
        "x-llm-context-after-tokens",
        "x-llm-context-removed-messages",
        "x-llm-context-cleared",
        "x-llm-context-offloaded",
    ] {
        assert!(
            headers[name].to_str().unwrap().parse::<u64>().is_ok(),
            "{name}"
        );
    }
    assert_eq!(headers["x-llm-context-memo"], "miss");
    let sent: Value =
        serde_json::from_slice(&upstream.received_requests().await.unwrap()[0].body).unwrap();
    assert_valid(
        &validator(OPENAI_SCHEMA, Root::Request),
        &sent,
        "the upstream body",
    );
    // The upstream key is the server's, never the client's.
    let received = &upstream.received_requests().await.unwrap()[0];
    assert_eq!(
        received.headers.get("authorization").unwrap(),
        "Bearer sk-upstream"
    );
}

#[tokio::test]
async fn a_stream_comes_back_as_chat_completion_chunks() {
    let pieces = openai_stream();
    let upstream = start(vec![Reply::events(pieces)]).await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let response = post(&url, &body("gpt-5.4", true), None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    // What preparation did is known before the first event: the report is in the headers.
    assert_eq!(response.headers()["x-llm-context-memo"], "miss");
    assert_eq!(response.headers()["x-llm-context-removed-messages"], "0");
    assert!(
        response.headers()["x-llm-context-before-tokens"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    let text = response.text().await.unwrap();
    let events: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"));
    let v = validator(OPENAI_SCHEMA, Root::Stream);
    let mut content = String::new();
    let mut usage = None;
    for e in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(e).unwrap();
        assert_valid(&v, &chunk, "a chunk the client gets");
        if let Some(c) = chunk["choices"][0]["delta"]["content"].as_str() {
            content.push_str(c);
        }
        if !chunk["usage"].is_null() {
            usage = Some(chunk["usage"].clone());
        }
    }
    assert_eq!(content, STREAMED_TEXT);
    assert_eq!(usage.unwrap()["completion_tokens"], 8);
    let sent = upstream.bodies.lock().unwrap()[0].clone();
    assert_valid(
        &validator(OPENAI_SCHEMA, Root::Request),
        &sent,
        "the upstream body",
    );
    assert_eq!(sent["stream"], true);
}

#[tokio::test]
async fn a_request_that_cannot_fit_is_400_and_never_sent() {
    let upstream =
        crate::support::servers::mock_post("/v1/chat/completions", ResponseTemplate::new(200))
            .await;
    let policy = ContextPolicy::default()
        .with_max_context_tokens(2_000)
        .with_reserve_tokens(500);
    let proxy = Proxy::builder()
        .policy(policy)
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut request = body("gpt-5.4", false);
    request["messages"][1]["content"] = json!("слово ".repeat(5_000));
    for stream in [false, true] {
        request["stream"] = json!(stream);
        let response = post(&url, &request, None).await;
        assert_eq!(response.status(), 400);
        let v = json_of(response).await;
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "context_length_exceeded");
        assert_eq!(v["error"]["param"], "messages");
        assert_eq!(v["llm_context"]["allowance"], 1_500);
        assert!(v["llm_context"]["needed_tokens"].as_u64().unwrap() > 1_500);
        assert!(v["llm_context"]["breakdown"].is_object());
    }
    assert!(upstream.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_openai_client_reaches_claude() {
    let upstream = crate::support::servers::mock_post(
        "/v1/messages",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("anthropic-response-text.json"), "application/json"),
    )
    .await;
    let claude = Anthropic::builder()
        .base_url(upstream.uri())
        .api_key("sk-ant-upstream")
        .build()
        .unwrap();
    let proxy = Proxy::builder().anthropic(claude).build().unwrap();
    let url = serving(proxy).await;
    let response = post(&url, &body("claude-sonnet-4-6", false), None).await;
    assert_eq!(response.status(), 200);
    let answer = json_of(response).await;
    assert_valid(
        &validator(OPENAI_SCHEMA, Root::Response),
        &answer,
        "the answer",
    );
    let sent: Value =
        serde_json::from_slice(&upstream.received_requests().await.unwrap()[0].body).unwrap();
    assert_valid(
        &validator("anthropic-messages.schema.json", Root::Request),
        &sent,
        "the upstream body",
    );
    assert_eq!(sent["system"][0]["text"], "You are an SRE assistant.");
    // A model whose provider has no key here is the client's error, said plainly.
    let response = post(&url, &body("gpt-5.4", false), None).await;
    assert_eq!(response.status(), 400);
    let v = json_of(response).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the provider openai"),
        "{v}"
    );
}

#[tokio::test]
async fn a_provider_error_keeps_its_status() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(404).set_body_json(json!({"error": {
            "message": "The model `gpt-9` does not exist", "type": "invalid_request_error",
            "param": null, "code": "model_not_found"}})),
    )
    .await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let response = post(&url, &body("gpt-9", false), None).await;
    assert_eq!(response.status(), 404);
    let v = json_of(response).await;
    assert_eq!(v["error"]["code"], "model_not_found");
    assert!(v["error"]["message"].as_str().unwrap().contains("gpt-9"));
}

#[tokio::test]
async fn an_answer_the_proxy_cannot_read_is_a_bad_gateway_never_a_200() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200).set_body_raw("<html>maintenance</html>", "text/html"),
    )
    .await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let response = post(&url, &body("gpt-5.4", false), None).await;
    assert_eq!(response.status(), 502);
    let v = json_of(response).await;
    assert!(
        v["error"]["message"].as_str().unwrap().contains("JSON"),
        "{v}"
    );
}

#[tokio::test]
async fn health_and_bad_bodies() {
    let proxy = Proxy::builder()
        .openai(openai("http://127.0.0.1:9"))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let health = reqwest::get(format!("{url}/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let v = json_of(response).await;
    assert_eq!(v["error"]["type"], "invalid_request_error");
}

#[test]
fn without_a_key_table_only_loopback_is_served() {
    assert!(check_listen("127.0.0.1:8080".parse().unwrap()).is_ok());
    assert!(check_listen("[::1]:8080".parse().unwrap()).is_ok());
    let err = check_listen("0.0.0.0:8080".parse().unwrap()).unwrap_err();
    assert!(err.contains("loopback"), "{err}");
}

#[tokio::test]
async fn past_the_concurrency_limit_a_request_is_shed_with_retry_after() {
    // A stream that takes a while: it holds the one place to its last event.
    let slow = Reply {
        gap: std::time::Duration::from_millis(150),
        ..Reply::events(openai_stream())
    };
    let upstream = start(vec![slow, Reply::events(openai_stream())]).await;
    let proxy = Proxy::builder()
        .max_concurrency(1)
        .openai(openai(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let streaming = post(&url, &body("gpt-5.4", true), None).await;
    assert_eq!(streaming.status(), 200);
    let shed = post(&url, &body("gpt-5.4", false), None).await;
    assert_eq!(shed.status(), 503);
    assert_eq!(shed.headers()["retry-after"], "1");
    let v = json_of(shed).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("concurrency"),
        "{v}"
    );
    // Once the stream has ended, its place is free again.
    assert!(
        streaming
            .text()
            .await
            .unwrap()
            .ends_with("data: [DONE]\n\n")
    );
    // (The server drops the finished body a moment after its last byte is written.)
    let mut status = 0;
    for _ in 0..40 {
        status = post(&url, &body("gpt-5.4", true), None)
            .await
            .status()
            .as_u16();
        if status != 503 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(status, 200);
    assert_eq!(upstream.bodies.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn an_upstream_slower_than_the_timeout_is_a_gateway_timeout() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("openai-response-text.json"), "application/json")
            .set_delay(std::time::Duration::from_secs(3)),
    )
    .await;
    let proxy = Proxy::builder()
        .upstream_timeout(std::time::Duration::from_millis(200))
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let started = std::time::Instant::now();
    let response = post(&url, &body("gpt-5.4", false), None).await;
    assert_eq!(response.status(), 504);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    let v = json_of(response).await;
    assert_eq!(v["error"]["type"], "server_error");
}

#[tokio::test]
async fn with_a_key_table_every_request_needs_a_known_key_and_gets_its_tenant() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("openai-response-text.json"), "application/json"),
    )
    .await;
    let tight = ContextPolicy::default()
        .with_max_context_tokens(2_000)
        .with_reserve_tokens(500);
    let proxy = Proxy::builder()
        .tenant(key_digest("sk-acme"), Scope::org("acme"), None)
        .tenant(
            parse_digest(&hex(&key_digest("sk-tiny"))).unwrap(),
            Scope::org("tiny").with_domain("support"),
            Some(tight),
        )
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let call = |path: &'static str, key: Option<(&'static str, String)>, body: Value| {
        let url = url.clone();
        async move {
            let mut req = reqwest::Client::new()
                .post(format!("{url}{path}"))
                .body(body.to_string());
            if let Some((name, value)) = key {
                req = req.header(name, value);
            }
            req.send().await.unwrap()
        }
    };
    let bearer = |k: &str| Some(("authorization", format!("Bearer {k}")));
    // No key, or an unknown one: 401 in each route's own shape, nothing sent.
    let chat = body("gpt-5.4", false);
    for key in [None, bearer("sk-wrong")] {
        let r = call("/v1/chat/completions", key, chat.clone()).await;
        assert_eq!(r.status(), 401);
        let v = json_of(r).await;
        assert_eq!(v["error"]["code"], "invalid_api_key", "{v}");
    }
    let messages = json!({"model": "gpt-5.4", "max_tokens": 64,
                          "messages": [{"role": "user", "content": "Warum?"}]});
    let r = call(
        "/v1/messages",
        Some(("x-api-key", "sk-wrong".into())),
        messages.clone(),
    )
    .await;
    assert_eq!(r.status(), 401);
    let v = json_of(r).await;
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    assert!(upstream.received_requests().await.unwrap().is_empty());
    // A known key, either way it is sent, is served under the default policy.
    assert_eq!(
        call("/v1/chat/completions", bearer("sk-acme"), chat.clone())
            .await
            .status(),
        200
    );
    let r = call(
        "/v1/messages",
        Some(("x-api-key", "sk-acme".into())),
        messages,
    )
    .await;
    assert_eq!(r.status(), 200);
    // The other tenant's own policy: a request that fits the default does not fit its.
    let mut long = chat.clone();
    long["messages"][1]["content"] = json!("слово ".repeat(3_000));
    assert_eq!(
        call("/v1/chat/completions", bearer("sk-acme"), long.clone())
            .await
            .status(),
        200
    );
    let r = call("/v1/chat/completions", bearer("sk-tiny"), long).await;
    assert_eq!(r.status(), 400);
    assert_eq!(json_of(r).await["llm_context"]["allowance"], 1_500);
    // The memo is per tenant: one tenant's answer is never another's.
    let mut fixed = chat.clone();
    fixed["temperature"] = json!(0);
    let memo = |r: &reqwest::Response| r.headers()["x-llm-context-memo"].clone();
    let a = call("/v1/chat/completions", bearer("sk-acme"), fixed.clone()).await;
    assert_eq!(memo(&a), "miss");
    let a = call("/v1/chat/completions", bearer("sk-acme"), fixed.clone()).await;
    assert_eq!(memo(&a), "hit");
    let b = call("/v1/chat/completions", bearer("sk-tiny"), fixed).await;
    assert_eq!(memo(&b), "miss");
}

#[tokio::test]
async fn a_route_wins_over_the_catalog() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("openai-response-text.json"), "application/json"),
    )
    .await;
    // A self-hosted model named like Claude, served by an OpenAI-compatible server.
    let proxy = Proxy::builder()
        .route("claude-local-", Provider::OpenAi)
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let r = post(&url, &body("claude-local-7b", false), None).await;
    assert_eq!(r.status(), 200);
    assert_eq!(upstream.received_requests().await.unwrap().len(), 1);
    // Without the route, `claude-…` belongs to Anthropic, which has no upstream here:
    // a 400 naming it, and nothing falls through to the one upstream there is.
    for stream in [false, true] {
        let r = post(&url, &body("claude-sonnet-4-6", stream), None).await;
        assert_eq!(r.status(), 400);
        let v = json_of(r).await;
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("the provider anthropic"), "{v}");
        assert!(message.contains("claude-sonnet-4-6"), "{v}");
    }
    assert_eq!(upstream.received_requests().await.unwrap().len(), 1);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn digests_are_64_hex_digits() {
    // SHA-256 of "test", as the config example in the proxy guide begins.
    assert!(hex(&key_digest("test")).starts_with("9f86d081884c7d65"));
    assert!(parse_digest("9f86").unwrap_err().contains("64 hex digits"));
    assert!(parse_digest(&"zz".repeat(32)).is_err());
}

#[tokio::test]
async fn metrics_count_requests_tokens_memo_hits_and_upstream_errors() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("openai-response-text.json"), "application/json"),
    )
    .await;
    let proxy = Proxy::builder()
        .tenant(key_digest("sk-acme"), Scope::org("acme"), None)
        .openai(openai(&upstream.uri()))
        // A dead upstream for one model family: its errors are counted by kind.
        .route("dead-", Provider::Anthropic)
        .anthropic(
            Anthropic::builder()
                .base_url("http://127.0.0.1:9")
                .api_key("k")
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let ask = |model: &str, key: &str| {
        let mut b = body(model, false);
        b["temperature"] = json!(0);
        reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(key.to_owned())
            .body(b.to_string())
            .send()
    };
    assert_eq!(ask("gpt-5.4", "sk-acme").await.unwrap().status(), 200);
    assert_eq!(ask("gpt-5.4", "sk-acme").await.unwrap().status(), 200);
    assert_eq!(ask("gpt-5.4", "sk-nope").await.unwrap().status(), 401);
    assert_eq!(ask("dead-1", "sk-acme").await.unwrap().status(), 502);
    let ready = reqwest::get(format!("{url}/readyz")).await.unwrap();
    assert_eq!(ready.status(), 200);
    assert_eq!(json_of(ready).await["status"], "ready");
    let text = crate::support::proxy::metrics_text(&url).await;
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    let ok =
        r#"llm_context_requests_total{route="/v1/chat/completions",status="200",tenant="acme"}"#;
    assert_eq!(line(ok), 2.0, "{text}");
    assert_eq!(
        line(r#"llm_context_requests_total{route="/v1/chat/completions",status="401",tenant="-"}"#),
        1.0
    );
    assert_eq!(line("llm_context_memo_hits_total{tenant=\"acme\"}"), 1.0);
    assert!(line("llm_context_tokens_before_total{tenant=\"acme\"}") > 0.0);
    assert!(
        text.contains("llm_context_upstream_errors_total{kind="),
        "{text}"
    );
    assert!(text.contains("llm_context_request_duration_seconds_bucket"));
    assert!(text.ends_with("# EOF\n"));
}

#[tokio::test]
async fn metrics_split_the_upstreams_time_from_preparation() {
    // The upstream takes 300 ms; what the proxy does itself on a small request is a few
    // milliseconds at most.
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("openai-response-text.json"), "application/json")
            .set_delay(Duration::from_millis(300)),
    )
    .await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut b = body("gpt-5.4", false);
    b["temperature"] = json!(0);
    for _ in 0..2 {
        // The second is a memo hit: no upstream call.
        let answer = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .body(b.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    let text = crate::support::proxy::metrics_text(&url).await;
    let value = |name: &str| {
        let prefix = format!("{name}{{route=\"/v1/chat/completions\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .parse::<f64>()
            .unwrap()
    };
    assert_eq!(value("llm_context_upstream_duration_seconds_count"), 1.0);
    assert!(
        value("llm_context_upstream_duration_seconds_sum") >= 0.3,
        "{text}"
    );
    assert_eq!(value("llm_context_preparation_duration_seconds_count"), 2.0);
    assert!(
        value("llm_context_preparation_duration_seconds_sum") < 0.2,
        "{text}"
    );
    assert!(
        value("llm_context_request_duration_seconds_sum") >= 0.3,
        "{text}"
    );
}

#[tokio::test]
async fn a_call_over_its_tenants_budget_is_429_and_never_sent() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("openai-response-text.json"), "application/json"),
    )
    .await;
    let acme = Scope::org("acme");
    let budget: Budget = toml::from_str("calls_per_hour = 1").unwrap();
    let proxy = Proxy::builder()
        .tenant(key_digest("sk-acme"), acme.clone(), None)
        .tenant(key_digest("sk-free"), Scope::org("free"), None)
        .budgets(BudgetLayer::new(&Budget::default()).for_tenant(&acme, &budget))
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let ask = |route: &str, key: &str, b: Value| {
        reqwest::Client::new()
            .post(format!("{url}{route}"))
            .bearer_auth(key.to_owned())
            .body(b.to_string())
            .send()
    };
    let chat = body("gpt-5.4", false);
    assert_eq!(
        ask("/v1/chat/completions", "sk-acme", chat.clone())
            .await
            .unwrap()
            .status(),
        200
    );
    let refused = ask("/v1/chat/completions", "sk-acme", chat.clone())
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=3601).contains(&wait), "{wait}");
    let v = json_of(refused).await;
    assert_eq!(v["error"]["type"], "insufficient_quota");
    assert_eq!(v["error"]["code"], "budget_exceeded");
    assert_eq!(v["llm_context"]["limit"], "calls_per_hour");
    assert_eq!(v["llm_context"]["used"], 1.0);
    assert_eq!(v["llm_context"]["max"], 1.0);
    assert!(
        v["llm_context"]["resets_at"]
            .as_str()
            .unwrap()
            .ends_with(":00:00Z"),
        "{v}"
    );
    // The Messages route answers in Anthropic's shape.
    let messages = json!({"model": "gpt-5.4", "max_tokens": 100,
                          "messages": [{"role": "user", "content": "Noch einmal? もう一度?"}]});
    let refused = ask("/v1/messages", "sk-acme", messages).await.unwrap();
    assert_eq!(refused.status(), 429);
    let v = json_of(refused).await;
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("calls_per_hour")
    );
    // Another tenant, without a budget of its own, is not limited.
    for _ in 0..3 {
        assert_eq!(
            ask("/v1/chat/completions", "sk-free", chat.clone())
                .await
                .unwrap()
                .status(),
            200
        );
    }
    assert_eq!(
        upstream.received_requests().await.unwrap().len(),
        4,
        "refused calls were never sent"
    );
    let text = crate::support::proxy::metrics_text(&url).await;
    assert!(
        text.contains(r#"llm_context_budget_used{tenant="acme",limit="calls_per_hour"} 1.0"#),
        "{text}"
    );
    assert!(
        text.contains(r#"llm_context_budget_limit{tenant="acme",limit="calls_per_hour"} 1.0"#),
        "{text}"
    );
}
