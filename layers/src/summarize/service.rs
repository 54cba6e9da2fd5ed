//! The [`Summarize`] service: fold, then call the inner model.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Service, ServiceExt};

use super::bound::{archive_overflow, fit_block, model_budget};
use super::config::SummarizeConfig;
use super::fold::{FoldWork, Step, plan};
use super::layer::{SummarizeLayer, SummarizeState};
use super::prompt::summary_request;
use super::run::{Summarized, ask, call, fold_block, span_text};
use crate::BoxError;
use crate::artifact::artifact_id;
use crate::artifact::{Artifact, ArtifactStore};
use crate::executor::{Executor, choose, compaction};
use crate::future::ResponseFuture;
use crate::future::{streamed, take_ready};
use crate::model::PreparationReport;
use crate::model::SummaryBlock;
use crate::model::{ChatRequest, ChatResponse};
use crate::policy::PolicyError;
use crate::stream::{ChatStream, StreamFuture, Streaming};
use tracing::Instrument;

/// The service of [`SummarizeLayer`].
#[derive(Clone)]
pub struct Summarize<S> {
    inner: S,
    layer: SummarizeLayer,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Summarize<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Summarize")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S> Summarize<S> {
    /// Wraps `inner` (which is also the summarizer).
    pub fn new(inner: S, layer: SummarizeLayer) -> Self {
        Self { inner, layer }
    }

    /// A [`SummarizeLayer`] for `config` (see [`SummarizeLayer::new`]).
    pub fn layer(config: SummarizeConfig) -> Result<SummarizeLayer, PolicyError> {
        SummarizeLayer::new(config)
    }

    inner_accessors!(inner);
}

impl<S> Summarize<S>
where
    S: Service<ChatRequest, Response = ChatResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    /// Folds `request` now, whatever its size (the explicit `compact`), and returns
    /// the request as it would be sent, with the report; the inner model is called only
    /// to summarize. Nothing is folded when no fold point leaves `keep_last` messages.
    pub async fn compact(
        &self,
        request: ChatRequest,
    ) -> Result<(ChatRequest, PreparationReport), BoxError> {
        let shared = &self.layer.shared;
        match plan(request, &shared.config, &shared.cache, true)? {
            Step::Send(req, report) => Ok((req, report)),
            Step::Fold(work) => fold(self.inner.clone(), shared, work)
                .await
                .map(|(r, p, _)| (r, p)),
        }
    }
}

impl<S> Service<ChatRequest> for Summarize<S>
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
        let mut req = crate::model::infer_session(req);
        let shared = &self.layer.shared;
        if let Some(report) = not_local(shared, &mut req) {
            return ResponseFuture::direct(self.inner.call(req), report);
        }
        let work = match plan(req, &shared.config, &shared.cache, false) {
            Ok(Step::Send(req, report)) => {
                return ResponseFuture::direct(self.inner.call(req), report);
            }
            Ok(Step::Fold(work)) => work,
            Err(e) => return ResponseFuture::failed(e),
        };
        let inner = take_ready(&mut self.inner);
        let shared = shared.clone();
        ResponseFuture::boxed(Box::pin(async move {
            let (req, report, mut inner) = fold(inner, &shared, work).await?;
            let mut response = call(&mut inner, req).await?;
            let mut ours = report;
            ours.absorb_inner(&response.report);
            response.report = ours;
            Ok(response)
        }))
    }
}

/// A streamed call: folded the same way (the summary itself asked for with a plain
/// call), then the request streamed.
impl<S> Service<Streaming> for Summarize<S>
where
    S: Service<ChatRequest, Response = ChatResponse>
        + Service<Streaming, Response = ChatStream>
        + Clone
        + Send
        + 'static,
    <S as Service<ChatRequest>>::Future: Send + 'static,
    <S as Service<ChatRequest>>::Error: Into<BoxError>,
    <S as Service<Streaming>>::Future: Send + 'static,
    <S as Service<Streaming>>::Error: Into<BoxError>,
{
    type Response = ChatStream;
    type Error = BoxError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<Streaming>::poll_ready(&mut self.inner, cx).map_err(Into::into)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let mut req = crate::model::infer_session(req.0);
        let shared = &self.layer.shared;
        if let Some(report) = not_local(shared, &mut req) {
            let call = Service::<Streaming>::call(&mut self.inner, Streaming(req));
            return streamed(call, report, None);
        }
        let work = match plan(req, &shared.config, &shared.cache, false) {
            Ok(Step::Send(req, report)) => {
                let call = Service::<Streaming>::call(&mut self.inner, Streaming(req));
                return streamed(call, report, None);
            }
            Ok(Step::Fold(work)) => work,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let inner = take_ready(&mut self.inner);
        let shared = shared.clone();
        Box::pin(async move {
            let (req, report, mut inner) = fold(inner, &shared, work).await?;
            // Readiness for the summary call was spent: ready again, to stream.
            ServiceExt::<Streaming>::ready(&mut inner)
                .await
                .map_err(Into::into)?;
            let call = Service::<Streaming>::call(&mut inner, Streaming(req));
            streamed(call, report, None).await
        })
    }
}

