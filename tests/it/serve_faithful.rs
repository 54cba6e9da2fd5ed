//! What `serve` passes on as the upstream gave it: message ids, `created`,
//! `system_fingerprint`, streamed and not. Each test here reproduces a change a real
//! agent client was shown through the proxy (Claude Code merged every turn of a session
//! because every streamed answer carried one id).

use crate::support::proxy::{
    anthropic, anthropic_proxy, anthropic_upstream, json_of, openai, openai_proxy, openai_upstream,
    serving,
};
use crate::support::stream_server::{Reply, data, named, start};
use llm_context::serve::Proxy;
use serde_json::{Value, json};

/// An Anthropic stream answering `text` under the message id `id`.
fn anthropic_stream(id: &str, text: &str) -> Vec<String> {
    let event = |v: Value| named(v["type"].as_str().unwrap(), &v);
    vec![
        event(
            json!({"type": "message_start", "message": {"id": id, "type": "message",
            "role": "assistant", "model": "claude-sonnet-4-6-20260101", "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 40, "output_tokens": 1}}}),
        ),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}})),
        event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}})),
        event(json!({"type": "content_block_stop", "index": 0})),
        event(
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
            "stop_sequence": null}, "usage": {"output_tokens": 9}}),
        ),
        event(json!({"type": "message_stop"})),
    ]
}

fn messages_turn(text: &str) -> Value {
    json!({"model": "claude-sonnet-4-6", "max_tokens": 512, "stream": true,
           "messages": [{"role": "user", "content": text}]})
}

/// `body` posted as JSON to `route` with `headers`.
async fn send(url: &str, route: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{url}{route}"))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap()
}

/// `body` posted as JSON to `route`, answered 200.
async fn post(url: &str, route: &str, body: &Value) -> reqwest::Response {
    let r = send(url, route, body, &[]).await;
    assert_eq!(r.status(), 200);
    r
}

/// The body of the `i`th request `upstream` got, as JSON.
async fn received(upstream: &wiremock::MockServer, i: usize) -> Value {
    serde_json::from_slice(&upstream.received_requests().await.unwrap()[i].body).unwrap()
}

