//! The [`ContextStore`] trait and its in-memory backend.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;

use super::record::ContextRecord;
use crate::model::Scope;
use crate::store::{StoreError, check_context_id, version_conflict};

/// Durable, versioned context records, per tenant.
///
/// Every write is a compare-and-set on the version: [`save`](Self::save) commits
/// `record` only when the stored version is still `record.version` (0: no record yet),
/// as version `record.version + 1`, which it returns. Against any other version it
/// fails with [`StoreErrorKind::Conflict`](crate::StoreErrorKind::Conflict) and changes nothing, so two writers can never
/// silently overwrite each other: the loser reloads and tries again. A store never
/// answers for another tenant, whatever id it is asked for.
///
/// ```
/// use llm_context_layers::durable::{ContextRecord, ContextStore, LocalContextStore};
/// use llm_context_layers::{Message, Scope, StoreErrorKind};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::StoreError> {
/// let store = LocalContextStore::new();
/// let acme = Scope::org("acme");
/// let mut record = ContextRecord::new();
/// record.messages.push(Message::user("hello"));
/// record.version = store.save(&acme, "root", &record).await?;
/// assert_eq!(record.version, 1);
///
/// let stale = record.clone();
/// record.messages.push(Message::assistant("hi"));
/// record.version = store.save(&acme, "root", &record).await?; // 2
/// let err = store.save(&acme, "root", &stale).await.unwrap_err(); // still thinks 1
/// assert_eq!(err.kind, StoreErrorKind::Conflict);
///
/// assert_eq!(store.load(&acme, "root").await?.unwrap().messages.len(), 2);
/// assert!(store.load(&Scope::org("other"), "root").await?.is_none());
/// # Ok(()) }
/// ```
#[async_trait]
pub trait ContextStore: Send + Sync + 'static {
    /// The record `id` of `scope` at its last committed version, or `None`.
    async fn load(&self, scope: &Scope, id: &str) -> Result<Option<ContextRecord>, StoreError>;

    /// Commits `record` if the stored version is `record.version` (0: absent); returns
    /// the new version. A stale version fails with [`StoreErrorKind::Conflict`](crate::StoreErrorKind::Conflict).
    async fn save(
        &self,
        scope: &Scope,
        id: &str,
        record: &ContextRecord,
    ) -> Result<u64, StoreError>;

    /// Removes the record `id` of `scope`; whether there was one.
    async fn delete(&self, scope: &Scope, id: &str) -> Result<bool, StoreError>;
}

/// Context records in memory; they disappear when the process exits.
#[derive(Debug, Default)]
pub struct LocalContextStore {
    records: Mutex<HashMap<(String, String), ContextRecord>>,
}

impl LocalContextStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records held, all tenants together.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the store holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), ContextRecord>> {
        // Each critical section is one map operation: a panic cannot leave it half done.
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl ContextStore for LocalContextStore {
    async fn load(&self, scope: &Scope, id: &str) -> Result<Option<ContextRecord>, StoreError> {
        check_context_id(id)?;
        Ok(self.lock().get(&(scope.key(), id.to_owned())).cloned())
    }

    async fn save(
        &self,
        scope: &Scope,
        id: &str,
        record: &ContextRecord,
    ) -> Result<u64, StoreError> {
        check_context_id(id)?;
        let mut records = self.lock();
        let key = (scope.key(), id.to_owned());
        let found = records.get(&key).map_or(0, |r| r.version);
        if found != record.version {
            return Err(version_conflict(id, record.version, found));
        }
        let mut stored = record.clone();
        stored.version = found + 1;
        records.insert(key, stored);
        Ok(found + 1)
    }

    async fn delete(&self, scope: &Scope, id: &str) -> Result<bool, StoreError> {
        check_context_id(id)?;
        Ok(self.lock().remove(&(scope.key(), id.to_owned())).is_some())
    }
}
