//! The response future of the preparing layers (prune, clear, offload, the composite).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use crate::BoxError;
use crate::calibration::Calibration;
use crate::model::ChatResponse;
use crate::model::PreparationReport;
use crate::stream::{ChatStream, StreamFuture};

/// The ready service out of `slot`, for a future that will call it; a clone takes its
/// place for the next `poll_ready`. tower's idiom for a service whose future owns its
/// inner service: the clone is not ready, the one taken is.
pub(crate) fn take_ready<S: Clone>(slot: &mut S) -> S {
    let clone = slot.clone();
    std::mem::replace(slot, clone)
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<ChatResponse, BoxError>> + Send>>;

/// A calibration to teach the response of a request for `model`.
#[derive(Debug)]
pub(crate) struct Learn {
    pub(crate) calibration: Calibration,
    pub(crate) model: String,
}

pin_project! {
    /// The response future of the preparing layers: the inner call straight away with the
    /// report attached to its response (no allocation), a boxed sequence of store writes
    /// and inner calls, or an error (such as `ContextLimitError`) without any inner call.
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Direct {
            #[pin] future: F,
            report: Option<PreparationReport>,
            learn: Option<Learn>,
        },
        Boxed { future: BoxFuture },
        Failed { error: Option<BoxError> },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn direct(future: F, report: PreparationReport) -> Self {
        Self::direct_learning(future, report, None)
    }

    /// [`direct`](Self::direct), with the response taught to a calibration.
    pub(crate) fn direct_learning(
        future: F,
        report: PreparationReport,
        learn: Option<Learn>,
    ) -> Self {
        Self {
            kind: Kind::Direct {
                future,
                report: Some(report),
                learn,
            },
        }
    }

    pub(crate) fn boxed(future: BoxFuture) -> Self {
        Self {
            kind: Kind::Boxed { future },
        }
    }

    pub(crate) fn failed(error: BoxError) -> Self {
        Self {
            kind: Kind::Failed { error: Some(error) },
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

/// What a preparing layer does to the response of the request it prepared: its report,
/// with what the inner layers did absorbed, and the calibration taught.
fn attach(response: &mut ChatResponse, mut ours: PreparationReport, learn: Option<Learn>) {
    ours.absorb_inner(&response.report);
    response.report = ours;
    if let Some(learn) = learn {
        learn.calibration.observe(&learn.model, response);
    }
}

/// A preparing layer's streamed call: `call`'s stream, its final response given the
/// layer's report (as [`ResponseFuture`] does for a plain call).
pub(crate) fn streamed<F, E>(
    call: F,
    report: PreparationReport,
    learn: Option<Learn>,
) -> StreamFuture
where
    F: Future<Output = Result<ChatStream, E>> + Send + 'static,
    E: Into<BoxError>,
{
    Box::pin(async move {
        let stream = call.await.map_err(Into::into)?;
        Ok(stream.map_response(move |response| attach(response, report, learn)))
    })
}

impl<F, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<ChatResponse, E>>,
    E: Into<BoxError>,
{
    type Output = Result<ChatResponse, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Direct {
                future,
                report,
                learn,
            } => {
                let mut response = ready!(future.poll(cx)).map_err(Into::into)?;
                attach(
                    &mut response,
                    report.take().unwrap_or_default(),
                    learn.take(),
                );
                Poll::Ready(Ok(response))
            }
            KindProj::Boxed { future } => future.as_mut().poll(cx),
            KindProj::Failed { error } => Poll::Ready(Err(error
                .take()
                .unwrap_or_else(|| "ResponseFuture polled after completion".into()))),
        }
    }
}