/// The `data` of each server-sent event of `text` (`[DONE]` left out).
fn datas(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The `message_start` event of the stream answering `body` on `/v1/messages`.
async fn message_start(url: &str, body: &Value) -> Value {
    let text = post(url, "/v1/messages", body).await.text().await.unwrap();
    datas(&text)
        .into_iter()
        .find(|e| e["type"] == "message_start")
        .unwrap()
}

#[tokio::test]
async fn each_streamed_messages_answer_keeps_the_upstreams_message_id() {
    let upstream = start(vec![
        Reply::events(anthropic_stream("msg_01AAA", "Erste Runde. 一")),
        Reply::events(anthropic_stream("msg_01BBB", "Zweite Runde. 二")),
    ])
    .await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut ids = Vec::new();
    for turn in ["Warum?", "Und dann?"] {
        let start = message_start(&url, &messages_turn(turn)).await;
        assert_eq!(start["message"]["model"], "claude-sonnet-4-6-20260101");
        ids.push(start["message"]["id"].clone());
    }
    assert_eq!(ids, [json!("msg_01AAA"), json!("msg_01BBB")]);
}

#[tokio::test]
async fn answers_no_provider_named_get_ids_of_their_own() {
    // An OpenAI upstream's id is not a Messages id: each answer gets a new `msg_` one,
    // never one shared by every answer.
    let chunk = |delta: Value, finish: Value| {
        data(
            &json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                     "model": "gpt-5.4", "choices": [{"index": 0, "delta": delta,
                     "finish_reason": finish}]}),
        )
    };
    let pieces = vec![
        chunk(json!({"content": "Hallo 你好"}), Value::Null),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_owned(),
    ];
    let upstream = start(vec![Reply::events(pieces)]).await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let body = json!({"model": "gpt-5.4", "max_tokens": 64, "stream": true,
                          "messages": [{"role": "user", "content": "Hallo?"}]});
        let start = message_start(&url, &body).await;
        let id = start["message"]["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("msg_") && id.len() > 20, "{id}");
        ids.push(id);
    }
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn chat_completions_answers_keep_id_created_and_system_fingerprint() {
    let chunk = |delta: Value, finish: Value| {
        data(
            &json!({"id": "chatcmpl-Zq7", "object": "chat.completion.chunk",
                     "created": 1_767_000_000, "model": "gpt-5.4-2026-03-01",
                     "system_fingerprint": "fp_4a1b", "service_tier": "default",
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let pieces = vec![
        chunk(
            json!({"role": "assistant", "content": "Die DB "}),
            Value::Null,
        ),
        chunk(json!({"content": "— 接続拒否."}), Value::Null),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_owned(),
    ];
    let whole = json!({"id": "chatcmpl-Zq8", "object": "chat.completion",
        "created": 1_767_000_001, "model": "gpt-5.4-2026-03-01",
        "system_fingerprint": "fp_4a1c", "service_tier": "default",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Die DB — 接続拒否."}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 6, "total_tokens": 18}});
    let upstream = start(vec![
        Reply::events(pieces),
        Reply::events(vec![whole.to_string()]),
    ])
    .await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let ask = |stream: bool| {
        json!({"model": "gpt-5.4", "stream": stream,
               "messages": [{"role": "user", "content": "Warum?"}]})
    };
    let text = post(&url, "/v1/chat/completions", &ask(true))
        .await
        .text()
        .await
        .unwrap();
    let chunks = datas(&text);
    assert!(!chunks.is_empty());
    for c in &chunks {
        assert_eq!(c["id"], "chatcmpl-Zq7", "{c}");
        assert_eq!(c["created"], 1_767_000_000, "{c}");
        assert_eq!(c["model"], "gpt-5.4-2026-03-01", "{c}");
        assert_eq!(c["system_fingerprint"], "fp_4a1b", "{c}");
        assert_eq!(c["service_tier"], "default", "{c}");
    }
    let body = json_of(post(&url, "/v1/chat/completions", &ask(false)).await).await;
    assert_eq!(body["id"], "chatcmpl-Zq8");
    assert_eq!(body["created"], 1_767_000_001);
    assert_eq!(body["system_fingerprint"], "fp_4a1c");
    assert_eq!(body["service_tier"], "default");
}

/// The id of the first preview of an offloaded result in a body sent upstream.
fn preview_id(body: &Value) -> String {
    let text = body["messages"].to_string();
    let at = text.find("art_").expect("an offloaded result");
    text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

#[tokio::test]
async fn an_agents_own_session_header_names_the_session() {
    // Artifacts are kept per session, so the id of an offloaded result tells which
    // session the proxy served a request in.
    let logs: String = (0..400)
        .map(|i| format!("{{\"level\":\"error\",\"i\":{i},\"msg\":\"接続拒否 — refusée\"}}\n"))
        .collect();
    let turn = json!({"model": "gpt-5.4", "messages": [
        {"role": "user", "content": "Warum fällt die API aus?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "fetch_logs", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": logs},
        {"role": "user", "content": "Und?"}]});
    let upstream = openai_upstream().await;
    let url = openai_proxy(&upstream).await;
    let cases: [&[(&str, &str)]; 5] = [
        &[("x-claude-code-session-id", "cc-A")],
        &[("x-claude-code-session-id", "cc-B")],
        &[("session_id", "019a9544-7ab1-73c1-837e-1fa681f4462b")],
        // The proxy's own header wins over an agent's.
        &[
            ("x-llm-context-session", "S"),
            ("x-claude-code-session-id", "cc-A"),
        ],
        &[
            ("x-llm-context-session", "S"),
            ("x-claude-code-session-id", "cc-B"),
        ],
    ];
    for headers in cases {
        let r = send(&url, "/v1/chat/completions", &turn, headers).await;
        assert_eq!(r.status(), 200);
    }
    let ids: Vec<String> = upstream
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| preview_id(&serde_json::from_slice(&r.body).unwrap()))
        .collect();
    assert_ne!(ids[0], ids[1], "two Claude Code sessions");
    assert_ne!(ids[0], ids[2], "a Codex session is its own");
    assert_ne!(ids[1], ids[2]);
    assert_eq!(ids[3], ids[4], "x-llm-context-session names the session");
    assert!(!ids[..3].contains(&ids[3]));
}

/// The values of header `name` a recorded request had, each line as it came.
fn header_lines(r: &wiremock::Request, name: &str) -> Vec<String> {
    r.headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_clients_headers_and_query_reach_its_own_formats_upstream() {
    let upstream = anthropic_upstream().await;
    let url = anthropic_proxy(&upstream).await;
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 256,
                      "messages": [{"role": "user", "content": "Warum? なぜ?"}]});
    // Claude Code's: two lines of betas, a newer API version, its session.
    let headers = [
        (
            "anthropic-beta",
            "interleaved-thinking-2025-05-14,context-1m-2025-08-07",
        ),
        ("anthropic-beta", "context-management-2025-06-27"),
        ("anthropic-version", "2026-09-01"),
        ("x-claude-code-session-id", "3f9c-session"),
        ("user-agent", "claude-cli/2.1.0 (external, cli)"),
        ("x-stainless-lang", "js"),
        ("x-api-key", "sk-ant-the-clients-own"),
        ("x-llm-context-session", "mine"),
    ];
    let r = send(&url, "/v1/messages?beta=true", &body, &headers).await;
    assert_eq!(r.status(), 200);
    let sent = upstream.received_requests().await.unwrap();
    let sent = &sent[0];
    assert_eq!(sent.url.query(), Some("beta=true"));
    assert_eq!(
        header_lines(sent, "anthropic-beta"),
        [
            "interleaved-thinking-2025-05-14,context-1m-2025-08-07",
            "context-management-2025-06-27"
        ],
        "verbatim, in order"
    );
    assert_eq!(header_lines(sent, "anthropic-version"), ["2026-09-01"]);
    assert_eq!(
        header_lines(sent, "x-claude-code-session-id"),
        ["3f9c-session"]
    );
    assert_eq!(
        header_lines(sent, "user-agent"),
        ["claude-cli/2.1.0 (external, cli)"]
    );
    assert_eq!(header_lines(sent, "x-stainless-lang"), ["js"]);
    // The server's key, not the client's; nothing of the proxy's own.
    assert_eq!(header_lines(sent, "x-api-key"), ["sk-ant-upstream"]);
    assert!(header_lines(sent, "x-llm-context-session").is_empty());
}

#[tokio::test]
async fn openai_headers_reach_openai_and_no_provider_gets_anothers() {
    let upstream = openai_upstream().await;
    let url = openai_proxy(&upstream).await;
    let chat = json!({"model": "gpt-5.4", "messages": [{"role": "user", "content": "Hallo?"}]});
    let messages = json!({"model": "gpt-5.4", "max_tokens": 64,
                          "messages": [{"role": "user", "content": "Hallo?"}]});
    for (route, body, query) in [
        ("/v1/chat/completions", &chat, "api-version=2026-01-01"),
        ("/v1/messages", &messages, "beta=true"),
    ] {
        let headers = [
            ("OpenAI-Organization", "org-client"),
            ("OpenAI-Project", "proj_client"),
            ("X-Client-Request-Id", "req-7f3a"),
            ("anthropic-beta", "context-management-2025-06-27"),
            ("authorization", "Bearer sk-the-clients-own"),
        ];
        let r = send(&url, &format!("{route}?{query}"), body, &headers).await;
        assert_eq!(r.status(), 200, "{route}");
    }
    let sent = upstream.received_requests().await.unwrap();
    let (chat, cross) = (&sent[0], &sent[1]);
    assert_eq!(chat.url.query(), Some("api-version=2026-01-01"));
    assert_eq!(header_lines(chat, "openai-organization"), ["org-client"]);
    assert_eq!(header_lines(chat, "openai-project"), ["proj_client"]);
    assert_eq!(header_lines(chat, "x-client-request-id"), ["req-7f3a"]);
    assert_eq!(header_lines(chat, "authorization"), ["Bearer sk-upstream"]);
    // A Messages client reaching GPT: its query and the other provider's headers stay
    // behind; the headers that name no provider go on.
    assert_eq!(cross.url.query(), None);
    assert!(header_lines(cross, "anthropic-beta").is_empty());
    assert!(header_lines(cross, "openai-organization").is_empty());
    assert_eq!(header_lines(cross, "x-client-request-id"), ["req-7f3a"]);
    assert_eq!(header_lines(cross, "authorization"), ["Bearer sk-upstream"]);
}

/// `body` sent to `/v1/messages` with `headers`, answered 200; the body the upstream got.
async fn sent_through(
    url: &str,
    upstream: &wiremock::MockServer,
    body: &Value,
    headers: &[(&str, &str)],
) -> Value {
    let r = send(url, "/v1/messages", body, headers).await;
    let status = r.status();
    assert_eq!(status, 200, "{}", r.text().await.unwrap());
    let sent = upstream.received_requests().await.unwrap();
    serde_json::from_slice(&sent.last().unwrap().body).unwrap()
}

#[tokio::test]
async fn claude_codes_mid_conversation_system_message_stays_where_it_was() {
    // The shape of Claude Code's first request on its default model.
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 32000, "stream": false,
    "system": [{"type": "text", "text": "You are Claude Code."}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]},
        {"role": "system", "content": [{"type": "text",
            "text": "<system-reminder>Todo list is empty.</system-reminder>"}]},
        {"role": "user", "content": [{"type": "text", "text": "Und schnell — 速く."}]}
    ]});
    let upstream = anthropic_upstream().await;
    let url = anthropic_proxy(&upstream).await;
    let beta = [("anthropic-beta", "mid-conversation-system-2026-04-07")];
    let sent = sent_through(&url, &upstream, &body, &beta).await;
    assert_eq!(sent["system"][0]["text"], "You are Claude Code.");
    assert_eq!(
        sent["system"].as_array().unwrap().len(),
        1,
        "nothing hoisted"
    );
    let roles: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "system", "user"]);
    assert_eq!(
        sent["messages"][1]["content"][0]["text"],
        "<system-reminder>Todo list is empty.</system-reminder>"
    );
}

