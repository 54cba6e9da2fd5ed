//! The shared fitting pass behind [`prune`](crate::prune), [`clear`](crate::clear) and
//! [`ContextPolicyLayer`](crate::ContextPolicyLayer).
//!
//! Pruning and clearing decide together: whether a turn must go depends on how much
//! clearing (and offloading) will save, and the order of the two is a policy choice. So
//! they are stages of one planner, and each layer runs the stages it owns:
//!
//! | layer | stages | fails with `ContextLimitError` |
//! |---|---|---|
//! | `PruneLayer` | drop old turns, then old rounds of kept turns | yes |
//! | `ClearLayer` | clear old tool results | no |
//! | `ContextPolicyLayer` | all, in the policy's order, sized as offloading will send | yes |
//!
//! The plan is computed in one linear pass with a running total; nothing outside the
//! layer depends on positions.

mod plan;
mod turns;

pub(crate) use plan::{Budget, Scratch, Stages, offloadable_text, refers_to_artifact};
pub(crate) use turns::Layout;

use std::task::{Context, Poll};

use tower::Service;

use crate::BoxError;
use crate::cut::Cut;
use crate::error::ContextLimitError;
pub use crate::future::ResponseFuture;
use crate::offload::Displaced;
use crate::policy::ContextPolicy;
use crate::report::PreparationReport;
use crate::request::{ChatRequest, ChatResponse};

impl Stages {
    pub(crate) const PRUNE: Stages = Stages {
        prune: true,
        clear: false,
        rounds: true,
        offload_sizing: false,
        enforce: true,
        clear_artifacts: false,
    };
    pub(crate) const CLEAR: Stages = Stages {
        prune: false,
        clear: true,
        rounds: false,
        offload_sizing: false,
        enforce: false,
        clear_artifacts: false,
    };
    pub(crate) const ALL: Stages = Stages {
        prune: true,
        clear: true,
        rounds: true,
        offload_sizing: true,
        enforce: true,
        clear_artifacts: true,
    };
}

/// A fitted request.
pub(crate) struct Fitted {
    pub(crate) req: ChatRequest,
    /// Where whole turns were cut (`None` when none were).
    pub(crate) cut: Option<Cut>,
    pub(crate) report: PreparationReport,
    /// Cleared contents to store (empty unless `stages.clear_artifacts`).
    pub(crate) displaced: Vec<Displaced>,
    /// Whether the read tool's tokens were counted in the plan.
    pub(crate) reserved_tool: bool,
    /// Whether a kept message refers to an artifact.
    pub(crate) refers: bool,
}

/// Plans and applies the stages to a request: the pure core of the fitting layers.
pub(crate) fn prepare(
    mut req: ChatRequest,
    policy: &ContextPolicy,
    stages: Stages,
    budget: Budget,
    scratch: &mut Scratch,
) -> Result<Fitted, ContextLimitError> {
    let planned = plan::plan(&req, policy, stages, budget, scratch)?;
    let cut = planned.cut;
    let reserved_tool = planned.reserved_tool;
    let refers = planned.refers;
    let report = planned.report.clone();
    let mut displaced = Vec::new();
    if report.removed_messages > 0 || report.cleared_observations > 0 {
        let messages = std::mem::take(&mut req.messages);
        (req.messages, displaced) =
            planned.apply(messages, &scratch.actions, policy.artifact_max_chars);
        tracing::info!(
            target: "llm_context",
            event = "context_compacted",
            before_tokens = report.before_tokens,
            after_tokens = report.after_tokens,
            removed_messages = report.removed_messages,
            cleared_observations = report.cleared_observations,
            pruned_turns = report.pruned_turns,
            dropped_rounds = report.dropped_rounds,
            prompt_allowance = report.prompt_allowance,
            scope = %req.scope.key(),
            session = %req.session,
            "context_compacted"
        );
    }
    Ok(Fitted {
        req,
        cut,
        report,
        displaced,
        reserved_tool,
        refers,
    })
}

/// A service that fits requests with some stages. Rewrite-only: the inner future is
/// returned wrapped only to attach the report to the response.
#[derive(Clone, Debug)]
pub(crate) struct Fit<S> {
    inner: S,
    policy: ContextPolicy,
    stages: Stages,
    scratch: Scratch,
}

impl<S> Fit<S> {
    pub(crate) fn new(inner: S, policy: ContextPolicy, stages: Stages) -> Self {
        Self {
            inner,
            policy,
            stages,
            scratch: Scratch::default(),
        }
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    pub(crate) fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    pub(crate) fn into_inner(self) -> S {
        self.inner
    }
}

impl<S> Service<ChatRequest> for Fit<S>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        match prepare(
            req,
            &self.policy,
            self.stages,
            Budget::new(None),
            &mut self.scratch,
        ) {
            Ok(fitted) => ResponseFuture::direct(self.inner.call(fitted.req), fitted.report),
            Err(limit) => ResponseFuture::failed(Box::new(limit)),
        }
    }
}
