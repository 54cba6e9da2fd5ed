//! A bounded in-memory [`ArtifactStore`].

use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use lru::LruCache;

use super::store::{Artifact, ArtifactStore};
use crate::model::Scope;
use crate::store::{StoreError, StoreErrorKind};

/// Bounds of an [`LocalArtifactStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArtifactLimits {
    /// Artifacts per (scope, session). Default 32 (`ContextPolicy::max_artifacts`).
    pub per_session: usize,
    /// Sessions kept. Default 128.
    pub sessions: usize,
    /// Bytes of artifact text kept in all. Default 256 MiB.
    pub total_bytes: usize,
}

impl Default for ArtifactLimits {
    fn default() -> Self {
        Self {
            per_session: 32,
            sessions: 128,
            total_bytes: 256 << 20,
        }
    }
}

impl ArtifactLimits {
    /// Sets the artifacts kept per session.
    pub fn with_per_session(mut self, n: usize) -> Self {
        self.per_session = n.max(1);
        self
    }

    /// Sets the sessions kept.
    pub fn with_sessions(mut self, n: usize) -> Self {
        self.sessions = n.max(1);
        self
    }

    /// Sets the total bytes kept.
    pub fn with_total_bytes(mut self, n: usize) -> Self {
        self.total_bytes = n;
        self
    }
}

type SessionKey = (String, String);

struct Inner {
    sessions: LruCache<SessionKey, LruCache<String, Artifact>>,
    bytes: usize,
}

/// A bounded in-memory artifact store; artifacts disappear when the process exits.
///
/// ```
/// use llm_context_layers::artifact::{ArtifactLimits, LocalArtifactStore};
/// use llm_context_layers::{Artifact, ArtifactStore, Scope};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = LocalArtifactStore::new(ArtifactLimits::default().with_per_session(2));
/// let acme = Scope::org("acme");
/// for id in ["a", "b", "c"] {
///     store.put(&acme, "s1", id, Artifact::new(id, 100)).await.unwrap();
/// }
/// // "a" was the least recently used of the session: evicted.
/// assert!(store.get(&acme, "s1", "a").await.unwrap().is_none());
/// assert!(store.get(&acme, "s1", "c").await.unwrap().is_some());
/// // Another tenant never sees it, even with the right id.
/// assert!(store.get(&Scope::org("other"), "s1", "c").await.unwrap().is_none());
/// # }
/// ```
///
/// Eviction is least recently used at every level, because an agent reads back what it
/// offloaded recently: within a session, the least recently stored or read artifact goes
/// when the session is full; past `sessions`, the least recently used session goes whole;
/// past `total_bytes`, artifacts of the least recently used sessions go until the total
/// fits. A read counts as a use.
pub struct LocalArtifactStore {
    limits: ArtifactLimits,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for LocalArtifactStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("LocalArtifactStore")
            .field("limits", &self.limits)
            .field("sessions", &inner.sessions.len())
            .field("bytes", &inner.bytes)
            .finish()
    }
}

impl Default for LocalArtifactStore {
    fn default() -> Self {
        Self::new(ArtifactLimits::default())
    }
}

impl LocalArtifactStore {
    /// A store with these bounds.
    pub fn new(limits: ArtifactLimits) -> Self {
        Self {
            limits,
            inner: Mutex::new(Inner {
                sessions: LruCache::unbounded(),
                bytes: 0,
            }),
        }
    }

    /// The bounds.
    pub fn limits(&self) -> ArtifactLimits {
        self.limits
    }

    /// Artifacts held in all.
    pub fn len(&self) -> usize {
        self.lock().sessions.iter().map(|(_, s)| s.len()).sum()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sessions held.
    pub fn session_count(&self) -> usize {
        self.lock().sessions.len()
    }

    /// Bytes of artifact text held.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every critical section leaves the maps consistent before it can panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl ArtifactStore for LocalArtifactStore {
    async fn put(
        &self,
        scope: &Scope,
        session: &str,
        id: &str,
        artifact: Artifact,
    ) -> Result<(), StoreError> {
        let size = artifact.text.len();
        if size > self.limits.total_bytes {
            return Err(StoreError::new(
                StoreErrorKind::TooLarge,
                format!(
                    "an artifact of {size} bytes exceeds the store's {} bytes",
                    self.limits.total_bytes
                ),
            ));
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        let key = (scope.key(), session.to_owned());
        if !inner.sessions.contains(&key) {
            if inner.sessions.len() >= self.limits.sessions
                && let Some((_, evicted)) = inner.sessions.pop_lru()
            {
                inner.bytes -= evicted.iter().map(|(_, a)| a.text.len()).sum::<usize>();
            }
            inner.sessions.put(key.clone(), LruCache::unbounded());
        }
        let artifacts = inner.sessions.get_mut(&key).expect("inserted above");
        if artifacts.get(id).is_some() {
            // Content-addressed: the same id is the same text. Promoted by `get`.
            return Ok(());
        }
        if artifacts.len() >= self.limits.per_session
            && let Some((_, evicted)) = artifacts.pop_lru()
        {
            inner.bytes -= evicted.text.len();
        }
        artifacts.put(id.to_owned(), artifact);
        inner.bytes += size;
        // Over the byte bound: take from the least recently used sessions, never the
        // artifact just stored (it is the most recent of the most recent session).
        while inner.bytes > self.limits.total_bytes {
            let Some(oldest) = inner.sessions.peek_lru().map(|(k, _)| k.clone()) else {
                break;
            };
            // `peek_mut` leaves the session's recency alone.
            let popped = inner.sessions.peek_mut(&oldest).and_then(|s| s.pop_lru());
            match popped {
                Some((_, a)) => inner.bytes -= a.text.len(),
                None => {
                    inner.sessions.pop_lru();
                }
            }
        }
        Ok(())
    }

    async fn get(
        &self,
        scope: &Scope,
        session: &str,
        id: &str,
    ) -> Result<Option<Artifact>, StoreError> {
        let mut inner = self.lock();
        let key = (scope.key(), session.to_owned());
        Ok(inner
            .sessions
            .get_mut(&key)
            .and_then(|s| s.get(id).cloned()))
    }
}
