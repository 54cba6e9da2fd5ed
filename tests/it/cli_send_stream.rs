//! `llm-context send --stream` end to end: the binary against a real SSE server on
//! 127.0.0.1, its JSON lines, and the exit codes `send` documents.

use std::process::Output;

use crate::support::schema::{Root, assert_valid, validator};
use crate::support::stream_server::{Reply, data, named, start};
use serde_json::{Value, json};

const KEY: &str = "sk-test-CLI-0123456789abcdefghijklmnop";

async fn run(args: &[&str], env: Vec<(&'static str, String)>, stdin: String) -> Output {
    let args = args.iter().map(|s| (*s).to_owned()).collect();
    crate::support::child::run(env!("CARGO_BIN_EXE_llm-context"), args, env, stdin).await
}

/// Every stdout line, as JSON.
fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn body(model: &str) -> String {
    json!({
        "model": model,
        "max_completion_tokens": 500,
        "messages": [
            {"role": "developer", "content": "Antworte knapp."},
            {"role": "user", "content": "Warum schlug das Deployment fehl? なぜ?"}
        ],
        "tools": [{"type": "function", "function": {"name": "fetch_logs",
                   "parameters": {"type": "object", "properties": {"unit": {"type": "string"}}}}}]
    })
    .to_string()
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5.4",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn openai_answer() -> Vec<String> {
    let v = validator("openai-chat-completions.schema.json", Root::Stream);
    let mut out: Vec<String> = [
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"content": "Ich prüfe "}), None),
        chunk(json!({"content": "die Logs."}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                   "function": {"name": "fetch_logs", "arguments": "{\"unit\":"}}]}),
            None,
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": " \"déploiement\"}"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-5.4",
               "choices": [], "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}}),
    ]
    .iter()
    .map(|c| {
        assert_valid(&v, c, "a stream chunk");
        data(c)
    })
    .collect();
    out.push("data: [DONE]\n\n".into());
    out
}

