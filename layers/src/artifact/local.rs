//! A bounded in-memory [`ArtifactStore`].

use std::collections::HashSet;
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
    /// Artifacts per (scope, session), besides those the session's latest request refers
    /// to. Default 32 (`ContextPolicy::max_artifacts`).
    pub per_session: usize,
    /// Bytes of artifact text per (scope, session), with the same exception. Default
    /// 32 MiB (`ContextPolicy::max_artifact_bytes`).
    pub session_bytes: usize,
    /// Sessions kept. Default 128.
    pub sessions: usize,
    /// Bytes of artifact text kept in all. Default 256 MiB.
    pub total_bytes: usize,
}

impl Default for ArtifactLimits {
    fn default() -> Self {
        Self {
            per_session: 32,
            session_bytes: 32 << 20,
            sessions: 128,
            total_bytes: 256 << 20,
        }
    }
}

impl ArtifactLimits {
    /// Sets the artifacts kept per session.
    #[must_use]
    pub fn with_per_session(mut self, n: usize) -> Self {
        self.per_session = n.max(1);
        self
    }

    /// Sets the bytes kept per session.
    #[must_use]
    pub fn with_session_bytes(mut self, n: usize) -> Self {
        self.session_bytes = n;
        self
    }

    /// Sets the sessions kept.
    #[must_use]
    pub fn with_sessions(mut self, n: usize) -> Self {
        self.sessions = n.max(1);
        self
    }

    /// Sets the total bytes kept.
    #[must_use]
    pub fn with_total_bytes(mut self, n: usize) -> Self {
        self.total_bytes = n;
        self
    }
}

type SessionKey = (String, String);

/// One session's artifacts, least recently used first, and the ids its latest request
/// refers to (never evicted while they are).
struct Session {
    artifacts: LruCache<String, Artifact>,
    live: HashSet<String, foldhash::fast::RandomState>,
    /// A digest of the ids the live set was made from, in order, so that a request naming
    /// the same ids as the one before (an agent loop's usual request) is told in one hash
    /// of ids it has just written, instead of a lookup of each in the set.
    live_digest: Option<u128>,
    /// Whether the session held every live id after the last commit. Live artifacts are
    /// never evicted (only a whole session is, and then this one is new), so while the
    /// live set stays the same and nothing is added, they all still are.
    all_held: bool,
    bytes: usize,
}

impl Session {
    fn new() -> Self {
        Self {
            artifacts: LruCache::unbounded(),
            live: HashSet::default(),
            live_digest: None,
            all_held: false,
            bytes: 0,
        }
    }

    /// Evicts artifacts outside the live set, least recently used first, while `over`
    /// says the session is over a bound; returns the bytes freed.
    fn evict_unreferenced(&mut self, mut over: impl FnMut(usize, usize) -> bool) -> usize {
        let victims: Vec<String> = {
            let (mut n, mut bytes) = (self.artifacts.len(), self.bytes);
            let mut out = Vec::new();
            // `iter().rev()` walks least recently used first.
            for (id, a) in self.artifacts.iter().rev() {
                if !over(n, bytes) {
                    break;
                }
                if self.live.contains(id) {
                    continue;
                }
                n -= 1;
                bytes -= a.text.len();
                out.push(id.clone());
            }
            out
        };
        let mut freed = 0;
        for id in victims {
            if let Some(a) = self.artifacts.pop(&id) {
                freed += a.text.len();
            }
        }
        self.bytes -= freed;
        freed
    }
}

struct Inner {
    sessions: LruCache<SessionKey, Session>,
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
/// Eviction never takes an artifact the session's latest request refers to (its live set,
/// see [`ArtifactStore::commit`]); among the others it is least recently used at every
/// level, because an agent reads back what it offloaded recently. Within a session, the
/// least recently stored or read artifact goes when the session is over `per_session` or
/// `session_bytes`; past `sessions`, the least recently used session goes whole (its next
/// commit reports its ids missing, and the stack stores them again); past `total_bytes`,
/// unreferenced artifacts of the least recently used sessions go first, then whole idle
/// sessions. A read counts as a use.
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
        self.lock()
            .sessions
            .iter()
            .map(|(_, s)| s.artifacts.len())
            .sum()
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

impl Inner {
    /// The session `key`, made (and the least recently used one evicted past the
    /// `sessions` bound) when it is new; now the most recently used.
    fn session(&mut self, key: SessionKey, limits: &ArtifactLimits) -> &mut Session {
        if !self.sessions.contains(&key) {
            if self.sessions.len() >= limits.sessions
                && let Some((_, evicted)) = self.sessions.pop_lru()
            {
                self.bytes -= evicted.bytes;
            }
            self.sessions.put(key.clone(), Session::new());
        }
        self.sessions.get_mut(&key).expect("inserted above")
    }

