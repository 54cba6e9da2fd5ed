//! One `gen_ai.attempt` span per attempt of a call: under the retry layer, each attempt
//! is a child of the call's `gen_ai.chat` span
//! ([`GenAiSpanLayer`](crate::trace::GenAiSpanLayer)), with `error.type` (the provider
//! error's kind: `RateLimited`, `Server`, `Timeout`, …) when it failed.
//!
//! ```
//! use llm_context::attempt::AttemptSpanLayer;
//! use llm_context::mock::MockModel;
//! use llm_context::retry::RetryPolicy;
//! use llm_context::trace::GenAiSpanLayer;
//! use llm_context::{ChatRequest, Message};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let model = ServiceBuilder::new()
//!     .layer(GenAiSpanLayer::new())
//!     .retry(RetryPolicy::default())
//!     .layer(AttemptSpanLayer)
//!     .service(MockModel::echo());
//! model.oneshot(ChatRequest::new("gpt-5.4", vec![Message::user("hi")])).await.unwrap();
//! # }
//! ```

use std::task::{Context, Poll};

use tower::{Layer, Service};
use tracing::field::Empty;
use tracing::{Instrument, Span};

use crate::error::find_source;
use crate::stream::{ChatStream, StreamFuture, Streaming};
use crate::{BoxError, ChatRequest, ChatResponse, ProviderError};

/// Opens a `gen_ai.attempt` span around each call it passes on: put it under a retry
/// layer, and each attempt of a call is a child span of the call's, with `error.type` when
/// it failed.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttemptSpanLayer;

impl<S> Layer<S> for AttemptSpanLayer {
    type Service = AttemptSpan<S>;

    fn layer(&self, inner: S) -> AttemptSpan<S> {
        AttemptSpan { inner }
    }
}

/// The service of [`AttemptSpanLayer`].
#[derive(Clone, Debug)]
pub struct AttemptSpan<S> {
    inner: S,
}

fn attempt_span() -> Span {
    tracing::info_span!(
        target: "llm_context::gen_ai",
        "gen_ai.attempt",
        error.type = Empty,
        otel.status_code = Empty
    )
}

/// `Ok`, or the failure recorded as `error.type` on `span`: the provider's error kind.
fn attempt_error(span: &Span, e: &BoxError) {
    if span.is_disabled() {
        return;
    }
    let kind = find_source::<ProviderError>(&**e)
        .map_or_else(|| "_OTHER".to_owned(), |p| format!("{:?}", p.kind));
    crate::trace::failed(span, &kind);
}

/// `call` in `span`, its failure recorded there.
fn in_attempt<T, E, F>(
    span: Span,
    call: F,
) -> futures_util::future::BoxFuture<'static, Result<T, BoxError>>
where
    F: std::future::Future<Output = Result<T, E>> + Send + 'static,
    E: Into<BoxError>,
{
    let recorded = span.clone();
    Box::pin(
        async move {
            let result = call.await.map_err(Into::into);
            if let Err(e) = &result {
                attempt_error(&recorded, e);
            }
            result
        }
        .instrument(span),
    )
}

impl<S> Service<ChatRequest> for AttemptSpan<S>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = futures_util::future::BoxFuture<'static, Result<ChatResponse, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let span = attempt_span();
        let call = span.in_scope(|| self.inner.call(req));
        in_attempt(span, call)
    }
}

/// A streamed attempt lasts to its stream's headers (a retry happens only before the
/// first event).
impl<S> Service<Streaming> for AttemptSpan<S>
where
    S: Service<Streaming, Response = ChatStream>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = ChatStream;
    type Error = BoxError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let span = attempt_span();
        let call = span.in_scope(|| self.inner.call(req));
        in_attempt(span, call)
    }
}
