//! [`ChatStream`], the response of a streamed call, and [`Streaming`], its request.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::accumulate::deltas;
use super::error::StreamError;
use super::event::StreamEvent;
use crate::BoxError;
use crate::model::{ChatRequest, ChatResponse, PreparationReport};

/// A request to stream the answer: every service of this crate that takes a `R`
/// (a [`ChatRequest`], by default) also takes a `Streaming<R>`, and answers it with a
/// [`ChatStream`] instead of a [`ChatResponse`]. The same stack serves both.
#[derive(Clone, Debug, PartialEq)]
pub struct Streaming<R = ChatRequest>(pub R);

impl<R> Streaming<R> {
    /// The request inside.
    pub fn into_inner(self) -> R {
        self.0
    }
}

impl From<ChatRequest> for Streaming {
    fn from(req: ChatRequest) -> Self {
        Streaming(req)
    }
}

/// The response future of a streamed call through this crate's layers: the stream, once
/// the call has begun.
pub type StreamFuture = Pin<Box<dyn Future<Output = Result<ChatStream, BoxError>> + Send>>;

type Inner = Pin<Box<dyn Stream<Item = Result<StreamEvent, BoxError>> + Send>>;

/// The answer to a [`Streaming`] request: [`StreamEvent`]s as the model writes, ending
/// with [`StreamEvent::Done`] and its complete [`ChatResponse`]. An `Err` item ends the
/// stream; so does `Done`. Dropping it cancels the call (the provider's connection is
/// closed) and nothing is memoized.
///
/// One allocation per stream (the box); events pass through the stack's layers without
/// another.
pub struct ChatStream {
    inner: Inner,
    /// What preparation did, when it is known before the first event (boxed: a stream
    /// without one costs a pointer).
    report: Option<Box<PreparationReport>>,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream").finish_non_exhaustive()
    }
}

impl ChatStream {
    /// A stream of `events`.
    pub fn new<S>(events: S) -> Self
    where
        S: Stream<Item = Result<StreamEvent, BoxError>> + Send + 'static,
    {
        Self {
            inner: Box::pin(events),
            report: None,
        }
    }

    /// The same stream, saying up front what preparation did: the report the final
    /// response will carry, as far as it is known before the first event (what was
    /// pruned, cleared, offloaded; whether it is a memo replay). A proxy writes it into
    /// its response headers, which go out before the body.
    #[must_use]
    pub fn with_report(mut self, report: PreparationReport) -> Self {
        self.report = Some(Box::new(report));
        self
    }

    /// The report given by [`with_report`](Self::with_report), if any. Every stream the
    /// context policy returns has one; the final response's report is the authority
    /// (artifact reads answered inside add to it).
    pub fn report(&self) -> Option<&PreparationReport> {
        self.report.as_deref()
    }

    /// `response` streamed again: its provider's opening fields ([`StreamEvent::Started`],
    /// when it has any), its reasoning, text and tool calls as deltas, its usage, then
    /// `Done` with the response itself (what the memo replays, what the mock model
    /// streams).
    pub fn replay(response: ChatResponse) -> Self {
        let mut events = Vec::new();
        // The provider's opening fields (a memo entry keeps them): a relay opens with its id.
        let opening: BTreeMap<String, Value> = response
            .provider_fields
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "content" | "choice" | "message"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !opening.is_empty() {
            events.push(StreamEvent::Started(Box::new(opening)));
        }
        events.extend(deltas(&response, REPLAY_CHUNK));
        let report = response.report.clone();
        events.push(StreamEvent::Done(Box::new(response)));
        Self::new(futures_util::stream::iter(events.into_iter().map(Ok))).with_report(report)
    }

    /// A stream that fails at once with `error`.
    pub fn failed(error: impl Into<BoxError>) -> Self {
        let error: BoxError = error.into();
        Self::new(futures_util::stream::once(std::future::ready(Err(error))))
    }

    /// Reads the stream to its end and returns the complete response: what a
    /// non-streamed call would have returned. A stream that ends without `Done` is
    /// [`StreamError::Incomplete`].
    pub async fn response(mut self) -> Result<ChatResponse, BoxError> {
        while let Some(event) = self.next().await {
            if let StreamEvent::Done(response) = event? {
                return Ok(*response);
            }
        }
        Err(StreamError::Incomplete.into())
    }

    /// The same stream, with `f` applied to the final response before it is yielded.
    #[must_use]
    pub fn map_response(self, f: impl FnOnce(&mut ChatResponse) + Send + 'static) -> Self {
        self.then_response(move |mut response| {
            f(&mut response);
            std::future::ready(Ok(response))
        })
    }

