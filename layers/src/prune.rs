//! Pruning whole old turns (and, inside a turn that alone is too long, old tool rounds).
//!
//! ```
//! use llm_context_layers::prune::PruneLayer;
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextPolicy, Message};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let policy = ContextPolicy::default().with_max_tokens(300).with_reserve_tokens(100);
//! let mut messages = vec![Message::system("Be brief.")];
//! for i in 0..10 {
//!     messages.push(Message::user(format!("question {i} {}", "detail ".repeat(20))));
//!     messages.push(Message::assistant(format!("answer {i} {}", "detail ".repeat(20))));
//! }
//! let model = PruneLayer::new(policy).unwrap().layer(MockModel::echo());
//! let reply = model.oneshot(ChatRequest::new("mock", messages)).await.unwrap();
//! assert!(reply.report.pruned_turns > 0);
//! assert!(reply.report.after_tokens <= 200);
//! # }
//! ```
//!
//! A turn is a real user request and everything up to the next one, so a tool call and its
//! results always go together, whatever role the provider uses for results. The system
//! messages before the first turn and the newest `preserve_recent` turns are never
//! pruned. When those still do not fit, the oldest complete tool rounds of the kept turns
//! (an assistant tool-call message with all its results) are dropped, never a user
//! request and never the newest `preserve_recent` rounds. If that is not enough, the call
//! fails with [`ContextLimitError`](crate::ContextLimitError) and the inner service is
//! never called.

use std::task::{Context, Poll};

use tower::{Layer, Service};

use crate::BoxError;
use crate::fit::{Fit, Stages};
pub use crate::future::ResponseFuture;
use crate::policy::{ContextPolicy, PolicyError};
use crate::request::{ChatRequest, ChatResponse};

/// Prunes old turns until the request fits. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct PruneLayer {
    policy: ContextPolicy,
}

impl PruneLayer {
    /// A layer for a policy; fails when the policy does not validate.
    pub fn new(policy: ContextPolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(Self { policy })
    }
}

impl<S> Layer<S> for PruneLayer {
    type Service = Prune<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Prune {
            fit: Fit::new(inner, self.policy.clone(), Stages::PRUNE),
        }
    }
}

/// The service of [`PruneLayer`].
#[derive(Clone, Debug)]
pub struct Prune<S> {
    fit: Fit<S>,
}

impl<S> Prune<S> {
    /// Wraps `inner`; fails when the policy does not validate.
    pub fn new(inner: S, policy: ContextPolicy) -> Result<Self, PolicyError> {
        Ok(PruneLayer::new(policy)?.layer(inner))
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        self.fit.get_ref()
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        self.fit.get_mut()
    }

    /// The inner service, consuming the wrapper.
    pub fn into_inner(self) -> S {
        self.fit.into_inner()
    }
}

impl<S> Service<ChatRequest> for Prune<S>
where
    S: Service<ChatRequest, Response = ChatResponse>,
    S::Error: Into<BoxError>,
{
    type Response = ChatResponse;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.fit.poll_ready(cx)
    }

    fn call(&mut self, req: ChatRequest) -> Self::Future {
        self.fit.call(req)
    }
}
