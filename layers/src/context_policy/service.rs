use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Service, ServiceExt};

use crate::BoxError;
use crate::calibration::Calibration;
use crate::catalog::Catalog;
use crate::cut::CutStore;
use crate::fit::{self, Budget, Scratch, Stages};
use crate::future::Learn;
use crate::memo::{DefaultPredicate, Memo, MemoPredicate, ResponseFuture as MemoFuture};
use crate::message::Message;
use crate::offload::prepare::{Prepared, offload_request, store_all};
use crate::offload::{ArtifactReader, READ_ARTIFACT_TOOL, ResponseFuture};
use crate::policy::ContextPolicy;
use crate::prefix::PrefixLayer;
use crate::request::{ChatRequest, ChatResponse};
use crate::store::ArtifactStore;

#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) policy: ContextPolicy,
    /// Injects the configured prefix (before planning) and marks breakpoints (after).
    pub(crate) prefix: PrefixLayer,
    /// Context windows (when the policy sets no ceiling) and cache minimums.
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) store: Arc<dyn ArtifactStore>,
    pub(crate) reader: ArtifactReader,
    pub(crate) auto_resolve: Option<usize>,
    /// Sessions' previous cuts, for cache-aware pruning.
    pub(crate) cuts: Arc<dyn CutStore>,
    /// Learns the provider's counting from responses and tightens the budget by it.
    pub(crate) calibration: Option<Calibration>,
}

/// The service of [`ContextPolicyLayer`](crate::ContextPolicyLayer): the preparation
/// steps around the memo step around `S`.
#[derive(Clone)]
pub struct ContextPolicyService<S, P = DefaultPredicate> {
    inner: Memo<S, P>,
    shared: Arc<Shared>,
    scratch: Scratch,
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
    pub(crate) fn new(inner: Memo<S, P>, shared: Arc<Shared>) -> Self {
        Self {
            inner,
            shared,
            scratch: Scratch::default(),
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.inner.get_ref()
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.inner.get_mut()
    }

    /// The inner service, consuming the wrapper.
    pub fn into_inner(self) -> S {
        self.inner.into_inner()
    }
}

/// The whole synchronous part of preparation: inject the prefix (so the plan counts
/// it), fit, offload, then mark the cache breakpoints on what will be sent.
fn prepare(
    mut req: ChatRequest,
    shared: &Shared,
    scratch: &mut Scratch,
) -> Result<Prepared, BoxError> {
    shared.prefix.inject(&mut req);
    let window = shared.catalog.context_window(&req.model);
    if let Some(window) = window {
        shared.policy.validate_window(window)?;
    }
    // Cache-aware pruning only: otherwise no cut is looked up or kept.
    let cuts = shared.policy.low_water_tokens.map(|_| shared.cuts.as_ref());
    let previous = cuts.and_then(|c| c.get(&req.scope, &req.session));
    let budget = Budget {
        model_window: window,
        previous_cut: previous,
        factor: shared
            .calibration
            .as_ref()
            .map_or(1.0, |c| c.factor(&req.model)),
    };
    let fitted = fit::prepare(req, &shared.policy, Stages::ALL, budget, scratch)?;
    if let (Some(store), Some(cut)) = (cuts, fitted.cut)
        && Some(cut) != previous
    {
        store.put(&fitted.req.scope, &fitted.req.session, cut);
    }
    let mut prepared = offload_request(
        fitted.req,
        fitted.report,
        fitted.displaced,
        &shared.policy,
        fitted.reserved_tool,
        Some(fitted.refers),
    )?;
    shared.prefix.mark(&mut prepared.req);
    Ok(prepared)
}

/// Whether the reply asks only for artifact pages.
fn only_artifact_reads(m: &Message) -> bool {
    m.has_tool_calls() && m.tool_calls.iter().all(|c| c.name == READ_ARTIFACT_TOOL)
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
        let prepared = match prepare(req, &self.shared, &mut self.scratch) {
            Ok(p) => p,
            Err(e) => return ResponseFuture::failed(e),
        };
        if prepared.to_store.is_empty() && self.shared.auto_resolve.is_none() {
            let learn = self.shared.calibration.as_ref().map(|c| Learn {
                calibration: c.clone(),
                model: prepared.req.model.clone(),
            });
            let future = self.inner.call(prepared.req);
            return ResponseFuture::direct_learning(future, prepared.report, learn);
        }
        // The ready service goes into the future; a clone stays for the next call.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::boxed(Box::pin(run(inner, self.shared.clone(), prepared)))
    }
}

async fn run<S>(
    mut inner: S,
    shared: Arc<Shared>,
    mut prepared: Prepared,
) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    let before_tokens = prepared.report.before_tokens;
    // Rounds after the first prepare in this future, away from the service's scratch.
    let mut scratch = Scratch::default();
    let mut resolved = Vec::new();
    let mut round = 0;
    loop {
        let to_store = std::mem::take(&mut prepared.to_store);
        store_all(shared.store.as_ref(), &prepared.req, to_store).await;
        let resolving = shared.auto_resolve.is_some_and(|max| round < max);
        let sent = resolving.then(|| prepared.req.clone());
        if round > 0 {
            inner.ready().await.map_err(Into::into)?;
        }
        let model = shared
            .calibration
            .is_some()
            .then(|| prepared.req.model.clone());
        let mut response = inner.call(prepared.req).await.map_err(Into::into)?;
        let mut report = prepared.report;
        report.absorb_inner(&response.report);
        // Every round is a prompt the provider counted against this round's estimate.
        if let (Some(calibration), Some(model)) = (&shared.calibration, model) {
            calibration.observe_parts(&model, &report, &response.usage);
        }
        match sent {
            Some(mut req) if only_artifact_reads(&response.message) => {
                let calls = response.message.tool_calls.clone();
                req.messages.push(response.message.clone());
                resolved.push(response.message);
                for call in &calls {
                    let answer = shared.reader.answer(&req.scope, &req.session, call).await;
                    req.messages.push(answer.clone());
                    resolved.push(answer);
                }
                // The pages may not fit with the rest: prepare again.
                prepared = prepare(req, &shared, &mut scratch)?;
                round += 1;
            }
            _ => {
                report.before_tokens = before_tokens;
                report.resolved_messages = resolved;
                response.report = report;
                return Ok(response);
            }
        }
    }
}
