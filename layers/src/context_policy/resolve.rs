//! The artifact-read loop: answering the model's `read_context_artifact` calls inside the
//! stack, and preparing the conversation again with the pages it read.

use std::ops::ControlFlow;
use std::sync::Arc;

use tower::{Service, ServiceExt};
use tracing::Instrument;

use super::steps::{Composite, prepare, prepare_verified};
use crate::BoxError;
use crate::artifact::{READ_ARTIFACT_TOOL, Untrusted};
use crate::fit::Scratch;
use crate::model::{ChatRequest, ChatResponse, Message, PreparationReport, Usage};
use crate::offload::{Prepared, commit};

/// Whether the reply asks only for artifact pages.
fn only_artifact_reads(m: &Message) -> bool {
    m.has_tool_calls() && m.tool_calls.iter().all(|c| c.name == READ_ARTIFACT_TOOL)
}

/// Whether the model was offered the read tool: a call of it is answered here only then
/// (a model that names it unoffered is answered by its client, as any other call).
fn offers_read_tool(req: &ChatRequest) -> bool {
    req.tools.iter().any(|t| t.name == READ_ARTIFACT_TOOL)
}

/// Checks the request's previews and stubs against the store, prepares it, and runs it
/// as [`run`] does: the path of a request that claims artifacts.
pub(super) async fn verify_and_run<S>(
    inner: S,
    shared: Arc<Composite>,
    req: ChatRequest,
) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    let (prepared, untrusted) = prepare_verified(req, &shared).await?;
    run(inner, shared, prepared, untrusted).await
}

/// Stores what preparation displaced, calls `inner`, and answers the model's artifact
/// reads when auto-resolve is on. `untrusted` is what the first preparation was given.
pub(super) async fn run<S>(
    mut inner: S,
    shared: Arc<Composite>,
    mut prepared: Prepared,
    untrusted: Untrusted,
) -> Result<ChatResponse, BoxError>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    let mut rounds = Rounds::new(shared, untrusted, &prepared);
    loop {
        let (req, sent) = rounds.begin(prepared).await;
        if rounds.round > 0 {
            inner.ready().await.map_err(Into::into)?;
        }
        // Each round after the first answers the model's artifact reads: a child span.
        let response = if rounds.round > 0 {
            let span = tracing::info_span!(
                target: "llm_context::gen_ai",
                "llm_context.artifact_round",
                llm_context.round = crate::trace::int(rounds.round)
            );
            // Called inside the span, so what the call opens at once (a retry's
            // attempt) is the round's too.
            let call = span.in_scope(|| inner.call(req));
            call.instrument(span).await
        } else {
            inner.call(req).await
        }
        .map_err(Into::into)?;
        match rounds.end(sent, response).await? {
            ControlFlow::Break(response) => return Ok(response),
            ControlFlow::Continue(next) => prepared = next,
        }
    }
}

/// The rounds of one call, plain or streamed: each stores what its preparation
/// displaced, is sent, and ends either with the answer or, when the model only read
/// artifacts, with the conversation prepared again with the pages it read.
pub(super) struct Rounds {
    shared: Arc<Composite>,
    /// What the first preparation was given.
    untrusted: Untrusted,
    /// Rounds after the first prepare in this future, away from the service's scratch.
    scratch: Scratch,
    before_tokens: usize,
    /// What the earlier rounds did: a later round prepares what the earlier one sent,
    /// where an offloaded result is a preview already, so its own report alone would say
    /// nothing was offloaded.
    earlier: PreparationReport,
    resolved: Vec<Message>,
    /// The usage of the rounds that only read artifacts: the answer reports every round's,
    /// since the client is billed for them all.
    hidden_usage: Usage,
    pub(super) round: usize,
}

impl Sent {
    /// Whether this round may end only reading artifacts: its reads are answered here and
    /// the model may call the read tool, which it was offered.
    pub(super) fn may_be_hidden(&self) -> bool {
        self.req.as_ref().is_some_and(offers_read_tool)
    }
}

/// What a round keeps of what it sent, to read its answer.
#[derive(Default)]
pub(super) struct Sent {
    /// The request, while its artifact reads may still be answered.
    pub(super) req: Option<ChatRequest>,
    /// The model, when a calibration learns from the answer.
    model: Option<String>,
    pub(super) report: PreparationReport,
}

impl Rounds {
    pub(super) fn new(shared: Arc<Composite>, untrusted: Untrusted, first: &Prepared) -> Self {
        Self {
            shared,
            untrusted,
            scratch: Scratch::default(),
            before_tokens: first.report.before_tokens,
            earlier: PreparationReport::default(),
            resolved: Vec::new(),
            hidden_usage: Usage::default(),
            round: 0,
        }
    }

    /// Stores what `prepared` displaced; the request to send, and what the round keeps.
    pub(super) async fn begin(&self, mut prepared: Prepared) -> (ChatRequest, Sent) {
        let shared = &self.shared;
        commit(
            shared.store.as_ref(),
            Some(&shared.memory),
            &shared.policy,
            &mut prepared,
        )
        .await;
        let resolving = shared.auto_resolve.is_some_and(|max| self.round < max);
        let sent = Sent {
            req: resolving.then(|| prepared.req.clone()),
            model: shared
                .calibration
                .is_some()
                .then(|| prepared.req.model.clone()),
            report: prepared.report,
        };
        (prepared.req, sent)
    }

    /// Ends a round with its response: the answer (its report covering every round), or
    /// the next round's preparation when the model only read artifacts.
    pub(super) async fn end(
        &mut self,
        sent: Sent,
        mut response: ChatResponse,
    ) -> Result<ControlFlow<ChatResponse, Prepared>, BoxError> {
        let mut report = sent.report;
        report.absorb_inner(&response.report);
        // Every round is a prompt the provider counted against this round's estimate.
        if let (Some(calibration), Some(model)) = (&self.shared.calibration, sent.model) {
            calibration.observe_parts(&model, &report, &response.usage);
        }
        let mut req = match sent.req {
            Some(req) if only_artifact_reads(&response.message) && offers_read_tool(&req) => req,
            _ => {
                report.add_counts(&self.earlier);
                report.before_tokens = self.before_tokens;
                report.resolved_messages = std::mem::take(&mut self.resolved);
                response.report = report;
                response.usage += std::mem::take(&mut self.hidden_usage);
                return Ok(ControlFlow::Break(response));
            }
        };
        // The counts add up without counting a result twice: what this round removed,
        // cleared or offloaded reaches the next one removed, a stub or a preview, which
        // that round does not count again.
        self.earlier.add_counts(&report);
        self.hidden_usage += response.usage;
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
        let prepared = prepare(req, &self.shared, &mut self.scratch, &self.untrusted)?;
        self.round += 1;
        Ok(ControlFlow::Continue(prepared))
    }
}
