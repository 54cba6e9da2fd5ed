//! Summaries by a stable hash of what they fold, so a transcript sent again pays for no
//! summary and gets the same bytes.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;

use crate::hash::StableHasher;
use crate::model::Message;
use crate::model::Scope;
use crate::model::SummaryBlock;

/// A bounded cache of summary blocks, keyed by a stable hash (XXH3-128) of the tenant,
/// the session and every message from the fold's start to its end.
///
/// A block folds everything up to its end, so an agent loop that resends its whole
/// transcript finds the longest fold it already paid for by hashing the transcript once,
/// checking the cache at each fold point. Clones share the entries.
#[derive(Clone)]
pub struct SummaryCache {
    inner: Arc<Mutex<LruCache<u128, Arc<SummaryBlock>>>>,
}

impl std::fmt::Debug for SummaryCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SummaryCache")
            .field("len", &self.len())
            .finish()
    }
}

impl Default for SummaryCache {
    fn default() -> Self {
        Self::new(DEFAULT_SUMMARY_CACHE)
    }
}

/// The summaries a [`SummaryCache`] keeps by default.
pub const DEFAULT_SUMMARY_CACHE: usize = 1_024;

impl SummaryCache {
    /// A cache of at most `capacity` summaries (at least one), least recently used out
    /// first.
    pub fn new(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            inner: Arc::new(Mutex::new(LruCache::new(capacity))),
        }
    }

    /// Summaries held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn get(&self, key: u128) -> Option<Arc<SummaryBlock>> {
        self.lock().get(&key).cloned()
    }

    pub(crate) fn put(&self, key: u128, block: Arc<SummaryBlock>) {
        self.lock().put(key, block);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<u128, Arc<SummaryBlock>>> {
        // Every critical section is one map call: a panic cannot leave it half done.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The cache key of `messages[start..end]` for every `end` in `points` (ascending), in
/// one pass.
pub(crate) fn point_keys(
    scope: &Scope,
    session: &str,
    messages: &[Message],
    start: usize,
    points: &[usize],
) -> Vec<u128> {
    let mut h = StableHasher::new("llm-context/summary-span/v1");
    h.str(&scope.key());
    h.str(session);
    let mut out = Vec::with_capacity(points.len());
    let mut next = start;
    for &end in points {
        // Each message is self-delimiting, so the running hash of a prefix is a key of
        // exactly that prefix.
        for m in &messages[next..end] {
            h.message(m);
        }
        next = end;
        out.push(h.finish());
    }
    out
}
