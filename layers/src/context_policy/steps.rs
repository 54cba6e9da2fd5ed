//! What the composite is configured with, and the synchronous part of its preparation.

use std::borrow::Cow;
use std::sync::Arc;

use crate::BoxError;
use crate::artifact::{ArtifactReader, ArtifactStore, Untrusted, verify};
use crate::calibration::Calibration;
use crate::catalog::Catalog;
use crate::executor::edits::{self, ClientClearing};
use crate::executor::{self, Executor, compaction};
use crate::fit::{self, CutStore, Fitting, Scratch, Stages};
use crate::model::{ChatRequest, INFERRED_SESSION_PREFIX, WireFormat};
use crate::offload::{Prepared, PreviewCache, offload_request};
use crate::policy::ContextPolicy;
use crate::prefix::PrefixLayer;
use crate::thinking::{self, ThinkingMismatch};

#[derive(Clone)]
/// The composite's configuration, shared by every service of one layer.
pub(crate) struct Composite {
    pub(crate) policy: ContextPolicy,
    /// Injects the configured prefix (before planning) and marks breakpoints (after).
    pub(crate) prefix: PrefixLayer,
    /// Context windows (when the policy sets no ceiling) and cache minimums.
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) store: Arc<dyn ArtifactStore>,
    /// What each session offloaded before, so a transcript sent again is not offloaded
    /// again.
    pub(crate) memory: PreviewCache,
    pub(crate) reader: ArtifactReader,
    pub(crate) auto_resolve: Option<usize>,
    /// Sessions' previous cuts, for cache-aware pruning.
    pub(crate) cuts: Arc<dyn CutStore>,
    /// Learns the provider's counting from responses and tightens the budget by it.
    pub(crate) calibration: Option<Calibration>,
}

/// The whole synchronous part of preparation: inject the prefix (so the plan counts
/// it), fit, offload, then mark the cache breakpoints on what will be sent. `untrusted`
/// holds the request's imitations of the stack's formats (see `artifact::verify`): the
/// request's claims were checked with the store, or are taken at their word.
pub(super) fn prepare(
    req: ChatRequest,
    shared: &Composite,
    scratch: &mut Scratch,
    untrusted: &Untrusted,
) -> Result<Prepared, BoxError> {
    match prepare_checked(req, shared, scratch, untrusted, false)? {
        Preparation::Prepared(prepared) => Ok(prepared),
        Preparation::Claims(_) => Err("claims are not checked here, so never found".into()),
    }
}

/// [`prepare`] for a request [`prepare_unverified`] gave back: its claims checked with the
/// store first (`artifact::verify`), then prepared with what the store does not back taken
/// as plain text. The untrusted texts are returned for the artifact-read rounds, which
/// prepare the conversation again.
pub(super) async fn prepare_verified(
    req: ChatRequest,
    shared: &Composite,
) -> Result<(Prepared, Untrusted), BoxError> {
    let untrusted = verify(shared.store.as_ref(), &req).await;
    let prepared = prepare(req, shared, &mut Scratch::default(), &untrusted)?;
    Ok((prepared, untrusted))
}

/// What [`prepare_unverified`] came to.
// Returned once a call, nearly always prepared: boxing it would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Preparation {
    /// The request, prepared.
    Prepared(Prepared),
    /// A tool result is a preview or a stub naming an artifact: the request, as received
    /// (the prefix injected, which is idempotent), for the store to check its claims
    /// before it is prepared with [`prepare`].
    Claims(Box<ChatRequest>),
}

/// [`prepare`] for a request whose claims nobody checked yet: the planner looks for them
/// while it measures each message, and gives a request that has any back untouched. The
/// common request has none and is prepared in one pass, with no pass of its own to look.
pub(super) fn prepare_unverified(
    req: ChatRequest,
    shared: &Composite,
    scratch: &mut Scratch,
) -> Result<Preparation, BoxError> {
    prepare_checked(req, shared, scratch, &Untrusted::default(), true)
}

