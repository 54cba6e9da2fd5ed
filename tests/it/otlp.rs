//! OTLP export end to end: the real binary (`serve` and `send`) exports its spans over
//! OTLP/HTTP to a receiver on 127.0.0.1 that decodes the protobuf, in front of a fake
//! provider that fails once with 500, reads the artifact it is shown, then answers.

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message as _;
use serde_json::json;
use wiremock::MockServer;

use crate::support::serve_child::{exited, terminate};

/// The client's trace and span, as a `traceparent` names them.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// What the receiver got: every span, and the resources' `service.name`s.
#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
}

async fn traces(State(received): State<Received>, body: Bytes) -> impl IntoResponse {
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(r) => r,
        Err(e) => return (axum::http::StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    for resource in request.resource_spans {
        if let Some(r) = &resource.resource {
            for kv in &r.attributes {
                if kv.key == "service.name" {
                    received.services.lock().unwrap().push(text(kv));
                }
            }
        }
        for scope in resource.scope_spans {
            received.spans.lock().unwrap().extend(scope.spans);
        }
    }
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

/// A receiver on a free loopback port: its base URL (no path) and what it receives.
async fn receiver() -> (String, Received) {
    let received = Received::default();
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(traces))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .map(|kv| (kv.key.clone(), text(kv)))
        .collect()
}

fn int(span: &Span, key: &str) -> Option<i64> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(
            |kv| match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::IntValue(i)) => Some(*i),
                _ => None,
            },
        )
}

fn children<'a>(spans: &'a [Span], of: &Span, name: &str) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.parent_span_id == of.span_id && s.name == name)
        .collect()
}

/// Every span received once `want` of them are in, or all of them after 10 s.
async fn settled(received: &Received, want: usize) -> Vec<Span> {
    for _ in 0..200 {
        if received.spans.lock().unwrap().len() >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    received.spans.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exports_a_call_with_a_retry_and_an_artifact_round_as_one_tree() {
    let (collector, received) = receiver().await;
    let upstream = crate::support::artifact_reader::server().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("serve.toml");
    // The config's `otlp_endpoint`, a base URL: `/v1/traces` is added.
    std::fs::write(&config, format!("otlp_endpoint = \"{collector}\"\n")).unwrap();
    let port = crate::support::redis::free_port();
    let listen = format!("127.0.0.1:{port}");
    let (mut child, url) = crate::support::serve_child::spawn(
        env!("CARGO_BIN_EXE_llm-context"),
        &upstream.uri(),
        &["--listen", &listen, "--config", config.to_str().unwrap()],
        port,
    )
    .await;
    let body = json!({
        "model": "gpt-5.4",
        "messages": [
            {"role": "user", "content": "Warum fällt die API aus?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_logs", "type": "function",
             "function": {"name": "fetch_logs", "arguments": "{\"unit\":\"api\"}"}}]},
            {"role": "tool", "tool_call_id": "call_logs", "content": crate::support::artifact_reader::logs()}
        ]
    });
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .header("content-type", "application/json")
        // The agent's own trace, which the proxy's spans continue.
        .header("traceparent", format!("00-{TRACE}-{PARENT}-01"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer = crate::support::proxy::json_of(response).await;
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Die Logs zeigen einen Pool-Fehler."
    );
    // SIGTERM: the server drains, and the exporter sends its last batch before exiting.
    terminate(&child);
    assert!(exited(&mut child, Duration::from_secs(15)).await.success());

    // The request, the call, its three attempts (two in the first round, one in the
    // artifact round) and the round.
    let spans = settled(&received, 6).await;
    // One trace, the client's: the request's span is the child of the client's span.
    let trace = hex(TRACE);
    assert!(spans.iter().all(|s| s.trace_id == trace), "{spans:#?}");
    let request: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "POST /v1/chat/completions")
        .collect();
    assert_eq!(request.len(), 1, "{spans:#?}");
    let request = request[0];
    assert_eq!(request.parent_span_id, hex(PARENT));
    assert_eq!(request.kind, SpanKind::Server as i32);
    assert_eq!(int(request, "http.response.status_code"), Some(200));
    assert_eq!(attributes(request)["http.route"], "/v1/chat/completions");
    let chat = children(&spans, request, "chat gpt-5.4");
    assert_eq!(chat.len(), 1, "{spans:#?}");
    let root = chat[0];
    assert_eq!(root.kind, SpanKind::Client as i32);
    let a = attributes(root);
    assert_eq!(a["gen_ai.operation.name"], "chat");
    assert_eq!(a["gen_ai.provider.name"], "openai");
    assert_eq!(a["gen_ai.request.model"], "gpt-5.4");
    assert_eq!(a["gen_ai.response.model"], "gpt-5.4-2026-03-05");
    assert_eq!(a["gen_ai.response.id"], "chatcmpl-7");
    assert_eq!(a["gen_ai.response.finish_reasons"], "[\"stop\"]");
    // Typed as integers on the wire, as the conventions ask.
    // The call's usage is both rounds' (1200 + 20 each): the artifact round is billed too.
    assert_eq!(int(root, "gen_ai.usage.input_tokens"), Some(2400));
    assert_eq!(int(root, "gen_ai.usage.output_tokens"), Some(40));
    assert_eq!(int(root, "llm_context.offloaded"), Some(1));
    assert!(int(root, "llm_context.before_tokens") > int(root, "llm_context.after_tokens"));
    assert_eq!(a["llm_context.memo_hit"], "false");

    let attempts = children(&spans, root, "gen_ai.attempt");
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    let failed: Vec<&&Span> = attempts
        .iter()
        .filter(|s| attributes(s).get("error.type").map(String::as_str) == Some("Server"))
        .collect();
    assert_eq!(failed.len(), 1, "one attempt failed with a server error");
    assert_eq!(
        failed[0].status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );
    let rounds = children(&spans, root, "llm_context.artifact_round");
    assert_eq!(rounds.len(), 1, "{spans:#?}");
    assert_eq!(int(rounds[0], "llm_context.round"), Some(1));
    assert_eq!(children(&spans, rounds[0], "gen_ai.attempt").len(), 1);

    // No content by default: neither the question nor the tool's output is in any span.
    for span in &spans {
        for (key, value) in attributes(span) {
            assert!(
                !value.contains("Warum") && !value.contains("connexion"),
                "{key} carries content"
            );
        }
    }
    assert!(
        received
            .services
            .lock()
            .unwrap()
            .iter()
            .all(|s| s == "llm-context")
    );
}

