//! The artifact-read loop: answering the model's `read_context_artifact` calls inside the
//! stack, and preparing the conversation again with the pages it read.

use std::ops::ControlFlow;
use std::sync::Arc;

use tower::{Service, ServiceExt};
use tracing::Instrument;

use super::steps::{Composite, prepare, prepare_verified};
use crate::BoxError;
use crate::ContextLimitError;
use crate::artifact::{READ_ARTIFACT_TOOL, Untrusted};
use crate::executor::AppliedEdits;
use crate::fit::Scratch;
use crate::model::{
    ChatRequest, ChatResponse, Content, FinishReason, Message, PreparationReport, ToolCall, Usage,
};
use crate::offload::{Prepared, commit};

/// The texts at least this long are shared between the request sent and its copies (the
/// one a round keeps to answer reads): smaller ones cost less to copy than to share.
const SHARED_TEXT_BYTES: usize = 256;

/// Whether `call` is of the read tool.
fn is_read(call: &ToolCall) -> bool {
    call.name == READ_ARTIFACT_TOOL
}

/// The finish reason of an answer whose model only read artifacts at the bound: its read
/// calls were taken out, and nothing else was asked for.
pub const READ_BUDGET_SPENT: &str = "read_budget_spent";

/// The longest arguments a read call is answered for: an id (at most 128 bytes), an
/// offset and a page size fit many times over. Longer ones are cut in the hidden round,
/// so that a model's 100 KB call never makes the next round's request unfit.
const MAX_READ_ARGUMENT_BYTES: usize = 1024;

/// The answer to a read made when this turn's reads are spent: the model is told so, in
/// words it can act on, and not given the page.
fn budget_spent(call: &ToolCall) -> Message {
    let answer = serde_json::json!({
        "error": "read_budget_spent",
        "message": "this turn's artifact reads are spent: answer with what you have, or ask \
                    for the page again in a later turn",
    });
    Message::tool_result(call.id.as_str(), READ_ARTIFACT_TOOL, answer.to_string())
}