#[tokio::test]
async fn text_blocks_sampling_and_strict_tools_arrive_as_written() {
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 1024,
    "temperature": 0.2, "top_p": 0.9,
    "tools": [{"name": "fetch_logs", "description": "Fetch logs", "strict": true,
               "input_schema": {"type": "object", "properties": {"unit": {"type": "string"}},
                                "required": ["unit"], "additionalProperties": false}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Hello"},
                                     {"type": "text", "text": "World"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Erst "},
                                          {"type": "text", "text": "die Logs."}]},
        {"role": "user", "content": "Weiter — 続けて."}
    ]});
    let upstream = anthropic_upstream().await;
    let url = anthropic_proxy(&upstream).await;
    let sent = sent_through(&url, &upstream, &body, &[]).await;
    assert_eq!(
        sent["messages"][0]["content"],
        body["messages"][0]["content"]
    );
    assert_eq!(
        sent["messages"][1]["content"],
        body["messages"][1]["content"]
    );
    assert_eq!(sent["temperature"], 0.2);
    assert_eq!(sent["top_p"], 0.9);
    assert_eq!(sent["tools"][0]["strict"], true);
}

#[tokio::test]
async fn a_strict_function_tool_stays_strict_in_both_directions() {
    let tools = json!([{"type": "function", "function": {"name": "fetch_logs", "strict": true,
        "parameters": {"type": "object", "properties": {"unit": {"type": "string"}},
                       "required": ["unit"], "additionalProperties": false}}}]);
    let chat = json!({"model": "gpt-5.4", "tools": tools,
                      "messages": [{"role": "user", "content": "Logs?"}]});
    let openai_up = openai_upstream().await;
    let url = openai_proxy(&openai_up).await;
    post(&url, "/v1/chat/completions", &chat).await;
    let sent = received(&openai_up, 0).await;
    assert_eq!(
        sent["tools"][0], tools[0],
        "the Agents SDK's tool, as it sent it (the read tool follows)"
    );
    // The same tools reaching Claude.
    let anthropic_up = anthropic_upstream().await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&anthropic_up.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut chat = chat;
    chat["model"] = json!("claude-sonnet-4-6");
    post(&url, "/v1/chat/completions", &chat).await;
    let sent = received(&anthropic_up, 0).await;
    assert_eq!(sent["tools"][0]["strict"], true);
}

