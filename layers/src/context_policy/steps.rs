//! What the composite is configured with, and the synchronous part of its preparation.

use std::sync::Arc;

use crate::BoxError;
use crate::artifact::{ArtifactReader, ArtifactStore, Untrusted};
use crate::calibration::Calibration;
use crate::catalog::Catalog;
use crate::fit::{self, CutStore, Scratch, Stages};
use crate::model::{ChatRequest, INFERRED_SESSION_PREFIX};
use crate::offload::{OffloadMemory, Prepared, offload_request};
use crate::policy::ContextPolicy;
use crate::prefix::PrefixLayer;

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
    pub(crate) memory: OffloadMemory,
    pub(crate) reader: ArtifactReader,
    pub(crate) auto_resolve: Option<usize>,
    /// Sessions' previous cuts, for cache-aware pruning.
    pub(crate) cuts: Arc<dyn CutStore>,
    /// Learns the provider's counting from responses and tightens the budget by it.
    pub(crate) calibration: Option<Calibration>,
}

/// The whole synchronous part of preparation: inject the prefix (so the plan counts
/// it), fit, offload, then mark the cache breakpoints on what will be sent. `untrusted`
/// holds the request's imitations of the stack's formats (see `artifact::verify`).
pub(super) fn prepare(
    mut req: ChatRequest,
    shared: &Composite,
    scratch: &mut Scratch,
    untrusted: &Untrusted,
) -> Result<Prepared, BoxError> {
    shared.prefix.inject(&mut req);
    // The session's previous cuts: kept when the policy says so (see `fit::budget`), and
    // always compared, so the report says when the cached prefix was broken.
    let previous = shared
        .cuts
        .get(&req.scope, &req.session)
        .unwrap_or_default();
    let budget = fit::budget(
        &req,
        &shared.policy,
        &shared.catalog,
        shared.calibration.as_ref(),
        previous,
    )?;
    let memory = shared.memory.session(&req.scope, &req.session);
    let mut fitted = fit::prepare(
        req,
        &shared.policy,
        untrusted,
        Stages::All,
        budget,
        memory.as_deref(),
        scratch,
    )?;
    fitted.report.cut_moved = fitted.cuts.history_moved(&previous);
    fitted.report.clear_moved = fitted.cuts.cleared_moved(&previous);
    if fitted.cuts != previous {
        shared
            .cuts
            .put(&fitted.req.scope, &fitted.req.session, fitted.cuts);
    }
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
    shared.prefix.mark(&mut prepared.req);
    if prepared.req.session.starts_with(INFERRED_SESSION_PREFIX) {
        prepared.report.inferred_session = Some(prepared.req.session.clone());
    }
    Ok(prepared)
}