fn openai_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OPENAI_BASE_URL", format!("{url}/v1")),
        ("OPENAI_API_KEY", KEY.to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_streams_json_lines_ending_with_the_response_and_report() {
    let server = start(vec![Reply::events(openai_answer())]).await;
    let out = run(
        &["send", "--provider", "openai", "--stream", "-"],
        openai_env(&server.url),
        body("gpt-5.4"),
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = lines(&out);
    let kinds: Vec<&str> = lines.iter().map(|l| l["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["delta", "delta", "tool_call", "done"]);
    assert_eq!(lines[0]["text"], "Ich prüfe ");
    assert_eq!(
        lines[2],
        json!({"type": "tool_call", "id": "call_1", "name": "fetch_logs",
               "arguments": {"unit": "déploiement"}})
    );
    let done = &lines[3];
    assert_eq!(
        done["response"]["message"]["content"],
        "Ich prüfe die Logs."
    );
    assert_eq!(done["response"]["finish_reason"], "tool_calls");
    assert_eq!(done["response"]["usage"]["output_tokens"], 20);
    assert!(done["response"]["cost_usd"].as_f64().unwrap() > 0.0);
    assert!(done["report"]["prompt_allowance"].as_u64().unwrap() > 0);
    let sent = server.bodies.lock().unwrap()[0].clone();
    assert_valid(
        &validator("openai-chat-completions.schema.json", Root::Request),
        &sent,
        "the body",
    );
    assert_eq!(sent["stream"], true);
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_streams_reasoning_and_keeps_the_signed_block() {
    let start_event = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
        "role": "assistant", "model": "claude-sonnet-4-6", "content": [], "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": 300, "output_tokens": 1}}});
    let events = [
        start_event,
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Logs zuerst. "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Die Datenbank (接続拒否)."}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 40}}),
        json!({"type": "message_stop"}),
    ];
    let pieces = events
        .iter()
        .map(|e| named(e["type"].as_str().unwrap(), e))
        .collect();
    let server = start(vec![Reply::events(pieces)]).await;
    let env = vec![
        ("ANTHROPIC_BASE_URL", server.url.clone()),
        ("ANTHROPIC_API_KEY", KEY.to_owned()),
    ];
    let mut request: Value = serde_json::from_str(&body("claude-sonnet-4-6")).unwrap();
    request["reasoning_effort"] = json!("low");
    let out = run(
        &["send", "--provider", "anthropic", "--stream", "-"],
        env,
        request.to_string(),
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = lines(&out);
    assert_eq!(
        lines[0],
        json!({"type": "reasoning", "text": "Logs zuerst. "})
    );
    assert_eq!(
        lines[1],
        json!({"type": "delta", "text": "Die Datenbank (接続拒否)."})
    );
    let message = &lines[2]["response"]["message"];
    assert_eq!(lines[2]["type"], "done");
    assert_eq!(message["reasoning"][0]["signature"], "sig==");
    assert_eq!(lines[2]["response"]["usage"]["output_tokens"], 40);
    let sent = server.bodies.lock().unwrap()[0].clone();
    assert_valid(
        &validator("anthropic-messages.schema.json", Root::Request),
        &sent,
        "the body",
    );
    assert_eq!(sent["thinking"]["budget_tokens"], 1024);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_after_the_stream_began_is_an_error_line_and_exit_4() {
    let mut pieces = openai_answer();
    pieces.truncate(3);
    pieces.push(data(
        &json!({"error": {"message": "The server had an error", "type": "server_error"}}),
    ));
    let server = start(vec![Reply::events(pieces)]).await;
    let out = run(
        &["send", "--provider", "openai", "--stream", "-"],
        openai_env(&server.url),
        body("gpt-5.4"),
    )
    .await;
    assert_eq!(out.status.code(), Some(4));
    let lines = lines(&out);
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["error"]["error"], "provider");
    assert_eq!(last["error"]["kind"], "server");
    assert!(
        lines.iter().all(|l| l["type"] != "done"),
        "no done line after an error"
    );
    assert!(
        lines.iter().any(|l| l["type"] == "delta"),
        "the text before it was printed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_before_the_stream_exit_as_send_does() {
    // A request that cannot fit: exit 3, nothing sent.
    let server = start(vec![Reply::events(openai_answer())]).await;
    let policy =
        std::env::temp_dir().join(format!("llm-context-stream-{}.json", std::process::id()));
    std::fs::write(&policy, r#"{"max_tokens": 1000, "reserve_tokens": 100}"#).unwrap();
    let mut request: Value = serde_json::from_str(&body("gpt-5.4")).unwrap();
    request["messages"][1]["content"] = json!("слово ".repeat(5_000));
    let a = [
        "send",
        "--provider",
        "openai",
        "--stream",
        "--policy",
        policy.to_str().unwrap(),
        "-",
    ];
    let out = run(&a, openai_env(&server.url), request.to_string()).await;
    std::fs::remove_file(&policy).ok();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(lines(&out)[0]["error"], "context_limit");
    assert!(server.bodies.lock().unwrap().is_empty());

    // An error status: exit 4 with the provider's error object, as `send` prints it.
    let mut reply = Reply::events(vec![
        r#"{"error": {"message": "Invalid model", "type": "invalid_request_error", "code": "model_not_found"}}"#.into(),
    ]);
    reply.status = 404;
    let server = start(vec![reply]).await;
    let out = run(
        &[
            "send",
            "--provider",
            "openai",
            "--stream",
            "--max-retries",
            "0",
            "-",
        ],
        openai_env(&server.url),
        body("gpt-5.4"),
    )
    .await;
    assert_eq!(out.status.code(), Some(4));
    let v = &lines(&out)[0];
    assert_eq!(v["error"], "provider");
    assert_eq!(v["status"], 404);
}
