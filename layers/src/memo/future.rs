//! The response future of [`Memo`](super::Memo).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::BoxError;
use crate::model::ChatResponse;

pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = Result<ChatResponse, BoxError>> + Send>>;

pin_project! {
    /// The response future of [`Memo`](super::Memo): the inner call unchanged for a
    /// request that may not be memoized, or the memo's lookup, single flight and store.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Bypass { #[pin] future: F },
        Memo { future: BoxFuture },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn bypass(future: F) -> Self {
        Self {
            kind: Kind::Bypass { future },
        }
    }

    pub(crate) fn memo(future: BoxFuture) -> Self {
        Self {
            kind: Kind::Memo { future },
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ChatResponse, E>>,
    E: Into<BoxError>,
{
    type Output = Result<ChatResponse, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Bypass { future } => future.poll(cx).map_err(Into::into),
            KindProj::Memo { future } => future.as_mut().poll(cx),
        }
    }
}
