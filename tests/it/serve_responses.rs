//! `POST /v1/responses`, managed: a Codex-shaped Responses body through `serve` to a
//! recording upstream on 127.0.0.1 that answers in the Responses shape. What fits goes
//! on byte for byte; a long `exec_command` output is offloaded, its item kept but for
//! `output`; the model's read of it is answered inside; a request that cannot fit is
//! refused before any upstream call; chained and streamed requests pass on unmanaged.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::response::IntoResponse;

use llm_context::ContextPolicy;
use llm_context::serve::Proxy;
use serde_json::{Value, json};

use crate::support::proxy::{json_of, openai, serving};
use crate::support::schema::{Root, assert_valid, validator};

const SCHEMA: &str = "openai-responses.schema.json";

/// What the upstream received, and how it answers the `n`th request.
type Answer = dyn Fn(&Value, usize) -> Value + Send + Sync;

struct Recording {
    url: String,
    bodies: Arc<Mutex<Vec<Bytes>>>,
}

impl Recording {
    fn bodies(&self) -> Vec<Bytes> {
        self.bodies.lock().unwrap().clone()
    }

    fn json(&self, i: usize) -> Value {
        serde_json::from_slice(&self.bodies()[i]).unwrap()
    }
}

async fn upstream(answer: Arc<Answer>) -> Recording {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    let app = Router::new().route(
        "/v1/responses",
        axum::routing::post(move |body: Bytes| {
            let seen = seen.clone();
            let answer = answer.clone();
            async move {
                let n = {
                    let mut s = seen.lock().unwrap();
                    s.push(body.clone());
                    s.len() - 1
                };
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let mut whole = answer(&request, n);
                // OpenAI echoes the request's tools in its answer.
                if let Some(tools) = request
                    .get("tools")
                    .filter(|_| whole.get("tools").is_some())
                {
                    whole["tools"] = tools.clone();
                }
                if request["stream"] == true {
                    let frames: String = events_of(&whole)
                        .iter()
                        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
                        .collect();
                    return ([("content-type", "text/event-stream")], frames).into_response();
                }
                axum::Json(whole).into_response()
            }
        }),
    );
    // The count endpoint: recorded, and answered with a count of its own.
    let counted = bodies.clone();
    let app = app.route(
        "/v1/responses/input_tokens",
        axum::routing::post(move |body: Bytes| {
            let counted = counted.clone();
            async move {
                counted.lock().unwrap().push(body);
                axum::Json(json!({"object": "response.input_tokens", "input_tokens": 1_234}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Recording { url, bodies }
}

/// `whole` as OpenAI streams it: created, each item added, its deltas and done, then
/// completed; or, for an answer that is an error, the error event alone.
fn events_of(whole: &Value) -> Vec<Value> {
    if let Some(error) = whole.get("stream_error") {
        // The answer begins, then fails.
        let mut events = events_of(&done());
        events.truncate(5);
        events.push(error.clone());
        return events;
    }
    let mut events = Vec::new();
    let mut opening = whole.clone();
    opening["status"] = json!("in_progress");
    opening["output"] = json!([]);
    opening.as_object_mut().unwrap().remove("usage");
    events.push(json!({"type": "response.created", "response": opening}));
    for (i, item) in whole["output"].as_array().unwrap().iter().enumerate() {
        let mut empty = item.clone();
        match item["type"].as_str() {
            Some("message") => empty["content"] = json!([]),
            Some("function_call") => empty["arguments"] = json!(""),
            _ => {}
        }
        events
            .push(json!({"type": "response.output_item.added", "output_index": i, "item": empty}));
        if item["type"] == "message" {
            for (j, part) in item["content"].as_array().unwrap().iter().enumerate() {
                let text = part["text"].as_str().unwrap();
                let (a, b) = text.split_at(text.char_indices().nth(3).map_or(0, |(k, _)| k));
                for delta in [a, b] {
                    events.push(
                        json!({"type": "response.output_text.delta", "output_index": i,
                                       "item_id": item["id"], "content_index": j,
                                       "delta": delta, "logprobs": []}),
                    );
                }
            }
        }
        if item["type"] == "function_call" {
            events.push(json!({"type": "response.function_call_arguments.delta",
                               "output_index": i, "item_id": item["id"],
                               "delta": item["arguments"]}));
        }
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    events.push(json!({"type": "response.completed", "response": whole}));
    for (n, e) in events.iter_mut().enumerate() {
        e["sequence_number"] = json!(n);
    }
    events
}

/// The data of every event of a streamed answer.
async fn stream_data(answer: reqwest::Response) -> Vec<Value> {
    let text = answer.text().await.unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// A Responses answer with `output`.
fn response(output: Value) -> Value {
    json!({"id": "resp_up1", "object": "response", "created_at": 1_765_000_000,
           "status": "completed", "error": null, "incomplete_details": null,
           "instructions": null, "model": "gpt-5.5-codex", "output": output,
           "parallel_tool_calls": false, "metadata": {}, "tool_choice": "auto", "tools": [],
           "temperature": null, "top_p": null, "service_tier": "default",
           "usage": {"input_tokens": 1_200,
                     "input_tokens_details": {"cached_tokens": 1_024, "cache_write_tokens": 0},
                     "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 12},
                     "total_tokens": 1_240}})
}

fn done() -> Value {
    response(json!([
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAA-2"},
        {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
         "phase": "final_answer",
         "content": [{"type": "output_text", "text": "Der Build ist repariert. 完了。",
                      "annotations": [], "logprobs": []}]}]))
}

/// `answer` as the upstream gives it for `body`, seen by the caller: echoing the
/// caller's tools.
fn echoing(mut answer: Value, body: &str) -> Value {
    answer["tools"] = serde_json::from_str::<Value>(body).unwrap()["tools"].clone();
    answer
}

/// What `seq 1 n` prints.
fn seq(n: usize) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

/// A Codex-shaped body: instructions, a developer message, the task, one
/// `exec_command` round with its reasoning, a custom tool, fields this proxy does not
/// know, written in Codex's key order; the `exec_command` printed `output`.
fn codex_body(output: &str) -> String {
    let body = json!({
        "model": "gpt-5.5-codex",
        "instructions": "You are Codex, a coding agent. Keep answers short.",
        "input": [
            {"type": "message", "role": "developer",
             "content": [{"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Warum schlägt der Build fehl? 为什么"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Run it."}],
             "encrypted_content": "gAAAAABo-opaque=="},
            {"type": "message", "role": "assistant", "phase": "commentary",
             "content": "Ich führe den Build aus."},
            {"type": "function_call", "call_id": "call_1", "name": "exec_command",
             "arguments": "{\"cmd\":\"seq 1 3000\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": output},
            {"type": "web_search_call", "id": "ws_1", "status": "completed",
             "action": {"type": "search", "query": "rust build"}},
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Und jetzt?"}]}
        ],
        "tools": [
            {"type": "function", "name": "exec_command", "description": "Runs a command.",
             "strict": false, "parameters": {"type": "object",
                "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
            {"type": "custom", "name": "apply_patch", "description": "Applies a patch.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": false,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "019a-codex-session",
        "x_future_field": {"kept": true}
    });
    // Written with spaces after the separators, as no serializer of ours writes it: a
    // byte-for-byte comparison then shows whose bytes went on.
    let compact = serde_json::to_string(&body).unwrap();
    compact.replace("\",\"", "\", \"")
}

/// `sent` without the read tool the stack offers an agent (a tool list's last item, its
/// one documented addition to a body that fits), which must be there.
fn without_read_tool(sent: &[u8]) -> String {
    let sent = std::str::from_utf8(sent).unwrap();
    let tool = r#",{"type":"function","name":"read_context_artifact","#;
    let start = sent.find(tool).expect("the read tool");
    let last = r#""strict":false}]"#;
    let end = start + sent[start..].find(last).expect("the end of the tools") + last.len() - 1;
    format!("{}{}", &sent[..start], &sent[end..])
}

async fn proxy(policy: ContextPolicy, upstream: &Recording) -> String {
    let proxy = Proxy::builder()
        .policy(policy)
        .openai(openai(&upstream.url))
        .build()
        .unwrap();
    serving(proxy).await
}

/// `body` is answered 400 with a message naming `what`.
async fn refused_naming(url: &str, body: &Value, what: &str) {
    let answer = post(url, body.to_string()).await;
    assert_eq!(answer.status(), 400);
    let error = json_of(answer).await;
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains(what), "{error}");
}

async fn post(url: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
    post_to(url, "/v1/responses", body).await
}

async fn post_to(url: &str, path: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{url}{path}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_body_that_fits_reaches_the_upstream_byte_for_byte_and_its_answer_comes_back_as_given() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let url = proxy(ContextPolicy::default(), &up).await;
    let body = codex_body("build ok\n");
    let answer = post(&url, body.clone()).await;
    assert_eq!(answer.status(), 200);
    let headers = answer.headers().clone();
    // The upstream's answer as it gave it, its echo of the tools the caller's own.
    assert_eq!(json_of(answer).await, echoing(done(), &body));
    assert_eq!(up.bodies().len(), 1);
    assert_eq!(
        without_read_tool(&up.bodies()[0]),
        body,
        "the upstream gets the caller's bytes"
    );
    // Managed: the report's headers.
    assert!(
        headers.contains_key("x-llm-context-after-tokens"),
        "{headers:?}"
    );
    assert!(!headers.contains_key("x-llm-context-managed"));
}

#[tokio::test]
async fn a_long_output_is_offloaded_in_its_item_and_the_models_read_is_answered_inside() {
    // The model reads the artifact its first request names, then answers.
    let up = upstream(Arc::new(|req: &Value, n| {
        if n > 0 {
            return done();
        }
        let items = req["input"].as_array().unwrap();
        let preview = items
            .iter()
            .find(|i| i["type"] == "function_call_output")
            .and_then(|i| i["output"].as_str())
            .unwrap()
            .to_owned();
        let id = preview
            .split(|c: char| c == '"' || c.is_whitespace() || c == '`')
            .find(|w| w.starts_with("art_"))
            .unwrap_or_default()
            .to_owned();
        response(json!([
            {"type": "reasoning", "id": "rs_r", "summary": [], "encrypted_content": "gAAA-r"},
            {"type": "function_call", "id": "fc_r", "call_id": "call_read", "status": "completed",
             "name": "read_context_artifact",
             "arguments": json!({"artifact_id": id, "offset": 0, "max_chars": 2000}).to_string()}]))
    }))
    .await;
    let policy = ContextPolicy::default().with_tool_result_max_chars(2_000);
    let url = proxy(policy, &up).await;
    let long = seq(3_000);
    let body = codex_body(&long);
    let answer = post(&url, body.clone()).await;
    assert_eq!(answer.status(), 200);
    let got = json_of(answer).await;
    // The client gets the model's answer, never the read, nor the read tool in the
    // echo of the request's tools.
    assert_eq!(got["output"], done()["output"]);
    assert!(!got.to_string().contains("read_context_artifact"));
    assert_eq!(got["tools"].as_array().unwrap().len(), 2, "{got}");

    let bodies = up.bodies();
    assert_eq!(bodies.len(), 2, "one hidden round");
    let first = up.json(0);
    let sent: &Value = &serde_json::from_str::<Value>(&body).unwrap();
    let items = first["input"].as_array().unwrap();
    let output = items
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .unwrap();
    // The item is kept (its call id, its place), its output a preview naming an artifact.
    assert_eq!(output["call_id"], "call_1");
    let preview = output["output"].as_str().unwrap();
    assert!(preview.len() < 3_000, "{} chars", preview.len());
    assert!(preview.contains("art_"), "{preview}");
    // Every other item went on as the caller wrote it: the reasoning whole, by its bytes.
    let raw = std::str::from_utf8(&bodies[0]).unwrap();
    let start = body.find(r#"{"type":"reasoning""#).unwrap();
    let end = body[start..].find('}').unwrap();
    let end = start + end + body[start + end + 1..].find('}').unwrap() + 2;
    let reasoning = &body[start..end];
    assert!(
        reasoning.ends_with(r#""encrypted_content":"gAAAAABo-opaque=="}"#),
        "{reasoning}"
    );
    assert!(raw.contains(reasoning), "{raw}");
    assert!(
        reasoning.contains(r#""id":"rs_1", "summary""#),
        "{reasoning}"
    );
    for (i, item) in sent["input"].as_array().unwrap().iter().enumerate() {
        if item["type"] != "function_call_output" {
            assert_eq!(&items[i], item, "item {i}");
        }
    }
    // What the proxy wrote validates (the caller's own unknown field aside).
    let request = validator(SCHEMA, Root::Request);
    for i in 0..2 {
        let mut sent = up.json(i);
        sent.as_object_mut().unwrap().remove("x_future_field");
        assert_valid(&request, &sent, &format!("upstream request {i}"));
    }
    // The read tool was offered, after the caller's own tools.
    let tools: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        ["exec_command", "apply_patch", "read_context_artifact"]
    );
    // The hidden round: the model's read and its answer follow the caller's items, the
    // reasoning that led to it included.
    let second = up.json(1);
    let items = second["input"].as_array().unwrap();
    let n = items.len();
    assert_eq!(items[n - 3]["type"], "reasoning");
    assert_eq!(items[n - 3]["encrypted_content"], "gAAA-r");
    assert_eq!(items[n - 2]["type"], "function_call");
    assert_eq!(items[n - 2]["name"], "read_context_artifact");
    assert_eq!(items[n - 1]["type"], "function_call_output");
    assert_eq!(items[n - 1]["call_id"], "call_read");
    let read: Value = serde_json::from_str(items[n - 1]["output"].as_str().unwrap()).unwrap();
    assert!(
        read["text"].as_str().unwrap().starts_with("1\n2\n3\n"),
        "{read}"
    );
}

#[tokio::test]
async fn a_request_that_cannot_fit_is_refused_in_the_responses_shape_before_any_call() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let policy = ContextPolicy::default()
        .with_max_context_tokens(2_000)
        .with_reserve_tokens(500);
    let url = proxy(policy, &up).await;
    // The newest user message alone is over the window: nothing can be dropped for it.
    let huge = "Warum? ".repeat(4_000);
    let body = json!({"model": "gpt-5.5-codex", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": huge}]}]});
    let answer = post(&url, body.to_string()).await;
    assert_eq!(answer.status(), 400);
    let error = json_of(answer).await;
    assert_eq!(error["error"]["code"], "context_length_exceeded", "{error}");
    assert_eq!(error["error"]["param"], "input");
    assert!(up.bodies().is_empty());
}

#[tokio::test]
async fn a_compressed_body_is_read_as_the_other_routes_read_it() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let url = proxy(ContextPolicy::default(), &up).await;
    let body = codex_body("build ok\n");
    let answer = reqwest::Client::new()
        .post(format!("{url}/v1/responses"))
        .header("content-type", "application/json")
        .header("content-encoding", "zstd")
        .body(zstd::stream::encode_all(body.as_bytes(), 3).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(without_read_tool(&up.bodies()[0]), body);
}

#[tokio::test]
async fn a_chained_request_is_sent_as_it_came_but_counted_and_says_so() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let policy = ContextPolicy::default().with_tool_result_max_chars(2_000);
    let url = proxy(policy, &up).await;
    let body = json!({"model": "gpt-5.5-codex", "previous_response_id": "resp_0",
                      "input": [{"type": "function_call_output", "call_id": "call_9",
                                 "output": seq(3_000)}]})
    .to_string();
    let answer = post(&url, body.clone()).await;
    assert_eq!(answer.status(), 200);
    let headers = answer.headers().clone();
    assert_eq!(headers["x-llm-context-managed"], "no (stateful)");
    assert_eq!(headers["x-llm-context-executor"], "off");
    // Counted all the same (and metered, and budgeted, on its route).
    let counted: usize = headers["x-llm-context-before-tokens"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(counted > 3_000, "{counted}");
    assert_eq!(json_of(answer).await, done());
    // Nothing offloaded, nothing added: the provider holds the history this output
    // belongs to.
    assert_eq!(std::str::from_utf8(&up.bodies()[0]).unwrap(), body);
    let metrics = crate::support::proxy::metrics_text(&url).await;
    assert!(metrics.contains(r#"route="/v1/responses""#), "{metrics}");
    assert!(!metrics.contains(r#"route="passthrough""#), "{metrics}");
    // A stored item named by reference is the provider's too.
    let referenced = json!({"model": "gpt-5.5-codex", "input": [
        {"type": "item_reference", "id": "msg_stored"},
        {"type": "message", "role": "user", "content": "Weiter."}]})
    .to_string();
    let answer = post(&url, referenced.clone()).await;
    assert_eq!(answer.headers()["x-llm-context-managed"], "no (stateful)");
    assert_eq!(std::str::from_utf8(&up.bodies()[1]).unwrap(), referenced);
}

#[tokio::test]
async fn a_malformed_item_is_refused_naming_it() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let url = proxy(ContextPolicy::default(), &up).await;
    let body = json!({"model": "gpt-5.5-codex", "input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call", "name": "exec_command", "arguments": "{}"}]});
    let answer = post(&url, body.to_string()).await;
    assert_eq!(answer.status(), 400);
    let error = json_of(answer).await;
    assert_eq!(error["error"]["param"], "input[1].call_id", "{error}");
    assert!(up.bodies().is_empty());
}

#[tokio::test]
async fn a_claude_model_is_answered_in_the_responses_shape_and_what_cannot_cross_is_refused() {
    let upstream = crate::support::proxy::anthropic_upstream().await;
    let url = crate::support::proxy::anthropic_proxy(&upstream).await;
    // Text crosses: the answer comes back as a `Response`, written by the proxy.
    let body = json!({"model": "claude-sonnet-4-6", "instructions": "Be brief.",
                      "input": "Warum? 为什么", "max_output_tokens": 256});
    let answer = post(&url, body.to_string()).await;
    assert_eq!(answer.status(), 200);
    let got = json_of(answer).await;
    assert_eq!(got["object"], "response");
    let response = validator(SCHEMA, Root::Response);
    assert_valid(&response, &got, "the answer");
    let sent: Value =
        serde_json::from_slice(&upstream.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(sent["system"][0]["text"], "Be brief.");
    assert_eq!(sent["max_tokens"], 256);
    // A reasoning item is OpenAI's alone: refused by name, nothing sent.
    let body = json!({"model": "claude-sonnet-4-6", "input": [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "call_id": "c", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"}],
        "tools": [{"type": "function", "name": "run", "description": "Runs.", "strict": false,
                   "parameters": {"type": "object", "properties": {}}}]});
    refused_naming(&url, &body, "reasoning").await;
    assert_eq!(upstream.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn claudes_thinking_goes_out_as_a_reasoning_item_and_comes_back_as_the_signed_block() {
    use crate::support::servers::mock_post;
    use wiremock::ResponseTemplate;
    let claude = mock_post(
        "/v1/messages",
        ResponseTemplate::new(200).set_body_raw(
            crate::support::fixture("anthropic-response-tool-use.json"),
            "application/json",
        ),
    )
    .await;
    let url = crate::support::proxy::anthropic_proxy(&claude).await;
    let tools = json!([{"type": "function", "name": "get_weather", "description": "Weather.",
                        "strict": false, "parameters": {"type": "object",
                            "properties": {"city": {"type": "string"}}}}]);
    let first = json!({"model": "claude-opus-4-6", "input": "Oslo und Bergen? 天气",
                       "tools": tools, "reasoning": {"effort": "low", "summary": "auto"},
                       "store": false, "include": ["reasoning.encrypted_content"]});
    let answer = post(&url, first.to_string()).await;
    assert_eq!(answer.status(), 200);
    let got = json_of(answer).await;
    assert_valid(&validator(SCHEMA, Root::Response), &got, "the answer");
    let output = got["output"].as_array().unwrap().clone();
    let kinds: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["reasoning", "message", "function_call", "function_call"]
    );
    assert_eq!(
        output[0]["summary"][0]["text"],
        "The user wants the weather in two cities."
    );
    let received = || async { claude.received_requests().await.unwrap() };
    let sent = |requests: Vec<wiremock::Request>, i: usize| -> Value {
        serde_json::from_slice(&requests[i].body).unwrap()
    };
    // The effort asked for is Claude's thinking budget.
    assert_eq!(
        sent(received().await, 0)["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );

    // The client resends the output as it got it, with the calls' results: Claude gets
    // its signed thinking back, first in its turn.
    let mut input = vec![json!({"role": "user", "content": "Oslo und Bergen? 天气"})];
    input.extend(output.iter().cloned());
    for call in &output[2..] {
        input.push(
            json!({"type": "function_call_output", "call_id": call["call_id"],
                          "output": "12 °C"}),
        );
    }
    let second = json!({"model": "claude-opus-4-6", "input": input, "tools": tools,
                        "reasoning": {"effort": "low"}});
    let answer = post(&url, second.to_string()).await;
    assert_eq!(answer.status(), 200, "{}", answer.text().await.unwrap());
    let second_sent = sent(received().await, 1);
    let turn = &second_sent["messages"][1];
    assert_eq!(turn["role"], "assistant");
    assert_eq!(
        turn["content"][0],
        json!({"type": "thinking", "thinking": "The user wants the weather in two cities.",
               "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"})
    );
    let after: Vec<&str> = turn["content"].as_array().unwrap()[1..]
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(after, ["text", "tool_use", "tool_use"]);

    // The same item sent to an OpenAI model is left out: OpenAI cannot read it.
    let up = upstream(Arc::new(|_, _| done())).await;
    let openai_url = proxy(ContextPolicy::default(), &up).await;
    let mut to_openai = second.clone();
    to_openai["model"] = json!("gpt-5.5");
    let answer = post(&openai_url, to_openai.to_string()).await;
    assert_eq!(answer.status(), 200);
    let forwarded = up.json(0);
    let items = forwarded["input"].as_array().unwrap();
    assert!(
        items.iter().all(|i| i["type"] != "reasoning"),
        "{forwarded}"
    );
    assert_eq!(items.len(), input.len() - 1);
}

#[tokio::test]
async fn a_namespace_reaches_claude_as_its_functions_and_calls_come_back_by_their_own_name() {
    use crate::support::servers::mock_post;
    use wiremock::ResponseTemplate;
    let called = json!({"id": "msg_1", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-6", "stop_reason": "tool_use", "stop_sequence": null,
        "content": [{"type": "tool_use", "id": "toolu_1",
                     "name": "multi_agent_v1__spawn_agent", "input": {"task": "lint"}}],
        "usage": {"input_tokens": 50, "output_tokens": 9}});
    let claude = mock_post(
        "/v1/messages",
        ResponseTemplate::new(200).set_body_json(called),
    )
    .await;
    let url = crate::support::proxy::anthropic_proxy(&claude).await;
    let namespace = json!({"type": "namespace", "name": "multi_agent_v1",
        "description": "Sub-agents.", "tools": [
            {"type": "function", "name": "spawn_agent", "description": "Spawns one.",
             "strict": false, "parameters": {"type": "object",
                 "properties": {"task": {"type": "string"}}}}]});
    let exec = json!({"type": "function", "name": "exec_command", "description": "Runs.",
                      "strict": false, "parameters": {"type": "object", "properties": {}}});
    let body = json!({"model": "claude-sonnet-4-6", "input": "Lint it.",
                      "tools": [exec, namespace]});
    let answer = post(&url, body.to_string()).await;
    assert_eq!(answer.status(), 200);
    let got = json_of(answer).await;
    assert_valid(&validator(SCHEMA, Root::Response), &got, "the answer");
    let call = &got["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "spawn_agent");
    assert_eq!(call["namespace"], "multi_agent_v1");
    let requests = claude.received_requests().await.unwrap();
    let sent: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[..2], ["exec_command", "multi_agent_v1__spawn_agent"]);
    assert_eq!(
        sent["tools"][1]["input_schema"]["properties"]["task"]["type"],
        "string"
    );

    // The call resent with its result: the same name reaches Claude.
    let body = json!({"model": "claude-sonnet-4-6", "tools": [exec, namespace], "input": [
        {"role": "user", "content": "Lint it."}, call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "spawned"}]});
    assert_eq!(post(&url, body.to_string()).await.status(), 200);
    let requests = claude.received_requests().await.unwrap();
    let sent: Value = serde_json::from_slice(&requests[1].body).unwrap();
    assert_eq!(
        sent["messages"][1]["content"][0]["name"],
        "multi_agent_v1__spawn_agent"
    );

    // A hosted tool has no counterpart: refused by name, nothing sent.
    let body = json!({"model": "claude-sonnet-4-6", "input": "Search.",
                      "tools": [namespace, {"type": "web_search"}]});
    refused_naming(&url, &body, "web_search").await;
    assert_eq!(claude.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_model_that_takes_breakpoints_gets_the_stacks_on_input_parts_and_a_callers_own_are_kept()
{
    let up = upstream(Arc::new(|_, _| done())).await;
    let url = proxy(ContextPolicy::default(), &up).await;
    let body = codex_body(&seq(1_500)).replace("gpt-5.5-codex", "gpt-5.6-terra");
    assert_eq!(post(&url, body).await.status(), 200);
    let sent = up.json(0);
    let mut known = sent.clone();
    known.as_object_mut().unwrap().remove("x_future_field");
    assert_valid(&validator(SCHEMA, Root::Request), &known, "the body sent");
    let input = sent["input"].as_array().unwrap();
    let marked: Vec<usize> = (0..input.len())
        .filter(|&i| input[i].to_string().contains("prompt_cache_breakpoint"))
        .collect();
    // The newest request, and the end of the stable history: the command's output (the
    // answer after it is the model's, whose parts take none).
    assert_eq!(marked, [5, 7], "{sent}");
    let explicit = json!({"mode": "explicit"});
    assert_eq!(input[7]["content"][0]["prompt_cache_breakpoint"], explicit);
    assert_eq!(input[7]["content"][0]["text"], "Und jetzt?");
    assert_eq!(input[5]["output"][0]["prompt_cache_breakpoint"], explicit);
    assert_eq!(input[5]["output"][0]["type"], "input_text");

    // A caller that placed its own: nothing added, its body goes on as it came.
    let own = codex_body(&seq(1_500))
        .replace("gpt-5.5-codex", "gpt-5.6-terra")
        .replace(
            r#""Und jetzt?"}"#,
            r#""Und jetzt?","prompt_cache_breakpoint":{"mode":"explicit"}}"#,
        );
    assert!(own.contains("prompt_cache_breakpoint"));
    assert_eq!(post(&url, own.clone()).await.status(), 200);
    let sent = String::from_utf8(up.bodies()[1].to_vec()).unwrap();
    assert_eq!(sent.matches("prompt_cache_breakpoint").count(), 1, "{sent}");

    // An older model: none (the byte-for-byte test above is one).
    let older = codex_body(&seq(1_500)).replace("gpt-5.5-codex", "gpt-5.4");
    assert_eq!(post(&url, older).await.status(), 200);
    let sent = String::from_utf8(up.bodies()[2].to_vec()).unwrap();
    assert!(!sent.contains("prompt_cache_breakpoint"));
}

#[tokio::test]
async fn a_stream_is_relayed_event_for_event() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let url = proxy(ContextPolicy::default(), &up).await;
    let body = codex_body("build ok\n").replace(r#""stream":false"#, r#""stream":true"#);
    let answer = post(&url, body.clone()).await;
    assert_eq!(answer.status(), 200);
    assert!(!answer.headers().contains_key("x-llm-context-managed"));
    let got = stream_data(answer).await;
    assert_eq!(got, events_of(&echoing(done(), &body)));
    // The upstream was asked for a stream, with the caller's bytes.
    assert_eq!(without_read_tool(&up.bodies()[0]), body);
    let events = validator(SCHEMA, Root::Stream);
    for e in &got {
        assert_valid(&events, e, "a relayed event");
    }
}

#[tokio::test]
async fn a_hidden_round_never_reaches_the_stream_and_its_usage_is_summed() {
    let up = upstream(Arc::new(|req: &Value, n| {
        if n > 0 {
            return done();
        }
        let output = req["input"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "function_call_output")
            .unwrap()["output"]
            .as_str()
            .unwrap()
            .to_owned();
        let preview: Value = serde_json::from_str(&output).unwrap();
        let id = preview["context_artifact"].as_str().unwrap().to_owned();
        response(json!([
            {"type": "reasoning", "id": "rs_r", "summary": [], "encrypted_content": "gAAA-r"},
            {"type": "function_call", "id": "fc_r", "call_id": "call_read", "status": "completed",
             "name": "read_context_artifact",
             "arguments": json!({"artifact_id": id}).to_string()}]))
    }))
    .await;
    let policy = ContextPolicy::default().with_tool_result_max_chars(2_000);
    let url = proxy(policy, &up).await;
    let body = codex_body(&seq(3_000)).replace(r#""stream":false"#, r#""stream":true"#);
    let answer = post(&url, body).await;
    assert_eq!(answer.status(), 200);
    let got = stream_data(answer).await;
    assert_eq!(up.bodies().len(), 2);
    let text = serde_json::to_string(&got).unwrap();
    assert!(!text.contains("read_context_artifact"), "{text}");
    assert!(
        !text.contains("gAAA-r"),
        "the hidden round's reasoning: {text}"
    );
    // The final round's events, its usage the two rounds' together.
    let last = got.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["usage"]["input_tokens"], 2_400);
    assert_eq!(last["response"]["usage"]["output_tokens"], 80);
    assert_eq!(last["response"]["output"], done()["output"]);
    // The echo of the request's tools is the caller's own: the read tool left out.
    let echoed: Vec<&str> = last["response"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(echoed, ["exec_command", "apply_patch"]);
    // The hidden round sent the reasoning of the read back with it.
    let second = up.json(1);
    let items = second["input"].as_array().unwrap();
    assert_eq!(items[items.len() - 3]["encrypted_content"], "gAAA-r");
    assert_eq!(second["stream"], true);
}

#[tokio::test]
async fn an_upstream_error_event_ends_the_stream_with_an_error_event() {
    for error in [
        json!({"type": "error", "code": "server_error", "message": "boom", "param": null,
               "sequence_number": 0}),
        json!({"type": "error", "error": {"type": "server_error", "code": "server_error",
                                          "message": "boom", "param": null}}),
    ] {
        let up = upstream(Arc::new(move |_, _| json!({"stream_error": error.clone()}))).await;
        let url = proxy(ContextPolicy::default(), &up).await;
        let body = json!({"model": "gpt-5.5-codex", "input": "hi", "stream": true});
        let answer = post(&url, body.to_string()).await;
        let got = stream_data(answer).await;
        // What the upstream sent before it failed, then the error, and nothing after.
        assert_eq!(got[..5], events_of(&done())[..5]);
        let last = got.last().unwrap();
        assert_eq!(got.len(), 6, "{got:?}");
        assert_eq!(last["type"], "error", "{got:?}");
        assert!(last.to_string().contains("boom"), "{last}");
    }
}

#[tokio::test]
async fn a_websocket_upgrade_is_refused_at_once_with_426_and_a_plain_get_is_405() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let url = proxy(ContextPolicy::default(), &up).await;
    let client = reqwest::Client::new();
    let upgrade = client
        .get(format!("{url}/v1/responses"))
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("openai-beta", "responses_websockets=2026-02-06")
        .send()
        .await
        .unwrap();
    assert_eq!(upgrade.status(), 426);
    let error = json_of(upgrade).await;
    assert!(
        error["error"]["message"].as_str().unwrap().contains("POST"),
        "{error}"
    );
    let plain = client
        .get(format!("{url}/v1/responses"))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 405);
    assert_eq!(plain.headers()["allow"], "POST");
    assert!(up.bodies().is_empty());
}

#[tokio::test]
async fn under_delegate_the_server_compacts_and_the_outputs_go_unchanged() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let policy = ContextPolicy::default()
        .with_max_context_tokens(100_000)
        .with_reserve_tokens(4_000)
        .with_executor(llm_context::Executor::Delegate);
    let url = proxy(policy, &up).await;
    // Short enough not to be offloaded (offloading has no server counterpart: it stays
    // the stack's).
    let body = codex_body(&seq(300));
    let answer = post(&url, body.clone()).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-llm-context-executor"], "delegate");
    let sent = up.json(0);
    assert_eq!(
        sent["context_management"],
        json!([{"type": "compaction", "compact_threshold": 96_000}])
    );
    // Nothing else changed: the output went as it came.
    let raw = String::from_utf8(up.bodies()[0].to_vec()).unwrap();
    let without = raw.replace(
        r#","context_management":[{"type":"compaction","compact_threshold":96000}]"#,
        "",
    );
    assert_eq!(without_read_tool(without.as_bytes()), body);
}

#[tokio::test]
async fn a_clients_own_server_compaction_and_truncation_pass_on_as_written() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let url = proxy(ContextPolicy::default(), &up).await;
    let body = codex_body("build ok\n").replace(
        r#""store":false,"#,
        r#""store":false,"context_management":[{"type":"compaction","compact_threshold":150000}],"truncation":"auto","#,
    );
    let answer = post(&url, body.clone()).await;
    assert_eq!(answer.status(), 200);
    // The client compacts: the provider edits, never the stack over it.
    assert_eq!(answer.headers()["x-llm-context-executor"], "delegate");
    assert_eq!(without_read_tool(&up.bodies()[0]), body);
}

#[tokio::test]
async fn what_a_compaction_item_stands_in_for_is_left_out() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let url = proxy(ContextPolicy::default(), &up).await;
    let body = json!({"model": "gpt-5.5-codex", "store": false, "input": [
        {"type": "message", "role": "user", "content": "Erste Aufgabe"},
        {"type": "message", "role": "assistant", "content": "Erledigt."},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAA-compacted"},
        {"type": "message", "role": "user", "content": "Zweite Aufgabe"}]})
    .to_string();
    let answer = post(&url, body).await;
    assert_eq!(answer.status(), 200);
    // The user's first message, and the assistant's text before the block in the turn
    // the block belongs to.
    assert_eq!(answer.headers()["x-llm-context-compacted-messages"], "1");
    let sent = up.json(0);
    let kinds: Vec<&str> = sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["compaction", "message"]);
    assert_eq!(sent["input"][0]["encrypted_content"], "gAAA-compacted");
}

#[tokio::test]
async fn a_long_codex_session_stays_within_the_window_while_its_transcript_grows() {
    // The model runs a command every round, each printing 8 to 24 KB.
    let up = upstream(Arc::new(|_, n| {
        response(json!([
            {"type": "reasoning", "id": format!("rs_{n}"), "summary": [],
             "encrypted_content": format!("gAAA-{n}-{}", "x".repeat(400))},
            {"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
             "name": "exec_command", "status": "completed",
             "arguments": json!({"cmd": format!("cat log.{n}")}).to_string()}]))
    }))
    .await;
    let window = 60_000;
    let policy = ContextPolicy::default()
        .with_max_context_tokens(window)
        .with_reserve_tokens(4_000);
    let url = proxy(policy, &up).await;
    let mut input = vec![json!({"type": "message", "role": "user",
                                "content": "Finde den Fehler in den Logs. 找到错误"})];
    let mut largest_sent = 0;
    for round in 0..150 {
        let body = json!({"model": "gpt-5.5-codex", "instructions": "You are Codex.",
                          "input": input, "store": false, "stream": round % 2 == 1,
                          "include": ["reasoning.encrypted_content"],
                          "tools": [{"type": "function", "name": "exec_command",
                                     "description": "Runs a command.", "strict": false,
                                     "parameters": {"type": "object",
                                                    "properties": {"cmd": {"type": "string"}}}}]});
        let answer = post(&url, body.to_string()).await;
        assert_eq!(answer.status(), 200, "round {round}");
        let after: usize = answer.headers()["x-llm-context-after-tokens"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            after <= window - 4_000,
            "round {round}: {after} tokens sent"
        );
        let output = if round % 2 == 1 {
            // The whole answer, from the relayed stream's last event.
            stream_data(answer).await.last().unwrap()["response"]["output"].clone()
        } else {
            json_of(answer).await["output"].clone()
        };
        let call = output[1]["call_id"].as_str().unwrap().to_owned();
        input.extend(output.as_array().unwrap().iter().cloned());
        let n = 8_000 + (round * 7_919) % 16_000;
        let log: String = format!("{round}: ERROR connexion refusée — 接続拒否\n").repeat(n / 40);
        input.push(json!({"type": "function_call_output", "call_id": call, "output": log}));
        largest_sent = largest_sent.max(up.bodies().last().unwrap().len());
    }
    let transcript = serde_json::to_string(&input).unwrap().len();
    // The client's transcript is many windows long; what reached the upstream never was.
    assert!(transcript > 10 * window * 4, "{transcript} bytes");
    assert!(
        largest_sent < 2 * window * 4,
        "{largest_sent} bytes sent at most"
    );
    assert_eq!(up.bodies().len(), 150, "no hidden round, no retry");
}

#[tokio::test]
async fn input_tokens_counts_the_request_as_the_stack_would_send_it() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let policy = ContextPolicy::default().with_tool_result_max_chars(2_000);
    let url = proxy(policy, &up).await;
    let answer = post_to(&url, "/v1/responses/input_tokens", codex_body(&seq(3_000))).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-llm-context-offloaded"], "1");
    assert_eq!(
        json_of(answer).await,
        json!({"object": "response.input_tokens", "input_tokens": 1_234})
    );
    // OpenAI counted what the stack would send: the preview, not the output, and only
    // the fields its count endpoint takes.
    let sent = up.json(0);
    let keys: Vec<&str> = sent
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "model",
            "instructions",
            "input",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "reasoning"
        ]
    );
    let output = sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .unwrap();
    assert!(
        output["output"]
            .as_str()
            .unwrap()
            .contains("context_artifact")
    );
    assert_valid(
        &validator(SCHEMA, Root::Named("input-tokens-request")),
        &sent,
        "the count body",
    );
}

#[tokio::test]
async fn a_claude_models_input_tokens_are_the_stacks_estimate() {
    let upstream = crate::support::proxy::anthropic_upstream().await;
    let url = crate::support::proxy::anthropic_proxy(&upstream).await;
    let body = json!({"model": "claude-sonnet-4-6", "input": "Warum? 为什么"});
    let answer = post_to(&url, "/v1/responses/input_tokens", body.to_string()).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-llm-context-counted-by"], "estimate");
    let got = json_of(answer).await;
    assert_eq!(got["object"], "response.input_tokens");
    assert!(got["input_tokens"].as_u64().unwrap() > 0);
    assert!(upstream.received_requests().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_chat_client_reaches_a_responses_only_model_over_the_responses_api() {
    let up = upstream(Arc::new(|_, _| done())).await;
    let url = proxy(ContextPolicy::default(), &up).await;
    let body = json!({"model": "gpt-5.5-codex", "max_completion_tokens": 300, "messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Läuft der Build?"}]});
    for stream in [false, true] {
        let mut body = body.clone();
        body["stream"] = json!(stream);
        let answer = post_to(&url, "/v1/chat/completions", body.to_string()).await;
        assert_eq!(answer.status(), 200);
        let text = if stream {
            let chunks = stream_data(answer).await;
            assert!(
                chunks
                    .iter()
                    .all(|c| c["object"] == "chat.completion.chunk")
            );
            chunks
                .iter()
                .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
                .collect::<String>()
        } else {
            let got = json_of(answer).await;
            assert_eq!(got["object"], "chat.completion");
            got["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(text, "Der Build ist repariert. 完了。");
    }
    // Both went over the Responses API, written from the neutral request.
    let request = validator(SCHEMA, Root::Request);
    for i in 0..2 {
        let sent = up.json(i);
        assert_valid(&request, &sent, "the request");
        assert_eq!(sent["instructions"], "Be brief.");
        assert_eq!(sent["max_output_tokens"], 300);
        assert_eq!(sent["input"][0]["content"], "Läuft der Build?");
    }
}

#[tokio::test]
async fn compact_and_a_stored_response_are_passed_on_to_openai() {
    let upstream = wiremock::MockServer::start().await;
    let compacted = json!({"id": "cmp_1", "object": "response.compaction", "created_at": 1,
                           "output": [{"type": "compaction", "id": "cmp_1",
                                       "encrypted_content": "gAAA"}],
                           "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12,
                                     "input_tokens_details": {"cached_tokens": 0},
                                     "output_tokens_details": {"reasoning_tokens": 0}}});
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/responses/compact"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(compacted.clone()))
        .mount(&upstream)
        .await;
    wiremock::Mock::given(wiremock::matchers::method("GET"))
        .and(wiremock::matchers::path("/v1/responses/resp_7"))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(done()))
        .mount(&upstream)
        .await;
    let url = crate::support::proxy::openai_proxy(&upstream).await;
    let body = json!({"model": "gpt-5.5-codex", "input": "Fasse zusammen."}).to_string();
    let answer = post_to(&url, "/v1/responses/compact", body.clone()).await;
    assert_eq!(answer.status(), 200);
    assert_eq!(json_of(answer).await, compacted);
    let stored = reqwest::get(format!("{url}/v1/responses/resp_7"))
        .await
        .unwrap();
    assert_eq!(stored.status(), 200);
    assert_eq!(json_of(stored).await, done());
    let received = upstream.received_requests().await.unwrap();
    assert_eq!(received[0].body, body.as_bytes());
    // The server's key, not the client's.
    assert_eq!(received[0].headers["authorization"], "Bearer sk-upstream");
}
