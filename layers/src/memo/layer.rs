//! [`MemoLayer`]: configuration, shared by every service it makes.

use std::sync::Arc;
use std::time::Duration;

use tower::Layer;

use super::predicate::{DefaultPredicate, MemoPredicate};
use super::service::Memo;
use super::state::{MemoState, debug_memo};
use super::store::MemoStore;

/// How long the memo waits for its store by default before calling the provider.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(100);

/// How long the memo skips a store that could not be reached, by default.
pub const DEFAULT_STORE_BACKOFF: Duration = Duration::from_secs(1);

/// Tenant-scoped memoization. See the [module docs](super).
#[derive(Clone)]
pub struct MemoLayer<P = DefaultPredicate> {
    pub(crate) shared: Option<Arc<MemoState>>,
    pub(crate) predicate: P,
}

impl<P> std::fmt::Debug for MemoLayer<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        debug_memo(f, "MemoLayer", self.shared.as_deref(), None)
    }
}

impl MemoLayer {
    /// Memoizes in `store` the requests the [`DefaultPredicate`] allows.
    pub fn new(store: Arc<dyn MemoStore>) -> Self {
        Self {
            shared: Some(Arc::new(MemoState::new(
                store,
                DEFAULT_STORE_TIMEOUT,
                DEFAULT_STORE_BACKOFF,
                Arc::from(""),
            ))),
            predicate: DefaultPredicate,
        }
    }

    /// A layer that passes every request straight through, so a composite can always
    /// include the memo stage and switch it on by configuration.
    pub fn disabled() -> Self {
        Self {
            shared: None,
            predicate: DefaultPredicate,
        }
    }
}

impl<P> MemoLayer<P> {
    /// Replaces what may be memoized (a [`MemoPredicate`] or a closure). Requests that opt
    /// out with [`MemoHint::Never`](crate::model::MemoHint::Never) stay out.
    pub fn predicate<Q: MemoPredicate>(self, predicate: Q) -> MemoLayer<Q> {
        MemoLayer {
            shared: self.shared,
            predicate,
        }
    }

    /// How long to wait for the store on each lookup and write (default
    /// [`DEFAULT_STORE_TIMEOUT`]); past it, the request goes to the provider and a warning
    /// is logged. Needs a Tokio runtime with its timer enabled.
    #[must_use]
    pub fn store_timeout(self, timeout: Duration) -> Self {
        self.rebuild(|s| (timeout, s.backoff, s.upstream.clone()))
    }

    /// Names where the wrapped service sends requests, e.g. `"openai
    /// https://api.openai.com/v1"`, and makes it part of every memo key
    /// ([`MemoKey::for_upstream`](crate::memo::MemoKey::for_upstream)). Set it whenever
    /// one store serves stacks that call different providers or servers: the same body
    /// sent to two of them must not be answered from the other's entry. The default is
    /// empty (one upstream per store).
    #[must_use]
    pub fn upstream(self, upstream: impl Into<String>) -> Self {
        let upstream: Arc<str> = Arc::from(upstream.into());
        self.rebuild(|s| (s.timeout, s.backoff, upstream))
    }

    /// After the store could not be reached (an error saying so, or the timeout), skip
    /// it for this long (default [`DEFAULT_STORE_BACKOFF`]; zero never skips): requests go
    /// straight to the provider, each with a warning, instead of each waiting out the
    /// timeout. The first request after the backoff tries the store again.
    #[must_use]
    pub fn store_backoff(self, backoff: Duration) -> Self {
        self.rebuild(|s| (s.timeout, backoff, s.upstream.clone()))
    }

    /// This layer with its shared state built anew (same store, fresh breaker and
    /// flights) around the `(timeout, backoff, upstream)` that `settings` picks; a
    /// disabled layer stays disabled.
    fn rebuild(
        mut self,
        settings: impl FnOnce(&MemoState) -> (Duration, Duration, Arc<str>),
    ) -> Self {
        if let Some(s) = &self.shared {
            let (timeout, backoff, upstream) = settings(s);
            self.shared = Some(Arc::new(MemoState::new(
                Arc::clone(&s.store),
                timeout,
                backoff,
                upstream,
            )));
        }
        self
    }

    /// Whether this layer memoizes anything (false for [`MemoLayer::disabled`]).
    pub fn is_enabled(&self) -> bool {
        self.shared.is_some()
    }
}

impl<S, P: Clone> Layer<S> for MemoLayer<P> {
    type Service = Memo<S, P>;

    fn layer(&self, inner: S) -> Self::Service {
        Memo::from_parts(inner, self.shared.clone(), self.predicate.clone())
    }
}
