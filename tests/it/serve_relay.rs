//! A streamed answer from an upstream of the caller's own format reaches the caller as the
//! upstream sent it, byte for byte: event types, blocks and fields the neutral model has
//! no place for (server tools' blocks, citations, pings, events newer than the proxy,
//! `system_fingerprint`, `obfuscation`). What the proxy changes: the usage of the rounds
//! it answered inside added to the last figures, and no usage chunk for a Chat
//! Completions caller that did not ask for one. Before the relay, each of these streams
//! was written anew from the neutral events, and all of it was lost or reshaped.

use crate::support::proxy::{anthropic, openai, serving};
use crate::support::stream_server::{Reply, data, named, start};
use llm_context::serve::Proxy;
use serde_json::{Value, json};

fn event(v: Value) -> String {
    named(v["type"].as_str().unwrap(), &v)
}

/// An Anthropic stream with what a neutral writer cannot write: a server tool's use and
/// result, a citation, a ping, an event type newer than the proxy, unknown fields.
fn rich_anthropic_stream() -> Vec<String> {
    vec![
        event(
            json!({"type": "message_start", "message": {"id": "msg_01RELAY", "type": "message",
            "role": "assistant", "model": "claude-sonnet-4-6-20260101", "content": [],
            "stop_reason": null, "stop_sequence": null, "container": null,
            "usage": {"input_tokens": 40, "output_tokens": 1, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "service_tier": "standard",
                      "cache_creation": {"ephemeral_5m_input_tokens": 0,
                                         "ephemeral_1h_input_tokens": 0}}}}),
        ),
        event(json!({"type": "ping"})),
        event(
            json!({"type": "content_block_start", "index": 0, "content_block":
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}}),
        ),
        event(json!({"type": "content_block_delta", "index": 0, "delta":
            {"type": "input_json_delta", "partial_json": "{\"query\": \"接続拒否\"}"}})),
        event(json!({"type": "content_block_stop", "index": 0})),
        event(
            json!({"type": "content_block_start", "index": 1, "content_block":
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": [
                {"type": "web_search_result", "url": "https://example.org/db", "title": "DB",
                 "encrypted_content": "EqgfCioIARgBIiQ3", "page_age": null}]}}),
        ),
        event(json!({"type": "content_block_stop", "index": 1})),
        event(
            json!({"type": "content_block_start", "index": 2, "content_block":
            {"type": "text", "text": "", "citations": []}}),
        ),
        event(json!({"type": "content_block_delta", "index": 2, "delta":
            {"type": "text_delta", "text": "Die Datenbank verweigert.\n"}})),
        event(json!({"type": "content_block_delta", "index": 2, "delta":
            {"type": "citations_delta", "citation": {"type": "web_search_result_location",
             "url": "https://example.org/db", "title": "DB", "cited_text": "refused",
             "encrypted_index": "Eo8BCioIAhgB"}}})),
        event(json!({"type": "content_block_stop", "index": 2})),
        event(json!({"type": "future_event_2027", "detail": {"x": 1}})),
        event(
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
            "stop_sequence": null}, "usage": {"output_tokens": 31,
            "server_tool_use": {"web_search_requests": 1}}}),
        ),
        event(json!({"type": "message_stop"})),
    ]
}

async fn posted(url: &str, route: &str, body: &Value) -> String {
    let r = reqwest::Client::new()
        .post(format!("{url}{route}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

#[tokio::test]
async fn a_streamed_messages_answer_reaches_its_caller_byte_for_byte() {
    let pieces = rich_anthropic_stream();
    let upstream = start(vec![Reply::events(pieces.clone())]).await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 512, "stream": true,
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}],
        "messages": [{"role": "user", "content": "Warum fällt die DB aus?"}]});
    let got = posted(&url, "/v1/messages", &body).await;
    assert_eq!(got, pieces.concat());
}

/// OpenAI chunks with what a neutral writer drops: `system_fingerprint`, `obfuscation`,
/// `logprobs`, `usage: null` on each chunk, the usage chunk's details.
fn rich_openai_stream() -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        data(
            &json!({"id": "chatcmpl-RELAY", "object": "chat.completion.chunk",
            "created": 1_767_000_000, "model": "gpt-5.4-2026-03-05",
            "system_fingerprint": "fp_7a1b", "service_tier": "default", "obfuscation": "aZ3",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            "usage": null}),
        )
    };
    vec![
        chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            Value::Null,
        ),
        chunk(json!({"content": "Die Datenbank "}), Value::Null),
        chunk(json!({"content": "verweigert (接続拒否)."}), Value::Null),
        chunk(json!({}), json!("stop")),
        data(
            &json!({"id": "chatcmpl-RELAY", "object": "chat.completion.chunk",
            "created": 1_767_000_000, "model": "gpt-5.4-2026-03-05",
            "system_fingerprint": "fp_7a1b", "choices": [], "obfuscation": "q",
            "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58,
                      "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0}}}),
        ),
        "data: [DONE]\n\n".to_owned(),
    ]
}

