//! Fitting a request: the planner applied, and the service that prune and clear share.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;

use super::cut::Cuts;
use super::pairing;
use super::plan::{self, Applied, ApplyContext, Budget, Checks, Planned, Scratch, Stages};
use crate::BoxError;
use crate::artifact::SessionMemory;
use crate::artifact::Untrusted;
use crate::calibration::Calibration;
use crate::catalog::Catalog;
use crate::future::{Learn, ResponseFuture, streamed};
use crate::model::{ChatRequest, ChatResponse, PreparationReport};
use crate::policy::{ContextPolicy, PolicyError};
use crate::stream::{ChatStream, StreamFuture, Streaming};

/// A fitted request.
pub(crate) struct Fitted {
    pub(crate) req: ChatRequest,
    /// Where whole turns were cut, and where the cleared region ends.
    pub(crate) cuts: Cuts,
    pub(crate) report: PreparationReport,
    /// What the artifacts need: cleared contents to store (none unless the stages
    /// offload), the references so far, the long results kept. Its `messages` are
    /// `req`'s, moved there.
    pub(crate) applied: Applied,
    /// Whether the read tool's tokens were counted in the plan.
    pub(crate) reserved_tool: bool,
}

/// What [`prepare`] came to.
// Returned once a call, nearly always fitted: boxing it would cost an allocation.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Fitting {
    /// The fitted request.
    Fitted(Fitted),
    /// With `check_claims`: a tool result claims an artifact, so the request, given back
    /// as received, is to be verified against the store and prepared again.
    Claims(Box<ChatRequest>),
}

/// Plans and applies the stages to a request: the pure core of the fitting layers. With
/// `check_claims`, a request in which a tool result is a preview or a stub naming an
/// artifact is given back untouched (see [`Fitting::Claims`]); without it, `untrusted`
/// says which of those claims the store does not back.
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare(
    mut req: ChatRequest,
    policy: &ContextPolicy,
    untrusted: &Untrusted,
    stages: Stages,
    budget: Budget,
    memory: Option<&SessionMemory>,
    check_claims: bool,
    scratch: &mut Scratch,
) -> Result<Fitting, BoxError> {
    // The planner checks the pairing while it measures: only a transcript that does not
    // pair up is repaired (or refused) and planned again.
    let mut repaired = None;
    let mut checks = Checks {
        pairing: true,
        claims: check_claims,
    };
    let planned = loop {
        let input = plan::Input {
            req: &req,
            policy,
            untrusted,
            stages,
            budget,
            memory,
            checks,
        };
        match plan::plan(input, scratch)? {
            Planned::Plan(planned) => break planned,
            // Given back as received: nothing was planned or repaired.
            Planned::Claims => return Ok(Fitting::Claims(Box::new(req))),
            Planned::Unpaired => {
                if policy.repair_pairing {
                    repaired = pairing::repair(&mut req.messages);
                } else {
                    pairing::check(&req.messages)?;
                }
                checks.pairing = false;
            }
        }
    };
    let cuts = planned.cuts;
    let reserved_tool = planned.reserved_tool;
    let mut report = planned.report.clone();
    if let Some(r) = &repaired {
        // The report speaks of the request as received.
        report.repaired = r.count;
        report.before_tokens = report.before_tokens + r.dropped_tokens - r.added_tokens;
        report.history_start = report.history_start.map(|i| r.received_index(i));
        tracing::info!(
            event = "tool_pairing_repaired",
            repaired = r.count,
            scope = %req.scope.key(),
            session = %req.session,
            "tool calls and results did not pair up; repaired"
        );
    }
    let changes = report.removed_messages > 0 || report.cleared_results > 0;
    let messages = std::mem::take(&mut req.messages);
    let ctx = ApplyContext {
        scope: &req.scope,
        session: &req.session,
        memory,
        artifact_max_chars: policy.artifact_max_chars,
        clear_tool_inputs: policy.clear_tool_inputs,
    };
    let mut applied = planned.apply(messages, &scratch.actions, ctx);
    req.messages = std::mem::take(&mut applied.messages);
    report.after_tokens -= applied.inputs_freed;
    if changes {
        tracing::info!(
            event = "context_compacted",
            before_tokens = report.before_tokens,
            after_tokens = report.after_tokens,
            removed_messages = report.removed_messages,
            cleared_results = report.cleared_results,
            pruned_turns = report.pruned_turns,
            dropped_rounds = report.dropped_rounds,
            prompt_allowance = report.prompt_allowance,
            scope = %req.scope.key(),
            session = %req.session,
            "context_compacted"
        );
    }
    Ok(Fitting::Fitted(Fitted {
        req,
        cuts,
        report,
        applied,
        reserved_tool,
    }))
}

