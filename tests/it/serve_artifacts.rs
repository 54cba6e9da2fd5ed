//! The model's reads of offloaded results are answered inside `llm_context::serve`, with
//! and without streaming, and the client never sees the artifact tool; with replicas on
//! one real Redis, what one offloaded the other reads.

use crate::support::proxy::{json_of, openai, serving};
use crate::support::redis::{redis_url, unique_prefix};
use llm_context::ArtifactStore;
use llm_context::redis::{RedisOptions, RedisStores};
use llm_context::serve::Proxy;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// A large, realistic tool result: JSON log lines with quotes and non-ASCII, ~40 KB.
fn logs() -> String {
    (0..400)
        .map(|i| format!("{{\"level\":\"error\",\"i\":{i},\"msg\":\"connexion refusée — 接続拒否 \\\"db-{i}\\\"\"}}\n"))
        .collect()
}

/// The id of the first preview of an offloaded result in a request sent upstream.
fn preview_id(body: &Value) -> Option<String> {
    let text = body["messages"].to_string();
    let at = text.find("art_")?;
    let id: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    Some(id)
}

/// A provider that reads the first artifact it is shown, then answers with the start of
/// what it read; streamed when asked.
fn reader(req: &Request) -> ResponseTemplate {
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    let message = if last["role"] == "tool" && last["tool_call_id"] == "call_read" {
        let page: Value = serde_json::from_str(last["content"].as_str().unwrap()).unwrap();
        let read: String = page["text"].as_str().unwrap().chars().take(60).collect();
        json!({"role": "assistant", "content": format!("Gelesen: {read}")})
    } else if let Some(id) = preview_id(&body) {
        // Words and reasoning before the read: the round is hidden, and all of it with it.
        json!({"role": "assistant", "content": "Ich lese die Logs.",
               "reasoning_content": "Erst die Vorschau lesen.",
               "tool_calls": [{"id": "call_read", "type": "function",
               "function": {"name": "read_context_artifact",
                            "arguments": json!({"artifact_id": id}).to_string()}}]})
    } else {
        json!({"role": "assistant", "content": "keine Vorschau"})
    };
    let finish = if message["tool_calls"].is_null() {
        "stop"
    } else {
        "tool_calls"
    };
    if body["stream"] != json!(true) {
        return ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "object": "chat.completion", "created": 1, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}));
    }
    let mut delta = message;
    if let Some(calls) = delta["tool_calls"].as_array_mut() {
        calls[0]["index"] = json!(0);
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let sse = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(delta, Value::Null),
        chunk(json!({}), json!(finish))
    );
    ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream")
}

async fn provider() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(reader)
        .mount(&server)
        .await;
    server
}

/// A turn of an agent whose last tool result is large, as the client sends it.
fn turn(stream: bool) -> Value {
    json!({"model": "gpt-5.4", "stream": stream, "messages": [
        {"role": "system", "content": "Du bist ein SRE-Agent."},
        {"role": "user", "content": "Warum fällt die API aus?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_logs", "type": "function",
            "function": {"name": "fetch_logs", "arguments": "{\"unit\":\"api\"}"}}]},
        {"role": "tool", "tool_call_id": "call_logs", "content": logs()},
        {"role": "user", "content": "Lies die Logs."}
    ], "tools": [{"type": "function", "function": {"name": "fetch_logs",
        "parameters": {"type": "object", "properties": {"unit": {"type": "string"}}}}}]})
}

async fn ask(url: &str, body: &Value) -> reqwest::Response {
    let r = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("x-llm-context-session", "agent-7")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r
}

