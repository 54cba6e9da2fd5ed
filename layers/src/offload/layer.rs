use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::{Prepared, PreviewCache, commit, offload_request};
use crate::BoxError;
use crate::artifact::{ArtifactStore, Untrusted, has_claims, read_artifact_tool_tokens, verify};
use crate::fit::Applied;
use crate::future::ResponseFuture;
use crate::future::streamed;
use crate::future::take_ready;
use crate::model::{ChatRequest, ChatResponse, PreparationReport};
use crate::policy::{ContextPolicy, PolicyError};
use crate::stream::{ChatStream, StreamFuture, Streaming};

/// Offloads oversized tool results into an artifact store. See the
/// [module docs](crate::offload).
#[derive(Clone)]
pub struct OffloadLayer {
    policy: ContextPolicy,
    store: Arc<dyn ArtifactStore>,
    /// What each session offloaded before (shared by every service of the layer).
    memory: PreviewCache,
}

impl std::fmt::Debug for OffloadLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffloadLayer")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl OffloadLayer {
    /// Offloads results longer than `policy.tool_result_max_chars` into `store`; fails when
    /// the policy does not validate.
    pub fn new(policy: ContextPolicy, store: Arc<dyn ArtifactStore>) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(Self {
            policy,
            store,
            memory: PreviewCache::default(),
        })
    }
}

impl<S> Layer<S> for OffloadLayer {
    type Service = Offload<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Offload {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`OffloadLayer`].
#[derive(Clone)]
pub struct Offload<S> {
    inner: S,
    layer: OffloadLayer,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Offload<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offload")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S> Offload<S> {
    inner_accessors!(inner);
}

impl<S> Service<ChatRequest> for Offload<S>
where
    S: Service<ChatRequest, Response = ChatResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        let layer = self.layer.clone();
        if !has_claims(&req) {
            let prepared = match offload(req, &layer, &Untrusted::default()) {
                Ok(p) => p,
                Err(e) => return ResponseFuture::failed(e),
            };
            if !prepared.needs_store() {
                return ResponseFuture::direct(self.inner.call(prepared.req), prepared.report);
            }
            return self.stored_then_called(async move { Ok(prepared) });
        }
        // Previews or stubs in the request: the store says which are the stack's own.
        self.stored_then_called(async move {
            let untrusted = verify(layer.store.as_ref(), &req).await;
            offload(req, &layer, &untrusted)
        })
    }
}

impl<S> Offload<S>
where
    S: Service<ChatRequest, Response = ChatResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    /// The asynchronous path: prepare, store what was displaced, then call the inner
    /// service (the ready one; a clone stays for the next call).
    fn stored_then_called(
        &mut self,
        prepare: impl Future<Output = Result<Prepared, BoxError>> + Send + 'static,
    ) -> ResponseFuture<S::Future> {
        let mut inner = take_ready(&mut self.inner);
        let layer = self.layer.clone();
        ResponseFuture::boxed(Box::pin(async move {
            let prepared = stored(&layer, prepare.await?).await;
            let mut response = inner.call(prepared.req).await.map_err(Into::into)?;
            let mut report = prepared.report;
            report.absorb_inner(&response.report);
            response.report = report;
            Ok(response)
        }))
    }
}

/// A streamed call: offloaded and stored the same way, the final response given the
/// layer's report.
impl<S> Service<Streaming> for Offload<S>
where
    S: Service<Streaming, Response = ChatStream> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = ChatStream;
    type Error = BoxError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let mut inner = take_ready(&mut self.inner);
        let layer = self.layer.clone();
        Box::pin(async move {
            let req = req.0;
            let untrusted = if has_claims(&req) {
                verify(layer.store.as_ref(), &req).await
            } else {
                Untrusted::default()
            };
            let prepared = stored(&layer, offload(req, &layer, &untrusted)?).await;
            streamed(inner.call(Streaming(prepared.req)), prepared.report, None).await
        })
    }
}

/// `prepared`, with what it displaced stored.
async fn stored(layer: &OffloadLayer, mut prepared: Prepared) -> Prepared {
    commit(
        layer.store.as_ref(),
        Some(&layer.memory),
        &layer.policy,
        &mut prepared,
    )
    .await;
    prepared
}

/// Offloads `req` on its own: the request measured once, only the rewritten results and
/// an added read tool change its estimate.
fn offload(
    req: ChatRequest,
    layer: &OffloadLayer,
    untrusted: &Untrusted,
) -> Result<Prepared, BoxError> {
    let before = req.estimate_tokens();
    let tools = req.tools.len();
    let report = PreparationReport {
        before_tokens: before,
        ..PreparationReport::default()
    };
    let memory = layer.memory.session(&req.scope, &req.session);
    let mut prepared = offload_request(
        req,
        report,
        Applied::default(),
        &layer.policy,
        untrusted,
        false,
        false,
        memory.as_deref(),
    )?;
    let (replaced, previews) = prepared.rewritten_tokens;
    let added_tool = if prepared.req.tools.len() > tools {
        read_artifact_tool_tokens()
    } else {
        0
    };
    prepared.report.after_tokens = before - replaced + previews + added_tool;
    Ok(prepared)
}
