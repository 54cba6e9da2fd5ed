//! `llm-context send --redis URL` at start-up: a Redis that cannot be reached is an
//! outage (the request is sent without the memo, with a warning on stderr), refused
//! credentials are bad input (exit 2, one line, nothing sent). Logs go to stderr only,
//! warnings by default, as `RUST_LOG` asks otherwise. The binary runs as a child
//! process against a real HTTP server on 127.0.0.1 and a redis-server of the test's own.
#![cfg(all(feature = "cli", feature = "openai", feature = "redis"))]

use std::process::{Command, Output, Stdio};

use serde_json::json;
use wiremock::{MockServer, ResponseTemplate};

const KEY: &str = "sk-test-CLI-0123456789abcdefghijklmnop";

async fn provider() -> MockServer {
    crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200).set_body_raw(
            crate::support::fixture("openai-response-text.json"),
            "application/json",
        ),
    )
    .await
}

/// `send --provider openai --redis URL -` with a deterministic request on stdin, the
/// provider at `server`, and `RUST_LOG` as given (unset when `None`).
async fn send(server: &MockServer, redis: String, rust_log: Option<&'static str>) -> Output {
    let base = format!("{}/v1", server.uri());
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_llm-context"));
        cmd.args(["send", "--provider", "openai", "--redis", &redis, "-"])
            .env("OPENAI_BASE_URL", base)
            .env("OPENAI_API_KEY", KEY)
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(filter) = rust_log {
            cmd.env("RUST_LOG", filter);
        }
        let mut child = cmd.spawn().unwrap();
        let body = json!({
            "model": "gpt-5.4",
            "temperature": 0,
            "messages": [{"role": "user", "content": "When do hikes start?"}]
        });
        crate::support::child::feed(&mut child, body.to_string().as_bytes());
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Standard output is exactly one JSON document, whatever is logged.
use crate::support::stdout_json;

async fn calls(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_redis_at_start_sends_without_the_memo_and_warns_on_stderr() {
    let server = provider().await;
    // Nothing listens there.
    let redis = format!(
        "redis://:hunter2@127.0.0.1:{}/",
        crate::support::redis::free_port()
    );
    let out = send(&server, redis, None).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v = stdout_json(&out);
    assert_eq!(
        v["response"]["message"]["content"],
        "Hikes start at 08:00 sharp."
    );
    assert_eq!(calls(&server).await, 1, "the provider answered");
    assert!(err.contains("redis_unreachable"), "{err}");
    assert!(err.contains("memo_store_degraded"), "{err}");
    assert!(err.contains("redis://:***@127.0.0.1"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.lines().all(|l| l.contains("WARN")), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rust_log_chooses_what_is_logged_and_stdout_stays_json() {
    let server = provider().await;
    let down = || format!("redis://127.0.0.1:{}/", crate::support::redis::free_port());

    let quiet = send(&server, down(), Some("error")).await;
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    stdout_json(&quiet);
    assert_eq!(stderr(&quiet), "", "RUST_LOG=error hides the warnings");

    let verbose = send(&server, down(), Some("debug")).await;
    assert_eq!(verbose.status.code(), Some(0), "{}", stderr(&verbose));
    stdout_json(&verbose);
    let err = stderr(&verbose);
    assert!(err.contains("provider_request"), "a debug event: {err}");
    assert!(err.contains("redis_unreachable"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_redis_credentials_are_bad_input_and_nothing_is_sent() {
    let server = provider().await;
    let port = crate::support::redis::free_port();
    let _redis =
        crate::support::redis::OwnRedis::start_with(port, &["--requirepass", "s3cret-pass"]);
    for (url, why) in [
        // Without a password every memo call failed with NOAUTH, silently.
        (format!("redis://127.0.0.1:{port}/"), "no password"),
        (
            format!("redis://:wrong-pass@127.0.0.1:{port}/"),
            "a wrong password",
        ),
    ] {
        let out = send(&server, url, None).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{why}: {err}");
        assert!(out.stdout.is_empty(), "{why}");
        assert_eq!(err.lines().count(), 1, "{why}: one line: {err}");
        assert!(err.starts_with("llm-context: --redis: "), "{why}: {err}");
        assert!(err.contains("refused the credentials"), "{why}: {err}");
        assert!(!err.contains("wrong-pass"), "{why}: {err}");
    }
    assert_eq!(calls(&server).await, 0, "nothing was sent");

    // The right password: the memo works.
    let url = format!("redis://:s3cret-pass@127.0.0.1:{port}/");
    let first = send(&server, url.clone(), None).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert_eq!(stderr(&first), "");
    let second = send(&server, url, None).await;
    assert_eq!(stdout_json(&second)["report"]["memo_hit"], true);
    assert_eq!(calls(&server).await, 1);
}
