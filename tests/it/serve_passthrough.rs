//! The routes `serve` does not manage, passed on to their provider over real HTTP on
//! 127.0.0.1: `GET /v1/models` and `/v1/models/{id}`, and any other path under `/v1/`
//! (embeddings, files), with the server's key, everything else as the client sent it, and
//! the answer as the provider gave it. (Anthropic's `count_tokens` has a route of its own:
//! `serve_count`.)

use crate::support::proxy::{anthropic, json_of, openai, serving};
use llm_context::Scope;
use llm_context::serve::{Proxy, key_digest};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A fake provider answering `verb path` with `status` and `body`, plus a header of its own.
async fn provider(verb: &str, at: &str, status: u16, body: &Value) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method(verb))
        .and(path(at))
        .respond_with(
            ResponseTemplate::new(status)
                .insert_header("x-request-id", "req_upstream_1")
                .set_body_raw(body.to_string(), "application/json"),
        )
        .mount(&server)
        .await;
    server
}

/// A proxy in front of both fakes; its base URL.
async fn both(openai_up: &MockServer, anthropic_up: &MockServer) -> String {
    let proxy = Proxy::builder()
        .openai(openai(&openai_up.uri()))
        .anthropic(anthropic(&anthropic_up.uri()))
        .build()
        .unwrap();
    serving(proxy).await
}

