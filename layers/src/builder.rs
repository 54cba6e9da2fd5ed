//! `ServiceBuilder` methods for every layer of this crate.
//!
//! ```
//! use llm_context_layers::{ContextPolicy, ServiceBuilderExt};
//! use llm_context_layers::mock::MockModel;
//! use tower::ServiceBuilder;
//!
//! # fn main() -> Result<(), llm_context_layers::PolicyError> {
//! let policy = ContextPolicy::default().with_max_tokens(16_000);
//! let _model = ServiceBuilder::new()
//!     .prune(policy.clone())?
//!     .clear(policy)?
//!     .service(MockModel::echo());
//! # Ok(()) }
//! ```
//!
//! Each method validates the policy and returns the builder, so an invalid policy fails
//! where the stack is built, not on the first request.

use tower::ServiceBuilder;
use tower::layer::util::Stack;

use crate::clear::ClearLayer;
use crate::context_policy::ContextPolicyLayer;
use crate::policy::{ContextPolicy, PolicyError};
use crate::prune::PruneLayer;
use crate::summarize::{SummarizeConfig, SummarizeLayer};

mod sealed {
    pub trait Sealed<T> {}
}

/// Adds this crate's layers to a [`ServiceBuilder`]. Sealed.
pub trait ServiceBuilderExt<L>: sealed::Sealed<L> + Sized {
    /// Adds [`ContextPolicyLayer`].
    fn context_policy(
        self,
        policy: ContextPolicy,
    ) -> Result<ServiceBuilder<Stack<ContextPolicyLayer, L>>, PolicyError>;

    /// Adds [`PruneLayer`].
    fn prune(
        self,
        policy: ContextPolicy,
    ) -> Result<ServiceBuilder<Stack<PruneLayer, L>>, PolicyError>;

    /// Adds [`ClearLayer`].
    fn clear(
        self,
        policy: ContextPolicy,
    ) -> Result<ServiceBuilder<Stack<ClearLayer, L>>, PolicyError>;

    /// Adds [`SummarizeLayer`] (put it before [`context_policy`](Self::context_policy), so
    /// it runs first).
    fn summarize(
        self,
        config: SummarizeConfig,
    ) -> Result<ServiceBuilder<Stack<SummarizeLayer, L>>, PolicyError>;
}

impl<L> sealed::Sealed<L> for ServiceBuilder<L> {}

impl<L> ServiceBuilderExt<L> for ServiceBuilder<L> {
    fn context_policy(
        self,
        policy: ContextPolicy,
    ) -> Result<ServiceBuilder<Stack<ContextPolicyLayer, L>>, PolicyError> {
        Ok(self.layer(ContextPolicyLayer::new(policy)?))
    }

    fn prune(
        self,
        policy: ContextPolicy,
    ) -> Result<ServiceBuilder<Stack<PruneLayer, L>>, PolicyError> {
        Ok(self.layer(PruneLayer::new(policy)?))
    }

    fn clear(
        self,
        policy: ContextPolicy,
    ) -> Result<ServiceBuilder<Stack<ClearLayer, L>>, PolicyError> {
        Ok(self.layer(ClearLayer::new(policy)?))
    }

    fn summarize(
        self,
        config: SummarizeConfig,
    ) -> Result<ServiceBuilder<Stack<SummarizeLayer, L>>, PolicyError> {
        Ok(self.layer(SummarizeLayer::new(config)?))
    }
}