/// What the standalone fitting layers plan with, the same as the composite: the policy,
/// the catalog's context window when the policy sets none, and a calibration when given.
#[derive(Clone, Debug)]
pub(crate) struct FitConfig {
    pub(crate) policy: ContextPolicy,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) calibration: Option<Calibration>,
}

impl FitConfig {
    pub(crate) fn new(policy: ContextPolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(Self {
            policy,
            catalog: Catalog::builtin(),
            calibration: None,
        })
    }
}

/// The budget of `req` under `policy`: the model's window from `catalog`, the
/// calibration's factor for the model, and the session's previous cuts (the history cut is
/// and rounds dropped are kept only with `low_water_tokens`, the cleared region only with
/// `clear_at_least_tokens`). Fails when the policy leaves no room in the model's window.
pub(crate) fn budget(
    req: &ChatRequest,
    policy: &ContextPolicy,
    catalog: &Catalog,
    calibration: Option<&Calibration>,
    previous: Cuts,
) -> Result<Budget, PolicyError> {
    let window = catalog.context_window(&req.model);
    if let Some(window) = window {
        policy.validate_window(window)?;
    }
    Ok(Budget {
        model_window: window,
        previous_cut: policy.low_water_tokens.and(previous.history),
        previous_rounds: policy.low_water_tokens.and(previous.rounds),
        previous_clear: policy.clear_at_least_tokens.and(previous.cleared),
        server_clears: false,
        factor: calibration.map_or(1.0, |c| c.factor(&req.model)),
    })
}

/// A service that fits requests with some stages. Rewrite-only: the inner future is
/// returned wrapped only to attach the report to the response (and teach the
/// calibration, when there is one).
#[derive(Clone, Debug)]
pub(crate) struct Fit<S> {
    pub(crate) inner: S,
    config: Arc<FitConfig>,
    stages: Stages,
    scratch: Scratch,
}

impl<S> Fit<S> {
    pub(crate) fn new(inner: S, config: Arc<FitConfig>, stages: Stages) -> Self {
        Self {
            inner,
            config,
            stages,
            scratch: Scratch::default(),
        }
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
        match self.fit(req) {
            Ok((req, report, learn)) => {
                ResponseFuture::direct_learning(self.inner.call(req), report, learn)
            }
            Err(e) => ResponseFuture::failed(e),
        }
    }
}

