//! `serve` against a hostile network, on 127.0.0.1 over raw TCP where a client library
//! would not misbehave: slow and idle connections are closed, the connection cap holds
//! while `/healthz` still answers, a body is not read before its key is checked, and the
//! body limits (per tenant, in flight, rate) refuse in the route's shape.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::fixture;
use crate::support::proxy::{json_of, openai, serving};
use llm_context::Scope;
use llm_context::serve::{Proxy, key_digest};
use serde_json::json;
use wiremock::ResponseTemplate;

fn host(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// Reads until the server closes the connection, or `limit` passes; whether it closed,
/// and what it sent.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> (bool, Vec<u8>) {
    let mut got = Vec::new();
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (true, got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (false, got),
        }
    }
}

/// Reads one HTTP response head (to the blank line) within `limit`.
async fn head_within(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + limit;
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&got).into_owned())
}

fn upstream_answer() -> ResponseTemplate {
    ResponseTemplate::new(200)
        .set_body_raw(fixture("openai-response-text.json"), "application/json")
}

fn chat(text: &str) -> String {
    json!({"model": "gpt-5.4", "messages": [{"role": "user", "content": text}]}).to_string()
}

#[tokio::test]
async fn a_connection_sending_its_headers_a_byte_at_a_time_is_closed() {
    let proxy = Proxy::builder()
        .header_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut stream = TcpStream::connect(host(&url)).await.unwrap();
    let started = Instant::now();
    let head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let mut closed = false;
    for byte in head.iter().chain(b"a".repeat(100).iter()) {
        if stream.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        let (gone, _) = closed_within(&mut stream, Duration::from_millis(40)).await;
        if gone {
            closed = true;
            break;
        }
    }
    assert!(closed, "a slowloris connection stayed open");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let proxy = Proxy::builder()
        .header_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut stream = TcpStream::connect(host(&url)).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let head = head_within(&mut stream, Duration::from_secs(2))
        .await
        .unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Kept alive, then idle: closed within the header timeout (with slack), not held.
    let (closed, _) = closed_within(&mut stream, Duration::from_secs(3)).await;
    assert!(closed, "an idle keep-alive connection stayed open");
}

#[tokio::test]
async fn at_the_connection_cap_the_longest_idle_connection_is_shed_for_a_new_one() {
    // The default header timeout (30 s): idle connections would hold the cap that long.
    let proxy = Proxy::builder().max_connections(4).build().unwrap();
    let url = serving(proxy).await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(host(&url)).await.unwrap());
        // Opened in order: the first has waited longest.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A kept-alive connection between requests is idle too: the third has had one.
    idle[2]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(
        head_within(&mut idle[2], Duration::from_secs(1))
            .await
            .is_some()
    );
    // Each new one kept alive after its answer, so each needs a place of its own.
    let mut new = Vec::new();
    for _ in 0..2 {
        let mut next = TcpStream::connect(host(&url)).await.unwrap();
        next.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let head = head_within(&mut next, Duration::from_secs(1)).await;
        assert!(head.is_some_and(|h| h.starts_with("HTTP/1.1 200")));
        new.push(next);
    }
    // The two that waited longest without a request went; the others are open.
    for (i, stream) in idle.iter_mut().enumerate() {
        let (closed, _) = closed_within(stream, Duration::from_millis(200)).await;
        assert_eq!(closed, i < 2, "connection {i}");
    }
}

#[tokio::test]
async fn a_connection_with_a_request_in_flight_is_never_shed() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        upstream_answer().set_delay(Duration::from_millis(1500)),
    )
    .await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .max_connections(2)
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let body = chat("Warum? なぜ");
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(host(&url)).await.unwrap();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        busy.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut next = TcpStream::connect(host(&url)).await.unwrap();
    next.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    // Both places are busy: the new one waits...
    assert!(
        head_within(&mut next, Duration::from_millis(500))
            .await
            .is_none()
    );
    // ...the requests in flight are answered...
    for stream in &mut busy {
        let head = head_within(stream, Duration::from_secs(5)).await;
        assert!(head.is_some_and(|h| h.starts_with("HTTP/1.1 200")));
    }
    // ...and then, their connections idle, one is shed for it.
    let head = head_within(&mut next, Duration::from_secs(2)).await;
    assert!(head.is_some_and(|h| h.starts_with("HTTP/1.1 200")));
}

