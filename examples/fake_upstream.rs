//! A fake OpenAI provider on 127.0.0.1 that answers every chat completion at once with
//! the same small reply, streamed when the request asks: the upstream of the proxy's load
//! benchmark (`benches/serve.sh`), so that what is measured is the proxy, not a model.
//!
//! ```sh
//! cargo run --release --example fake_upstream -- 127.0.0.1:9100
//! OPENAI_BASE_URL=http://127.0.0.1:9100/v1 OPENAI_API_KEY=unused llm-context serve
//! ```
//!
//! It reads every body whole (as a provider does) and looks for `"stream":true` in it
//! without parsing it, so that calling it directly costs what the proxy's own hop to it
//! costs, and the difference of the two is the proxy's. It also takes OTLP/HTTP posts
//! to `/v1/traces` (and drops them), for a proxy exporting its spans.

use std::net::SocketAddr;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
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

async fn complete(body: Bytes) -> Response {
    // Both the proxy's compact JSON and a pretty-printed body.
    let streamed = memchr::memmem::find(&body, br#""stream":true"#).is_some()
        || memchr::memmem::find(&body, br#""stream": true"#).is_some();
    let (text, kind) = if streamed {
        (STREAM, "text/event-stream")
    } else {
        (COMPLETION, "application/json")
    };
    let mut out = Response::new(Body::from(text));
    out.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
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
        // An OTLP/HTTP sink, for the proxy's spans when the benchmark exports them.
        .route("/v1/traces", post(|| async { StatusCode::OK }))
        // Bodies of a long transcript are megabytes.
        .layer(axum::extract::DefaultBodyLimit::max(256 * 1024 * 1024));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("fake upstream on http://{}", listener.local_addr()?);
    axum::serve(listener, app).await
}