/// `llm-context send` of a one-message request to `upstream`, exporting to `endpoint`.
async fn send_exporting(upstream: &MockServer, endpoint: String) -> std::process::Output {
    crate::support::child::run(
        env!("CARGO_BIN_EXE_llm-context"),
        vec![
            "send".into(),
            "--provider".into(),
            "openai".into(),
            "--otlp-endpoint".into(),
            endpoint,
        ],
        vec![
            ("OPENAI_BASE_URL", format!("{}/v1", upstream.uri())),
            ("OPENAI_API_KEY", "sk-test".to_owned()),
        ],
        json!({"model": "gpt-5.4", "messages": [{"role": "user", "content": "Hallo"}]}).to_string(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_exports_its_spans_before_it_exits() {
    let (collector, received) = receiver().await;
    let upstream = crate::support::artifact_reader::server().await;
    // A full traces URL is used as it is.
    let out = send_exporting(&upstream, format!("{collector}/v1/traces")).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The process has exited: whatever it exported is in already.
    let spans = received.spans.lock().unwrap().clone();
    let root = spans
        .iter()
        .find(|s| s.name == "chat gpt-5.4")
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(children(&spans, root, "gen_ai.attempt").len(), 2);
    assert_eq!(int(root, "gen_ai.usage.output_tokens"), Some(20));
}

#[test]
fn an_endpoint_that_is_not_an_http_url_is_bad_input() {
    for endpoint in ["127.0.0.1:4318", "ftp://collector/"] {
        let out = Command::new(env!("CARGO_BIN_EXE_llm-context"))
            .args(["serve", "--otlp-endpoint", endpoint])
            .env("OPENAI_API_KEY", "sk-upstream")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{endpoint}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("OTLP endpoint"), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_the_spans_never_the_call() {
    let upstream = crate::support::artifact_reader::server().await;
    // Nothing listens there.
    let closed = format!("http://127.0.0.1:{}", crate::support::redis::free_port());
    let started = std::time::Instant::now();
    let out = send_exporting(&upstream, closed).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed["response"]["message"]["content"],
        "Die Logs zeigen einen Pool-Fehler."
    );
    // The last export is refused at once; it never holds the command to its timeout.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
