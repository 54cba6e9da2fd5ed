//! `llm-context send` end to end: the binary, a request body on stdin, a real HTTP server
//! on 127.0.0.1 standing in for the provider, and the documented exit codes.

#[cfg(feature = "redis")]
use std::process::Output;

use crate::support::rules::{anthropic_request, openai_request};
use crate::support::schema::{Root, assert_valid, validator};
use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

const KEY: &str = "sk-test-CLI-0123456789abcdefghijklmnop";

/// Runs the binary with `args`, `stdin` as the request, and only the given provider
/// variables in its environment.
async fn run(args: Vec<String>, env: Vec<(&'static str, String)>, stdin: String) -> Output {
    crate::support::child::run(env!("CARGO_BIN_EXE_llm-context"), args, env, stdin).await
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

use crate::support::stdout_json;

fn body() -> String {
    json!({
        "model": "gpt-5.4",
        "max_completion_tokens": 500,
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "When do hikes start?"}
        ]
    })
    .to_string()
}

async fn openai_server(template: ResponseTemplate) -> MockServer {
    crate::support::servers::mock_post("/v1/chat/completions", template).await
}

/// A server answering every Messages call with the recorded text answer.
async fn anthropic_server() -> MockServer {
    crate::support::servers::mock_post(
        "/v1/messages",
        ResponseTemplate::new(200).set_body_raw(
            crate::support::fixture("anthropic-response-text.json"),
            "application/json",
        ),
    )
    .await
}

/// Exit 0, or the test fails showing stderr.
fn assert_succeeded(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn openai_env(server: &MockServer) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{}/v1", server.uri())),
        ("OPENAI_API_KEY", KEY.to_owned()),
    ]
}

