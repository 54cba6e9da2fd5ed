//! The composite layer: every preparation step, in order, from one [`ContextPolicy`].
//!
//! ```
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, ContextLimitError, ContextPolicy, ContextPolicyLayer, Message};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let policy = ContextPolicy::default().with_max_tokens(4_000).with_reserve_tokens(1_000);
//! let model = ServiceBuilder::new()
//!     .layer(ContextPolicyLayer::new(policy).unwrap())
//!     .service(MockModel::echo());
//!
//! // A request that fits goes through untouched.
//! let reply = model.clone().oneshot(ChatRequest::new("mock", vec![Message::user("hi")])).await.unwrap();
//! assert!(!reply.report.changed());
//!
//! // One that cannot fit fails before the model is called.
//! let huge = Message::user("word ".repeat(20_000));
//! let err = model.oneshot(ChatRequest::new("mock", vec![huge])).await.unwrap_err();
//! let limit = err.downcast_ref::<ContextLimitError>().unwrap();
//! assert_eq!(limit.allowance, 3_000);
//! # }
//! ```
//!
//! The steps, outermost first: **prune** old turns and **clear** old tool results (one
//! linear plan, in the order the policy asks, see [`fit`](crate::fit)), then the steps that
//! join in later releases (offload, prefix, memo) without changing this type. Preparation
//! is a pure function of the request, the policy and the stores: preparing a prepared
//! request changes nothing.

use std::task::{Context, Poll};

use tower::{Layer, Service};

use crate::BoxError;
use crate::fit::{Fit, ResponseFuture, Stages};
use crate::policy::{ContextPolicy, PolicyError};
use crate::request::{ChatRequest, ChatResponse};

/// Applies a whole [`ContextPolicy`]. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct ContextPolicyLayer {
    policy: ContextPolicy,
}

impl ContextPolicyLayer {
    /// A layer for a policy; fails when the policy does not validate.
    pub fn new(policy: ContextPolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(Self { policy })
    }

    /// The policy.
    pub fn policy(&self) -> &ContextPolicy {
        &self.policy
    }
}

impl<S> Layer<S> for ContextPolicyLayer {
    type Service = ContextPolicyService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ContextPolicyService {
            fit: Fit::new(inner, self.policy.clone(), Stages::ALL),
        }
    }
}

/// The service of [`ContextPolicyLayer`].
#[derive(Clone, Debug)]
pub struct ContextPolicyService<S> {
    fit: Fit<S>,
}

impl<S> ContextPolicyService<S> {
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

impl<S> Service<ChatRequest> for ContextPolicyService<S>
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
