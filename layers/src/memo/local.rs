//! The bounded in-memory memo store, on moka.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use moka::future::Cache;

use super::key::MemoKey;
use super::store::MemoStore;
use crate::model::ChatResponse;
use crate::store::StoreError;

/// Bytes kept by [`LocalMemoStore::default`].
pub const DEFAULT_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// How long [`LocalMemoStore::default`] keeps an entry.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60 * 60);

/// A memo store in this process, bounded by bytes and by age.
///
/// Entries live at most `ttl` after they were written and the total size (the
/// response's JSON length plus its key) stays under `max_bytes`, evicting the least
/// useful entries first (moka's TinyLFU). Clones share one cache.
///
/// ```
/// use std::time::Duration;
/// use llm_context_layers::memo::LocalMemoStore;
///
/// let store = LocalMemoStore::new(8 * 1024 * 1024, Duration::from_secs(600));
/// assert_eq!(store.max_bytes(), 8 * 1024 * 1024);
/// ```
#[derive(Clone)]
pub struct LocalMemoStore {
    cache: Cache<MemoKey, Arc<ChatResponse>>,
    max_bytes: u64,
    ttl: Duration,
}

impl std::fmt::Debug for LocalMemoStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalMemoStore")
            .field("max_bytes", &self.max_bytes)
            .field("ttl", &self.ttl)
            .field("entries", &self.cache.entry_count())
            .finish()
    }
}

impl Default for LocalMemoStore {
    /// [`DEFAULT_MAX_BYTES`] and [`DEFAULT_TTL`].
    fn default() -> Self {
        Self::new(DEFAULT_MAX_BYTES, DEFAULT_TTL)
    }
}

impl LocalMemoStore {
    /// A store keeping at most `max_bytes`, each entry for at most `ttl`.
    pub fn new(max_bytes: u64, ttl: Duration) -> Self {
        let cache = Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|key: &MemoKey, value: &Arc<ChatResponse>| weight(key, value))
            .time_to_live(ttl)
            .build();
        Self {
            cache,
            max_bytes,
            ttl,
        }
    }

    /// The byte bound.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// How long an entry is kept.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Entries and weighted bytes held now, after pending evictions are applied.
    pub async fn occupancy(&self) -> (u64, u64) {
        self.cache.run_pending_tasks().await;
        (self.cache.entry_count(), self.cache.weighted_size())
    }
}

/// Bytes an entry is charged: its JSON length (what a shared store would hold) and key.
fn weight(key: &MemoKey, value: &ChatResponse) -> u32 {
    let mut counter = ByteCounter(0);
    // Writing plain data into a counter cannot fail; charge the maximum if it somehow does.
    let body = match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    };
    let total = body
        .saturating_add(key.scope_key().len())
        .saturating_add(16);
    u32::try_from(total).unwrap_or(u32::MAX)
}

struct ByteCounter(usize);

impl io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[async_trait]
impl MemoStore for LocalMemoStore {
    async fn get(&self, key: &MemoKey) -> Result<Option<ChatResponse>, StoreError> {
        Ok(self.cache.get(key).await.map(|r| (*r).clone()))
    }

    async fn put(&self, key: &MemoKey, response: &ChatResponse) -> Result<(), StoreError> {
        self.cache
            .insert(key.clone(), Arc::new(response.clone()))
            .await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChatRequest, Message, Scope};

    fn key(text: &str, scope: Scope) -> MemoKey {
        MemoKey::for_request(&ChatRequest::new("m", vec![Message::user(text)]).with_scope(scope))
    }

    fn response(chars: usize) -> ChatResponse {
        ChatResponse::new(Message::assistant("x".repeat(chars)))
    }

    #[tokio::test]
    async fn keeps_tenants_apart() {
        let store = LocalMemoStore::default();
        store
            .put(&key("q", Scope::org(1)), &response(3))
            .await
            .unwrap();
        assert!(store.get(&key("q", Scope::org(1))).await.unwrap().is_some());
        assert!(store.get(&key("q", Scope::org(2))).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn the_byte_bound_holds() {
        let store = LocalMemoStore::new(100_000, DEFAULT_TTL);
        for i in 0..100 {
            store
                .put(&key(&i.to_string(), Scope::org(1)), &response(10_000))
                .await
                .unwrap();
        }
        let (entries, bytes) = store.occupancy().await;
        assert!(bytes <= 100_000, "{bytes} bytes kept");
        assert!(
            (1..=9).contains(&entries),
            "{entries} entries of ~10 kB kept under 100 kB"
        );
    }

    #[tokio::test]
    async fn entries_expire() {
        // moka keeps time with its own clock, so this sleeps for real (briefly).
        let store = LocalMemoStore::new(DEFAULT_MAX_BYTES, Duration::from_millis(150));
        let k = key("q", Scope::org(1));
        store.put(&k, &response(3)).await.unwrap();
        assert!(store.get(&k).await.unwrap().is_some());
        std::thread::sleep(Duration::from_millis(300));
        assert!(store.get(&k).await.unwrap().is_none());
    }
}
