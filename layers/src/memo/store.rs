//! The `MemoStore` trait: where memoized responses are kept.

use std::sync::Arc;

use async_trait::async_trait;

use super::key::MemoKey;
use super::lease::Claim;
use crate::model::ChatResponse;
use crate::store::StoreError;

/// Where memoized responses are kept. Object-safe, so the store can be chosen at run
/// time (`Arc<dyn MemoStore>`): [`LocalMemoStore`](super::LocalMemoStore) here,
/// a Redis store in `llm-context` for a fleet of replicas.
///
/// An implementation keeps entries apart by the **whole** key, scope included; the
/// simplest way is to build its own key from [`MemoKey::scope_key`] and
/// [`MemoKey::digest_hex`]. It bounds what it keeps (a TTL, a size) and reports a
/// backend it cannot reach as a [`StoreError`]: the memo layer then calls the provider
/// and logs a warning, so a store outage never fails a request.
///
/// ```
/// use std::sync::Arc;
/// use llm_context_layers::memo::{LocalMemoStore, MemoKey, MemoStore};
/// use llm_context_layers::{ChatRequest, ChatResponse, Message};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::StoreError> {
/// let store: Arc<dyn MemoStore> = Arc::new(LocalMemoStore::default());
/// let key = MemoKey::for_request(&ChatRequest::new("m", vec![Message::user("hi")]));
/// store.put(&key, &ChatResponse::new(Message::assistant("hello"))).await?;
/// assert_eq!(store.get(&key).await?.unwrap().message.text(), "hello");
/// # Ok(()) }
/// ```
#[async_trait]
pub trait MemoStore: Send + Sync + 'static {
    /// The response stored under `key`, or `None` (never stored, expired or evicted).
    async fn get(&self, key: &MemoKey) -> Result<Option<ChatResponse>, StoreError>;

    /// Stores `response` under `key`, replacing what was there.
    async fn put(&self, key: &MemoKey, response: &ChatResponse) -> Result<(), StoreError>;

    /// Claims the call for `key` among every process sharing this store, after a lookup
    /// missed: the stored answer if there is one by now, else a [lease](super::MemoLease)
    /// to make the call under, else [`Claim::Held`] while another process makes it. The
    /// check and the claim are one atomic step, so two processes never both lead.
    ///
    /// The default is [`Claim::Unshared`]: a store only one process uses needs no more
    /// than the memo layer's own single flight.
    async fn claim(&self, key: &MemoKey) -> Result<Claim, StoreError> {
        let _ = key;
        Ok(Claim::Unshared)
    }
}

#[async_trait]
impl<T: MemoStore + ?Sized> MemoStore for Arc<T> {
    async fn get(&self, key: &MemoKey) -> Result<Option<ChatResponse>, StoreError> {
        (**self).get(key).await
    }

    async fn put(&self, key: &MemoKey, response: &ChatResponse) -> Result<(), StoreError> {
        (**self).put(key, response).await
    }

    async fn claim(&self, key: &MemoKey) -> Result<Claim, StoreError> {
        (**self).claim(key).await
    }
}