    /// Stores `artifact` in the most recently used session unless it is there (ids are
    /// content-addressed: the same id is the same text).
    fn insert(&mut self, key: &SessionKey, id: String, artifact: Artifact) {
        let Some(session) = self.sessions.peek_mut(key) else {
            return;
        };
        if session.artifacts.get(&id).is_some() {
            return;
        }
        let size = artifact.text.len();
        session.artifacts.put(id, artifact);
        session.bytes += size;
        self.bytes += size;
    }

    /// Brings the session `key` within its bounds, then the store within its byte bound,
    /// evicting only what no session's latest request refers to, and then whole idle
    /// sessions (never `key`'s).
    fn enforce(&mut self, key: &SessionKey, limits: &ArtifactLimits, all_live: bool) {
        if !all_live && let Some(session) = self.sessions.peek_mut(key) {
            let freed = session.evict_unreferenced(|n, bytes| {
                n > limits.per_session || bytes > limits.session_bytes
            });
            self.bytes -= freed;
        }
        if self.bytes <= limits.total_bytes {
            return;
        }
        // Least recently used sessions first (`iter().rev()`); `key` is the most recent.
        let order: Vec<SessionKey> = self.sessions.iter().rev().map(|(k, _)| k.clone()).collect();
        for k in &order {
            let excess = self.bytes.saturating_sub(limits.total_bytes);
            if excess == 0 {
                return;
            }
            if let Some(session) = self.sessions.peek_mut(k) {
                let start = session.bytes;
                // Over while less than the excess has been freed from this session.
                let freed = session.evict_unreferenced(|_, bytes| start - bytes < excess);
                self.bytes -= freed;
            }
        }
        for k in order.iter().filter(|k| *k != key) {
            if self.bytes <= limits.total_bytes {
                return;
            }
            if let Some(evicted) = self.sessions.pop(k) {
                self.bytes -= evicted.bytes;
            }
        }
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
        self.check_size(&artifact)?;
        let mut inner = self.lock();
        let key = (scope.key(), session.to_owned());
        inner.session(key.clone(), &self.limits);
        inner.insert(&key, id.to_owned(), artifact);
        inner.enforce(&key, &self.limits, false);
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
            .and_then(|s| s.artifacts.get(id).cloned()))
    }

    /// The same use as [`get`](Self::get) (the artifact contract's), without cloning it.
    async fn contains(&self, scope: &Scope, session: &str, id: &str) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        let key = (scope.key(), session.to_owned());
        Ok(inner
            .sessions
            .get_mut(&key)
            .is_some_and(|s| s.artifacts.get(id).is_some()))
    }

    async fn commit(
        &self,
        scope: &Scope,
        session: &str,
        new: Vec<(String, Artifact)>,
        referenced: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let mut inner = self.lock();
        let key = (scope.key(), session.to_owned());
        let s = inner.session(key.clone(), &self.limits);
        // An agent loop names the same ids request after request.
        let digest = live_digest(referenced);
        let same = s.live_digest == Some(digest);
        if !same {
            s.live.clear();
            s.live.extend(referenced.iter().cloned());
            s.live_digest = Some(digest);
        }
        if same && s.all_held && new.is_empty() {
            // Nothing added, nothing live evicted since: every id is held, as it was. The
            // live artifacts keep their order of use, which only matters once one stops
            // being live.
            return Ok(Vec::new());
        }
        for (id, artifact) in new {
            // One artifact over the store's whole bound is a missing reference.
            if self.check_size(&artifact).is_ok() {
                inner.insert(&key, id, artifact);
            }
        }
        // What is missing now stays missing: eviction below takes only what the live set
        // does not name. Every reference found is a use.
        let s = inner.sessions.get_mut(&key).expect("made above");
        let missing: Vec<String> = referenced
            .iter()
            .filter(|id| s.artifacts.get(id.as_str()).is_none())
            .cloned()
            .collect();
        s.all_held = missing.is_empty();
        // All the session holds is live (the usual case of a loop): nothing to scan.
        let all_live = s.artifacts.len() + missing.len() <= s.live.len();
        inner.enforce(&key, &self.limits, all_live);
        Ok(missing)
    }
}

/// The digest of a live set's ids, in order (two requests naming the same ids in another
/// order make the set again, which is only slower).
fn live_digest(referenced: &[String]) -> u128 {
    let mut h = crate::hash::StableHasher::new("llm-context/live-set/v1");
    for id in referenced {
        h.str(id);
    }
    h.finish()
}