/// A Claude Code-shaped Messages body full of what the neutral model has no place for:
/// unknown top-level, message-level, block-level and tool-level fields, `is_error`, the
/// client's own `cache_control` (a 1h TTL), a string and a block form of content.
fn rich_messages_body() -> Value {
    json!({"model": "claude-sonnet-4-6", "max_tokens": 32000,
    "system": [{"type": "text", "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    "metadata": {"user_id": "{\"session_id\":\"3f9c\"}"},
    "thinking": {"type": "adaptive"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "medium"},
    "tools": [
        {"name": "Bash", "description": "Run a command", "defer_loading": false,
         "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
        {"name": "Read", "description": "Read a file", "defer_loading": true,
         "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
         "cache_control": {"type": "ephemeral"}}
    ],
    "messages": [
        {"role": "user", "content": "Warum schlägt der Test fehl? なぜ?"},
        {"role": "system", "content": "<system-reminder>Todo list is empty.</system-reminder>",
         "output_config": {"effort": "medium"}},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Erst die Logs.", "signature": "EqQBCgIYAhIM1gbc"},
            {"type": "text", "text": "Ich sehe nach."},
            {"type": "tool_use", "id": "toolu_01", "name": "Bash",
             "input": {"command": "cargo test 2>&1 | tail"}, "caller": {"type": "direct"}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "is_error": true,
             "content": [{"type": "text", "text": "error[E0308]: mismatched types\n  --> src/lib.rs:3:5"}],
             "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            {"type": "text", "text": "Und jetzt?"}
        ], "x_client_note": {"turn": 2}}
    ]})
}

#[tokio::test]
async fn a_messages_callers_body_reaches_anthropic_as_written() {
    let body = rich_messages_body();
    let upstream = anthropic_upstream().await;
    let url = anthropic_proxy(&upstream).await;
    post(&url, "/v1/messages", &body).await;
    let raw = upstream.received_requests().await.unwrap()[0].body.clone();
    let raw = String::from_utf8(raw).unwrap();
    let sent: Value = serde_json::from_str(&raw).unwrap();
    // Each message byte for byte as the client wrote it.
    for (i, m) in body["messages"].as_array().unwrap().iter().enumerate() {
        assert!(raw.contains(&m.to_string()), "message {i} changed: {raw}");
    }
    assert_eq!(sent["messages"], body["messages"]);
    assert_eq!(sent["system"], body["system"]);
    // The client's tools as written; the stack's read tool after them.
    let tools = sent["tools"].as_array().unwrap();
    assert_eq!(tools[..2], body["tools"].as_array().unwrap()[..]);
    assert_eq!(tools[2]["name"], "read_context_artifact");
    for field in [
        "metadata",
        "thinking",
        "context_management",
        "output_config",
        "max_tokens",
    ] {
        assert_eq!(sent[field], body[field], "{field}");
    }
    // The client manages its cache: the stack adds no marker of its own.
    assert_eq!(
        raw.matches("\"cache_control\"").count(),
        body.to_string().matches("\"cache_control\"").count()
    );
}

#[tokio::test]
async fn an_offloaded_result_is_the_only_change_and_breakpoints_are_added_when_the_client_has_none()
{
    let logs: String = (0..500)
        .map(|i| {
            format!(
                "{{\"level\":\"error\",\"i\":{i},\"msg\":\"接続拒否 — refusée \\\"db-{i}\\\"\"}}\n"
            )
        })
        .collect();
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 1024,
    "system": "Du bist ein SRE-Agent.",
    "tools": [{"name": "fetch_logs", "description": "Fetch logs", "defer_loading": true,
               "input_schema": {"type": "object", "properties": {"unit": {"type": "string"}}}}],
    "messages": [
        {"role": "user", "content": "Warum fällt die API aus?", "x_note": 1},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "fetch_logs", "input": {"unit": "api"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": logs}]},
        {"role": "assistant", "content": "Die Datenbank verweigert Verbindungen.", "x_note": 2},
        {"role": "user", "content": "Und was nun? 続けて。"}
    ]});
    let upstream = anthropic_upstream().await;
    let url = anthropic_proxy(&upstream).await;
    let r = post(&url, "/v1/messages", &body).await;
    assert_eq!(r.headers()["x-llm-context-offloaded"], "1");
    let raw =
        String::from_utf8(upstream.received_requests().await.unwrap()[0].body.clone()).unwrap();
    let sent: Value = serde_json::from_str(&raw).unwrap();
    let client = body["messages"].as_array().unwrap();
    let messages = sent["messages"].as_array().unwrap();
    assert_eq!(messages.len(), client.len());
    // The first two as written; the result a preview; the rest as written but for the
    // stack's breakpoints (the client placed none).
    for i in [0, 1] {
        assert!(raw.contains(&client[i].to_string()), "message {i}: {raw}");
    }
    let result = &messages[2]["content"][0];
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert!(result.to_string().contains("art_"), "a preview: {result}");
    assert!(result.to_string().len() < logs.len() / 2);
    assert_eq!(messages[3]["x_note"], 2);
    assert_eq!(messages[4]["content"][0]["text"], "Und was nun? 続けて。");
    assert!(
        raw.contains("\"cache_control\""),
        "the stack's breakpoints: {raw}"
    );
    assert_eq!(sent["tools"][0]["defer_loading"], true);
}

#[tokio::test]
async fn a_server_tool_and_its_blocks_reach_claude_and_are_refused_by_name_for_gpt() {
    // Claude Code's WebSearch: a server tool, and the call and result blocks it left in
    // the history.
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 1024,
    "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 8}],
    "messages": [
        {"role": "user", "content": "Wie ist das Wetter in 東京?"},
        {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
             "input": {"query": "Wetter Tokio"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
             "content": [{"type": "web_search_result", "url": "https://example.org/w",
                          "title": "Wetter", "encrypted_content": "EqgfCioIARgBIiQ3"}]},
            {"type": "text", "text": "Sonnig, 21 °C.",
             "citations": [{"type": "web_search_result_location", "url": "https://example.org/w",
                            "title": "Wetter", "encrypted_index": "Eo8BCioIAhgB",
                            "cited_text": "sonnig"}]}
        ]},
        {"role": "user", "content": "Und morgen?"}
    ]});
    let anthropic_up = anthropic_upstream().await;
    let openai_up = openai_upstream().await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&anthropic_up.uri()))
        .openai(openai(&openai_up.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let sent = sent_through(&url, &anthropic_up, &body, &[]).await;
    assert_eq!(sent["messages"], body["messages"]);
    assert_eq!(sent["tools"][0], body["tools"][0]);
    // GPT has neither the tool nor the blocks: 400, named, nothing sent.
    let mut gpt = body.clone();
    gpt["model"] = json!("gpt-5.4");
    let r = send(&url, "/v1/messages", &gpt, &[]).await;
    assert_eq!(r.status(), 400);
    let v = json_of(r).await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("web_search"),
        "{v}"
    );
    assert!(openai_up.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_chat_completions_callers_messages_reach_openai_as_written() {
    // What the Agents SDK and pydantic-ai send: `developer`, explicit nulls, a refusal
    // field, vendor fields, a named user, tool calls with their ids.
    let messages = json!([
        {"role": "developer", "content": "Sei knapp."},
        {"role": "user", "content": "Warum? なぜ?", "name": "ops", "x_trace": {"id": 7}},
        {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "fetch_logs", "arguments": "{\"unit\": \"api\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "E connexion refusée 接続拒否"},
        {"role": "user", "content": [{"type": "text", "text": "Und jetzt?"}]}
    ]);
    let body = json!({"model": "gpt-5.4", "messages": messages, "temperature": 0.2,
        "tools": [{"type": "function", "function": {"name": "fetch_logs", "strict": true,
            "parameters": {"type": "object", "properties": {"unit": {"type": "string"}},
                           "required": ["unit"], "additionalProperties": false}}}],
        "metadata": {"run": "r-1"}, "store": false});
    let upstream = openai_upstream().await;
    let url = openai_proxy(&upstream).await;
    post(&url, "/v1/chat/completions", &body).await;
    let sent = received(&upstream, 0).await;
    assert_eq!(sent["messages"], messages, "{sent}");
    for field in ["temperature", "metadata", "store"] {
        assert_eq!(sent[field], body[field], "{field}");
    }
    assert_eq!(sent["tools"][0], body["tools"][0]);
    // The stack's documented additions.
    assert_eq!(
        sent["tools"][1]["function"]["name"],
        "read_context_artifact"
    );
    assert!(sent["prompt_cache_key"].is_string());
}

#[tokio::test]
async fn a_messages_answer_reaches_its_caller_as_anthropic_gave_it() {
    // A WebSearch answer: the server tool's call and result before the text, citations on
    // the text, the cache-write breakdown and a field newer than the proxy.
    let answer = json!({"id": "msg_01WEB", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-6-20260101",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
             "input": {"query": "Wetter Tokio"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
             "content": [{"type": "web_search_result", "url": "https://example.org/w",
                          "title": "Wetter", "encrypted_content": "EqgfCioIARgBIiQ3"}]},
            {"type": "text", "text": "Sonnig, 21 °C.",
             "citations": [{"type": "web_search_result_location", "url": "https://example.org/w",
                            "title": "Wetter", "encrypted_index": "Eo8BCioIAhgB",
                            "cited_text": "sonnig"}]}
        ],
        "stop_reason": "end_turn", "stop_sequence": null,
        "container": null,
        "usage": {"input_tokens": 40, "output_tokens": 12, "cache_read_input_tokens": 0,
                  "cache_creation_input_tokens": 2048,
                  "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                     "ephemeral_1h_input_tokens": 2048},
                  "server_tool_use": {"web_search_requests": 1}, "service_tier": "standard"}});
    let upstream = crate::support::servers::mock_post(
        "/v1/messages",
        wiremock::ResponseTemplate::new(200).set_body_raw(answer.to_string(), "application/json"),
    )
    .await;
    let url = anthropic_proxy(&upstream).await;
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 1024,
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        "messages": [{"role": "user", "content": "Wie ist das Wetter in 東京?"}]});
    let got = json_of(post(&url, "/v1/messages", &body).await).await;
    assert_eq!(got, answer);
}

