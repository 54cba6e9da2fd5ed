//! The HTTP transport of the provider clients, as a tower `Service`.
//!
//! ```
//! use bytes::Bytes;
//! use llm_context::transport::{HttpRequest, HttpResponse, TransportError};
//! use llm_context::openai::OpenAi;
//! use llm_context::{ChatRequest, Message};
//! use tower::{service_fn, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // A canned transport: any Service<HttpRequest, Response = HttpResponse> will do.
//! let canned = service_fn(|_req: HttpRequest| async {
//!     let body = r#"{"choices": [{"index": 0, "finish_reason": "stop",
//!                   "message": {"role": "assistant", "content": "hi"}}]}"#;
//!     Ok::<_, TransportError>(HttpResponse::new(Bytes::from(body)))
//! });
//! let client = OpenAi::builder().api_key("test").build_with_transport(canned).unwrap();
//! let reply = client.oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hello")])).await.unwrap();
//! assert_eq!(reply.message.text(), "hi");
//! # }
//! ```
//!
//! The clients only build an [`HttpRequest`] and read an [`HttpResponse`] with its whole
//! body; how the bytes travel is this service's business. [`ReqwestTransport`] (reqwest
//! over rustls) is the default. Tests can plug in canned responses, and deployments can
//! wrap the transport in their own tower layers (tracing, proxies, rate limits).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tower::Service;

use crate::BoxError;

/// A request as the clients build it.
pub type HttpRequest = http::Request<Bytes>;

/// A response with its whole body.
pub type HttpResponse = http::Response<Bytes>;

/// How the transport failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// No complete answer in time.
    Timeout,
    /// The connection could not be made, or was reset before a response.
    Connect,
    /// The response body was cut short or could not be read.
    Body,
    /// Anything else (an invalid request, a TLS setup failure, …).
    Other,
}

/// A transport failure. Never carries request headers, so never an API key.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct TransportError {
    /// How it failed.
    pub kind: TransportErrorKind,
    message: String,
    #[source]
    source: Option<BoxError>,
}

impl TransportError {
    /// A transport error of `kind`.
    pub fn new(kind: TransportErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Sets the underlying error.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(source.into());
        self
    }

    fn from_reqwest(e: reqwest::Error) -> Self {
        let kind = if e.is_timeout() {
            TransportErrorKind::Timeout
        } else if e.is_connect() || e.is_request() {
            // `is_request` covers a connection reset while the request was being sent.
            TransportErrorKind::Connect
        } else if e.is_body() || e.is_decode() {
            TransportErrorKind::Body
        } else {
            TransportErrorKind::Other
        };
        // reqwest's message names the URL, never the headers.
        let message = error_chain(&e);
        Self::new(kind, message).with_source(e)
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

/// The default transport: a `reqwest::Client` (rustls, HTTP/1.1 and HTTP/2). Cheap to
/// clone; clones share the connection pool.
#[derive(Clone, Debug)]
pub struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    /// A transport over a client of your own (proxies, certificates, pools).
    pub fn new(client: reqwest::Client) -> Self {
        Self { client }
    }

    /// A transport whose whole calls time out after `timeout` (`None`: never; the
    /// connection attempt alone still times out after 30 s).
    pub fn with_timeout(timeout: Option<Duration>) -> Result<Self, TransportError> {
        let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(30));
        if let Some(t) = timeout {
            builder = builder.timeout(t);
        }
        let client = builder.build().map_err(TransportError::from_reqwest)?;
        Ok(Self { client })
    }
}

impl Service<HttpRequest> for ReqwestTransport {
    type Response = HttpResponse;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, TransportError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // reqwest queues internally; its pool has no readiness to report.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: HttpRequest) -> Self::Future {
        let client = self.client.clone();
        Box::pin(async move {
            let req = reqwest::Request::try_from(req).map_err(TransportError::from_reqwest)?;
            let mut resp = client
                .execute(req)
                .await
                .map_err(TransportError::from_reqwest)?;
            let status = resp.status();
            let headers = std::mem::take(resp.headers_mut());
            let body = resp.bytes().await.map_err(TransportError::from_reqwest)?;
            let mut out = http::Response::new(body);
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            Ok(out)
        })
    }
}
