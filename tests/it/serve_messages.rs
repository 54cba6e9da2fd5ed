//! `POST /v1/messages` of `llm_context::serve` over real HTTP on 127.0.0.1: a client
//! speaking Anthropic Messages to the proxy, the proxy to a fake Anthropic or OpenAI
//! provider. Every body the client gets validates against Anthropic's response (or
//! stream-event) schema; every body a provider gets, against its own request schema.

use crate::support::fixture;
use crate::support::proxy::{STREAMED_TEXT, anthropic, json_of, openai, openai_stream, serving};
use crate::support::schema::{Root, assert_valid, validator};
use crate::support::stream_server::{Reply, named, start};
use llm_context::ContextPolicy;
use llm_context::serve::Proxy;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

const ANTHROPIC_SCHEMA: &str = "anthropic-messages.schema.json";
const OPENAI_SCHEMA: &str = "openai-chat-completions.schema.json";

/// A Messages body with a tool loop in its history: thinking (signed) before the
/// tool_use it led to, the result, and a vendor field the proxy does not model.
fn body(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "max_tokens": 1024,
        "stream": stream,
        "system": [{"type": "text", "text": "You are an SRE assistant.", "cache_control": {"type": "ephemeral"}}],
        "metadata": {"user_id": "u-17"},
        "tools": [{"name": "fetch_logs", "description": "Fetch a unit's logs",
                   "input_schema": {"type": "object", "properties": {"unit": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": "Warum schlug das Deployment fehl? なぜ?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Die Logs zuerst.", "signature": "EqQBCgIYAhIM1gbc"},
                {"type": "tool_use", "id": "toolu_1", "name": "fetch_logs", "input": {"unit": "api"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": "E connexion refusée 接続拒否\nE pool exhausted"},
                {"type": "text", "text": "Und jetzt?"}
            ]}
        ]
    })
}

async fn post(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

/// `(event name, data)` of each server-sent event of `text`.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap()
                .to_owned();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name, serde_json::from_str(data).unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_messages_call_keeps_thinking_before_its_tool_use_on_the_way_up() {
    let upstream = crate::support::servers::mock_post(
        "/v1/messages",
        ResponseTemplate::new(200).set_body_raw(
            fixture("anthropic-response-tool-use.json"),
            "application/json",
        ),
    )
    .await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let response = post(&url, &body("claude-sonnet-4-6", false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-llm-context-memo"], "miss");
    assert!(
        response.headers()["x-llm-context-before-tokens"]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    let answer = json_of(response).await;
    assert_valid(
        &validator(ANTHROPIC_SCHEMA, Root::Response),
        &answer,
        "the answer",
    );
    // The answer comes back as the provider gave it: thinking, text, two tool uses.
    let kinds: Vec<&str> = answer["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"]);
    assert_eq!(
        answer["content"][0]["signature"],
        "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    );
    assert_eq!(answer["content"][3]["input"], json!({"city": "Bergen"}));
    assert_eq!(answer["stop_reason"], "tool_use");
    assert_eq!(answer["id"], "msg_01Aq9w938a90dw8q");

    let received = &upstream.received_requests().await.unwrap()[0];
    assert_eq!(
        received.headers.get("x-api-key").unwrap(),
        "sk-ant-upstream"
    );
    let sent: Value = serde_json::from_slice(&received.body).unwrap();
    assert_valid(
        &validator(ANTHROPIC_SCHEMA, Root::Request),
        &sent,
        "the upstream body",
    );
    assert_eq!(sent["system"][0]["text"], "You are an SRE assistant.");
    assert_eq!(
        sent["metadata"],
        json!({"user_id": "u-17"}),
        "passed through"
    );
    assert_eq!(sent["max_tokens"], 1024);
    let assistant = &sent["messages"][1]["content"];
    assert_eq!(assistant[0]["type"], "thinking");
    assert_eq!(assistant[0]["signature"], "EqQBCgIYAhIM1gbc");
    assert_eq!(assistant[1]["type"], "tool_use");
    assert_eq!(assistant[1]["input"], json!({"unit": "api"}));
    // The result and the text that followed it, in one user message, the result first.
    let last = &sent["messages"][2]["content"];
    assert_eq!(last[0]["type"], "tool_result");
    assert_eq!(last[0]["tool_use_id"], "toolu_1");
    assert_eq!(
        last[0]["content"],
        "E connexion refusée 接続拒否\nE pool exhausted"
    );
    assert_eq!(
        last.as_array().unwrap().last().unwrap()["text"],
        "Und jetzt?"
    );
}

#[tokio::test]
async fn an_anthropic_client_reaches_an_openai_model() {
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200).set_body_raw(
            fixture("openai-response-tool-calls.json"),
            "application/json",
        ),
    )
    .await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut request = body("gpt-5.4", false);
    request["tool_choice"] = json!({"type": "any", "disable_parallel_tool_use": true});
    request.as_object_mut().unwrap().remove("metadata");
    // Fields of the Messages format that Chat Completions has no place for: never sent
    // to an OpenAI upstream (it would refuse them), whatever the neutral model holds.
    request["top_k"] = json!(5);
    request["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    request["context_management"] = json!({"edits": [{"type": "clear_thinking_20251015"}]});
    let response = post(&url, &request).await;
    assert_eq!(response.status(), 200);
    let answer = json_of(response).await;
    assert_valid(
        &validator(ANTHROPIC_SCHEMA, Root::Response),
        &answer,
        "the answer",
    );
    assert_eq!(answer["stop_reason"], "tool_use");
    let tool_use = answer["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap();
    assert!(tool_use["input"].is_object(), "{answer}");

    let sent: Value =
        serde_json::from_slice(&upstream.received_requests().await.unwrap()[0].body).unwrap();
    assert_valid(
        &validator(OPENAI_SCHEMA, Root::Request),
        &sent,
        "the upstream body",
    );
    let roles: Vec<&str> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert_eq!(sent["messages"][2]["tool_calls"][0]["id"], "toolu_1");
    assert_eq!(sent["messages"][3]["tool_call_id"], "toolu_1");
    assert_eq!(sent["tool_choice"], "required");
    assert_eq!(sent["parallel_tool_calls"], false);
    for field in ["top_k", "thinking", "context_management"] {
        assert!(sent.get(field).is_none(), "{field} was sent: {sent}");
    }
}

#[tokio::test]
async fn an_anthropic_stream_from_claude_comes_back_block_by_block() {
    let event = |v: Value| named(v["type"].as_str().unwrap(), &v);
    let pieces = vec![
        event(
            json!({"type": "message_start", "message": {"id": "msg_9", "type": "message",
            "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 40, "output_tokens": 1}}}),
        ),
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}})),
        event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Pool erschöpft?"}})),
        event(json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "signature_delta", "signature": "sig-Zz9"}})),
        event(json!({"type": "content_block_stop", "index": 0})),
        event(json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "text", "text": ""}})),
        event(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "Der Pool "}})),
        event(json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "text_delta", "text": "ist erschöpft (枯渇)."}})),
        event(json!({"type": "content_block_stop", "index": 1})),
        event(json!({"type": "content_block_start", "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "fetch_logs", "input": {}}})),
        event(json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": "{\"unit\": "}})),
        event(json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": "\"db\"}"}})),
        event(json!({"type": "content_block_stop", "index": 2})),
        event(
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
            "usage": {"output_tokens": 31}}),
        ),
        event(json!({"type": "message_stop"})),
    ];
    let upstream = start(vec![Reply::events(pieces)]).await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let response = post(&url, &body("claude-sonnet-4-6", true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    // The report goes out as headers before the body.
    assert_eq!(response.headers()["x-llm-context-memo"], "miss");
    assert!(
        response
            .headers()
            .contains_key("x-llm-context-after-tokens")
    );
    let events = events(&response.text().await.unwrap());
    let v = validator(ANTHROPIC_SCHEMA, Root::Stream);
    for (name, data) in &events {
        assert_valid(&v, data, "an event the client gets");
        assert_eq!(name, data["type"].as_str().unwrap());
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    // Reassembled as the SDK does: block by block, by index.
    let mut blocks: Vec<Value> = Vec::new();
    let mut stop_reason = Value::Null;
    for (_, e) in &events {
        match e["type"].as_str().unwrap() {
            "content_block_start" => {
                assert_eq!(e["index"], blocks.len());
                blocks.push(e["content_block"].clone());
            }
            "content_block_delta" => {
                let b = &mut blocks[e["index"].as_u64().unwrap() as usize];
                let d = &e["delta"];
                let append = |b: &mut Value, key: &str, more: &Value| {
                    let s = format!(
                        "{}{}",
                        b[key].as_str().unwrap_or(""),
                        more.as_str().unwrap()
                    );
                    b[key] = json!(s);
                };
                match d["type"].as_str().unwrap() {
                    "text_delta" => append(b, "text", &d["text"]),
                    "thinking_delta" => append(b, "thinking", &d["thinking"]),
                    "signature_delta" => append(b, "signature", &d["signature"]),
                    "input_json_delta" => append(b, "partial", &d["partial_json"]),
                    other => panic!("{other}"),
                }
            }
            "message_delta" => stop_reason = e["delta"]["stop_reason"].clone(),
            _ => {}
        }
    }
    assert_eq!(blocks.len(), 3, "{blocks:?}");
    assert_eq!(blocks[0]["thinking"], "Pool erschöpft?");
    assert_eq!(blocks[0]["signature"], "sig-Zz9");
    assert_eq!(blocks[1]["text"], "Der Pool ist erschöpft (枯渇).");
    assert_eq!(blocks[2]["name"], "fetch_logs");
    let input: Value = serde_json::from_str(blocks[2]["partial"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"unit": "db"}));
    assert_eq!(stop_reason, "tool_use");
    let sent = upstream.bodies.lock().unwrap()[0].clone();
    assert_valid(
        &validator(ANTHROPIC_SCHEMA, Root::Request),
        &sent,
        "the upstream body",
    );
    assert_eq!(sent["stream"], true);
}

#[tokio::test]
async fn an_openai_stream_comes_back_as_messages_events() {
    let pieces = openai_stream();
    let upstream = start(vec![Reply::events(pieces)]).await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut request = body("gpt-5.4", true);
    request.as_object_mut().unwrap().remove("metadata");
    let response = post(&url, &request).await;
    assert_eq!(response.status(), 200);
    let events = events(&response.text().await.unwrap());
    let v = validator(ANTHROPIC_SCHEMA, Root::Stream);
    let mut text = String::new();
    for (_, e) in &events {
        assert_valid(&v, e, "an event the client gets");
        if e["delta"]["type"] == "text_delta" {
            text.push_str(e["delta"]["text"].as_str().unwrap());
        }
    }
    assert_eq!(text, STREAMED_TEXT);
    let delta = events.iter().find(|(n, _)| n == "message_delta").unwrap();
    assert_eq!(delta.1["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta.1["usage"]["output_tokens"], 8);
    assert_eq!(events.last().unwrap().0, "message_stop");
}

#[tokio::test]
async fn errors_come_in_anthropics_shape() {
    let upstream =
        crate::support::servers::mock_post("/v1/messages", ResponseTemplate::new(200)).await;
    let policy = ContextPolicy::default()
        .with_max_context_tokens(2_000)
        .with_reserve_tokens(500);
    let proxy = Proxy::builder()
        .policy(policy)
        .max_body_bytes(64 * 1024)
        .anthropic(anthropic(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let shape = |v: &Value, kind: &str| {
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], kind, "{v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty());
    };
    // Too big for the window: 400 before any upstream call, streamed or not.
    let mut request = body("claude-sonnet-4-6", false);
    request["messages"][0]["content"] = json!("слово ".repeat(5_000));
    for stream in [false, true] {
        request["stream"] = json!(stream);
        let response = post(&url, &request).await;
        assert_eq!(response.status(), 400);
        shape(&json_of(response).await, "invalid_request_error");
    }
    assert!(upstream.received_requests().await.unwrap().is_empty());
    // Over the body limit: 413.
    request["messages"][0]["content"] = json!("x".repeat(100 * 1024));
    let response = post(&url, &request).await;
    assert_eq!(response.status(), 413);
    shape(&json_of(response).await, "request_too_large");
    // Not JSON.
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    shape(&json_of(response).await, "invalid_request_error");
}

/// A Messages body whose first message holds a document block.
fn with_document(model: &str) -> Value {
    let mut request = body(model, false);
    request["messages"][0]["content"] = json!([
        {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                        "data": "Betriebshandbuch — 運用手順"},
         "title": "runbook", "citations": {"enabled": true}},
        {"type": "text", "text": "Was sagt das Handbuch?"}
    ]);
    request
}

#[tokio::test]
async fn a_document_goes_to_claude_as_written_and_is_refused_by_name_for_gpt() {
    let anthropic_up = crate::support::proxy::anthropic_upstream().await;
    let openai_up = crate::support::proxy::openai_upstream().await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&anthropic_up.uri()))
        .openai(openai(&openai_up.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let request = with_document("claude-sonnet-4-6");
    let response = post(&url, &request).await;
    assert_eq!(response.status(), 200);
    let sent: Value =
        serde_json::from_slice(&anthropic_up.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(sent["messages"][0], request["messages"][0]);
    // GPT has no document block: refused, named, nothing sent.
    let response = post(&url, &with_document("gpt-5.4")).await;
    assert_eq!(response.status(), 400);
    let v = json_of(response).await;
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("document"),
        "{v}"
    );
    assert!(openai_up.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_upstream_error_keeps_its_status_and_type() {
    let upstream = crate::support::servers::mock_post(
        "/v1/messages",
        ResponseTemplate::new(404).set_body_json(json!({"type": "error",
            "error": {"type": "not_found_error", "message": "model: claude-9"}})),
    )
    .await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let response = post(&url, &body("claude-sonnet-4-6", false)).await;
    assert_eq!(response.status(), 404);
    let v = json_of(response).await;
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "not_found_error");
    assert_eq!(v["error"]["message"], "model: claude-9");
}

#[tokio::test]
async fn a_deterministic_request_asked_again_is_a_memo_hit_streamed_or_not() {
    let upstream = crate::support::servers::mock_post(
        "/v1/messages",
        ResponseTemplate::new(200)
            .set_body_raw(fixture("anthropic-response-text.json"), "application/json"),
    )
    .await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let mut request = body("claude-sonnet-4-6", false);
    request["temperature"] = json!(0);
    let first = post(&url, &request).await;
    assert_eq!(first.headers()["x-llm-context-memo"], "miss");
    let first = json_of(first).await;
    let again = post(&url, &request).await;
    assert_eq!(again.headers()["x-llm-context-memo"], "hit");
    assert_eq!(json_of(again).await["content"], first["content"]);
    // The same request streamed is replayed from the memo, and says so up front.
    request["stream"] = json!(true);
    let streamed = post(&url, &request).await;
    assert_eq!(streamed.headers()["x-llm-context-memo"], "hit");
    let mut text = String::new();
    for (_, e) in events(&streamed.text().await.unwrap()) {
        if e["delta"]["type"] == "text_delta" {
            text.push_str(e["delta"]["text"].as_str().unwrap());
        }
    }
    let answered: String = first["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect();
    assert_eq!(text, answered);
    assert_eq!(upstream.received_requests().await.unwrap().len(), 1);
}

/// A long unedited run of a client's messages goes upstream as the client wrote it, its
/// own separators included (it is sent as a slice of the client's bytes, not rewritten),
/// with an exact `Content-Length`, never chunked.
#[tokio::test]
async fn an_unedited_run_of_messages_goes_as_the_clients_bytes_with_an_exact_length() {
    let upstream = crate::support::proxy::anthropic_upstream().await;
    let url = crate::support::proxy::anthropic_proxy(&upstream).await;
    let mut messages = Vec::new();
    for i in 0..200 {
        messages.push(format!(
            r#"{{"role": "user", "content": "frage {i}: warum? なぜ"}}, {{"role": "assistant", "content": [{{"type": "text", "text": "antwort {i}"}}]}}"#
        ));
    }
    messages.push(r#"{"role": "user", "content": "und jetzt?"}"#.to_owned());
    let run = messages[..150].join(",\n  ");
    let client = format!(
        r#"{{"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": [{}]}}"#,
        messages.join(",\n  ")
    );
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/messages"))
        .header("content-type", "application/json")
        .header("x-api-key", "sk-client")
        .body(client.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let received = &upstream.received_requests().await.unwrap()[0];
    let sent = std::str::from_utf8(&received.body).unwrap();
    assert!(sent.contains(&run), "the run went as the client wrote it");
    assert_eq!(
        received.headers.get("content-length").unwrap(),
        &received.body.len().to_string(),
    );
    assert!(received.headers.get("transfer-encoding").is_none());
    let sent: Value = serde_json::from_str(sent).unwrap();
    let client: Value = serde_json::from_str(&client).unwrap();
    assert_eq!(sent["messages"].as_array().unwrap().len(), 401);
    assert_eq!(sent["messages"][7], client["messages"][7]);
}