/// The text a client got, streamed or not; panics if it saw a tool call.
async fn answer_text(r: reqwest::Response, stream: bool) -> String {
    if !stream {
        let body = json_of(r).await;
        assert!(
            body["choices"][0]["message"]["tool_calls"].is_null(),
            "{body}"
        );
        return body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned();
    }
    let text = r.text().await.unwrap();
    assert!(!text.contains("read_context_artifact"), "{text}");
    // No call reached it (a relayed chunk may say `"tool_calls": null`, as the fake's do).
    assert!(!text.contains("\"tool_calls\":["), "{text}");
    // Nothing of a hidden round: neither its words nor its reasoning.
    assert!(!text.contains("Ich lese"), "{text}");
    assert!(!text.contains("Erst die Vorschau"), "{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn the_models_artifact_reads_are_answered_inside_the_server() {
    for stream in [false, true] {
        let upstream = provider().await;
        let proxy = Proxy::builder()
            .openai(openai(&upstream.uri()))
            .build()
            .unwrap();
        let url = serving(proxy).await;
        let r = ask(&url, &turn(stream)).await;
        assert_eq!(r.headers()["x-llm-context-offloaded"], "1");
        let text = if stream {
            answer_text(r, stream).await
        } else {
            let body = json_of(r).await;
            // Billed for both rounds, the client is told both.
            assert_eq!(body["usage"]["prompt_tokens"], 20, "{body}");
            assert_eq!(body["usage"]["completion_tokens"], 10, "{body}");
            body["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        // The model read the original result, which the client never had to send twice.
        let start: String = logs().chars().take(60).collect();
        assert_eq!(text, format!("Gelesen: {start}"), "stream: {stream}");
        let sent = upstream.received_requests().await.unwrap();
        assert_eq!(sent.len(), 2, "the offloaded turn, then the answered read");
        let first: Value = serde_json::from_slice(&sent[0].body).unwrap();
        assert!(
            first.to_string().len() < logs().len(),
            "the result went upstream as a preview"
        );
    }
}

#[tokio::test]
async fn an_artifact_offloaded_through_one_replica_is_read_through_the_other() {
    let prefix = unique_prefix("serve-artifacts");
    let stores = || async {
        let options = RedisOptions::default().with_key_prefix(prefix.clone());
        RedisStores::connect_with(&redis_url(), options)
            .await
            .unwrap()
    };
    // Replica a's provider answers without reading: a offloads, and nothing reads.
    let plain = crate::support::servers::mock_post(
        "/v1/chat/completions",
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-5.4",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Moment."},
                         "finish_reason": "stop"}]})),
    )
    .await;
    let a = Proxy::builder()
        .redis(stores().await)
        .openai(openai(&plain.uri()))
        .build()
        .unwrap();
    let a = serving(a).await;
    ask(&a, &turn(false)).await;
    let sent: Value =
        serde_json::from_slice(&plain.received_requests().await.unwrap()[0].body).unwrap();
    let id = preview_id(&sent).expect("a sent a preview");

    // The artifact is in the shared store, under the request's tenant and session, for
    // any replica to read.
    let shared = stores().await.artifacts;
    let stored = shared
        .get(&Default::default(), "agent-7", &id)
        .await
        .unwrap()
        .expect("a's artifact is in Redis");
    assert_eq!(&*stored.text, logs());

    // Replica b serves the next turn, and its model reads the artifact.
    let upstream = provider().await;
    let b = Proxy::builder()
        .redis(stores().await)
        .openai(openai(&upstream.uri()))
        .build()
        .unwrap();
    let b = serving(b).await;
    let text = answer_text(ask(&b, &turn(false)).await, false).await;
    let start: String = logs().chars().take(60).collect();
    assert_eq!(text, format!("Gelesen: {start}"));
    let read: Value =
        serde_json::from_slice(&upstream.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(
        preview_id(&read).as_deref(),
        Some(id.as_str()),
        "one id for one result"
    );
}

/// A provider that asks to read `id`, whatever it was shown, then answers with the
/// error its read came back with; streamed when asked.
fn bad_reader(id: String) -> impl Fn(&Request) -> ResponseTemplate + Send + Sync + 'static {
    move |req: &Request| {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let last = body["messages"].as_array().unwrap().last().unwrap().clone();
        let message = if last["role"] == "tool" && last["tool_call_id"] == "call_read" {
            let page: Value = serde_json::from_str(last["content"].as_str().unwrap()).unwrap();
            json!({"role": "assistant", "content": format!("Fehler: {}", page["error"])})
        } else {
            // Words and reasoning before the read: the round is hidden, and all of it with it.
            json!({"role": "assistant", "content": "Ich lese die Logs.",
               "reasoning_content": "Erst die Vorschau lesen.",
               "tool_calls": [{"id": "call_read", "type": "function",
                   "function": {"name": "read_context_artifact",
                                "arguments": json!({"artifact_id": id}).to_string()}}]})
        };
        let finish = if message["tool_calls"].is_null() {
            "stop"
        } else {
            "tool_calls"
        };
        if body["stream"] != json!(true) {
            return ResponseTemplate::new(200).set_body_json(json!({
                "id": "c1", "object": "chat.completion", "created": 1, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}));
        }
        let mut delta = message;
        if let Some(calls) = delta["tool_calls"].as_array_mut() {
            calls[0]["index"] = json!(0);
        }
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let sse = format!(
            "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            chunk(delta, Value::Null),
            chunk(json!({}), json!(finish))
        );
        ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream")
    }
}

