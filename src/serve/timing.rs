//! How much of a request's time was the upstream's: a wrapper around the provider client
//! adds each call's time to a tally the handler scoped to its request (a task-local), so
//! the metrics can split preparation from waiting on the provider.
//!
//! A task-local rather than a field of the request: the calls happen inside the context
//! layer (an artifact read is a second call, a memo hit none), which knows nothing of the
//! server, and all of them run in the handler's task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use crate::BoxError;
use crate::stream::{ChatStream, Streaming};
use crate::{ChatRequest, ChatResponse};

tokio::task_local! {
    static TALLY: Arc<Tally>;
}

/// The upstream calls of one request and their time, to the answer's headers.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    calls: AtomicU64,
    nanos: AtomicU64,
}

impl Tally {
    /// The time spent in upstream calls, or `None` when none was made (a memo hit, a
    /// request refused before dispatch).
    pub(crate) fn upstream(&self) -> Option<Duration> {
        (self.calls.load(Ordering::Relaxed) > 0)
            .then(|| Duration::from_nanos(self.nanos.load(Ordering::Relaxed)))
    }

    fn add(&self, took: Duration) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// Runs `future` with `tally` counting the upstream calls made inside it.
pub(crate) async fn scoped<F: Future>(tally: Arc<Tally>, future: F) -> F::Output {
    TALLY.scope(tally, future).await
}

/// The provider client, timed: outside the retry and the timeout, so a retried call
/// counts all its attempts and their back-off.
#[derive(Clone, Debug)]
pub(crate) struct Timed<S> {
    inner: S,
}

/// Wraps a service in [`Timed`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TimedLayer;

impl<S> tower::Layer<S> for TimedLayer {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed { inner }
    }
}

fn timed<T, F>(future: F) -> BoxFuture<'static, Result<T, BoxError>>
where
    F: Future<Output = Result<T, BoxError>> + Send + 'static,
{
    // Read when the call is made: a future polled outside a handler (a library user's
    // own task) has no tally and is not timed.
    let tally = TALLY.try_with(Arc::clone).ok();
    Box::pin(async move {
        let started = Instant::now();
        let out = future.await;
        if let Some(tally) = tally {
            tally.add(started.elapsed());
        }
        out
    })
}

impl<S> tower::Service<ChatRequest> for Timed<S>
where
    S: tower::Service<ChatRequest, Response = ChatResponse, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<ChatResponse, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<ChatRequest>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        timed(self.inner.call(req))
    }
}

impl<S> tower::Service<Streaming> for Timed<S>
where
    S: tower::Service<Streaming, Response = ChatStream, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = ChatStream;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<ChatStream, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<Streaming>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        timed(self.inner.call(req))
    }
}