/// `method url` with `headers` and `body`, as a client sends it.
async fn call(
    method: reqwest::Method,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .request(method, url)
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

fn header(r: &wiremock::Request, name: &str) -> Option<String> {
    r.headers.get(name).map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn models_are_listed_by_the_provider_the_client_speaks_to() {
    let openai_models = json!({"object": "list", "data": [{"id": "gpt-5.4", "object": "model"}]});
    let anthropic_models = json!({"data": [{"id": "claude-sonnet-4-6", "type": "model"}],
                                  "has_more": false});
    let openai_up = provider("GET", "/v1/models", 200, &openai_models).await;
    let anthropic_up = provider("GET", "/v1/models", 200, &anthropic_models).await;
    let url = both(&openai_up, &anthropic_up).await;
    // The OpenAI SDK.
    let key = [("authorization", "Bearer sk-the-clients-own")];
    let r = call(reqwest::Method::GET, &format!("{url}/v1/models"), &key, "").await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-request-id"], "req_upstream_1");
    assert_eq!(json_of(r).await, openai_models);
    // The Anthropic SDK (it always sends `anthropic-version`), with a query.
    let headers = [
        ("anthropic-version", "2023-06-01"),
        ("x-api-key", "sk-ant-the-clients-own"),
    ];
    let models = format!("{url}/v1/models?limit=20");
    let r = call(reqwest::Method::GET, &models, &headers, "").await;
    assert_eq!(r.status(), 200);
    assert_eq!(json_of(r).await, anthropic_models);
    let sent = &openai_up.received_requests().await.unwrap()[0];
    assert_eq!(
        header(sent, "authorization").as_deref(),
        Some("Bearer sk-upstream")
    );
    let sent = &anthropic_up.received_requests().await.unwrap()[0];
    assert_eq!(sent.url.query(), Some("limit=20"));
    assert_eq!(
        header(sent, "x-api-key").as_deref(),
        Some("sk-ant-upstream")
    );
    assert_eq!(
        header(sent, "anthropic-version").as_deref(),
        Some("2023-06-01")
    );
}

#[tokio::test]
async fn a_models_page_goes_to_the_provider_that_serves_it() {
    let claude = json!({"id": "claude-sonnet-4-6", "type": "model"});
    let gpt = json!({"id": "gpt-5.4", "object": "model"});
    let openai_up = provider("GET", "/v1/models/gpt-5.4", 200, &gpt).await;
    let anthropic_up = provider("GET", "/v1/models/claude-sonnet-4-6", 200, &claude).await;
    let url = both(&openai_up, &anthropic_up).await;
    for (id, expected) in [("gpt-5.4", &gpt), ("claude-sonnet-4-6", &claude)] {
        let r = reqwest::get(format!("{url}/v1/models/{id}")).await.unwrap();
        assert_eq!(r.status(), 200, "{id}");
        assert_eq!(&json_of(r).await, expected);
    }
}

#[tokio::test]
async fn other_paths_go_through_byte_for_byte_and_their_errors_too() {
    let vectors = json!({"object": "list", "data": [{"object": "embedding", "index": 0,
                         "embedding": [0.25, -0.5]}], "model": "text-embedding-3-small"});
    let openai_up = provider("POST", "/v1/embeddings", 200, &vectors).await;
    let counted = json!({"input_tokens": 4211});
    let anthropic_up = provider("POST", "/v1/messages/count_tokens", 200, &counted).await;
    let url = both(&openai_up, &anthropic_up).await;
    // Spacing and key order as the client wrote them: the body is not re-encoded.
    let raw = "{\"model\": \"text-embedding-3-small\",  \"input\": \"接続拒否 — refusée\"}";
    let headers = [
        ("content-type", "application/json"),
        ("OpenAI-Project", "proj_client"),
    ];
    let r = call(
        reqwest::Method::POST,
        &format!("{url}/v1/embeddings"),
        &headers,
        raw,
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(json_of(r).await, vectors);
    let sent = &openai_up.received_requests().await.unwrap()[0];
    assert_eq!(sent.body, raw.as_bytes());
    assert_eq!(
        header(sent, "content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(
        header(sent, "openai-project").as_deref(),
        Some("proj_client")
    );
    // Claude Code's count of every turn: never a 404 again.
    let body = json!({"model": "claude-sonnet-4-6",
                      "messages": [{"role": "user", "content": "Wie lang ist das?"}]});
    let headers = [
        ("content-type", "application/json"),
        ("anthropic-beta", "token-counting-2024-11-01"),
    ];
    let count = format!("{url}/v1/messages/count_tokens?beta=true");
    let r = call(reqwest::Method::POST, &count, &headers, &body.to_string()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(json_of(r).await, counted);
    let sent = &anthropic_up.received_requests().await.unwrap()[0];
    assert_eq!(sent.url.query(), Some("beta=true"));
    assert_eq!(
        header(sent, "anthropic-beta").as_deref(),
        Some("token-counting-2024-11-01")
    );
    // A provider's error is the client's, status and body as it gave them.
    let refused = json!({"error": {"message": "no such file", "type": "invalid_request_error",
                                   "param": null, "code": "file_not_found"}});
    let files = provider("GET", "/v1/files/file-abc", 404, &refused).await;
    let url = serving(
        Proxy::builder()
            .openai(openai(&files.uri()))
            .build()
            .unwrap(),
    )
    .await;
    let r = reqwest::get(format!("{url}/v1/files/file-abc"))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json_of(r).await, refused);
}

#[tokio::test]
async fn a_path_without_an_upstream_or_a_key_is_refused_in_its_providers_shape() {
    let anthropic_up = MockServer::start().await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&anthropic_up.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let r = call(
        reqwest::Method::POST,
        &format!("{url}/v1/embeddings"),
        &[],
        "{}",
    )
    .await;
    assert_eq!(r.status(), 404);
    let body = json_of(r).await;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("openai"), "{body}");
    // With a key table, the key is checked first, as on the managed routes.
    let upstream = provider("GET", "/v1/models", 200, &json!({"data": []})).await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .tenant(key_digest("sk-acme"), Scope::org("acme"), None)
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let r = reqwest::get(format!("{url}/v1/models")).await.unwrap();
    assert_eq!(r.status(), 401);
    assert!(upstream.received_requests().await.unwrap().is_empty());
    let key = [("authorization", "Bearer sk-acme")];
    let r = call(reqwest::Method::GET, &format!("{url}/v1/models"), &key, "").await;
    assert_eq!(r.status(), 200);
    let sent = &upstream.received_requests().await.unwrap()[0];
    assert_eq!(
        header(sent, "authorization").as_deref(),
        Some("Bearer sk-upstream"),
        "the tenant's key never reaches the provider"
    );
    let metrics = crate::support::proxy::metrics_text(&url).await;
    assert!(
        metrics.contains("route=\"passthrough\""),
        "counted as passed through: {metrics}"
    );
}
