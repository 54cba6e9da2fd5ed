use std::sync::Arc;

use tower::Layer;

use super::service::ContextPolicyService;
use super::steps::Composite;
use crate::artifact::ArtifactStore;
use crate::artifact::{ArtifactLimits, ArtifactReader, LocalArtifactStore};
use crate::calibration::Calibration;
use crate::catalog::Catalog;
use crate::fit::{CutStore, LocalCutStore};
use crate::memo::{DefaultPredicate, MemoLayer};
use crate::offload::PreviewCache;
use crate::policy::{ContextPolicy, PolicyError};
use crate::prefix::PrefixLayer;

/// The auto-resolve rounds of [`ContextPolicyLayer::with_auto_resolve`].
pub const DEFAULT_RESOLVE_ROUNDS: usize = 4;

/// Applies a whole [`ContextPolicy`]. See the [module docs](crate::context_policy).
///
/// `P` is the memo's predicate (what may be memoized); see
/// [`with_memo`](Self::with_memo).
#[derive(Clone)]
pub struct ContextPolicyLayer<P = DefaultPredicate> {
    shared: Arc<Composite>,
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
    /// A layer for a policy, with a bounded in-memory artifact store (`max_artifacts` and
    /// `max_artifact_bytes` per session, 128 sessions); fails when the policy does not
    /// validate.
    pub fn new(policy: ContextPolicy) -> Result<Self, PolicyError> {
        policy.validate()?;
        let limits = ArtifactLimits::default()
            .with_per_session(policy.max_artifacts)
            .with_session_bytes(policy.max_artifact_bytes);
        let store: Arc<dyn ArtifactStore> = Arc::new(LocalArtifactStore::new(limits));
        Ok(Self {
            shared: Arc::new(Composite {
                reader: ArtifactReader::new(store.clone()),
                store,
                memory: PreviewCache::default(),
                policy,
                prefix: PrefixLayer::new(),
                catalog: Catalog::builtin(),
                auto_resolve: None,
                cuts: Arc::new(LocalCutStore::default()),
                calibration: None,
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

    /// Bounds what the layer remembers of each session's offloaded results (their
    /// previews and ids, so a transcript sent again is not offloaded again) to about
    /// `bytes`, least recently used sessions forgotten first. Default 64 MiB; 0 remembers
    /// nothing, and every request offloads its whole transcript again, to the same bytes.
    ///
    /// ```
    /// use llm_context_layers::{ContextPolicy, ContextPolicyLayer};
    ///
    /// let layer = ContextPolicyLayer::new(ContextPolicy::default())
    ///     .unwrap()
    ///     .with_offload_memory(16 << 20);
    /// # let _ = layer;
    /// ```
    #[must_use]
    pub fn with_offload_memory(self, bytes: usize) -> Self {
        self.with_shared(|s| s.memory = PreviewCache::new(bytes))
    }

    /// Keeps artifacts in `store` (shared with other stacks, durable, …) instead of the
    /// default in-memory one.
    #[must_use]
    pub fn with_artifact_store(self, store: Arc<dyn ArtifactStore>) -> Self {
        self.with_shared(|s| {
            s.reader = ArtifactReader::new(store.clone());
            s.store = store;
            // What the sessions offloaded into the old store says nothing of the new one.
            s.memory = s.memory.emptied();
        })
    }

    /// Uses `prefix` for the prefix step: a prefix injected into requests that carry none
    /// (counted in the allowance, since it is injected before planning) and the cache
    /// breakpoints to mark. The default injects nothing and marks all three breakpoints
    /// (tools, prefix, stable history) with a 5-minute TTL where the model's minimum
    /// cacheable length is reached.
    #[must_use]
    pub fn with_prefix(self, prefix: PrefixLayer) -> Self {
        self.with_shared(|s| s.prefix = prefix.with_catalog(s.catalog.clone()))
    }

    /// Takes context windows and cache minimums from `catalog` instead of the built-in
    /// one. The model's window is the ceiling when the policy sets no `max_context_tokens` or
    /// `context_window`.
    #[must_use]
    pub fn with_catalog(self, catalog: Arc<Catalog>) -> Self {
        self.with_shared(|s| {
            s.prefix = s.prefix.clone().with_catalog(catalog.clone());
            s.catalog = catalog;
        })
    }

    /// Answers the model's `read_context_artifact` calls inside the stack, up to
    /// [`DEFAULT_RESOLVE_ROUNDS`] times a request, so an agent loop that knows nothing
    /// about artifacts still works. The messages added are in the response's
    /// `report.resolved_messages`.
    #[must_use]
    pub fn with_auto_resolve(self) -> Self {
        self.with_auto_resolve_rounds(DEFAULT_RESOLVE_ROUNDS)
    }

    /// [`with_auto_resolve`](Self::with_auto_resolve) with a bound of `rounds`.
    #[must_use]
    pub fn with_auto_resolve_rounds(self, rounds: usize) -> Self {
        self.with_shared(|s| s.auto_resolve = Some(rounds))
    }

    /// Remembers sessions' cuts in `store` instead of the default in-memory one (10,000
    /// sessions). Consulted only when the policy sets
    /// [`low_water_tokens`](ContextPolicy::low_water_tokens); see [`cut`](crate::fit::cut).
    #[must_use]
    pub fn with_cut_store(self, store: Arc<dyn CutStore>) -> Self {
        self.with_shared(|s| s.cuts = store)
    }

    /// Learns from every response how the provider counts each model's prompts against
    /// the estimate, and plans each request to the allowance divided by that ratio (see
    /// [`calibration`](crate::calibration)). Share `calibration` between stacks that call
    /// the same models.
    #[must_use]
    pub fn with_calibration(self, calibration: Calibration) -> Self {
        self.with_shared(|s| s.calibration = Some(calibration))
    }

    /// The store of sessions' cuts.
    pub fn cut_store(&self) -> Arc<dyn CutStore> {
        self.shared.cuts.clone()
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

    fn with_shared(self, f: impl FnOnce(&mut Composite)) -> Self {
        let mut shared = Composite::clone(&self.shared);
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