#[tokio::test]
async fn a_streamed_chat_completion_reaches_its_caller_byte_for_byte() {
    let pieces = rich_openai_stream();
    let upstream = start(vec![Reply::events(pieces.clone())]).await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let turn = |include_usage: bool| {
        json!({"model": "gpt-5.4", "stream": true,
               "stream_options": {"include_usage": include_usage},
               "messages": [{"role": "user", "content": "Warum fällt die DB aus?"}]})
    };
    let got = posted(&url, "/v1/chat/completions", &turn(true)).await;
    assert_eq!(got, pieces.concat());

    // A client that did not ask for the usage gets the chunks as OpenAI would have sent
    // them: no usage chunk and no `"usage": null`, which come of the proxy's asking.
    let got = posted(&url, "/v1/chat/completions", &turn(false)).await;
    let mut without_usage = pieces.clone();
    without_usage.remove(4);
    let without_usage = without_usage.concat().replace(",\"usage\":null", "");
    assert!(!without_usage.contains("usage"));
    assert_eq!(got, without_usage);
    let sent = upstream.bodies.lock().unwrap().clone();
    assert_eq!(sent[1]["stream_options"], json!({"include_usage": true}));
}

/// A large tool result, as an agent's log fetch returns it (~40 KB, quotes, non-ASCII).
fn logs() -> String {
    (0..400)
        .map(|i| format!("{{\"level\":\"error\",\"i\":{i},\"msg\":\"connexion refusée — 接続拒否 \\\"db-{i}\\\"\"}}\n"))
        .collect()
}

/// A stream of `blocks` (each a start block, then its deltas) under `id`, with usage.
fn anthropic_answer(id: &str, blocks: &[(Value, Vec<Value>)], stop: &str) -> Vec<String> {
    let mut out = vec![event(
        json!({"type": "message_start", "message": {"id": id, "type": "message",
        "role": "assistant", "model": "claude-sonnet-4-6-20260101", "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 900, "output_tokens": 1, "cache_read_input_tokens": 0,
                  "cache_creation_input_tokens": 0}}}),
    )];
    for (i, (start, deltas)) in blocks.iter().enumerate() {
        out.push(event(
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        ));
        for d in deltas {
            out.push(event(
                json!({"type": "content_block_delta", "index": i, "delta": d}),
            ));
        }
        out.push(event(json!({"type": "content_block_stop", "index": i})));
    }
    out.push(event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": 20}})));
    out.push(event(json!({"type": "message_stop"})));
    out
}

#[tokio::test]
async fn a_round_answered_inside_is_not_relayed_and_its_usage_is_added_to_the_last_figures() {
    // Round 1 only reads an artifact (an unknown id: an error result the model reads);
    // round 2 answers. The caller gets round 2's stream as it came, but for the usage in
    // `message_delta`: the sum of both rounds, since it is billed for both.
    let hidden = anthropic_answer(
        "msg_01HIDDEN",
        &[
            (
                json!({"type": "thinking", "thinking": "", "signature": ""}),
                vec![
                    json!({"type": "thinking_delta", "thinking": "Erst lesen."}),
                    json!({"type": "signature_delta", "signature": "sig-hidden"}),
                ],
            ),
            (
                json!({"type": "tool_use", "id": "toolu_read", "name": "read_context_artifact",
                       "input": {}}),
                vec![json!({"type": "input_json_delta",
                            "partial_json": "{\"artifact_id\": \"art_unknown\"}"})],
            ),
        ],
        "tool_use",
    );
    let last = anthropic_answer(
        "msg_01FINAL",
        &[(
            json!({"type": "text", "text": ""}),
            vec![json!({"type": "text_delta", "text": "Die Logs sagen: 接続拒否."})],
        )],
        "end_turn",
    );
    let upstream = start(vec![Reply::events(hidden), Reply::events(last.clone())]).await;
    let proxy = Proxy::builder()
        .anthropic(anthropic(&upstream.url))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 512, "stream": true,
        "tools": [{"name": "fetch_logs", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "Warum fällt die API aus?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_logs",
                "name": "fetch_logs", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_logs",
                "content": logs()}, {"type": "text", "text": "Lies die Logs."}]}]});
    let got = posted(&url, "/v1/messages", &body).await;
    assert_eq!(
        upstream.bodies.lock().unwrap().len(),
        2,
        "both rounds went upstream"
    );
    // Everything of the last round but `message_delta`, as it came; nothing of the first.
    let (amended, rest): (Vec<&str>, Vec<&str>) = got
        .split_inclusive("\n\n")
        .partition(|e| e.starts_with("event: message_delta"));
    let expected: Vec<&String> = last
        .iter()
        .filter(|e| !e.starts_with("event: message_delta"))
        .collect();
    assert_eq!(rest, expected);
    assert_eq!(amended.len(), 1);
    let delta: Value = serde_json::from_str(
        amended[0]
            .lines()
            .nth(1)
            .unwrap()
            .strip_prefix("data: ")
            .unwrap(),
    )
    .unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 40, "{delta}");
    assert_eq!(delta["usage"]["input_tokens"], 1800, "{delta}");
}

