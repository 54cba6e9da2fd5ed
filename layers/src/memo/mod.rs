//! Tenant-scoped memoization: the same prepared request from the same tenant is answered
//! once.
//!
//! ```
//! use std::sync::Arc;
//! use llm_context_layers::memo::{LocalMemoStore, MemoLayer};
//! use llm_context_layers::mock::MockModel;
//! use llm_context_layers::{ChatRequest, Message, Scope};
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::BoxError> {
//! let provider = MockModel::echo();
//! let model = MemoLayer::new(Arc::new(LocalMemoStore::default())).layer(provider.clone());
//! let ask = |org: u32| {
//!     ChatRequest::new("mock", vec![Message::user("what is the number?")])
//!         .with_scope(Scope::org(org))
//!         .with_temperature(0.0)
//! };
//!
//! let first = model.clone().oneshot(ask(1)).await?;
//! let again = model.clone().oneshot(ask(1)).await?;   // same tenant: from the memo
//! let other = model.clone().oneshot(ask(999)).await?; // another tenant: its own call
//! assert!(!first.report.memo_hit && again.report.memo_hit && !other.report.memo_hit);
//! assert_eq!(provider.calls(), 2);
//! # Ok(()) }
//! ```
//!
//! **The key** ([`MemoKey`]) is a stable XXH3-128 digest of the prepared request — model,
//! prefix, messages, tools and generation parameters as canonical JSON — and is always
//! namespaced by [`Scope::key`](crate::Scope::key): it can only be built from a whole
//! request, and every request has a scope. Two tenants asking the same question make two
//! provider calls; sharing across tenants takes an explicit shared scope.
//!
//! **What may be memoized** is a [`MemoPredicate`]. The [`DefaultPredicate`] memoizes
//! requests with `temperature` 0 and requests that opt in with
//! [`MemoHint::Always`](crate::model::MemoHint); a request opts out with
//! [`MemoHint::Never`](crate::model::MemoHint) whatever the predicate says (set it with
//! [`ChatRequest::with_memo`](crate::ChatRequest::with_memo); it is never sent to the
//! provider). Errors are never memoized.
//!
//! **Memo hits say so**: `report.memo_hit` is true on a response that no provider call was
//! made for — read from the store, or shared from an identical request in flight. Its
//! `usage` is the usage of the call that produced it, kept for reference; cost accounting
//! should skip responses with `memo_hit` set.
//!
//! **Single flight**: concurrent identical requests in one scope make one call; the others
//! wait for its answer. If it fails, they all fail ([`FlightError`]) and nothing is stored.
//! No lock is held across the call; a waiter gives back its inner readiness while it
//! waits. A store shared by many processes (Redis, in `llm-context`) extends this across
//! them through [`MemoStore::claim`]: one process makes the call under a short lease it
//! renews while the call runs, the others poll the store for its answer, and take the
//! call over as soon as the lease is released (the call failed) or lapses (the process
//! died).
//!
//! **Store failures degrade, never fail**: a store error or a store slower than
//! [`MemoLayer::store_timeout`] sends the request to the provider and logs a `warn` event
//! (`event = "memo_store_degraded"`) saying why. After the store could not be reached it
//! is skipped for [`MemoLayer::store_backoff`], so an outage does not add the timeout to
//! every request.
//!
//! Stores: [`LocalMemoStore`] (bounded by bytes and age) here; `llm-context` adds a
//! Redis store so that many replicas share one memo. In [`ContextPolicyLayer`] this is the
//! innermost step, so the key is computed over the request as it will be sent.
//!
//! [`ContextPolicyLayer`]: crate::ContextPolicyLayer

mod breaker;
mod degrade;
mod flight;
mod future;
mod key;
mod layer;
mod lease;
mod local;
mod predicate;
mod service;
mod shared_flight;
mod state;
mod store;

pub use flight::FlightError;
pub use future::ResponseFuture;
pub use key::MemoKey;
pub use layer::{DEFAULT_STORE_BACKOFF, DEFAULT_STORE_TIMEOUT, MemoLayer};
pub use lease::{Claim, MemoLease};
pub use local::{DEFAULT_MAX_BYTES, DEFAULT_TTL, LocalMemoStore};
pub use predicate::{DefaultPredicate, MemoPredicate};
pub use service::Memo;
pub use store::MemoStore;

#[cfg(test)]
mod tests;
