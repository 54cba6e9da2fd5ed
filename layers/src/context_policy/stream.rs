//! The composite's streamed calls: the same preparation, then a stream whose final
//! response carries the report, and, with auto-resolve, artifact reads answered inside
//! the stream.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::StreamExt;
use tower::Service;

use super::resolve::only_artifact_reads;
use super::service::{ContextPolicyService, infer_session};
use super::steps::{Composite, prepare};
use crate::BoxError;
use crate::artifact::{Untrusted, has_claims, verify};
use crate::fit::Scratch;
use crate::memo::{MemoPredicate, StreamFuture};
use crate::model::{ChatRequest, ChatResponse, Message, PreparationReport};
use crate::offload::{Prepared, commit};
use crate::stream::{ChatStream, StreamError, StreamEvent, Streaming};

/// A streamed call through the whole policy: see [`stream`](crate::stream).
impl<S, P> Service<Streaming> for ContextPolicyService<S, P>
where
    S: Service<Streaming, Response = ChatStream> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    P: MemoPredicate + Send + Sync + 'static,
{
    type Response = ChatStream;
    type Error = BoxError;
    type Future = StreamFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<Streaming>::poll_ready(self.memo_mut(), cx)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let req = infer_session(req.0);
        let shared = self.shared().clone();
        if has_claims(&req) {
            let inner = self.take_ready();
            return Box::pin(async move {
                let untrusted = verify(shared.store.as_ref(), &req).await;
                let prepared = prepare(req, &shared, &mut Scratch::default(), &untrusted)?;
                run(inner, shared, prepared, untrusted).await
            });
        }
        let untrusted = Untrusted::default();
        let prepared = match prepare(req, &shared, self.scratch_mut(), &untrusted) {
            Ok(p) => p,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let inner = self.take_ready();
        Box::pin(run(inner, shared, prepared, untrusted))
    }
}

/// Stores what preparation displaced and starts the stream.
async fn run<S>(
    mut inner: S,
    shared: Arc<Composite>,
    mut prepared: Prepared,
    untrusted: Untrusted,
) -> Result<ChatStream, BoxError>
where
    S: Service<Streaming, Response = ChatStream> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
{
    commit(
        shared.store.as_ref(),
        Some(&shared.memory),
        &shared.policy,
        &mut prepared,
    )
    .await;
    let resolving = shared.auto_resolve.is_some_and(|max| max > 0);
    let sent = resolving.then(|| prepared.req.clone());
    let model = prepared.req.model.clone();
    let stream = inner
        .call(Streaming(prepared.req))
        .await
        .map_err(Into::into)?;
    let report = prepared.report;
    if !resolving {
        return Ok(stream.map_response(move |response| {
            let mut ours = report;
            ours.absorb_inner(&response.report);
            observe(&shared, &model, &ours, response);
            response.report = ours;
        }));
    }
    let rounds = Rounds {
        before_tokens: report.before_tokens,
        inner,
        shared,
        untrusted,
        scratch: Scratch::default(),
        current: stream,
        sent,
        model,
        report,
        resolved: Vec::new(),
        round: 0,
        held: Vec::new(),
        pending: VecDeque::new(),
        ended: false,
    };
    Ok(ChatStream::new(futures_util::stream::unfold(
        rounds,
        Rounds::step,
    )))
}

/// Every round is a prompt the provider counted against this round's estimate.
fn observe(shared: &Composite, model: &str, report: &PreparationReport, response: &ChatResponse) {
    if let Some(calibration) = &shared.calibration {
        calibration.observe_parts(model, report, &response.usage);
    }
}

/// The rounds of one streamed call with auto-resolve.
struct Rounds<S> {
    inner: S,
    shared: Arc<Composite>,
    untrusted: Untrusted,
    scratch: Scratch,
    current: ChatStream,
    /// The request this round was sent, while its artifact reads may still be answered.
    sent: Option<ChatRequest>,
    model: String,
    report: PreparationReport,
    before_tokens: usize,
    resolved: Vec<Message>,
    round: usize,
    /// This round's tool-call deltas, held until the round shows what they are.
    held: Vec<StreamEvent>,
    pending: VecDeque<Result<StreamEvent, BoxError>>,
    ended: bool,
}

impl<S> Rounds<S>
where
    S: Service<Streaming, Response = ChatStream> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
{
    async fn step(mut self) -> Option<(Result<StreamEvent, BoxError>, Self)> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some((item, self));
            }
            if self.ended {
                return None;
            }
            match self.current.next().await {
                Some(Ok(event @ StreamEvent::ToolCall(_))) if self.sent.is_some() => {
                    self.held.push(event);
                }
                Some(Ok(StreamEvent::Done(response))) => match self.round_done(*response).await {
                    Ok(Some(done)) => {
                        self.pending.extend(self.held.drain(..).map(Ok));
                        self.pending.push_back(Ok(done));
                        self.ended = true;
                    }
                    // The next round streams on.
                    Ok(None) => self.held.clear(),
                    Err(error) => {
                        self.pending.push_back(Err(error));
                        self.ended = true;
                    }
                },
                Some(Ok(event)) => return Some((Ok(event), self)),
                Some(Err(error)) => {
                    self.ended = true;
                    return Some((Err(error), self));
                }
                None => {
                    self.ended = true;
                    return Some((Err(StreamError::Incomplete.into()), self));
                }
            }
        }
    }

    /// Ends a round: the final `Done`, or `None` when the round only read artifacts and
    /// the next one has started.
    async fn round_done(
        &mut self,
        mut response: ChatResponse,
    ) -> Result<Option<StreamEvent>, BoxError> {
        let mut report = std::mem::take(&mut self.report);
        report.absorb_inner(&response.report);
        observe(&self.shared, &self.model, &report, &response);
        let mut req = match self.sent.take() {
            Some(req) if only_artifact_reads(&response.message) => req,
            _ => {
                report.before_tokens = self.before_tokens;
                report.resolved_messages = std::mem::take(&mut self.resolved);
                response.report = report;
                return Ok(Some(StreamEvent::Done(Box::new(response))));
            }
        };
        let calls = response.message.tool_calls.clone();
        req.messages.push(response.message.clone());
        self.resolved.push(response.message);
        for call in &calls {
            let answer = self
                .shared
                .reader
                .answer(&req.scope, &req.session, call)
                .await;
            req.messages.push(answer.clone());
            self.resolved.push(answer);
        }
        // The pages may not fit with the rest: prepare again.
        let mut prepared = prepare(req, &self.shared, &mut self.scratch, &self.untrusted)?;
        self.round += 1;
        commit(
            self.shared.store.as_ref(),
            Some(&self.shared.memory),
            &self.shared.policy,
            &mut prepared,
        )
        .await;
        let resolving = self.shared.auto_resolve.is_some_and(|max| self.round < max);
        self.sent = resolving.then(|| prepared.req.clone());
        self.model = prepared.req.model.clone();
        self.report = prepared.report;
        std::future::poll_fn(|cx| self.inner.poll_ready(cx))
            .await
            .map_err(Into::into)?;
        self.current = self
            .inner
            .call(Streaming(prepared.req))
            .await
            .map_err(Into::into)?;
        Ok(None)
    }
}
