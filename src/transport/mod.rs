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
//!
//! [`ReqwestTransport`] follows no redirect (a 3xx is handed to the client, which makes
//! it an error naming the target), and reads a body incrementally up to its limit
//! ([`DEFAULT_MAX_RESPONSE_BYTES`] unless set), failing with
//! [`TransportErrorKind::TooLarge`] past it, whatever `Content-Length` said or did not
//! say. Neither transport nor client asks for compressed bodies, so the limit is on the
//! bytes that arrive.
//!
//! Streamed calls ([`Streaming`] requests to a client) need a transport that also takes a
//! `Streaming<HttpRequest>` and answers an [`HttpStreamResponse`], whose body is read as
//! it arrives; [`ReqwestTransport`] does, with its body limit applied per line of the
//! event stream rather than to the whole answer. A transport of your own that only
//! answers whole bodies serves plain calls, and a streamed call does not compile.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use llm_context_layers::stream::Streaming;
use tower::Service;

use crate::BoxError;
use crate::redact::mask_userinfo;

mod body;

pub use body::RequestBody;

/// A request as the clients build it: its body a [`RequestBody`], one buffer or pieces of
/// several (a proxied body's kept spans are slices of the client's bytes).
pub type HttpRequest = http::Request<RequestBody>;

/// A response with its whole body.
pub type HttpResponse = http::Response<Bytes>;

/// A response body read as it arrives (a streamed call's server-sent events).
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, TransportError>> + Send>>;

/// A response whose body is read as it arrives: what a transport answers to a
/// [`Streaming`]`<`[`HttpRequest`]`>`.
pub type HttpStreamResponse = http::Response<BodyStream>;

/// The largest response body the clients read by default: 16 MiB. The largest answers
/// either API gives (128,000 output tokens, a few choices, non-ASCII text written as
/// `\u` escapes) stay well under a few megabytes; a body past 16 MiB is a broken or
/// hostile server, not an answer. Requests with `logprobs` on long outputs can need
/// more: raise it with the builders' `max_response_bytes`.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

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
    /// The response body is larger than the limit; reading stopped there.
    TooLarge,
    /// The HTTP client followed a redirect (a `reqwest::Client` of your own with a
    /// redirect policy); its answer is refused.
    Redirected,
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
    #[must_use]
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
        // reqwest's message names the URL, never the headers. The URL may carry a
        // password: it is shown masked, and the source keeps none.
        let url = e.url().map(|u| mask_userinfo(u.as_str()));
        let e = e.without_url();
        let mut message = error_chain(&e);
        if let Some(url) = url {
            message.push_str(&format!(" (url {url})"));
        }
        Self::new(kind, message).with_source(e)
    }

    /// A body over `limit` bytes.
    pub(crate) fn too_large(limit: usize) -> Self {
        Self::new(
            TransportErrorKind::TooLarge,
            format!(
                "the response body is larger than the limit of {limit} bytes (max_response_bytes)"
            ),
        )
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

/// The default transport: a `reqwest::Client` (rustls, HTTP/1.1 and HTTP/2) that
/// follows no redirect and reads at most [`DEFAULT_MAX_RESPONSE_BYTES`] of a body unless
/// told otherwise. Cheap to clone; clones share the connection pool.
#[derive(Clone, Debug)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    max_body_bytes: usize,
}

impl ReqwestTransport {
    /// A transport over a client of your own (proxies, certificates, pools). Build it
    /// with `.redirect(reqwest::redirect::Policy::none())`: reqwest's default follows
    /// redirects, sending the key and the prompt to wherever a server points. This
    /// transport refuses an answer that came from a followed redirect, but by then the
    /// request has gone.
    pub fn new(client: reqwest::Client) -> Self {
        Self {
            client,
            max_body_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }

    /// A transport whose whole calls time out after `timeout` (`None`: never; the
    /// connection attempt alone still times out after 30 s), following no redirect.
    pub fn with_timeout(timeout: Option<Duration>) -> Result<Self, TransportError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none());
        if let Some(t) = timeout {
            builder = builder.timeout(t);
        }
        let client = builder.build().map_err(TransportError::from_reqwest)?;
        Ok(Self::new(client))
    }

    /// The most bytes of a response body read (default [`DEFAULT_MAX_RESPONSE_BYTES`]);
    /// a longer body fails with [`TransportErrorKind::TooLarge`] once the limit is
    /// passed (at once, when its `Content-Length` says so).
    #[must_use]
    pub fn with_max_body_bytes(mut self, limit: usize) -> Self {
        self.max_body_bytes = limit;
        self
    }
}

