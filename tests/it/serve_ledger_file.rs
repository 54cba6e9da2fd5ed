//! The ledger on disk (`serve --ledger sqlite:PATH`): a session's rows survive a SIGKILL of
//! the server mid-session, every answered request among them; `llm-context ledger` prints
//! them; a ledger path that cannot be opened stops the server at start.

use std::process::Command;

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::proxy::json_of;
use crate::support::redis::free_port;

const EXE: &str = env!("CARGO_BIN_EXE_llm-context");

async fn upstream() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-5.4",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 2_000, "completion_tokens": 7, "total_tokens": 2_007,
                      "prompt_tokens_details": {"cached_tokens": 1_024}}})))
        .mount(&server)
        .await;
    server
}

async fn send(url: &str, turns: usize) {
    let mut messages = vec![json!({"role": "system", "content": "Be brief. ".repeat(300)})];
    for i in 0..turns {
        messages.push(json!({"role": "user", "content": format!("question {i}")}));
        messages.push(json!({"role": "assistant", "content": format!("answer {i}")}));
    }
    messages.push(json!({"role": "user", "content": "and now?"}));
    let answer = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("x-llm-context-session", "durable")
        .header("content-type", "application/json")
        .body(json!({"model": "gpt-5.4", "messages": messages}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.bytes().await.unwrap();
}

async fn requests(url: &str) -> Value {
    let one = reqwest::get(format!("{url}/llm-context/ledger/sessions/durable"))
        .await
        .unwrap();
    json_of(one).await
}

#[tokio::test]
async fn a_killed_server_loses_no_answered_request_and_the_cli_prints_the_ledger() {
    let upstream = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let ledger = format!("sqlite:{}", dir.path().join("ledger.db").display());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = ["--listen", listen.as_str(), "--ledger", ledger.as_str()];
    let (mut child, url) =
        crate::support::serve_child::spawn(EXE, &upstream.uri(), &args, port).await;
    for turn in 0..7 {
        send(&url, turn).await;
    }
    // Killed at once after the seventh answer: no drain, no flush.
    child.kill().unwrap();
    child.wait().unwrap();

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = ["--listen", listen.as_str(), "--ledger", ledger.as_str()];
    let (mut again, url) =
        crate::support::serve_child::spawn(EXE, &upstream.uri(), &args, port).await;
    let before = requests(&url).await;
    assert_eq!(before["totals"]["requests"], 7, "{before}");
    send(&url, 7).await;
    let after = requests(&url).await;
    let rows = after["requests"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    // Billed as the upstream said: 976 fresh, 1,024 read, 7 out, at gpt-5.4's prices.
    assert!(
        rows.iter()
            .all(|r| r["actual"]["uncached"] == 976 && r["actual"]["cache_read"] == 1_024)
    );
    assert!(after["scope"].as_str().unwrap().contains("ledger.db"));
    again.kill().unwrap();
    again.wait().unwrap();

    let printed = Command::new(EXE)
        .args(["ledger", "--ledger", &ledger, "--json"])
        .output()
        .unwrap();
    assert!(printed.status.success());
    let overview: Value = serde_json::from_slice(&printed.stdout).unwrap();
    assert_eq!(overview["sessions"][0]["totals"], after["totals"]);
    let table = Command::new(EXE)
        .args(["ledger", "--ledger", &ledger])
        .output()
        .unwrap();
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.starts_with("tenant"), "{table}");
    let session = table.lines().find(|l| l.contains("durable")).unwrap();
    let usd = format!("{:.4}", after["totals"]["actual_usd"].as_f64().unwrap());
    assert!(session.contains(" 8 ") && session.contains(&usd), "{table}");
}

#[test]
fn a_ledger_that_cannot_be_opened_stops_the_server_at_start_and_the_cli_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let bad = format!("sqlite:{}/no/such/dir/ledger.db", dir.path().display());
    let out = Command::new(EXE)
        .args(["serve", "--listen", "127.0.0.1:0", "--ledger", &bad])
        .env("OPENAI_API_KEY", "sk-x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no/such/dir/ledger.db"), "{said}");
    let kind = Command::new(EXE)
        .args(["ledger", "--ledger", "postgres://x"])
        .output()
        .unwrap();
    assert_eq!(kind.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&kind.stderr).contains("sqlite:PATH"));
    let missing = Command::new(EXE)
        .args(["ledger", "--ledger", &bad])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no such file"));
}