/// The answer to a read whose arguments were too long to be a read (they were cut).
fn arguments_cut(call: &ToolCall, bytes: usize) -> Message {
    let answer = serde_json::json!({
        "error": "invalid_arguments",
        "message": format!(
            "the call's arguments were {bytes} bytes, over the {MAX_READ_ARGUMENT_BYTES} a \
             read takes, and were cut: call again with the artifact_id of a preview"
        ),
    });
    Message::tool_result(call.id.as_str(), READ_ARTIFACT_TOOL, answer.to_string())
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
    /// Whether the answer was rewritten here (its read calls taken out): the provider's
    /// answer as it came no longer is the answer, and a stream's held events are not
    /// relayed.
    pub(super) rewritten: bool,
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
            rewritten: false,
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
        // Kept in every round, the last included: a read asked for there is taken out.
        // (Only a request offered the read tool can read.)
        let resolving = shared.auto_resolve.is_some() && offers_read_tool(&prepared.req);
        // Large texts are shared from here on: a copy of the request (the one kept to
        // answer reads, a client's or a retry's) then holds no second copy of a
        // transcript's results until the answer.
        for m in &mut prepared.req.messages {
            if let Content::Text(text) = &mut m.content
                && text.len() >= SHARED_TEXT_BYTES
            {
                text.share();
            }
        }
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
    /// the next round's preparation when the model read artifacts.
    ///
    /// The caller never sees a read call. A round whose model reads (alone, or beside
    /// other calls) is answered here: its reads are answered and the model is asked again
    /// in the same request, its other calls taken out of the hidden exchange (it asks for
    /// them again once it has read). The bound is on upstream calls (`rounds + 1`): the
    /// last hidden round answers its reads with `read_budget_spent`, and a read in the
    /// last call is taken out of the answer ([`READ_BUDGET_SPENT`] is its finish reason
    /// when nothing else was asked for). A read's arguments over 1 KiB are cut and
    /// answered `invalid_arguments`; a next round that cannot fit ends the turn as the
    /// bound does.
    pub(super) async fn end(
        &mut self,
        sent: Sent,
        response: ChatResponse,
    ) -> Result<ControlFlow<ChatResponse, Prepared>, BoxError> {
        let mut report = sent.report;
        report.absorb_inner(&response.report);
        // What the provider edited of this round's request (a delegated one's clearing).
        if let Some(applied) = AppliedEdits::from_response(&response) {
            report.provider_edits = Some(applied);
        }
        // Every round is a prompt the provider counted against this round's estimate.
        if let (Some(calibration), Some(model)) = (&self.shared.calibration, sent.model) {
            calibration.observe_parts(&model, &report, &response.usage);
        }
        let reads = response.message.tool_calls.iter().any(is_read);
        let req = match sent.req {
            Some(req) if reads && offers_read_tool(&req) => req,
            _ => return Ok(ControlFlow::Break(self.answer(report, response))),
        };
        let max = self.shared.auto_resolve.unwrap_or(0);
        if self.round >= max {
            return Ok(ControlFlow::Break(self.without_reads(report, response)));
        }
        match self.hidden_round(req, &response).await {
            Ok(prepared) => {
                // The counts add up without counting a result twice: what this round
                // removed, cleared or offloaded reaches the next one removed, a stub or a
                // preview, which that round does not count again.
                self.earlier.add_counts(&report);
                self.hidden_usage += response.usage;
                self.round += 1;
                Ok(ControlFlow::Continue(prepared))
            }
            // The pages do not fit with the rest: the turn ends as at the bound.
            Err(e) if e.downcast_ref::<ContextLimitError>().is_some() => {
                Ok(ControlFlow::Break(self.without_reads(report, response)))
            }
            Err(e) => Err(e),
        }
    }

    /// The answer: `response` with the report of every round and the usage summed.
    fn answer(
        &mut self,
        mut report: PreparationReport,
        mut response: ChatResponse,
    ) -> ChatResponse {
        report.add_counts(&self.earlier);
        report.before_tokens = self.before_tokens;
        report.resolved_messages = std::mem::take(&mut self.resolved);
        response.report = report;
        response.usage += std::mem::take(&mut self.hidden_usage);
        response
    }

    /// The answer with its read calls taken out: the caller gets only its own calls, or,
    /// when the model asked for nothing else, an answer with no calls that finished
    /// [`READ_BUDGET_SPENT`]. The provider's answer as it came is dropped: it holds the
    /// reads.
    fn without_reads(
        &mut self,
        report: PreparationReport,
        mut response: ChatResponse,
    ) -> ChatResponse {
        response.message.tool_calls = std::mem::take(&mut response.message.tool_calls)
            .into_iter()
            .filter(|c| !is_read(c))
            .collect();
        if !response.message.has_tool_calls() {
            response.finish_reason = FinishReason::Other(READ_BUDGET_SPENT.to_owned());
        }
        response.origin = None;
        self.rewritten = true;
        self.answer(report, response)
    }

    /// The next round's preparation: the model's reads (only those, their arguments cut
    /// when too long) and their answers appended to what was sent.
    async fn hidden_round(
        &mut self,
        mut req: ChatRequest,
        response: &ChatResponse,
    ) -> Result<Prepared, BoxError> {
        let max = self.shared.auto_resolve.unwrap_or(0);
        // The last hidden round: its reads are refused, the model told why.
        let spent = self.round + 1 >= max;
        let mut message = response.message.clone();
        message.tool_calls = std::mem::take(&mut message.tool_calls)
            .into_iter()
            .filter(is_read)
            .collect();
        let mut answers = Vec::with_capacity(message.tool_calls.len());
        for call in &mut message.tool_calls {
            let bytes = call.arguments.len();
            let answer = if bytes > MAX_READ_ARGUMENT_BYTES {
                call.arguments = "{}".to_owned();
                arguments_cut(call, bytes)
            } else if spent {
                budget_spent(call)
            } else {
                self.shared
                    .reader
                    .answer(&req.scope, &req.session, call)
                    .await
            };
            answers.push(answer);
        }
        req.messages.push(message.clone());
        req.messages.extend(answers.iter().cloned());
        // The pages may not fit with the rest: prepare again.
        let prepared = prepare(req, &self.shared, &mut self.scratch, &self.untrusted)?;
        self.resolved.push(message);
        self.resolved.extend(answers);
        Ok(prepared)
    }
}
