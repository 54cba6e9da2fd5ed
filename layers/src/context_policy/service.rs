use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use super::steps::{Composite, Preparation, prepare_unverified};
use crate::BoxError;
use crate::artifact::Untrusted;
use crate::fit::Scratch;
use crate::future::ResponseFuture;
use crate::future::{Learn, take_ready};
use crate::memo::{DefaultPredicate, Memo, MemoPredicate, ResponseFuture as MemoFuture};
use crate::model::infer_session;
use crate::model::{ChatRequest, ChatResponse};

/// The service of [`ContextPolicyLayer`](crate::ContextPolicyLayer): the preparation
/// steps around the memo step around `S`.
#[derive(Clone)]
pub struct ContextPolicyService<S, P = DefaultPredicate> {
    // Read by the streamed call's impl too (`super::stream`).
    pub(super) inner: Memo<S, P>,
    pub(super) shared: Arc<Composite>,
    pub(super) scratch: Scratch,
}

impl<S: std::fmt::Debug, P> std::fmt::Debug for ContextPolicyService<S, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextPolicyService")
            .field("inner", &self.inner)
            .field("policy", &self.shared.policy)
            .finish_non_exhaustive()
    }
}

impl<S, P> ContextPolicyService<S, P> {
    pub(crate) fn new(inner: Memo<S, P>, shared: Arc<Composite>) -> Self {
        Self {
            inner,
            shared,
            scratch: Scratch::default(),
        }
    }

    inner_accessors!(inner.inner);
}

impl<S, P> Service<ChatRequest> for ContextPolicyService<S, P>
where
    S: Service<ChatRequest, Response = ChatResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    P: MemoPredicate + Send + Sync + 'static,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = ResponseFuture<MemoFuture<S::Future>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let req = infer_session(req);
        let prepared = match prepare_unverified(req, &self.shared, &mut self.scratch) {
            Ok(Preparation::Prepared(p)) => p,
            Ok(Preparation::Claims(req)) => {
                // Previews or stubs in the request: the store says which are the stack's
                // own before anything is planned, so this request takes the asynchronous
                // path.
                let inner = take_ready(&mut self.inner);
                return ResponseFuture::boxed(Box::pin(super::resolve::verify_and_run(
                    inner,
                    self.shared.clone(),
                    *req,
                )));
            }
            Err(e) => return ResponseFuture::failed(e),
        };
        let untrusted = Untrusted::default();
        if !prepared.needs_store() && self.shared.auto_resolve.is_none() {
            let learn = self.shared.calibration.as_ref().map(|c| Learn {
                calibration: c.clone(),
                model: prepared.req.model.clone(),
            });
            let future = self.inner.call(prepared.req);
            return ResponseFuture::direct_learning(future, prepared.report, learn);
        }
        let inner = take_ready(&mut self.inner);
        ResponseFuture::boxed(Box::pin(super::resolve::run(
            inner,
            self.shared.clone(),
            prepared,
            untrusted,
        )))
    }
}