/// The usage of the recorded answer (2,006 prompt tokens, 1,920 of them cached, 300
/// out) and its cost on gpt-5.4: $2.50 fresh, $15 output, $0.25 cached per Mtok.
fn assert_usage_and_cost(v: &Value) {
    assert_eq!(v["response"]["usage"]["input_tokens"], 86);
    assert_eq!(v["response"]["usage"]["cache_read_tokens"], 1_920);
    let cost = v["response"]["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (86.0 * 2.5 + 300.0 * 15.0 + 1_920.0 * 0.25) / 1e6).abs() < 1e-12,
        "{cost}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_answers_with_the_response_and_the_report() {
    let server = openai_server(ResponseTemplate::new(200).set_body_raw(
        crate::support::fixture("openai-response-text.json"),
        "application/json",
    ))
    .await;
    let out = run(
        args(&["send", "--provider", "openai", "-"]),
        openai_env(&server),
        body(),
    )
    .await;
    assert_succeeded(&out);
    let v = stdout_json(&out);
    assert_eq!(
        v["response"]["message"]["content"],
        "Hikes start at 08:00 sharp."
    );
    assert_eq!(v["response"]["finish_reason"], "stop");
    assert_usage_and_cost(&v);
    // No policy file: the allowance comes from the model's window in the catalog.
    assert_eq!(v["report"]["prompt_allowance"], 272_000 - 2_048);
    assert_eq!(v["report"]["removed_messages"], 0);

    let sent: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert_valid(
        &validator("openai-chat-completions.schema.json", Root::Request),
        &sent,
        "the body",
    );
    assert!(openai_request(&sent).is_empty());
    assert_eq!(sent["max_completion_tokens"], 500);
}

#[tokio::test(flavor = "multi_thread")]
async fn api_responses_calls_the_responses_api_with_the_same_request_file() {
    let answer = json!({"id": "resp_1", "object": "response", "status": "completed",
        "model": "gpt-5.4", "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e1"},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Hikes start at 08:00 sharp.",
                          "annotations": [], "logprobs": []}]}],
        "usage": {"input_tokens": 2_006, "input_tokens_details": {"cached_tokens": 1_920},
                  "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 100},
                  "total_tokens": 2_306}});
    let server = crate::support::servers::mock_post(
        "/v1/responses",
        ResponseTemplate::new(200).set_body_json(answer),
    )
    .await;
    let out = run(
        args(&["send", "--provider", "openai", "--api", "responses", "-"]),
        openai_env(&server),
        body(),
    )
    .await;
    assert_succeeded(&out);
    let v = stdout_json(&out);
    assert_usage_and_cost(&v);
    let sent: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert_valid(
        &validator("openai-responses.schema.json", Root::Request),
        &sent,
        "the body",
    );
    assert_eq!(sent["instructions"], "Be brief.");
    assert_eq!(sent["max_output_tokens"], 500);
    assert_eq!(sent["input"][0]["content"], "When do hikes start?");
    // `--api` chooses among OpenAI's APIs only.
    let out = run(
        args(&["send", "--provider", "anthropic", "--api", "responses", "-"]),
        vec![("ANTHROPIC_API_KEY", KEY.to_owned())],
        body(),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_gets_the_same_body_in_its_own_form() {
    let server = anthropic_server().await;
    let env = vec![
        ("ANTHROPIC_BASE_URL", server.uri()),
        ("ANTHROPIC_API_KEY", KEY.to_owned()),
    ];
    let a = args(&[
        "send",
        "--provider",
        "anthropic",
        "--tenant",
        "acme",
        "--session",
        "s1",
        "-",
    ]);
    let mut request: Value = serde_json::from_str(&body()).unwrap();
    request["model"] = json!("claude-sonnet-4-6");
    let out = run(a, env, request.to_string()).await;
    assert_succeeded(&out);
    let v = stdout_json(&out);
    assert_eq!(v["response"]["usage"]["cache_write_1h_tokens"], 2_000);
    assert_eq!(v["report"]["prompt_allowance"], 1_000_000 - 2_048);

    let sent: Value =
        serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert_valid(
        &validator("anthropic-messages.schema.json", Root::Request),
        &sent,
        "the body",
    );
    assert!(anthropic_request(&sent).is_empty());
    assert_eq!(sent["system"][0]["text"], "Be brief.");
    assert_eq!(sent["max_tokens"], 500);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_takes_a_bearer_token_and_openai_only_fields_stay_behind() {
    let server = anthropic_server().await;
    let token = "gw-token-0123456789abcdefghij";
    let env = vec![
        ("ANTHROPIC_BASE_URL", server.uri()),
        ("ANTHROPIC_AUTH_TOKEN", token.to_owned()),
    ];
    let mut request: Value = serde_json::from_str(&body()).unwrap();
    request["model"] = json!("claude-sonnet-4-6");
    // Fields the Messages API takes pass through; OpenAI's own stay behind.
    request["metadata"] = json!({"user_id": "u-42"});
    request["service_tier"] = json!("auto");
    request["response_format"] = json!({"type": "json_object"});
    request["seed"] = json!(7);
    request["user"] = json!("u-42");
    let a = args(&["send", "--provider", "anthropic", "-"]);
    let out = run(a, env, request.to_string()).await;
    assert_succeeded(&out);
    let received = &server.received_requests().await.unwrap()[0];
    assert_eq!(
        received.headers.get("authorization").unwrap(),
        &format!("Bearer {token}")
    );
    assert!(received.headers.get("x-api-key").is_none());
    let sent: Value = serde_json::from_slice(&received.body).unwrap();
    assert_valid(
        &validator("anthropic-messages.schema.json", Root::Request),
        &sent,
        "the body",
    );
    assert_eq!(sent["metadata"], json!({"user_id": "u-42"}));
    assert_eq!(sent["service_tier"], "auto");
    for field in ["response_format", "seed", "user"] {
        assert!(sent.get(field).is_none(), "{field} was sent");
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains(token));
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_organization_and_project_come_from_the_environment() {
    let server = openai_server(ResponseTemplate::new(200).set_body_raw(
        crate::support::fixture("openai-response-text.json"),
        "application/json",
    ))
    .await;
    let mut env = openai_env(&server);
    env.push(("OPENAI_ORG_ID", "org-acme".to_owned()));
    env.push(("OPENAI_PROJECT_ID", "proj_agents".to_owned()));
    let out = run(args(&["send", "--provider", "openai", "-"]), env, body()).await;
    assert_succeeded(&out);
    let received = &server.received_requests().await.unwrap()[0];
    assert_eq!(
        received.headers.get("openai-organization").unwrap(),
        "org-acme"
    );
    assert_eq!(
        received.headers.get("openai-project").unwrap(),
        "proj_agents"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_that_cannot_fit_is_never_sent() {
    let server = openai_server(ResponseTemplate::new(200)).await;
    let policy = std::env::temp_dir().join(format!("llm-context-send-{}.toml", std::process::id()));
    std::fs::write(&policy, "max_tokens = 1000\nreserve_tokens = 100\n").unwrap();
    let mut request: Value = serde_json::from_str(&body()).unwrap();
    request["messages"][1]["content"] = json!("word ".repeat(5_000));
    let a = args(&[
        "send",
        "--provider",
        "openai",
        "--policy",
        policy.to_str().unwrap(),
        "-",
    ]);
    let out = run(a, openai_env(&server), request.to_string()).await;
    std::fs::remove_file(&policy).ok();
    assert_eq!(out.status.code(), Some(3));
    let v = stdout_json(&out);
    assert_eq!(v["error"], "context_limit");
    assert_eq!(v["allowance"], 900);
    assert!(server.received_requests().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_errors_exit_4_without_the_key() {
    let server = openai_server(ResponseTemplate::new(401).set_body_json(json!({"error": {
        "message": format!("Incorrect API key provided: {KEY}."),
        "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}})))
    .await;
    let out = run(
        args(&["send", "--provider", "openai", "-"]),
        openai_env(&server),
        body(),
    )
    .await;
    assert_eq!(out.status.code(), Some(4));
    let v = stdout_json(&out);
    assert_eq!(v["error"], "provider");
    assert_eq!(v["kind"], "authentication");
    assert_eq!(v["status"], 401);
    assert_eq!(v["code"], "invalid_api_key");
    for stream in [&out.stdout, &out.stderr] {
        assert!(!String::from_utf8_lossy(stream).contains(KEY));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_the_server_echoes_in_a_header_is_never_printed() {
    let server = openai_server(
        ResponseTemplate::new(401)
            .insert_header("x-request-id", format!("req-{KEY}"))
            .set_body_json(json!({"error": {"message": "no", "type": "invalid_request_error"}})),
    )
    .await;
    let out = run(
        args(&["send", "--provider", "openai", "-"]),
        openai_env(&server),
        body(),
    )
    .await;
    assert_eq!(out.status.code(), Some(4));
    let v = stdout_json(&out);
    assert_eq!(v["request_id"], "req-[REDACTED]");
    for stream in [&out.stdout, &out.stderr] {
        assert!(!String::from_utf8_lossy(stream).contains("0123456789abcdefghijklmnop"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_exit_4_naming_the_target_and_never_followed() {
    let elsewhere = openai_server(ResponseTemplate::new(200).set_body_raw(
        crate::support::fixture("openai-response-text.json"),
        "application/json",
    ))
    .await;
    let target = format!("{}/v1/chat/completions", elsewhere.uri());
    let server =
        openai_server(ResponseTemplate::new(308).insert_header("location", target.as_str())).await;
    let out = run(
        args(&["send", "--provider", "openai", "-"]),
        openai_env(&server),
        body(),
    )
    .await;
    assert_eq!(out.status.code(), Some(4));
    let v = stdout_json(&out);
    assert_eq!(v["kind"], "redirect");
    assert_eq!(v["status"], 308);
    assert!(v["message"].as_str().unwrap().contains(&target), "{v}");
    assert!(elsewhere.received_requests().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_password_in_the_base_url_is_never_printed() {
    // Nothing listens on port 1: the connection error names the URL.
    let env = vec![
        (
            "OPENAI_BASE_URL",
            "http://proxy:s3cret-pass-4711@127.0.0.1:1/v1".to_owned(),
        ),
        ("OPENAI_API_KEY", KEY.to_owned()),
    ];
    let a = args(&["send", "--provider", "openai", "--max-retries", "0", "-"]);
    let out = run(a, env, body()).await;
    assert_eq!(out.status.code(), Some(4));
    let v = stdout_json(&out);
    assert_eq!(v["kind"], "connection");
    assert!(v["message"].as_str().unwrap().contains("proxy:***@"), "{v}");
    for stream in [&out.stdout, &out.stderr] {
        assert!(!String::from_utf8_lossy(stream).contains("s3cret-pass-4711"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_are_retried_as_asked() {
    let server = openai_server(ResponseTemplate::new(500).set_body_raw("oops", "text/plain")).await;
    let a = args(&["send", "--provider", "openai", "--max-retries", "1", "-"]);
    let out = run(a, openai_env(&server), body()).await;
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(stdout_json(&out)["kind"], "server");
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_exits_2() {
    // No key for OpenAI's own API.
    let out = run(args(&["send", "--provider", "openai", "-"]), vec![], body()).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("OPENAI_API_KEY"));
    let out = run(
        args(&["send", "--provider", "anthropic", "-"]),
        vec![],
        body(),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ANTHROPIC_API_KEY"));
    // Not JSON, and not a request body.
    let env = vec![("OPENAI_API_KEY", KEY.to_owned())];
    let out = run(
        args(&["send", "--provider", "openai", "-"]),
        env.clone(),
        "{oops".into(),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    let out = run(
        args(&["send", "--provider", "openai", "-"]),
        env,
        "{\"model\": 1}".into(),
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("model"));
}

/// `--redis URL`: two separate processes share one memo (and one artifact store) through
/// a real Redis, per tenant.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread")]
async fn redis_shares_the_memo_between_processes() {
    let url = crate::support::redis::redis_url();
    let server = openai_server(ResponseTemplate::new(200).set_body_raw(
        crate::support::fixture("openai-response-text.json"),
        "application/json",
    ))
    .await;
    // A tenant of its own, so an earlier run's memo in the same Redis cannot answer.
    let tenant = crate::support::redis::unique_prefix("cli");
    let deterministic = json!({
        "model": "gpt-5.4",
        "temperature": 0,
        "messages": [{"role": "user", "content": "When do hikes start?"}]
    })
    .to_string();
    let send = |tenant: String| {
        let (url, server_env, body) = (url.clone(), openai_env(&server), deterministic.clone());
        async move {
            let out = run(
                args(&[
                    "send",
                    "--provider",
                    "openai",
                    "--redis",
                    &url,
                    "--tenant",
                    &tenant,
                    "-",
                ]),
                server_env,
                body,
            )
            .await;
            assert_succeeded(&out);
            stdout_json(&out)
        }
    };
    let first = send(tenant.clone()).await;
    assert_eq!(first["report"]["memo_hit"], Value::Null, "a provider call");
    let second = send(tenant.clone()).await;
    assert_eq!(second["report"]["memo_hit"], true, "answered from Redis");
    assert_eq!(second["response"]["message"], first["response"]["message"]);
    send(format!("{tenant}-other")).await;
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        2,
        "one call per tenant"
    );

    // An unreachable Redis at start is an outage, not bad input: the request is sent
    // without the memo (tests/it/cli_redis.rs has the rest), and the password never printed.
    let out = run(
        args(&[
            "send",
            "--provider",
            "openai",
            "--redis",
            "redis://:hunter2@127.0.0.1:1/",
            "-",
        ]),
        openai_env(&server),
        deterministic.clone(),
    )
    .await;
    assert_succeeded(&out);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hunter2"));
}

/// The memo key covers where the request goes: the same body sent with `--provider
/// openai`, then `--provider anthropic`, then to another OpenAI-compatible server, is
/// three provider calls. The second was answered from the first's entry.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread")]
async fn the_memo_is_per_provider_and_base_url() {
    let url = crate::support::redis::redis_url();
    let openai = || async {
        openai_server(ResponseTemplate::new(200).set_body_raw(
            crate::support::fixture("openai-response-text.json"),
            "application/json",
        ))
        .await
    };
    let (first_openai, other_openai) = (openai().await, openai().await);
    let anthropic = anthropic_server().await;
    let tenant = crate::support::redis::unique_prefix("upstream");
    let body = json!({
        "model": "claude-sonnet-4-6",
        "temperature": 0,
        "messages": [{"role": "user", "content": "Which trail is open?"}]
    })
    .to_string();
    let send = |provider: &'static str, env: Vec<(&'static str, String)>| {
        let a = args(&[
            "send",
            "--provider",
            provider,
            "--redis",
            &url,
            "--tenant",
            &tenant,
            "-",
        ]);
        let body = body.clone();
        async move {
            let out = run(a, env, body).await;
            assert_succeeded(&out);
            stdout_json(&out)
        }
    };
    let anthropic_env = vec![
        ("ANTHROPIC_BASE_URL", anthropic.uri()),
        ("ANTHROPIC_API_KEY", KEY.to_owned()),
    ];
    let once = send("openai", openai_env(&first_openai)).await;
    assert_eq!(once["report"]["memo_hit"], Value::Null);
    let again = send("openai", openai_env(&first_openai)).await;
    assert_eq!(
        again["report"]["memo_hit"], true,
        "same upstream: a memo hit"
    );
    let other = send("anthropic", anthropic_env).await;
    assert_eq!(other["report"]["memo_hit"], Value::Null, "{other}");
    let moved = send("openai", openai_env(&other_openai)).await;
    assert_eq!(moved["report"]["memo_hit"], Value::Null, "{moved}");
    assert_eq!(first_openai.received_requests().await.unwrap().len(), 1);
    assert_eq!(anthropic.received_requests().await.unwrap().len(), 1);
    assert_eq!(other_openai.received_requests().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_over_its_budget_exits_5_and_is_never_sent() {
    let server = openai_server(ResponseTemplate::new(200).set_body_raw(
        crate::support::fixture("openai-response-text.json"),
        "application/json",
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let send = |budget: &str| {
        let path = dir.path().join("budget.toml");
        std::fs::write(&path, budget).unwrap();
        let a = args(&[
            "send",
            "--provider",
            "openai",
            "--budget",
            path.to_str().unwrap(),
            "-",
        ]);
        run(a, openai_env(&server), body())
    };
    // The request's 500-token output limit alone is over the session's 100.
    let out = send("output_tokens_per_session = 100\ncalls_per_day = 10\n").await;
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stdout_json(&out);
    assert_eq!(v["error"], "budget");
    assert_eq!(v["limit"], "output_tokens_per_session");
    assert_eq!(v["used"], 0.0);
    assert_eq!(v["requested"], 500.0);
    assert_eq!(v["max"], 100.0);
    assert!(v["resets_at"].is_null(), "a session's limit does not reset");
    assert!(server.received_requests().await.unwrap().is_empty());
    // Within the budget, it is sent; a misspelt limit is bad input.
    assert_succeeded(&send("cost_usd_per_day = 1.0\noutput_tokens_per_hour = 600\n").await);
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
    let out = send("calls_per_days = 1\n").await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("calls_per_days"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_litellm_price_file_prices_the_call() {
    let server = openai_server(ResponseTemplate::new(200).set_body_raw(
        crate::support::fixture("openai-response-text.json"),
        "application/json",
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("model_prices_and_context_window.json");
    // LiteLLM's own field names and units (USD per token).
    std::fs::write(
        &prices,
        r#"{"sample_spec": {"mode": "one of: chat, embedding"},
            "gpt-5.4": {"max_input_tokens": 272000, "input_cost_per_token": 1e-06,
                        "output_cost_per_token": 2e-06, "cache_read_input_token_cost": 1e-07,
                        "litellm_provider": "openai", "mode": "chat"}}"#,
    )
    .unwrap();
    let a = args(&[
        "send",
        "--provider",
        "openai",
        "--catalog",
        prices.to_str().unwrap(),
        "-",
    ]);
    let out = run(a, openai_env(&server), body()).await;
    assert_succeeded(&out);
    let v = stdout_json(&out);
    // The fixture's usage: 2,006 prompt tokens of which 1,920 cached, 300 output.
    let expected = 86.0 * 1e-6 + 1_920.0 * 1e-7 + 300.0 * 2e-6;
    let cost = v["response"]["cost_usd"].as_f64().unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
}