impl LocalArtifactStore {
    fn check_size(&self, artifact: &Artifact) -> Result<(), StoreError> {
        let size = artifact.text.len();
        let max = self.limits.session_bytes.min(self.limits.total_bytes);
        if size > max {
            return Err(StoreError::new(
                StoreErrorKind::TooLarge,
                format!("an artifact of {size} bytes exceeds the store's {max} bytes"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn art(n: usize) -> Artifact {
        Artifact::new(&"x".repeat(n), usize::MAX)
    }

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn the_live_set_outlasts_the_count_bound() {
        let store = LocalArtifactStore::new(ArtifactLimits::default().with_per_session(2));
        let s = Scope::org(1);
        let new = vec![
            ("a".into(), art(1)),
            ("b".into(), art(1)),
            ("c".into(), art(1)),
        ];
        let missing = store
            .commit(&s, "s", new, &ids(&["a", "b", "c"]))
            .await
            .unwrap();
        // All three are referenced: over the bound, none evicted.
        assert!(missing.is_empty());
        assert_eq!(store.len(), 3);
        // The next request refers to "c" and a new "d": "a" and "b" may go now.
        let missing = store
            .commit(&s, "s", vec![("d".into(), art(1))], &ids(&["c", "d"]))
            .await
            .unwrap();
        assert!(missing.is_empty());
        assert_eq!(store.len(), 2);
        assert!(store.contains(&s, "s", "c").await.unwrap());
        assert!(store.contains(&s, "s", "d").await.unwrap());
        // A plain put evicts around the live set too.
        store.put(&s, "s", "e", art(1)).await.unwrap();
        assert!(store.contains(&s, "s", "c").await.unwrap());
        assert!(store.contains(&s, "s", "d").await.unwrap());
    }

    #[tokio::test]
    async fn the_byte_bounds_evict_only_unreferenced_artifacts() {
        let limits = ArtifactLimits::default()
            .with_session_bytes(10)
            .with_total_bytes(25);
        let store = LocalArtifactStore::new(limits);
        let (s, t) = (Scope::org(1), Scope::org(2));
        store.put(&s, "s", "old", art(6)).await.unwrap();
        let missing = store
            .commit(&s, "s", vec![("big".into(), art(8))], &ids(&["big"]))
            .await
            .unwrap();
        assert!(missing.is_empty());
        assert!(
            !store.contains(&s, "s", "old").await.unwrap(),
            "over 10 bytes"
        );
        assert!(store.contains(&s, "s", "big").await.unwrap());
        // Another session pushes the total over 25: the first session's live artifact
        // stays, its whole session is idle and goes only when nothing else frees room.
        store
            .commit(&t, "s", vec![("t1".into(), art(9))], &ids(&["t1"]))
            .await
            .unwrap();
        assert_eq!(store.bytes(), 17);
        store
            .commit(&t, "s", vec![("t2".into(), art(9))], &ids(&["t1", "t2"]))
            .await
            .unwrap();
        assert!(store.contains(&t, "s", "t1").await.unwrap());
        assert!(store.contains(&t, "s", "t2").await.unwrap());
        assert!(
            !store.contains(&s, "s", "big").await.unwrap(),
            "idle session evicted"
        );
        assert!(store.bytes() <= 25);
    }

    #[tokio::test]
    async fn commit_reports_what_it_does_not_hold() {
        let store = LocalArtifactStore::new(ArtifactLimits::default().with_total_bytes(4));
        let s = Scope::org(1);
        let missing = store
            .commit(
                &s,
                "s",
                vec![("ok".into(), art(2)), ("huge".into(), art(5))],
                &ids(&["ok", "huge", "never"]),
            )
            .await
            .unwrap();
        assert_eq!(missing, ids(&["huge", "never"]));
        // The same live set again: what was missing is reported again, not taken as held.
        let missing = store
            .commit(&s, "s", Vec::new(), &ids(&["ok", "huge", "never"]))
            .await
            .unwrap();
        assert_eq!(missing, ids(&["huge", "never"]));
    }

    #[tokio::test]
    async fn a_repeated_live_set_is_checked_again_once_its_session_was_evicted() {
        let store = LocalArtifactStore::new(ArtifactLimits::default().with_sessions(1));
        let s = Scope::org(1);
        let refs = ids(&["a", "b"]);
        let new = vec![("a".into(), art(1)), ("b".into(), art(1))];
        assert!(store.commit(&s, "s", new, &refs).await.unwrap().is_empty());
        // The same ids, nothing new: all held, as before.
        assert!(
            store
                .commit(&s, "s", Vec::new(), &refs)
                .await
                .unwrap()
                .is_empty()
        );
        // Another session takes the only slot: the first one's artifacts are gone, and a
        // request naming the same ids as before is told so.
        store.put(&s, "other", "x", art(1)).await.unwrap();
        let missing = store.commit(&s, "s", Vec::new(), &refs).await.unwrap();
        assert_eq!(missing, refs);
        // In another order the same ids are the same live set.
        let new = vec![("a".into(), art(1)), ("b".into(), art(1))];
        assert!(store.commit(&s, "s", new, &refs).await.unwrap().is_empty());
        let missing = store
            .commit(&s, "s", Vec::new(), &ids(&["b", "a"]))
            .await
            .unwrap();
        assert!(missing.is_empty());
        assert_eq!(store.len(), 2);
    }
}