/// The report of a request the stack does not fold, with the fold handed to the
/// provider when the executor is `Delegate` (its compaction edit, see
/// [`compaction`](crate::executor::compaction)); `None` when the stack folds.
fn not_local(shared: &SummarizeState, req: &mut ChatRequest) -> Option<PreparationReport> {
    let config = &shared.config;
    let executor = choose(config.executor, req, &shared.catalog);
    match executor {
        Executor::Delegate => {
            compaction::delegate_compaction(
                req,
                config.threshold(),
                config.provider_instructions(),
            );
        }
        Executor::Off => {}
        _ => return None,
    }
    Some(PreparationReport {
        executor: Some(executor),
        ..PreparationReport::default()
    })
}

/// Summarizes the span of `work` with `inner`, stores it as an artifact, caches the new
/// block and composes the request. An empty summary folds nothing.
async fn fold<S>(
    mut inner: S,
    shared: &Arc<SummarizeState>,
    work: FoldWork,
) -> Result<(ChatRequest, PreparationReport, S), BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    let span = &work.req.messages[work.from..work.to];
    let previous = work.previous.as_deref();
    let request = summary_request(&work.req, previous, span, &shared.config);
    // A child of the call's span: the summary is a model call of its own.
    let summary_span = tracing::info_span!(
        target: "llm_context::gen_ai",
        "llm_context.summary",
        llm_context.folded_messages = crate::trace::int(work.to - work.from)
    );
    let (outcome, calls) = ask(&mut inner, request, model_budget(&shared.config))
        .instrument(summary_span)
        .await;
    let (req, mut report) = match &outcome {
        Summarized::Empty => {
            tracing::warn!(
                event = "summary_empty",
                scope = %work.req.scope.key(),
                session = %work.req.session,
                "the summarizer returned an empty summary; nothing was folded"
            );
            work.compose_previous()?
        }
        outcome => {
            if let Summarized::Failed(why) = outcome {
                tracing::warn!(
                    event = "summary_fallback",
                    scope = %work.req.scope.key(),
                    session = %work.req.session,
                    reason = %why,
                    "summary failed; folding a plain-text fallback"
                );
            }
            let artifact = store_span(shared.store.as_ref(), &work.req, span, &shared.config).await;
            match bounded_block(shared, &work.req, previous, span, outcome, artifact).await {
                Some(block) => {
                    let block = Arc::new(block);
                    shared.cache.put(work.key, block.clone());
                    work.compose_folded(&block)?
                }
                // Not cached: a later request may fold a span that fits.
                None => work.compose_previous()?,
            }
        }
    };
    report.summary_calls += calls;
    Ok((req, report, inner))
}

/// The block after folding `span`, with its artifact list archived past
/// `max_artifacts` and within the summary budget; `None` when it cannot fit (logged),
/// and the fold is refused rather than leaving no room for the turns it keeps.
async fn bounded_block(
    shared: &SummarizeState,
    req: &ChatRequest,
    previous: Option<&SummaryBlock>,
    span: &[crate::model::Message],
    outcome: &Summarized,
    artifact: Option<String>,
) -> Option<SummaryBlock> {
    let config = &shared.config;
    let mut block = fold_block(previous, span, outcome, artifact, config)?;
    archive_overflow(
        shared.store.as_ref(),
        &req.scope,
        &req.session,
        &mut block,
        config,
    )
    .await;
    match fit_block(&mut block, config.summary_budget()) {
        Ok(()) => Some(block),
        Err(tokens) => {
            tracing::warn!(
                event = "summary_too_large",
                scope = %req.scope.key(),
                session = %req.session,
                tokens,
                budget = config.summary_budget(),
                "the summary block is over its budget even without facts and fallback; \
                 nothing was folded"
            );
            None
        }
    }
}

/// Stores the folded span; its id, or `None` when the store failed (logged).
pub(crate) async fn store_span(
    store: &dyn ArtifactStore,
    req: &ChatRequest,
    span: &[crate::model::Message],
    config: &SummarizeConfig,
) -> Option<String> {
    let text = span_text(span);
    let id = artifact_id(&req.scope, &req.session, &text);
    match store
        .put(
            &req.scope,
            &req.session,
            &id,
            Artifact::new(&text, config.artifact_max_chars),
        )
        .await
    {
        Ok(()) => Some(id),
        Err(e) => {
            tracing::warn!(
                event = "summary_span_not_stored",
                error = %e,
                scope = %req.scope.key(),
                session = %req.session,
                "could not store a folded span; the summary keeps its facts only"
            );
            None
        }
    }
}
