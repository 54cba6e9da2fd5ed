//! `ServiceBuilder` methods for every layer of this crate.
//!
//! ```
//! use llm_context_layers::{ContextPolicy, ServiceBuilderExt};
//! use llm_context_layers::mock::MockModel;
//! use tower::ServiceBuilder;
//!
//! # fn main() -> Result<(), llm_context_layers::PolicyError> {
//! let policy = ContextPolicy::default().with_max_context_tokens(16_000);
//! let _model = ServiceBuilder::new()
//!     .prune(policy.clone())?
//!     .clear(policy)?
//!     .service(MockModel::echo());
//! # Ok(()) }
//! ```
//!
//! Each method that takes a policy validates it and returns the builder, so an invalid
//! policy fails where the stack is built, not on the first request. The others cannot
//! fail.
//!
//! ```
//! use std::sync::Arc;
//! use llm_context_layers::{PrefixContext, ServiceBuilderExt};
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::usage::UsageMeter;
//! use tower::ServiceBuilder;
//!
//! let meter = UsageMeter::new();
//! let _model = ServiceBuilder::new()
//!     .prefix(Arc::new(PrefixContext::new("You are terse.")))
//!     .usage(meter.clone())
//!     .service(MockModel::echo());
//! ```

use std::sync::Arc;

use tower::ServiceBuilder;
use tower::layer::util::Stack;

use crate::artifact::ArtifactStore;
use crate::context_policy::ContextPolicyLayer;
use crate::fit::ClearLayer;
use crate::fit::PruneLayer;
use crate::memo::{MemoLayer, MemoStore};
use crate::model::PrefixContext;
use crate::offload::OffloadLayer;
use crate::policy::{ContextPolicy, PolicyError};
use crate::prefix::PrefixLayer;
use crate::summarize::{SummarizeConfig, SummarizeLayer};
use crate::usage::{UsageLayer, UsageMeter};

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

    /// Adds [`OffloadLayer`] over `store`.
    fn offload(
        self,
        policy: ContextPolicy,
        store: Arc<dyn ArtifactStore>,
    ) -> Result<ServiceBuilder<Stack<OffloadLayer, L>>, PolicyError>;

    /// Adds [`MemoLayer`] with this store and the default predicate.
    fn memo(self, store: Arc<dyn MemoStore>) -> ServiceBuilder<Stack<MemoLayer, L>>;

    /// Adds [`PrefixLayer`] injecting `prefix` into requests that carry none, with the
    /// default breakpoints (see [`prefix`](crate::prefix)). For other settings, add a
    /// configured `PrefixLayer` with `layer`.
    fn prefix(self, prefix: Arc<PrefixContext>) -> ServiceBuilder<Stack<PrefixLayer, L>>;

    /// Adds [`UsageLayer`] recording into `meter`.
    fn usage(self, meter: UsageMeter) -> ServiceBuilder<Stack<UsageLayer, L>>;

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

    fn offload(
        self,
        policy: ContextPolicy,
        store: Arc<dyn ArtifactStore>,
    ) -> Result<ServiceBuilder<Stack<OffloadLayer, L>>, PolicyError> {
        Ok(self.layer(OffloadLayer::new(policy, store)?))
    }

    fn memo(self, store: Arc<dyn MemoStore>) -> ServiceBuilder<Stack<MemoLayer, L>> {
        self.layer(MemoLayer::new(store))
    }

    fn prefix(self, prefix: Arc<PrefixContext>) -> ServiceBuilder<Stack<PrefixLayer, L>> {
        self.layer(PrefixLayer::new().with_prefix(prefix))
    }

    fn usage(self, meter: UsageMeter) -> ServiceBuilder<Stack<UsageLayer, L>> {
        self.layer(UsageLayer::new(meter))
    }

    fn summarize(
        self,
        config: SummarizeConfig,
    ) -> Result<ServiceBuilder<Stack<SummarizeLayer, L>>, PolicyError> {
        Ok(self.layer(SummarizeLayer::new(config)?))
    }
}