    /// The same stream, with `f` awaited on the final response before it is yielded (a
    /// store write, say). `f`'s error ends the stream instead of `Done`. An error item
    /// ends the stream; a stream that ends without `Done` yields
    /// [`StreamError::Incomplete`] and `f` never runs.
    #[must_use]
    pub fn then_response<F, Fut>(self, f: F) -> Self
    where
        F: FnOnce(ChatResponse) -> Fut + Send + 'static,
        Fut: Future<Output = Result<ChatResponse, BoxError>> + Send + 'static,
    {
        let report = self.report.clone();
        let mut out = Self::new(on_end(
            self,
            (),
            move |(), response| f(response),
            |(), _| std::future::ready(()),
        ));
        out.report = report;
        out
    }
}

/// About how many bytes of text each replayed delta carries.
const REPLAY_CHUNK: usize = 64;

impl Stream for ChatStream {
    type Item = Result<StreamEvent, BoxError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

/// `stream` with `done` awaited on its final response, and `failed` awaited when it ends
/// any other way (an error item, or no `Done`) before the error is yielded. Whichever
/// runs is given `state`; when the stream is dropped before its end, neither runs and
/// `state` is dropped.
pub(crate) fn on_end<T, F, Fut, G, GFut>(
    stream: ChatStream,
    state: T,
    done: F,
    failed: G,
) -> impl Stream<Item = Result<StreamEvent, BoxError>> + Send + 'static
where
    T: Send + 'static,
    F: FnOnce(T, ChatResponse) -> Fut + Send + 'static,
    Fut: Future<Output = Result<ChatResponse, BoxError>> + Send + 'static,
    G: FnOnce(T, &BoxError) -> GFut + Send + 'static,
    GFut: Future<Output = ()> + Send + 'static,
{
    let start = Some((stream, state, done, failed));
    futures_util::stream::unfold(start, |streaming| async move {
        let (mut stream, state, done, failed) = streaming?;
        let error = match stream.next().await {
            Some(Ok(StreamEvent::Done(response))) => {
                let item = done(state, *response).await;
                return Some((item.map(|r| StreamEvent::Done(Box::new(r))), None));
            }
            Some(Ok(event)) => return Some((Ok(event), Some((stream, state, done, failed)))),
            Some(Err(error)) => error,
            None => StreamError::Incomplete.into(),
        };
        failed(state, &error).await;
        Some((Err(error), None))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Message, Usage};

    #[tokio::test]
    async fn a_replay_reads_back_to_the_response() {
        let response = ChatResponse::new(Message::assistant("x".repeat(300)))
            .with_usage(Usage::new(1, 2, 3, 4));
        let events: Vec<_> = ChatStream::replay(response.clone()).collect().await;
        assert!(events.len() > 3, "text is replayed in pieces");
        assert_eq!(
            ChatStream::replay(response.clone())
                .response()
                .await
                .unwrap(),
            response
        );
    }

    #[test]
    fn the_report_is_known_up_front_and_kept_by_then_response() {
        let mut response = ChatResponse::new(Message::assistant("x"));
        response.report = PreparationReport::memo_hit();
        let replay = ChatStream::replay(response);
        assert!(replay.report().unwrap().memo_hit);
        let mapped = replay.map_response(|_| {});
        assert!(mapped.report().unwrap().memo_hit);
        assert!(
            ChatStream::failed(StreamError::Incomplete)
                .report()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_stream_without_done_is_incomplete() {
        let s = ChatStream::new(futures_util::stream::iter([Ok(StreamEvent::Text(
            "half".into(),
        ))]));
        let err = s.response().await.unwrap_err();
        assert!(err.downcast_ref::<StreamError>().is_some(), "{err}");
    }

    #[tokio::test]
    async fn then_response_runs_once_on_done_and_not_on_failure() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let s = ChatStream::replay(ChatResponse::new(Message::assistant("hi"))).then_response(
            move |mut resp| {
                r.fetch_add(1, Ordering::SeqCst);
                resp.message = Message::assistant("changed");
                std::future::ready(Ok(resp))
            },
        );
        assert_eq!(s.response().await.unwrap().message.text(), "changed");
        assert_eq!(ran.load(Ordering::SeqCst), 1);

        let r = ran.clone();
        let s = ChatStream::failed(StreamError::Incomplete).then_response(move |resp| {
            r.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok(resp))
        });
        assert!(s.response().await.is_err());
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }
}