#[tokio::test]
async fn a_body_is_not_read_before_the_key_is_checked() {
    let proxy = Proxy::builder()
        .tenant(key_digest("sk-acme"), Scope::org("acme"), None)
        .build()
        .unwrap();
    let url = serving(proxy).await;
    // A 60 MB body declared, none of it sent, no key: the answer comes without it.
    for route in ["/v1/chat/completions", "/v1/messages"] {
        let mut stream = TcpStream::connect(host(&url)).await.unwrap();
        let head = format!(
            "POST {route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: 60000000\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let head = head_within(&mut stream, Duration::from_secs(2)).await;
        assert!(
            head.as_deref()
                .is_some_and(|h| h.starts_with("HTTP/1.1 401")),
            "{route}: {head:?}"
        );
    }
}

#[tokio::test]
async fn a_declared_body_over_the_limit_is_refused_before_it_is_read() {
    let proxy = Proxy::builder().max_body_bytes(1_000).build().unwrap();
    let url = serving(proxy).await;
    let mut stream = TcpStream::connect(host(&url)).await.unwrap();
    stream
        .write_all(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        .await
        .unwrap();
    let head = head_within(&mut stream, Duration::from_secs(2)).await;
    assert!(head.is_some_and(|h| h.starts_with("HTTP/1.1 413")));
}

#[tokio::test]
async fn a_tenant_has_its_own_body_limit() {
    let upstream =
        crate::support::servers::mock_post("/v1/chat/completions", upstream_answer()).await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .tenant(key_digest("sk-small"), Scope::org("small"), None)
        .tenant_max_body_bytes(key_digest("sk-small"), 2_000)
        .tenant(key_digest("sk-big"), Scope::org("big"), None)
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let body = chat(&"Déploiement échoué 接続拒否\n".repeat(150));
    assert!(body.len() > 2_000);
    let send = |key: &'static str| {
        reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
    };
    let small = send("sk-small").await.unwrap();
    assert_eq!(small.status(), 413);
    let error = json_of(small).await;
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2000 bytes")
    );
    assert_eq!(send("sk-big").await.unwrap().status(), 200);
    assert_eq!(upstream.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn past_the_in_flight_body_budget_a_request_is_shed_before_its_body_is_read() {
    let upstream =
        crate::support::servers::mock_post("/v1/chat/completions", upstream_answer()).await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .max_body_bytes(64 * 1024)
        .max_inflight_body_bytes(64 * 1024)
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let body = chat(&"x".repeat(40_000));
    // The first request declares its body and sends only half of it: it holds its share.
    let mut first = TcpStream::connect(host(&url)).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    first.write_all(head.as_bytes()).await.unwrap();
    first.write_all(&body.as_bytes()[..20_000]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The second has no room: 503 with retry-after, in the route's shape, at once.
    let second = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 503);
    assert_eq!(second.headers()["retry-after"], "1");
    let error = json_of(second).await;
    assert!(error["error"]["message"].is_string(), "{error}");
    // The first completes and is answered; then there is room again.
    first.write_all(&body.as_bytes()[20_000..]).await.unwrap();
    let (_, answer) = closed_within(&mut first, Duration::from_secs(5)).await;
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    let third = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(third.status(), 200);
}

#[tokio::test]
async fn a_body_slower_than_the_minimum_rate_is_refused() {
    let proxy = Proxy::builder()
        .min_body_rate(Duration::from_millis(200), 1_000)
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut stream = TcpStream::connect(host(&url)).await.unwrap();
    stream
        .write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000\r\n\r\n",
        )
        .await
        .unwrap();
    let started = Instant::now();
    // 10 bytes every 100 ms: 100 bytes a second, a tenth of the minimum.
    let mut answer = None;
    for _ in 0..50 {
        if stream.write_all(&[b' '; 10]).await.is_err() {
            break;
        }
        if let Some(head) = head_within(&mut stream, Duration::from_millis(100)).await {
            answer = Some(head);
            break;
        }
    }
    let answer = answer.expect("a trickling body was never refused");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn other_methods_and_paths_are_answered_in_the_routes_shape() {
    let url = serving(Proxy::builder().build().unwrap()).await;
    let client = reqwest::Client::new();
    let r = client
        .get(format!("{url}/v1/chat/completions"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "POST");
    let body = json_of(r).await;
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    let r = client
        .get(format!("{url}/v1/messages"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let body = json_of(r).await;
    assert_eq!(body["type"], "error", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("POST"));
    let r = client
        .post(format!("{url}/v1/messages/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(json_of(r).await["type"], "error");
    let r = client
        .get(format!("{url}/v2/whatever"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(json_of(r).await["error"]["message"].is_string());
}

#[tokio::test]
async fn metrics_need_the_metrics_key_when_one_is_set() {
    let proxy = Proxy::builder()
        .tenant(key_digest("sk-acme"), Scope::org("acme"), None)
        .metrics_key(key_digest("sk-metrics"))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let get = |key: Option<&'static str>| {
        let mut req = reqwest::Client::new().get(format!("{url}/metrics"));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        req.send()
    };
    for key in [None, Some("sk-acme"), Some("sk-wrong")] {
        let r = get(key).await.unwrap();
        assert_eq!(r.status(), 403, "{key:?}");
        let body = json_of(r).await;
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("metrics key")
        );
    }
    let r = get(Some("sk-metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().ends_with("# EOF\n"));
}

#[tokio::test]
async fn with_a_key_table_metrics_are_for_loopback_peers_only() {
    use tower::ServiceExt;
    let proxy = || {
        Proxy::builder()
            .tenant(key_digest("sk-acme"), Scope::org("acme"), None)
            .build()
            .unwrap()
    };
    // Served: the peer is 127.0.0.1.
    let url = serving(proxy()).await;
    let r = reqwest::get(format!("{url}/metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    // Mounted elsewhere, the peer unknown: not loopback as far as the proxy can tell.
    let request = axum::http::Request::get("/metrics")
        .body(axum::body::Body::empty())
        .unwrap();
    let r = proxy().router().oneshot(request).await.unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn tenants_that_would_print_alike_have_distinct_labels() {
    let upstream =
        crate::support::servers::mock_post("/v1/chat/completions", upstream_answer()).await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .tenant(key_digest("sk-1"), Scope::org("acme:support"), None)
        .tenant(
            key_digest("sk-2"),
            Scope::org("acme").with_domain("support"),
            None,
        )
        .tenant(key_digest("sk-3"), Scope::org("-"), None)
        .build()
        .unwrap();
    let url = serving(proxy).await;
    for key in ["sk-1", "sk-2", "sk-3", "sk-unknown"] {
        reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .body(chat("Warum? なぜ?"))
            .send()
            .await
            .unwrap();
    }
    let text = crate::support::proxy::metrics_text(&url).await;
    let count = |tenant: &str, status: u16| {
        let line = format!(
            "llm_context_requests_total{{route=\"/v1/chat/completions\",status=\"{status}\",tenant=\"{tenant}\"}} 1"
        );
        text.lines().filter(|l| *l == line).count()
    };
    assert_eq!(count("acme%3Asupport", 200), 1, "{text}");
    assert_eq!(count("acme:support", 200), 1, "{text}");
    assert_eq!(count("%2D", 200), 1, "{text}");
    assert_eq!(count("-", 401), 1, "{text}");
    assert_eq!(count("-", 200), 0, "{text}");
}

#[tokio::test]
async fn a_client_tool_under_the_read_tools_name_is_refused_naming_the_clash() {
    let upstream =
        crate::support::servers::mock_post("/v1/chat/completions", upstream_answer()).await;
    let url = serving(
        Proxy::builder()
            .openai(openai(&upstream.uri()))
            .build()
            .unwrap(),
    )
    .await;
    let body = json!({
        "model": "gpt-5.4",
        "messages": [{"role": "user", "content": "Lies die Datei."}],
        "tools": [{"type": "function", "function": {
            "name": "read_context_artifact",
            "description": "Reads a file of mine",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}
        }}]
    });
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let error = json_of(r).await;
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("read_context_artifact"), "{error}");
    assert!(upstream.received_requests().await.unwrap().is_empty());
}

/// An upstream that answers with `usage` figures no call could have.
fn absurd_usage() -> serde_json::Value {
    let mut answer: serde_json::Value =
        serde_json::from_str(&fixture("openai-response-text.json")).unwrap();
    answer["usage"] = json!({
        "prompt_tokens": 18_446_744_073_709_551_615_u64,
        "completion_tokens": 300,
        "total_tokens": 18_446_744_073_709_551_615_u64
    });
    answer
}

#[tokio::test]
async fn usage_no_call_could_have_is_a_bad_upstream_answer() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200).set_body_json(absurd_usage()),
    )
    .await;
    let url = serving(
        Proxy::builder()
            .openai(openai(&upstream.uri()))
            .build()
            .unwrap(),
    )
    .await;
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(chat("Warum? なぜ?"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let text = r.text().await.unwrap();
    assert!(!text.contains("18446744073709551"), "{text}");
    assert!(text.contains("usage"), "{text}");
    let metrics = crate::support::proxy::metrics_text(&url).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("llm_context_upstream_errors_total{") && l.ends_with(" 1")),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_stream_with_usage_no_call_could_have_ends_with_an_error_not_the_figures() {
    use crate::support::stream_server::{Reply, start};
    let mut pieces = crate::support::proxy::openai_stream();
    let last = pieces.len() - 2;
    pieces[last] = pieces[last].replace(
        r#""prompt_tokens":30"#,
        r#""prompt_tokens":18446744073709551615"#,
    );
    assert!(pieces[last].contains("18446744073709551615"));
    let upstream = start(vec![Reply::events(pieces)]).await;
    let url = serving(
        Proxy::builder()
            .openai(openai(&upstream.url))
            .build()
            .unwrap(),
    )
    .await;
    let body = json!({"model": "gpt-5.4", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "Warum?"}]});
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(!text.contains("18446744073709551"), "{text}");
    assert!(text.contains("usage no call"), "{text}");
}

/// A Messages body of about `bytes`, in 1 KB messages (non-ASCII text).
fn messages_body(bytes: usize) -> String {
    let text = "Fehler: connexion refusée (接続拒否) bei db-7. ".repeat(20);
    let messages: Vec<serde_json::Value> = (0..bytes / (text.len() + 40))
        .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": text}))
        .chain([json!({"role": "user", "content": "Warum?"})])
        .collect();
    json!({"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": messages}).to_string()
}

/// `body` posted raw to `/v1/messages`: the status and the `retry-after` header.
async fn post_messages(url: &str, body: String) -> (u16, Option<String>) {
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    (r.status().as_u16(), retry)
}

#[tokio::test]
async fn a_request_holds_its_share_of_the_body_budget_until_it_is_answered() {
    let upstream = crate::support::servers::mock_post(
        "/v1/messages",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("anthropic-response-text.json"), "application/json")
            .set_delay(Duration::from_millis(800)),
    )
    .await;
    // Room for one 1 MB request read and held (its bytes and its parsed form), not two.
    let proxy = Proxy::builder()
        .anthropic(crate::support::proxy::anthropic(&upstream.uri()))
        .max_inflight_body_bytes(3 << 20)
        .max_body_bytes(3 << 20)
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let first = tokio::spawn({
        let url = url.clone();
        async move { post_messages(&url, messages_body(1 << 20)).await }
    });
    // The first is read and waiting on the upstream when the second arrives.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, retry) = post_messages(&url, messages_body(1 << 20)).await;
    assert_eq!(status, 503, "a second big request past the budget is shed");
    assert_eq!(retry.as_deref(), Some("1"));
    assert_eq!(first.await.unwrap().0, 200);
    // Answered, the first gave its share back: the next one is served.
    assert_eq!(post_messages(&url, messages_body(1 << 20)).await.0, 200);
    assert_eq!(upstream.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_request_alone_is_served_even_when_it_holds_more_than_the_budget() {
    let upstream = crate::support::servers::mock_post(
        "/v1/messages",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("anthropic-response-text.json"), "application/json"),
    )
    .await;
    let proxy = Proxy::builder()
        .anthropic(crate::support::proxy::anthropic(&upstream.uri()))
        .max_inflight_body_bytes(1 << 20)
        .max_body_bytes(1 << 20)
        .build()
        .unwrap();
    let url = serving(proxy).await;
    // Under the budget as bytes, over it once parsed: alone, it is served.
    assert_eq!(post_messages(&url, messages_body(900 << 10)).await.0, 200);
}