#[tokio::test]
async fn a_read_of_any_bad_id_is_an_error_result_the_model_reads_and_the_client_never_sees() {
    let ids = [
        format!("art_{}", "0".repeat(100_000)),
        "x".repeat(100_000),
        "art_\u{0}\u{7f}\"\\</script>é接続".to_owned(),
        String::new(),
    ];
    let prefix = unique_prefix("serve-bad-ids");
    for (id, stream, redis) in ids
        .iter()
        .flat_map(|id| [(id, false), (id, true)])
        .flat_map(|(id, stream)| [(id.clone(), stream, false), (id.clone(), stream, true)])
    {
        {
            let upstream = MockServer::start().await;
            Mock::given(method("POST"))
                .and(path("/v1/chat/completions"))
                .respond_with(bad_reader(id.clone()))
                .mount(&upstream)
                .await;
            let mut proxy = Proxy::builder().openai(openai(&upstream.uri()));
            // A real Redis too: the store the probe found the empty answers with.
            if redis {
                let options = RedisOptions::default().with_key_prefix(prefix.clone());
                proxy = proxy.redis(
                    RedisStores::connect_with(&redis_url(), options)
                        .await
                        .unwrap(),
                );
            }
            let proxy = proxy.build().unwrap();
            let url = serving(proxy).await;
            let r = ask(&url, &turn(stream)).await;
            let text = answer_text(r, stream).await;
            let shown: String = id.chars().take(20).collect();
            assert!(
                text.starts_with("Fehler: \"") && text.len() < 200,
                "id {shown:?}, stream {stream}, redis {redis}: {text}"
            );
            let sent = upstream.received_requests().await.unwrap();
            assert_eq!(sent.len(), 2);
            // The error result the model got does not echo a long id back upstream.
            let second: Value = serde_json::from_slice(&sent[1].body).unwrap();
            let result = second["messages"].as_array().unwrap().last().unwrap()["content"]
                .as_str()
                .unwrap()
                .len();
            assert!(result < 1_000, "id {shown:?}: a {result}-byte result");
        }
    }
}

/// A Chat Completions answer of `message` to `body`, streamed when it asks.
fn answered(body: &Value, message: Value) -> ResponseTemplate {
    let finish = if message["tool_calls"].is_null() {
        "stop"
    } else {
        "tool_calls"
    };
    if body["stream"] != json!(true) {
        return ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "object": "chat.completion", "created": 1, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}));
    }
    let mut delta = message;
    if let Some(calls) = delta["tool_calls"].as_array_mut() {
        for (i, call) in calls.iter_mut().enumerate() {
            call["index"] = json!(i);
        }
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": body["model"],
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let sse = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(delta, Value::Null),
        chunk(json!({}), json!(finish))
    );
    ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream")
}

fn read_call(id: &str, call_id: &str) -> Value {
    json!({"id": call_id, "type": "function", "function": {"name": "read_context_artifact",
           "arguments": json!({"artifact_id": id}).to_string()}})
}

/// A provider answering every call with `answer(round, body)`.
async fn scripted(answer: impl Fn(usize, &Value) -> Value + Send + Sync + 'static) -> MockServer {
    let server = MockServer::start().await;
    let calls = std::sync::atomic::AtomicUsize::new(0);
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(move |req: &Request| {
            let body: Value = serde_json::from_slice(&req.body).unwrap();
            let round = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            answered(&body, answer(round, &body))
        })
        .mount(&server)
        .await;
    server
}