#[tokio::test]
async fn a_whole_chat_completion_reaches_its_caller_as_openai_gave_it() {
    // What the neutral response has no place for: `annotations`, `logprobs`, `audio`,
    // `service_tier`, the usage's details, a field newer than the proxy.
    let given = json!({"id": "chatcmpl-AS-GIVEN", "object": "chat.completion",
        "created": 1_767_000_000, "model": "gpt-5.4-2026-03-05",
        "system_fingerprint": "fp_7a1b", "service_tier": "default",
        "choices": [{"index": 0, "finish_reason": "stop",
            "logprobs": {"content": [{"token": "Die", "logprob": -0.01, "bytes": [68, 105, 101],
                                      "top_logprobs": []}]},
            "message": {"role": "assistant", "content": "Die Datenbank verweigert (接続拒否).",
                "refusal": null, "audio": null,
                "annotations": [{"type": "url_citation", "url_citation": {
                    "url": "https://example.org/db", "title": "DB",
                    "start_index": 0, "end_index": 3}}]}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 8, "total_tokens": 58,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0,
                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "future_field_2027": {"x": 1}});
    let upstream = crate::support::servers::mock_post(
        "/v1/chat/completions",
        wiremock::ResponseTemplate::new(200).set_body_json(given.clone()),
    )
    .await;
    let proxy = Proxy::builder()
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;
    let body = json!({"model": "gpt-5.4", "logprobs": true,
        "messages": [{"role": "user", "content": "Warum fällt die DB aus?"}]});
    let got: Value =
        serde_json::from_str(&posted(&url, "/v1/chat/completions", &body).await).unwrap();
    assert_eq!(got, given);
}

/// `body` posted as written (its bytes, not re-encoded) to `route`; the answer's text.
async fn posted_raw(url: &str, route: &str, body: &str) -> String {
    let r = reqwest::Client::new()
        .post(format!("{url}{route}"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.text().await.unwrap()
}

#[tokio::test]
async fn bodies_and_answers_keep_their_writers_key_order() {
    // The order of a schema's properties is the order the model writes the arguments in:
    // through the proxy it was sorted (`hinweis` before `ort`), and so was every answer.
    let schema = r#"{"type":"object","properties":{"ort":{"type":"string","description":"Die Stadt, z. B. Zürich."},"hinweis":{"type":"string"}},"required":["ort","hinweis"],"additionalProperties":false}"#;
    let chat_answer = r#"{"id":"chatcmpl-ORDER","object":"chat.completion","created":1767000000,"model":"gpt-5.4","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"ort\":\"Zürich\",\"hinweis\":\"接続拒否\"}"}}],"refusal":null},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":8,"total_tokens":58},"system_fingerprint":"fp_1"}"#;
    let openai_up = crate::support::servers::mock_post(
        "/v1/chat/completions",
        wiremock::ResponseTemplate::new(200).set_body_raw(chat_answer, "application/json"),
    )
    .await;
    let messages_answer = r#"{"type":"message","id":"msg_ORDER","role":"assistant","model":"claude-sonnet-4-6","content":[{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"ort":"Zürich","hinweis":"接続拒否"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"output_tokens":8,"input_tokens":50}}"#;
    let anthropic_up = crate::support::servers::mock_post(
        "/v1/messages",
        wiremock::ResponseTemplate::new(200).set_body_raw(messages_answer, "application/json"),
    )
    .await;
    let proxy = Proxy::builder()
        .openai(openai(&openai_up.uri()))
        .anthropic(anthropic(&anthropic_up.uri()))
        .build()
        .unwrap();
    let url = serving(proxy).await;

    let chat = format!(
        r#"{{"model":"gpt-5.4","stream":false,"messages":[{{"role":"user","content":"Störung in Zürich?"}}],"tools":[{{"type":"function","function":{{"name":"lookup","parameters":{schema}}}}}]}}"#
    );
    assert_eq!(
        posted_raw(&url, "/v1/chat/completions", &chat).await,
        chat_answer
    );
    let sent =
        String::from_utf8(openai_up.received_requests().await.unwrap()[0].body.clone()).unwrap();
    // (The top-level members may come in another order: none of them is shown to the
    // model in an order.)
    assert!(sent.contains(r#""stream":false"#), "{sent}");
    assert!(
        sent.contains(&format!(r#""parameters":{schema}"#)),
        "{sent}"
    );

    let messages = format!(
        r#"{{"model":"claude-sonnet-4-6","max_tokens":512,"tools":[{{"name":"lookup","input_schema":{schema}}}],"messages":[{{"role":"user","content":"Störung in Zürich?"}}]}}"#
    );
    assert_eq!(
        posted_raw(&url, "/v1/messages", &messages).await,
        messages_answer
    );
    let sent = String::from_utf8(
        anthropic_up.received_requests().await.unwrap()[0]
            .body
            .clone(),
    )
    .unwrap();
    assert!(
        sent.contains(&format!(r#""input_schema":{schema}"#)),
        "{sent}"
    );
}