/// A streamed call, fitted the same way.
impl<S> Service<Streaming> for Fit<S>
where
    S: Service<Streaming, Response = ChatStream>,
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
        match self.fit(req.0) {
            Ok((req, report, learn)) => streamed(self.inner.call(Streaming(req)), report, learn),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

impl<S> Fit<S> {
    /// The request fitted to the budget, its report, and what the calibration learns.
    fn fit(
        &mut self,
        req: ChatRequest,
    ) -> Result<(ChatRequest, PreparationReport, Option<Learn>), BoxError> {
        let config = &self.config;
        let calibration = config.calibration.as_ref();
        let budget = budget(
            &req,
            &config.policy,
            &config.catalog,
            calibration,
            Cuts::default(),
        )?;
        // No store to look in: a standalone fitting layer takes the stack's formats at
        // their word (they are checked byte for byte, and bounded in size).
        let untrusted = Untrusted::default();
        let fitted = match prepare(
            req,
            &config.policy,
            &untrusted,
            self.stages,
            budget,
            None,
            false,
            &mut self.scratch,
        )? {
            Fitting::Fitted(fitted) => fitted,
            Fitting::Claims(_) => return Err("claims are not checked here, so never found".into()),
        };
        let learn = calibration.map(|c| Learn {
            calibration: c.clone(),
            model: fitted.req.model.clone(),
        });
        Ok((fitted.req, fitted.report, learn))
    }
}

/// A standalone fitting layer and its service: the same surface for prune and clear,
/// which differ only in their stages.
macro_rules! fit_layer {
    ($(#[$doc:meta])* $layer:ident => $service:ident, $stages:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $layer {
            config: std::sync::Arc<$crate::fit::FitConfig>,
        }

        impl $layer {
            /// A layer for a policy; fails when the policy does not validate. The model's
            /// window comes from the built-in catalog when the policy sets none, as in
            /// [`ContextPolicyLayer`](crate::ContextPolicyLayer).
            pub fn new(
                policy: $crate::ContextPolicy,
            ) -> Result<Self, $crate::PolicyError> {
                Ok(Self {
                    config: std::sync::Arc::new($crate::fit::FitConfig::new(policy)?),
                })
            }

            /// Takes context windows from `catalog` instead of the built-in one.
            #[must_use]
            pub fn with_catalog(mut self, catalog: std::sync::Arc<$crate::Catalog>) -> Self {
                std::sync::Arc::make_mut(&mut self.config).catalog = catalog;
                self
            }

            /// Learns the provider's counting from responses and plans to the allowance
            /// divided by it, as [`ContextPolicyLayer::with_calibration`](crate::ContextPolicyLayer::with_calibration) does.
            #[must_use]
            pub fn with_calibration(mut self, calibration: $crate::Calibration) -> Self {
                std::sync::Arc::make_mut(&mut self.config).calibration = Some(calibration);
                self
            }
        }

        impl<S> tower::Layer<S> for $layer {
            type Service = $service<S>;

            fn layer(&self, inner: S) -> Self::Service {
                $service {
                    fit: $crate::fit::Fit::new(inner, self.config.clone(), $stages),
                }
            }
        }

        #[doc = concat!("The service of [`", stringify!($layer), "`].")]
        #[derive(Clone, Debug)]
        pub struct $service<S> {
            fit: $crate::fit::Fit<S>,
        }

        impl<S> $service<S> {
            /// Wraps `inner`; fails when the policy does not validate.
            pub fn new(inner: S, policy: $crate::ContextPolicy) -> Result<Self, $crate::PolicyError> {
                Ok(tower::Layer::layer(&$layer::new(policy)?, inner))
            }

            inner_accessors!(fit.inner);
        }

        impl<S> tower::Service<$crate::ChatRequest> for $service<S>
        where
            S: tower::Service<$crate::ChatRequest, Response = $crate::ChatResponse>,
            S::Error: Into<$crate::BoxError>,
        {
            type Response = $crate::ChatResponse;
            type Error = $crate::BoxError;
            type Future = $crate::future::ResponseFuture<S::Future>;

            fn poll_ready(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), Self::Error>> {
                self.fit.poll_ready(cx)
            }

            fn call(&mut self, req: $crate::ChatRequest) -> Self::Future {
                self.fit.call(req)
            }
        }

        impl<S> tower::Service<$crate::stream::Streaming> for $service<S>
        where
            S: tower::Service<$crate::stream::Streaming, Response = $crate::stream::ChatStream>,
            S::Future: Send + 'static,
            S::Error: Into<$crate::BoxError>,
        {
            type Response = $crate::stream::ChatStream;
            type Error = $crate::BoxError;
            type Future = $crate::stream::StreamFuture;

            fn poll_ready(
                &mut self,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), Self::Error>> {
                tower::Service::<$crate::stream::Streaming>::poll_ready(&mut self.fit, cx)
            }

            fn call(&mut self, req: $crate::stream::Streaming) -> Self::Future {
                self.fit.call(req)
            }
        }
    };
}
pub(crate) use fit_layer;