/// The body of `resp`, read piece by piece and never past `limit` bytes. The declared
/// length only decides early: a body is counted as it arrives, since a length can lie
/// (or be overridden by chunked framing) and may be absent.
async fn read_body(resp: &mut reqwest::Response, limit: usize) -> Result<Bytes, TransportError> {
    let declared = resp.content_length();
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(TransportError::too_large(limit));
    }
    // Never allocate ahead on the server's word alone.
    let ahead = declared.map_or(0, |n| n as usize).min(64 * 1024);
    let mut body = BytesMut::with_capacity(ahead);
    while let Some(piece) = resp.chunk().await.map_err(TransportError::from_reqwest)? {
        if piece.len() > limit - body.len() {
            return Err(TransportError::too_large(limit));
        }
        body.extend_from_slice(&piece);
    }
    Ok(body.freeze())
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
        let limit = self.max_body_bytes;
        Box::pin(async move {
            let mut resp = send(&client, req).await?;
            let status = resp.status();
            let body = read_body(&mut resp, limit).await?;
            let headers = std::mem::take(resp.headers_mut());
            let mut out = http::Response::new(body);
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            Ok(out)
        })
    }
}

/// Sends `req`, refusing an answer that came from a followed redirect.
async fn send(
    client: &reqwest::Client,
    req: HttpRequest,
) -> Result<reqwest::Response, TransportError> {
    let req = reqwest::Request::try_from(req).map_err(TransportError::from_reqwest)?;
    let asked = req.url().clone();
    let resp = client
        .execute(req)
        .await
        .map_err(TransportError::from_reqwest)?;
    if resp.url() != &asked {
        return Err(TransportError::new(
            TransportErrorKind::Redirected,
            format!(
                "the HTTP client followed a redirect to {}; its answer is refused \
                 (build the client with reqwest::redirect::Policy::none())",
                mask_userinfo(resp.url().as_str())
            ),
        ));
    }
    Ok(resp)
}

/// A streamed call: the response as soon as its headers arrive, its body read piece by
/// piece as the caller polls. Dropping the body closes the connection. The body limit
/// applies to the bytes between two line breaks (one server-sent event line), not to
/// the whole stream, which is as long as the model's answer: a server that sends no
/// line break fails with [`TransportErrorKind::TooLarge`] past it.
impl Service<Streaming<HttpRequest>> for ReqwestTransport {
    type Response = HttpStreamResponse;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpStreamResponse, TransportError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Streaming<HttpRequest>) -> Self::Future {
        let client = self.client.clone();
        let limit = self.max_body_bytes;
        Box::pin(async move {
            let mut resp = send(&client, req.0).await?;
            let status = resp.status();
            let headers = std::mem::take(resp.headers_mut());
            // `None` after an error: nothing is read after it.
            let body =
                futures_util::stream::unfold(Some((resp, 0usize)), move |state| async move {
                    let (mut resp, run) = state?;
                    match resp.chunk().await {
                        Ok(Some(piece)) => {
                            // Bytes since the last line break, this piece included.
                            let run = match piece.iter().rposition(|&b| b == b'\n') {
                                Some(at) => piece.len() - at - 1,
                                None => run + piece.len(),
                            };
                            if run > limit {
                                return Some((Err(TransportError::too_large(limit)), None));
                            }
                            Some((Ok(piece), Some((resp, run))))
                        }
                        Ok(None) => None,
                        Err(e) => Some((Err(TransportError::from_reqwest(e)), None)),
                    }
                });
            let mut out = http::Response::new(Box::pin(body) as BodyStream);
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            Ok(out)
        })
    }
}