fn prepare_checked(
    mut req: ChatRequest,
    shared: &Composite,
    scratch: &mut Scratch,
    untrusted: &Untrusted,
    check_claims: bool,
) -> Result<Preparation, BoxError> {
    let executor = executor::choose(shared.policy.executor, &req, &shared.catalog);
    if executor == Executor::Off {
        // Nothing edited, nothing added: the request as it came.
        return Ok(Preparation::Prepared(Prepared::untouched(req, executor)));
    }
    // What a provider's compaction stands in for is not shown to the model: neither
    // counted nor sent.
    let compacted = compaction::leave_out_compacted(&mut req);
    shared.prefix.inject(&mut req);
    // The session's previous cuts: kept when the policy says so (see `fit::budget`), and
    // always compared, so the report says when the cached prefix was broken.
    let previous = shared
        .cuts
        .get(&req.scope, &req.session)
        .unwrap_or_default();
    let mut budget = fit::budget(
        &req,
        &shared.policy,
        &shared.catalog,
        shared.calibration.as_ref(),
        previous,
    )?;
    // The policy the plan is made with: the stack's, or, when the client's own clearing
    // is the provider's, one that counts on what that clearing guarantees.
    let mut planned = Cow::Borrowed(&shared.policy);
    if executor == Executor::Delegate && req.params.extra_format == Some(WireFormat::Responses) {
        // OpenAI's server compacts; it clears nothing: results go unchanged and the plan
        // prunes only what would not fit.
        let allowance = shared.policy.prompt_allowance(budget.model_window);
        edits::delegate_responses(&mut req, allowance);
        planned.to_mut().preserve_tool_results = Some(usize::MAX);
        budget.previous_clear = None;
    } else if executor == Executor::Delegate {
        // The provider clears: the plan counts on it and sends the results unchanged,
        // and no cleared region of the stack's is kept.
        let allowance = shared.policy.prompt_allowance(budget.model_window);
        match edits::client_clearing(&req, allowance) {
            Some(ClientClearing::Counted { keep, exclude }) => {
                let policy = planned.to_mut();
                policy.preserve_tool_results = Some(keep);
                policy.never_clear.extend(exclude);
            }
            // No result may be counted as cleared: what does not fit is pruned.
            Some(ClientClearing::Uncounted) => {
                planned.to_mut().preserve_tool_results = Some(usize::MAX);
            }
            None => edits::delegate(&mut req, &shared.policy, allowance),
        }
        budget.server_clears = true;
        budget.previous_clear = None;
    }
    let memory = shared.memory.session(&req.scope, &req.session);
    let mut fitted = match fit::prepare(
        req,
        &planned,
        untrusted,
        Stages::All,
        budget,
        memory.as_deref(),
        check_claims,
        scratch,
    )? {
        Fitting::Fitted(fitted) => fitted,
        Fitting::Claims(req) => return Ok(Preparation::Claims(req)),
    };
    fitted.report.executor = Some(executor);
    fitted.report.compacted_messages = compacted;
    fitted.report.cut_moved = fitted.cuts.history_moved(&previous);
    fitted.report.clear_moved = fitted.cuts.cleared_moved(&previous);
    let mut cuts = fitted.cuts;
    let mut prepared = offload_request(
        fitted.req,
        fitted.report,
        fitted.applied,
        &shared.policy,
        untrusted,
        fitted.reserved_tool,
        true,
        memory.as_deref(),
    )?;
    // Last, on what will be sent: a thinking block bound to a prefix this request no
    // longer sends is left out, from the start (see `thinking`).
    // Or, when the policy says so and the request can carry it, the provider drops them.
    if shared.catalog.binds_thinking(&prepared.req.model) {
        let provider_drops = shared.policy.thinking_mismatch == ThinkingMismatch::DropBlock
            && thinking::ask_provider_to_drop(&mut prepared.req);
        if !provider_drops {
            let edited = prepared.report.changed();
            // Past a compaction the history starts at its block: the blocks after it
            // were signed over what follows it, not over what it left out.
            let bound = previous.thinking.filter(|_| compacted == 0);
            let kept = thinking::keep_bound(&mut prepared.req, bound, edited);
            prepared.report.thinking_dropped = kept.dropped;
            cuts.thinking = Some(kept.binding);
        }
    }
    if cuts != previous {
        shared
            .cuts
            .put(&prepared.req.scope, &prepared.req.session, cuts);
    }
    shared.prefix.mark(&mut prepared.req);
    if prepared.req.session.starts_with(INFERRED_SESSION_PREFIX) {
        prepared.report.inferred_session = Some(prepared.req.session.clone());
    }
    Ok(Preparation::Prepared(prepared))
}
