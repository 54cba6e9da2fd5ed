//! A fake OpenAI and Anthropic provider on 127.0.0.1 that answers every chat completion
//! (`POST /v1/chat/completions`), every response (`POST /v1/responses`) and every message
//! (`POST /v1/messages`) at once with the same small reply, streamed when the request asks: the upstream of the proxy's load
//! benchmark (`benches/serve.sh`), so that what is measured is the proxy, not a model.
//!
//! ```sh
//! cargo run --release --example fake_upstream -- 127.0.0.1:9100
//! OPENAI_BASE_URL=http://127.0.0.1:9100/v1 OPENAI_API_KEY=unused \
//!     ANTHROPIC_BASE_URL=http://127.0.0.1:9100 ANTHROPIC_API_KEY=unused llm-context serve
//! ```
//!
//! It reads every body whole (as a provider does) and looks for `"stream":true` in it
//! without parsing it, so that calling it directly costs what the proxy's own hop to it
//! costs, and the difference of the two is the proxy's. It also takes OTLP/HTTP posts
//! to `/v1/traces` (and drops them), for a proxy exporting its spans, and answers any
//! other request (`/v1/messages/count_tokens`, a pass-through route) with a token count.
//!
//! A request with the header `x-fake-upstream-delay-ms: N` (which the proxy passes on, as
//! it does every `x-…` header) is answered N ms after its body is read, as a model takes
//! its time: the requests a proxy in front of it holds then stay in flight together, for
//! measuring its memory per request in flight.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::post;

