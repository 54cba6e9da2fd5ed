//! `llm-context serve` as a process: SIGTERM drains the requests in flight (a stream
//! runs to its end), within `--drain-timeout`; two processes on one real Redis share
//! their memo.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::stream_server::{Reply, data, start};
use serde_json::{Value, json};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The server over `upstream`, once it answers `/healthz`; its child and base URL.
async fn serve(upstream: &str, drain: &str) -> (Child, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    serve_with(
        upstream,
        &["--listen", &listen, "--drain-timeout", drain],
        port,
    )
    .await
}

/// The server with `args`, listening on `port` of loopback (or of every address).
async fn serve_with(upstream: &str, args: &[&str], port: u16) -> (Child, String) {
    crate::support::serve_child::spawn(env!("CARGO_BIN_EXE_llm-context"), upstream, args, port)
        .await
}

use crate::support::serve_child::{exited, terminate};

fn slow_answer(pieces: usize) -> Vec<String> {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5.4",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut out: Vec<String> = (0..pieces)
        .map(|i| {
            data(&chunk(
                json!({"content": format!("Stück {i} — 部分 ")}),
                None,
            ))
        })
        .collect();
    out.push(data(&chunk(json!({}), Some("stop"))));
    out.push("data: [DONE]\n\n".into());
    out
}

