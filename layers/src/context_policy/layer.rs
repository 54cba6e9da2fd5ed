use std::sync::Arc;

use tower::Layer;

use crate::context_policy::service::{ContextPolicyService, Shared};
use crate::memo::{DefaultPredicate, MemoLayer};
use crate::offload::{ArtifactLimits, ArtifactReader, InMemoryArtifactStore};
use crate::policy::{ContextPolicy, PolicyError};
use crate::store::ArtifactStore;

/// The auto-resolve rounds of [`ContextPolicyLayer::with_auto_resolve`].
pub const DEFAULT_RESOLVE_ROUNDS: usize = 4;

/// Applies a whole [`ContextPolicy`]. See the [module docs](crate::context_policy).
///
/// `P` is the memo's predicate (what may be memoized); see
/// [`with_memo`](Self::with_memo).
#[derive(Clone)]
pub struct ContextPolicyLayer<P = DefaultPredicate> {
    shared: Arc<Shared>,
    memo: MemoLayer<P>,
}

impl<P> std::fmt::Debug for ContextPolicyLayer<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextPolicyLayer")
            .field("policy", &self.shared.policy)
            .field("auto_resolve", &self.shared.auto_resolve)
            .field("memo", &self.memo)
            .finish_non_exhaustive()
    }
}

impl ContextPolicyLayer {
    /// A layer for a policy, with a bounded in-memory artifact store (`max_artifacts` per
    /// session, 128 sessions); fails when the policy does not validate.
    pub fn new(policy: ContextPolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        let limits = ArtifactLimits::default().with_per_session(policy.max_artifacts);
        let store: Arc<dyn ArtifactStore> = Arc::new(InMemoryArtifactStore::new(limits));
        Ok(Self {
            shared: Arc::new(Shared {
                reader: ArtifactReader::new(store.clone()),
                store,
                policy,
                auto_resolve: None,
            }),
            memo: MemoLayer::disabled(),
        })
    }
}

impl<P> ContextPolicyLayer<P> {
    /// Memoizes prepared requests, per tenant, as the innermost step (see
    /// [`memo`](crate::memo)). Off by default.
    pub fn with_memo<Q>(self, memo: MemoLayer<Q>) -> ContextPolicyLayer<Q> {
        ContextPolicyLayer {
            shared: self.shared,
            memo,
        }
    }

    /// Keeps artifacts in `store` (shared with other stacks, durable, …) instead of the
    /// default in-memory one.
    pub fn with_artifact_store(self, store: Arc<dyn ArtifactStore>) -> Self {
        self.with_shared(|s| {
            s.reader = ArtifactReader::new(store.clone());
            s.store = store;
        })
    }

    /// Answers the model's `read_context_artifact` calls inside the stack, up to
    /// [`DEFAULT_RESOLVE_ROUNDS`] times a request, so an agent loop that knows nothing
    /// about artifacts still works. The messages added are in the response's
    /// `report.resolved_messages`.
    pub fn with_auto_resolve(self) -> Self {
        self.with_auto_resolve_rounds(DEFAULT_RESOLVE_ROUNDS)
    }

    /// [`with_auto_resolve`](Self::with_auto_resolve) with a bound of `rounds`.
    pub fn with_auto_resolve_rounds(self, rounds: usize) -> Self {
        self.with_shared(|s| s.auto_resolve = Some(rounds))
    }

    /// The policy.
    pub fn policy(&self) -> &ContextPolicy {
        &self.shared.policy
    }

    /// The artifact store.
    pub fn artifact_store(&self) -> Arc<dyn ArtifactStore> {
        self.shared.store.clone()
    }

    /// A handler for the `read_context_artifact` calls an agent loop receives.
    pub fn artifact_reader(&self) -> ArtifactReader {
        self.shared.reader.clone()
    }

    fn with_shared(self, f: impl FnOnce(&mut Shared)) -> Self {
        let mut shared = Shared::clone(&self.shared);
        f(&mut shared);
        Self {
            shared: Arc::new(shared),
            memo: self.memo,
        }
    }
}

impl<S, P: Clone> Layer<S> for ContextPolicyLayer<P> {
    type Service = ContextPolicyService<S, P>;

    fn layer(&self, inner: S) -> Self::Service {
        ContextPolicyService::new(self.memo.layer(inner), self.shared.clone())
    }
}