/// The chunks' `finish_reason` of a streamed answer, and its calls' names.
fn streamed(text: &str) -> (Vec<String>, Vec<String>) {
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect();
    let finish = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["finish_reason"].as_str().map(str::to_owned))
        .collect();
    let names = chunks
        .iter()
        .flat_map(|c| {
            c["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|call| call["function"]["name"].as_str().map(str::to_owned))
        .collect();
    (finish, names)
}

#[tokio::test]
async fn a_model_that_only_reads_gets_an_answer_without_the_read_tool_at_the_bound() {
    for stream in [false, true] {
        let upstream = scripted(|_, body| {
            let id = preview_id(body).unwrap_or_default();
            json!({"role": "assistant", "content": "Noch mehr lesen.",
                   "tool_calls": [read_call(&id, "call_read")]})
        })
        .await;
        let proxy = Proxy::builder()
            .openai(openai(&upstream.uri()))
            .build()
            .unwrap();
        let url = serving(proxy).await;
        let r = ask(&url, &turn(stream)).await;
        // The whole answer first: a stream's rounds run while it is read.
        let (text, body) = if stream {
            (r.text().await.unwrap(), Value::Null)
        } else {
            (String::new(), json_of(r).await)
        };
        let sent = upstream.received_requests().await.unwrap();
        let bound = llm_context::context_policy::DEFAULT_RESOLVE_ROUNDS;
        assert_eq!(sent.len(), bound + 1, "bound + 1");
        // The last hidden round told the model its reads are spent.
        let last: Value = serde_json::from_slice(&sent.last().unwrap().body).unwrap();
        let told = last["messages"].as_array().unwrap().last().unwrap();
        assert!(
            told["content"]
                .as_str()
                .unwrap()
                .contains("read_budget_spent")
        );
        if stream {
            assert!(!text.contains("read_context_artifact"), "{text}");
            let (finish, names) = streamed(&text);
            assert!(names.is_empty(), "{text}");
            assert_eq!(finish, ["read_budget_spent"], "{text}");
        } else {
            let choice = &body["choices"][0];
            assert!(choice["message"]["tool_calls"].is_null(), "{body}");
            assert_eq!(choice["finish_reason"], "read_budget_spent", "{body}");
            assert!(
                !body.to_string().contains("read_context_artifact"),
                "{body}"
            );
        }
    }
}

#[tokio::test]
async fn a_read_beside_the_clients_call_reaches_the_client_as_its_call_alone() {
    for stream in [false, true] {
        let upstream = scripted(|round, body| {
            let fetch = json!({"id": format!("call_fetch_{round}"), "type": "function",
                               "function": {"name": "fetch_logs", "arguments": "{\"unit\":\"db\"}"}});
            if round == 0 {
                let id = preview_id(body).unwrap();
                json!({"role": "assistant", "content": null,
                       "tool_calls": [read_call(&id, "call_read"), fetch]})
            } else {
                json!({"role": "assistant", "content": null, "tool_calls": [fetch]})
            }
        })
        .await;
        let proxy = Proxy::builder()
            .openai(openai(&upstream.uri()))
            .build()
            .unwrap();
        let url = serving(proxy).await;
        let r = ask(&url, &turn(stream)).await;
        if stream {
            let text = r.text().await.unwrap();
            let (finish, names) = streamed(&text);
            assert_eq!(names, ["fetch_logs"], "{text}");
            assert_eq!(finish, ["tool_calls"], "{text}");
            assert!(text.contains("call_fetch_1"), "{text}");
        } else {
            let body = json_of(r).await;
            let calls = body["choices"][0]["message"]["tool_calls"]
                .as_array()
                .unwrap();
            assert_eq!(calls.len(), 1, "{body}");
            assert_eq!(calls[0]["id"], "call_fetch_1");
        }
        // What the model was shown next: its read alone, and the page.
        let sent = upstream.received_requests().await.unwrap();
        assert_eq!(sent.len(), 2);
        let next: Value = serde_json::from_slice(&sent[1].body).unwrap();
        let messages = next["messages"].as_array().unwrap();
        let n = messages.len();
        let calls = messages[n - 2]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["id"], "call_read");
        assert_eq!(messages[n - 1]["tool_call_id"], "call_read");
        assert!(
            messages[n - 1]["content"]
                .as_str()
                .unwrap()
                .contains("connexion")
        );
    }
}
