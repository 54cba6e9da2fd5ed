//! [`MemoryStore`] in process memory.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use super::memory::{MemoryEntry, MemoryStore};
use crate::model::Scope;
use crate::store::StoreError;

/// Memory entries in process memory, ordered per tenant; they disappear when the
/// process exits. Expired entries are dropped when a read or a listing meets them.
#[derive(Debug, Default)]
pub struct LocalMemoryStore {
    tenants: Mutex<HashMap<String, BTreeMap<String, MemoryEntry>>>,
}

impl LocalMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Entries held (expired ones not yet dropped included), all tenants together.
    pub fn len(&self) -> usize {
        self.lock().values().map(BTreeMap::len).sum()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, BTreeMap<String, MemoryEntry>>> {
        // Each critical section leaves the maps consistent before it could panic.
        self.tenants.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl MemoryStore for LocalMemoryStore {
    async fn put(&self, scope: &Scope, entry: MemoryEntry) -> Result<(), StoreError> {
        self.lock()
            .entry(scope.key())
            .or_default()
            .insert(entry.key.clone(), entry);
        Ok(())
    }

    async fn get(
        &self,
        scope: &Scope,
        key: &str,
        now_ms: u64,
    ) -> Result<Option<MemoryEntry>, StoreError> {
        let mut tenants = self.lock();
        let Some(entries) = tenants.get_mut(&scope.key()) else {
            return Ok(None);
        };
        match entries.get(key) {
            Some(e) if e.is_expired(now_ms) => {
                entries.remove(key);
                Ok(None)
            }
            found => Ok(found.cloned()),
        }
    }

    async fn delete(&self, scope: &Scope, key: &str, now_ms: u64) -> Result<bool, StoreError> {
        let mut tenants = self.lock();
        let removed = tenants
            .get_mut(&scope.key())
            .and_then(|entries| entries.remove(key));
        Ok(removed.is_some_and(|e| !e.is_expired(now_ms)))
    }

    async fn range(
        &self,
        scope: &Scope,
        from: &str,
        to: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<MemoryEntry>, StoreError> {
        let mut tenants = self.lock();
        let Some(entries) = tenants.get_mut(&scope.key()) else {
            return Ok(Vec::new());
        };
        let upper = to.map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::new();
        let mut expired = Vec::new();
        for (key, entry) in entries.range::<str, _>((Bound::Included(from), upper)) {
            if entry.is_expired(now_ms) {
                expired.push(key.clone());
                continue;
            }
            if out.len() == limit {
                break;
            }
            out.push(entry.clone());
        }
        for key in expired {
            entries.remove(&key);
        }
        Ok(out)
    }
}