/// The reply to a plain request: a whole `chat.completion`.
const COMPLETION: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"gpt-5.4","choices":[{"index":0,"message":{"role":"assistant","content":"Die Datenbank verweigert die Verbindung (接続拒否): der Pool ist erschöpft."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1200,"completion_tokens":18,"total_tokens":1218}}"#;

/// The reply to a streamed request: role, three pieces of text, the finish, usage, done.
const STREAM: &str = concat!(
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-5.4","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-5.4","choices":[{"index":0,"delta":{"content":"Die Datenbank verweigert "},"finish_reason":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-5.4","choices":[{"index":0,"delta":{"content":"die Verbindung (接続拒否): "},"finish_reason":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-5.4","choices":[{"index":0,"delta":{"content":"der Pool ist erschöpft."},"finish_reason":null}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-5.4","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"gpt-5.4","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":18,"total_tokens":1218}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

/// The reply to a plain Messages request: a whole `message`, one text block.
const MESSAGE: &str = r#"{"id":"msg_bench","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Die Datenbank verweigert die Verbindung (接続拒否): der Pool ist erschöpft."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":18}}"#;

/// The reply to a streamed Messages request: the opening, one text block in three pieces,
/// the stop reason with the usage, the end.
const MESSAGE_STREAM: &str = concat!(
    "event: message_start\n",
    r#"data: {"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}"#,
    "\n\n",
    "event: content_block_start\n",
    r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Die Datenbank verweigert "}}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"die Verbindung (接続拒否): "}}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"der Pool ist erschöpft."}}"#,
    "\n\n",
    "event: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":0}"#,
    "\n\n",
    "event: message_delta\n",
    r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":18}}"#,
    "\n\n",
    "event: message_stop\n",
    r#"data: {"type":"message_stop"}"#,
    "\n\n",
);

/// The reply to a plain Responses request: a whole `response`, one message.
const RESPONSE: &str = r#"{"id":"resp_bench","object":"response","created_at":1,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"model":"gpt-5.5-codex","output":[{"type":"message","id":"msg_bench","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Die Datenbank verweigert die Verbindung (接続拒否): der Pool ist erschöpft.","annotations":[],"logprobs":[]}]}],"parallel_tool_calls":true,"metadata":{},"tool_choice":"auto","tools":[],"temperature":null,"top_p":null,"usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":18,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1218}}"#;

/// The reply to a streamed Responses request: created, the message added, its text in
/// three pieces, the message done, completed with the usage.
const RESPONSE_STREAM: &str = concat!(
    "event: response.created
",
    r#"data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_bench","object":"response","created_at":1,"status":"in_progress","model":"gpt-5.5-codex","output":[]}}"#,
    "

",
    "event: response.output_item.added
",
    r#"data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"msg_bench","role":"assistant","status":"in_progress","content":[]}}"#,
    "

",
    "event: response.output_text.delta
",
    r#"data: {"type":"response.output_text.delta","sequence_number":2,"output_index":0,"item_id":"msg_bench","content_index":0,"delta":"Die Datenbank verweigert ","logprobs":[]}"#,
    "

",
    "event: response.output_text.delta
",
    r#"data: {"type":"response.output_text.delta","sequence_number":3,"output_index":0,"item_id":"msg_bench","content_index":0,"delta":"die Verbindung (接続拒否): ","logprobs":[]}"#,
    "

",
    "event: response.output_text.delta
",
    r#"data: {"type":"response.output_text.delta","sequence_number":4,"output_index":0,"item_id":"msg_bench","content_index":0,"delta":"der Pool ist erschöpft.","logprobs":[]}"#,
    "

",
    "event: response.output_item.done
",
    r#"data: {"type":"response.output_item.done","sequence_number":5,"output_index":0,"item":{"type":"message","id":"msg_bench","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Die Datenbank verweigert die Verbindung (接続拒否): der Pool ist erschöpft.","annotations":[],"logprobs":[]}]}}"#,
    "

",
    "event: response.completed
",
    r#"data: {"type":"response.completed","sequence_number":6,"response":{"id":"resp_bench","object":"response","created_at":1,"status":"completed","model":"gpt-5.5-codex","output":[{"type":"message","id":"msg_bench","role":"assistant","status":"completed","content":[{"type":"output_text","text":"Die Datenbank verweigert die Verbindung (接続拒否): der Pool ist erschöpft.","annotations":[],"logprobs":[]}]}],"usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":0},"output_tokens":18,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1218}}}"#,
    "

",
);

/// Whether `body` asks for a stream: a search for the key, not a parse (the proxy's
/// compact JSON and a pretty-printed body both). The text of a JSON string cannot match
/// (its quotes are escaped); only a key, and the benchmark's bodies have no other
/// `stream` key.
fn streamed(body: &[u8]) -> bool {
    memchr::memmem::find(body, br#""stream":true"#).is_some()
        || memchr::memmem::find(body, br#""stream": true"#).is_some()
}

/// `plain` or `stream` as the answer to `body`, with its content type, after the delay
/// the request asks for.
async fn answer(
    headers: &HeaderMap,
    body: &[u8],
    plain: &'static str,
    stream: &'static str,
) -> Response {
    let delay = headers
        .get("x-fake-upstream-delay-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    if let Some(ms) = delay {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let (text, kind) = if streamed(body) {
        (stream, "text/event-stream")
    } else {
        (plain, "application/json")
    };
    let mut out = Response::new(Body::from(text));
    out.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    out
}

async fn complete(headers: HeaderMap, body: Bytes) -> Response {
    answer(&headers, &body, COMPLETION, STREAM).await
}

async fn respond(headers: HeaderMap, body: Bytes) -> Response {
    answer(&headers, &body, RESPONSE, RESPONSE_STREAM).await
}

async fn message(headers: HeaderMap, body: Bytes) -> Response {
    answer(&headers, &body, MESSAGE, MESSAGE_STREAM).await
}

/// `POST /v1/messages/count_tokens` (`serve` asks it for Anthropic's models), and any
/// other request: `{"input_tokens":1200}` whatever the path, after reading the body. A
/// path `serve` passes on without its stack (`/v1/messages/batches`, `/v1/files`, …)
/// then measures `serve`'s plumbing alone, the same body the same way.
async fn other(_body: Bytes) -> Response {
    let mut out = Response::new(Body::from(r#"{"input_tokens":1200}"#));
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    out
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:9100")
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let app = Router::new()
        .route("/v1/chat/completions", post(complete))
        .route("/v1/messages", post(message))
        .route("/v1/responses", post(respond))
        // An OTLP/HTTP sink, for the proxy's spans when the benchmark exports them.
        .route("/v1/traces", post(|| async { StatusCode::OK }))
        .fallback(other)
        // Bodies of a long transcript are megabytes.
        .layer(axum::extract::DefaultBodyLimit::max(256 * 1024 * 1024));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("fake upstream on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await
}
