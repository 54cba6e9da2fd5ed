//! [`SummarizeLayer`]: configuration and the stores it shares.

use std::sync::Arc;

use tower::Layer;

use super::cache::SummaryCache;
use super::config::SummarizeConfig;
use super::service::Summarize;
use crate::artifact::ArtifactStore;
use crate::artifact::LocalArtifactStore;
use crate::catalog::Catalog;
use crate::policy::PolicyError;

/// Folds old history into a summary written by the inner model. See the
/// [module docs](crate::summarize).
#[derive(Clone)]
pub struct SummarizeLayer {
    pub(crate) shared: Arc<SummarizeState>,
}

/// What every service of one layer shares.
pub(crate) struct SummarizeState {
    pub(crate) config: SummarizeConfig,
    pub(crate) cache: SummaryCache,
    pub(crate) store: Arc<dyn ArtifactStore>,
    /// Which models' providers compact on request and bind thinking (the executor's
    /// choice).
    pub(crate) catalog: Arc<Catalog>,
}

impl std::fmt::Debug for SummarizeLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummarizeLayer")
            .field("config", &self.shared.config)
            .field("cache", &self.shared.cache)
            .finish_non_exhaustive()
    }
}

impl SummarizeLayer {
    /// A layer with `config`, a cache of [`DEFAULT_SUMMARY_CACHE`](super::DEFAULT_SUMMARY_CACHE)
    /// summaries and a default in-memory artifact store; fails when the config does not
    /// validate.
    pub fn new(config: SummarizeConfig) -> Result<Self, PolicyError> {
        config.validate()?;
        Ok(Self {
            shared: Arc::new(SummarizeState {
                config,
                cache: SummaryCache::default(),
                store: Arc::new(LocalArtifactStore::default()),
                catalog: Catalog::builtin(),
            }),
        })
    }

    /// Keeps the folded spans in `store`. Give it the store of the
    /// [`ContextPolicyLayer`](crate::ContextPolicyLayer) below, so that its
    /// `read_context_artifact` handling finds them.
    #[must_use]
    pub fn with_artifact_store(self, store: Arc<dyn ArtifactStore>) -> Self {
        self.with_shared(|s| s.store = store)
    }

    /// Uses `cache` (shared with other layers or a [`Compactor`](crate::durable::Compactor)).
    #[must_use]
    pub fn with_cache(self, cache: SummaryCache) -> Self {
        self.with_shared(|s| s.cache = cache)
    }

    /// Chooses the executor with `catalog` (the built-in one by default): give it the
    /// catalog of the [`ContextPolicyLayer`](crate::ContextPolicyLayer) below.
    #[must_use]
    pub fn with_catalog(self, catalog: Arc<Catalog>) -> Self {
        self.with_shared(|s| s.catalog = catalog)
    }

    /// The configuration.
    pub fn config(&self) -> &SummarizeConfig {
        &self.shared.config
    }

    /// The summary cache.
    pub fn cache(&self) -> &SummaryCache {
        &self.shared.cache
    }

    /// The artifact store the folded spans go to.
    pub fn artifact_store(&self) -> Arc<dyn ArtifactStore> {
        self.shared.store.clone()
    }

    fn with_shared(self, f: impl FnOnce(&mut SummarizeState)) -> Self {
        let mut shared = SummarizeState {
            config: self.shared.config.clone(),
            cache: self.shared.cache.clone(),
            store: self.shared.store.clone(),
            catalog: self.shared.catalog.clone(),
        };
        f(&mut shared);
        Self {
            shared: Arc::new(shared),
        }
    }
}

impl<S> Layer<S> for SummarizeLayer {
    type Service = Summarize<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Summarize::new(inner, self.clone())
    }
}