#[tokio::test]
async fn a_reminder_before_the_newest_request_is_kept_with_it_when_older_turns_go() {
    // Claude Code puts a `<system-reminder>` system message right before the request it
    // speaks to. It belonged to the turn before, and was pruned with it: the newest
    // request then lost what the agent told the model about it.
    let old_turn = |i: usize| {
        [
            json!({"role": "user", "content": format!("Frage {i}: {}", "слово ".repeat(1_500))}),
            json!({"role": "assistant", "content": format!("Antwort {i}: {}", "説明 ".repeat(300))}),
        ]
    };
    let mut messages: Vec<Value> = (0..6).flat_map(old_turn).collect();
    messages.push(json!({"role": "system", "content": [{"type": "text",
        "text": "<system-reminder>Todo list: fix the flaky test.</system-reminder>"}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "Und jetzt?"}]}));
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are Claude Code."}], "messages": messages});
    let upstream = anthropic_upstream().await;
    let policy = llm_context::ContextPolicy::default()
        .with_max_context_tokens(3_000)
        .with_reserve_tokens(1_024)
        .with_preserve_recent(1);
    let proxy = Proxy::builder()
        .policy(policy)
        .anthropic(anthropic(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let beta = [("anthropic-beta", "mid-conversation-system-2026-04-07")];
    let sent = sent_through(&url, &upstream, &body, &beta).await;
    let sent_messages = sent["messages"].as_array().unwrap();
    assert!(
        sent_messages.len() < messages.len(),
        "older turns were pruned"
    );
    // The reminder and its request, as the client wrote them; the system prompt as it was
    // (the reminder, now first, is not hoisted into it).
    assert_eq!(sent_messages[..], messages[messages.len() - 2..]);
    assert_eq!(sent["system"], body["system"]);
}

#[tokio::test]
async fn an_offloaded_result_is_edited_in_place_and_the_rest_of_its_message_kept() {
    // The result's message was written anew from the neutral model: `is_error`, fields
    // the proxy does not know, the text beside it and the client's marker inside it were
    // lost (LangChain's and pydantic-ai's `is_error: false` showed it).
    let logs: String = (0..500)
        .map(|i| format!("{{\"i\":{i},\"msg\":\"接続拒否 — refusée \\\"db-{i}\\\"\"}}\n"))
        .collect();
    let result_message = json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": true, "x_vendor": {"a": 1},
         "content": [{"type": "text", "text": logs, "cache_control": {"type": "ephemeral"}}]},
        {"type": "text", "text": "Der Befehl schlug fehl.", "x_other": "b"}]});
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 1024,
    "tools": [{"name": "fetch_logs", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "Warum fällt die API aus?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "fetch_logs", "input": {}}]},
        result_message,
        {"role": "assistant", "content": "Die Datenbank verweigert Verbindungen."},
        {"role": "user", "content": "Und was nun?"}
    ]});
    let upstream = anthropic_upstream().await;
    let url = anthropic_proxy(&upstream).await;
    let r = post(&url, "/v1/messages", &body).await;
    assert_eq!(r.headers()["x-llm-context-offloaded"], "1");
    let sent = received(&upstream, 0).await;
    let mut edited = sent["messages"][2].clone();
    // Only the result's content changed: a preview, a block still, the marker on it.
    let content = edited["content"][0]["content"].take();
    let preview = &content[0];
    assert_eq!(content.as_array().unwrap().len(), 1, "{content}");
    assert!(
        preview["text"].as_str().unwrap().contains("art_"),
        "{preview}"
    );
    assert!(preview["text"].as_str().unwrap().len() < logs.len() / 2);
    assert_eq!(preview["cache_control"], json!({"type": "ephemeral"}));
    let mut expected = result_message.clone();
    expected["content"][0]["content"] = Value::Null;
    assert_eq!(edited, expected);
}
