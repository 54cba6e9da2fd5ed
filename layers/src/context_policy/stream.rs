//! The composite's streamed calls: the same preparation, then a stream whose final
//! response carries the report, and, with auto-resolve, artifact reads answered inside
//! the stream.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::StreamExt;
use tower::{Service, ServiceExt};
use tracing::{Instrument, Span};

use super::resolve::{Rounds, Sent};
use super::service::ContextPolicyService;
use super::steps::{Composite, Preparation, prepare_unverified, prepare_verified};
use crate::BoxError;
use crate::artifact::Untrusted;
use crate::future::take_ready;
use crate::memo::MemoPredicate;
use crate::model::ChatResponse;
use crate::model::infer_session;
use crate::offload::Prepared;
use crate::stream::{ChatStream, StreamError, StreamEvent, StreamFuture, Streaming, ToolCallDelta};

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
        Service::<Streaming>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, req: Streaming) -> Self::Future {
        let req = infer_session(req.0);
        let shared = self.shared.clone();
        // As an unstreamed call: the planner finds the request's claims while it measures,
        // and only a request that has any is checked with the store before it is prepared.
        let prepared = match prepare_unverified(req, &shared, &mut self.scratch) {
            Ok(Preparation::Prepared(p)) => p,
            Ok(Preparation::Claims(req)) => {
                let inner = take_ready(&mut self.inner);
                return Box::pin(async move {
                    let (prepared, untrusted) = prepare_verified(*req, &shared).await?;
                    run(inner, shared, prepared, untrusted).await
                });
            }
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let untrusted = Untrusted::default();
        let inner = take_ready(&mut self.inner);
        Box::pin(run(inner, shared, prepared, untrusted))
    }
}

/// Stores what preparation displaced and starts the stream.
async fn run<S>(
    mut inner: S,
    shared: Arc<Composite>,
    prepared: Prepared,
    untrusted: Untrusted,
) -> Result<ChatStream, BoxError>
where
    S: Service<Streaming, Response = ChatStream> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
{
    let rounds = Rounds::new(shared, untrusted, &prepared);
    let (req, sent) = rounds.begin(prepared).await;
    let current = inner.call(Streaming(req)).await.map_err(Into::into)?;
    let holding = sent.may_be_hidden();
    // What preparation did is known now, before the first event: say it up front.
    let mut report = sent.report.clone();
    if let Some(inner_report) = current.report() {
        report.absorb_inner(inner_report);
    }
    let streamed = Streamed {
        inner,
        // The caller's span (a GenAI call's): the stream is polled outside it, so its
        // rounds name it as their parent.
        call_span: Span::current(),
        round_span: None,
        rounds,
        sent,
        current,
        held: Vec::new(),
        holding,
        pending: VecDeque::new(),
        ended: false,
    };
    Ok(ChatStream::new(futures_util::stream::unfold(streamed, Streamed::step)).with_report(report))
}

/// One streamed call's rounds, as one stream.
struct Streamed<S> {
    inner: S,
    call_span: Span,
    /// The current artifact round's span, open while its stream runs.
    round_span: Option<Span>,
    rounds: Rounds,
    /// What the current round keeps of what it sent.
    sent: Sent,
    current: ChatStream,
    /// This round's events, held while it may turn out to only read artifacts: a round
    /// answered here never reaches the client, neither its calls nor the text and thinking
    /// before them (a client shown them would send that thinking back without its call).
    held: Vec<StreamEvent>,
    /// Whether the round's events are held: the model was offered the read tool, so the
    /// round may read (alone or beside other calls, in any order), and is held to its end
    /// to be answered here, or relayed, or told without its reads.
    holding: bool,
    pending: VecDeque<Result<StreamEvent, BoxError>>,
    ended: bool,
}

impl<S> Streamed<S>
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
            let within = self.round_span.as_ref().unwrap_or(&self.call_span).clone();
            match self.current.next().instrument(within).await {
                Some(Ok(event)) if self.holding && !matches!(event, StreamEvent::Done(_)) => {
                    self.held.push(event);
                }
                Some(Ok(StreamEvent::Done(response))) => match self.round_done(*response).await {
                    Ok(Some(StreamEvent::Done(done))) if self.rounds.rewritten => {
                        // The answer lost its read calls: what was held holds them, so
                        // the answer is told from the rewritten response instead.
                        self.held.clear();
                        self.pending.extend(told(&done).into_iter().map(Ok));
                        self.pending.push_back(Ok(StreamEvent::Done(done)));
                        self.ended = true;
                    }
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
        response: ChatResponse,
    ) -> Result<Option<StreamEvent>, BoxError> {
        let sent = std::mem::take(&mut self.sent);
        // The round that ended is over, whatever comes next.
        self.round_span = None;
        let prepared = match self.rounds.end(sent, response).await? {
            ControlFlow::Break(response) => return Ok(Some(StreamEvent::Done(Box::new(response)))),
            ControlFlow::Continue(prepared) => prepared,
        };
        // Each round answering the model's artifact reads is a child span of the call,
        // as it is for a plain call, and lasts until its stream ends.
        let span = tracing::info_span!(
            target: "llm_context::gen_ai",
            parent: &self.call_span,
            "llm_context.artifact_round",
            llm_context.round = crate::trace::int(self.rounds.round)
        );
        let (req, sent) = self.rounds.begin(prepared).instrument(span.clone()).await;
        self.holding = sent.may_be_hidden();
        self.sent = sent;
        ServiceExt::<Streaming>::ready(&mut self.inner)
            .await
            .map_err(Into::into)?;
        let call = span.in_scope(|| self.inner.call(Streaming(req)));
        self.current = call.instrument(span.clone()).await.map_err(Into::into)?;
        self.round_span = Some(span);
        Ok(None)
    }
}

/// The events telling `response` (its opening, its text, its other calls whole, its
/// usage), for an answer rewritten here: the `Done` that follows them completes it.
fn told(response: &ChatResponse) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    if !response.provider_fields.is_empty() {
        out.push(StreamEvent::Started(Box::new(
            response.provider_fields.clone(),
        )));
    }
    let text = response.message.content.text();
    if !text.is_empty() {
        out.push(StreamEvent::Text(text.into_owned()));
    }
    for (index, call) in response.message.tool_calls.iter().enumerate() {
        let whole = ToolCallDelta::new(index)
            .with_id(call.id.as_str())
            .with_name(call.name.as_str())
            .with_arguments(call.arguments.as_str());
        out.push(StreamEvent::ToolCall(whole));
    }
    out.push(StreamEvent::Usage(response.usage));
    out
}