async fn open_stream(url: &str) -> reqwest::Response {
    let body = json!({"model": "gpt-5.4", "stream": true,
                      "messages": [{"role": "user", "content": "Erzähl langsam."}]});
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_a_stream_in_flight_finish_then_exits() {
    let mut reply = Reply::events(slow_answer(8));
    reply.gap = Duration::from_millis(120);
    let upstream = start(vec![reply]).await;
    let (mut child, url) = serve(&upstream.url, "30").await;
    let mut response = open_stream(&url).await;
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("Stück 0"));
    terminate(&child);
    let mut rest = String::new();
    while let Some(piece) = response.chunk().await.unwrap() {
        rest.push_str(&String::from_utf8_lossy(&piece));
    }
    assert!(
        rest.contains("Stück 7"),
        "the stream ran to its end: {rest}"
    );
    assert!(rest.trim_end().ends_with("data: [DONE]"), "{rest}");
    let status = exited(&mut child, Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    // Gone: no new connection is accepted.
    assert!(reqwest::get(format!("{url}/healthz")).await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_past_the_drain_timeout_is_cut_off() {
    let mut reply = Reply::events(slow_answer(2)[..1].to_vec());
    reply.close = false; // the upstream never finishes
    let upstream = start(vec![reply]).await;
    let (mut child, url) = serve(&upstream.url, "1").await;
    let mut response = open_stream(&url).await;
    response.chunk().await.unwrap().unwrap();
    let asked = Instant::now();
    terminate(&child);
    let status = exited(&mut child, Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "the drain lasted {waited:?}"
    );
    // The client's stream ends without [DONE].
    let mut rest = String::new();
    while let Ok(Some(piece)) = response.chunk().await {
        rest.push_str(&String::from_utf8_lossy(&piece));
    }
    assert!(!rest.contains("[DONE]"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_with_keys_serves_tenants_on_any_address() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(
        dir.path().join("tiny.toml"),
        "max_tokens = 2000\nreserve_tokens = 500\n",
    )
    .unwrap();
    // SHA-256 of "sk-acme" and of "sk-tiny", as an operator writes them.
    let config = format!(
        r#"listen = "0.0.0.0:{port}"

[[keys]]
sha256 = "{acme}"
org = "acme"

[[keys]]
sha256 = "{tiny}"
org = "tiny"
domain = "support"
policy = "tiny.toml"

[routes]
"claude-local-" = "openai"
"#,
        acme = sha256_hex("sk-acme"),
        tiny = sha256_hex("sk-tiny"),
    );
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let replies = (0..2).map(|_| Reply::events(slow_answer(1))).collect();
    let upstream = start(replies).await;
    let (mut child, url) =
        serve_with(&upstream.url, &["--config", path.to_str().unwrap()], port).await;
    let ask = |key: Option<&'static str>, model: &'static str, text: String| {
        let url = url.clone();
        async move {
            let body = json!({"model": model, "stream": true,
                              "messages": [{"role": "user", "content": text}]});
            let mut req = reqwest::Client::new()
                .post(format!("{url}/v1/chat/completions"))
                .body(body.to_string());
            if let Some(key) = key {
                req = req.bearer_auth(key);
            }
            req.send().await.unwrap()
        }
    };
    let r = ask(None, "gpt-5.4", "hallo".into()).await;
    assert_eq!(r.status(), 401);
    let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(v["error"]["code"], "invalid_api_key");
    // Routed by the config's prefix to the OpenAI-compatible upstream.
    let r = ask(Some("sk-acme"), "claude-local-7b", "hallo".into()).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("Stück 0"));
    // The tenant's own policy file, found beside the config.
    let r = ask(Some("sk-tiny"), "gpt-5.4", "слово ".repeat(3_000)).await;
    assert_eq!(r.status(), 400);
    let v: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(v["llm_context"]["allowance"], 1_500);
    terminate(&child);
    exited(&mut child, Duration::from_secs(10)).await;
}

#[test]
fn a_config_without_keys_is_loopback_only_and_unbuilt_fields_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = |config: &str| {
        let path = dir.path().join("serve.toml");
        std::fs::write(&path, config).unwrap();
        Command::new(env!("CARGO_BIN_EXE_llm-context"))
            .args(["serve", "--config", path.to_str().unwrap()])
            .env("OPENAI_API_KEY", "sk-upstream")
            .output()
            .unwrap()
    };
    // A build without the exporter refuses to be asked for one.
    #[cfg(not(feature = "otel"))]
    {
        let out = run("otlp_endpoint = \"http://127.0.0.1:4318\"\n");
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("`otel` feature"));
    }
    for (config, says) in [
        ("listen = \"0.0.0.0:0\"\n", "loopback"),
        (
            "[budgets.\"ghost\"]\ncalls_per_hour = 1\n",
            "names no tenant",
        ),
        (
            "[budgets.\"acme\"]\ncost_usd_per_day = -1.0\n",
            "cost_usd_per_day",
        ),
        (
            "[budgets.\"acme\"]\ncalls_per_hours = 1\n",
            "calls_per_hours",
        ),
        ("listen = \"127.0.0.1:0\"\nmystery = 1\n", "mystery"),
        ("[limits]\nheader_timeout = 0\n", "header_timeout"),
        ("[limits]\nmax_connections = 0\n", "max_connections"),
        ("[limits]\nheader_timeuot = 5\n", "header_timeuot"),
        (
            "[[keys]]\nsha256 = \"9f86\"\norg = \"acme\"\n",
            "64 hex digits",
        ),
    ] {
        let out = run(config);
        assert_eq!(out.status.code(), Some(2), "{config}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{config}: {stderr}");
    }
}

fn sha256_hex(key: &str) -> String {
    llm_context::serve::key_digest(key)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_config_starts_and_asks_for_keys() {
    let upstream = start(vec![Reply::events(slow_answer(1))]).await;
    let port = free_port();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/serve.toml");
    let listen = format!("127.0.0.1:{port}");
    let (mut child, url) = serve_with(
        &upstream.url,
        &["--config", config, "--listen", &listen],
        port,
    )
    .await;
    let body = json!({"model": "gpt-5.4", "messages": [{"role": "user", "content": "hallo"}]});
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .header("x-api-key", "not-in-the-table")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth("test")
        .body(
            json!({"model": "gpt-5.4", "stream": true,
                     "messages": [{"role": "user", "content": "hallo"}]})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    terminate(&child);
    exited(&mut child, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_logs_one_json_line_per_request() {
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_llm-context"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("OPENAI_API_KEY", "sk-upstream")
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let mut up = false;
    for _ in 0..200 {
        if reqwest::get(format!("{url}/healthz")).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(up, "the server did not start");
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    terminate(&child);
    exited(&mut child, Duration::from_secs(10)).await;
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let request = lines
        .iter()
        .find(|l| l["fields"]["event"] == "serve_request")
        .unwrap_or_else(|| panic!("no serve_request line in {stderr}"));
    assert_eq!(request["fields"]["status"], 400);
    assert_eq!(request["fields"]["route"], "/v1/chat/completions");
    assert_eq!(request["level"], "INFO");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_serve_processes_on_one_redis_share_the_memo() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        wiremock::ResponseTemplate::new(200).set_body_raw(
            crate::support::fixture("openai-response-text.json"),
            "application/json",
        ),
    )
    .await;
    let redis = crate::support::redis::redis_url();
    let replica = || async {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        serve_with(
            &upstream.uri(),
            &["--listen", &listen, "--redis", &redis],
            port,
        )
        .await
    };
    let (mut a, url_a) = replica().await;
    let (mut b, url_b) = replica().await;
    // Its own question: the replicas' Redis keys are the default ones, shared with other
    // runs, and only this test asks it.
    let nonce = crate::support::redis::unique_prefix("two-processes");
    let body = json!({"model": "gpt-5.4", "temperature": 0,
                      "messages": [{"role": "user", "content": format!("Wer hat {nonce} gelöscht? 誰?")}]});
    let ask = |url: String| {
        let body = body.to_string();
        async move {
            let r = reqwest::Client::new()
                .post(format!("{url}/v1/chat/completions"))
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.headers()["x-llm-context-memo"]
                .to_str()
                .unwrap()
                .to_owned()
        }
    };
    assert_eq!(ask(url_a).await, "miss");
    assert_eq!(ask(url_b).await, "hit");
    assert_eq!(upstream.received_requests().await.unwrap().len(), 1);
    for child in [&mut a, &mut b] {
        terminate(child);
        assert!(exited(child, Duration::from_secs(10)).await.success());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_serve_processes_on_one_redis_share_a_tenants_budget() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        wiremock::ResponseTemplate::new(200).set_body_raw(
            crate::support::fixture("openai-response-text.json"),
            "application/json",
        ),
    )
    .await;
    // A tenant of its own: the replicas' Redis keys are the default ones, shared with
    // other runs.
    let org = crate::support::redis::unique_prefix("budget-org");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[[keys]]\nsha256 = \"{}\"\norg = \"{org}\"\n\n[budgets.\"{}\"]\ncalls_per_hour = 3\n",
            sha256_hex("sk-tenant"),
            // The tenant's label, as `/metrics` shows it: this org's `:`s are `%3A` there.
            llm_context::serve::tenant_label(&llm_context::Scope::org(&org)),
        ),
    )
    .unwrap();
    let redis = crate::support::redis::redis_url();
    let replica = || async {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let args = [
            "--config",
            config.to_str().unwrap(),
            "--listen",
            &listen,
            "--redis",
            &redis,
        ];
        serve_with(&upstream.uri(), &args, port).await
    };
    let (mut a, url_a) = replica().await;
    let (mut b, url_b) = replica().await;
    let mut statuses = Vec::new();
    for i in 0..6 {
        let url = if i % 2 == 0 { &url_a } else { &url_b };
        let body = json!({"model": "gpt-5.4",
                          "messages": [{"role": "user", "content": format!("Frage {i}: warum? なぜ?")}]});
        let r = reqwest::Client::new()
            .post(format!("{url}/v1/chat/completions"))
            .bearer_auth("sk-tenant")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    assert_eq!(upstream.received_requests().await.unwrap().len(), 3);
    for child in [&mut a, &mut b] {
        terminate(child);
        assert!(exited(child, Duration::from_secs(10)).await.success());
    }
}

#[tokio::test]
async fn the_limits_come_from_the_config_and_the_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(
        &path,
        "[limits]\nheader_timeout = 0.3\nmax_body_bytes = 100000\n",
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "--config",
        path.to_str().unwrap(),
        "--listen",
        &listen,
        "--max-body-bytes",
        "1000",
    ];
    let (mut child, url) = serve_with("http://127.0.0.1:9", &args, port).await;
    // The flag's body limit, not the config's.
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("x".repeat(5_000))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    // The config's header timeout: an idle connection is closed.
    use tokio::io::AsyncReadExt;
    let mut idle = tokio::net::TcpStream::connect(&listen).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(3), idle.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    terminate(&child);
    exited(&mut child, Duration::from_secs(10)).await;
}
