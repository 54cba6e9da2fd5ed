//! Redis stores, so that a fleet of replicas shares one memo, one set of artifacts, and
//! durable context records and memory.
//!
//! ```no_run
//! use std::sync::Arc;
//! use llm_context::memo::MemoLayer;
//! use llm_context::mock::MockModel;
//! use llm_context::redis::RedisStores;
//! use llm_context::{ChatRequest, ContextPolicy, ContextPolicyLayer, Message, Scope};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::BoxError> {
//! // Every replica connects to the same Redis; a password in the URL never shows in errors.
//! let stores = RedisStores::connect("redis://127.0.0.1:6379/").await?;
//! let model = ServiceBuilder::new()
//!     .layer(ContextPolicyLayer::new(ContextPolicy::default())?)
//!     .layer(MemoLayer::new(Arc::new(stores.memo.clone())))
//!     .service(MockModel::echo());
//! let request = ChatRequest::new("mock", vec![Message::user("what is the number?")])
//!     .with_scope(Scope::org(1))
//!     .with_temperature(0.0);
//! let reply = model.oneshot(request).await?;
//! // A second replica asking the same for org 1 gets `reply.report.memo_hit == true`.
//! # let _ = reply; Ok(()) }
//! ```
//!
//! [`RedisStores::connect`] opens one multiplexed connection (a `ConnectionManager`,
//! which reconnects by itself) and gives the four stores on it:
//!
//! * [`RedisMemoStore`] — one key per memoized response, with a TTL; keys are namespaced
//!   by the tenant's scope key, as every memo key is.
//! * [`RedisArtifactStore`] — per tenant and session, bounded in count and bytes by a Lua
//!   script that writes and evicts in one atomic step.
//! * [`RedisCutStore`] — where each session's history was cut, so that cache-aware
//!   pruning keeps one cut across replicas (loaded before preparation, written behind).
//! * [`RedisBudgetStore`] — budget counters, checked and reserved in one Lua script, so
//!   replicas share a tenant's budget without overspending.
//!
//! [`RedisDurableStore`] holds context records and memory for many replicas sharing state:
//! compare-and-set and listing are Lua scripts, listing reads a per-tenant sorted-set
//! index (never `SCAN`). It implements [`ContextStore`](crate::durable::ContextStore) and
//! [`MemoryStore`](crate::durable::MemoryStore) and passes the same contract tests as the
//! in-memory and SQLite backends.
//!
//! Errors are [`StoreError`]s whose messages never carry the URL's password. When Redis
//! is away — at start-up too — the memo layer serves from the provider and logs a
//! warning until the connection comes back; refused credentials fail the constructor
//! with [`StoreErrorKind::Authentication`].
//!
//! Tests of this module run against a real `redis-server`: `scripts/test.sh` installs
//! one where it is missing, starts it on a free port and sets `REDIS_URL`.

mod artifacts;
mod budgets;
mod connect;
mod cuts;
mod durable;
mod error;
mod flight;
pub(crate) mod keys;
mod ledger;
mod memo;
mod options;

use std::sync::Arc;

use llm_context_layers::{StoreError, StoreErrorKind};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use artifacts::{RedisArtifactStore, SessionUsage};
pub use budgets::RedisBudgetStore;
pub use cuts::RedisCutStore;
pub use durable::{DEFAULT_REDIS_NAMESPACE, RedisDurableStore};
#[cfg(feature = "serve")]
pub(crate) use ledger::LedgerConnection;
pub use ledger::{LEDGER_STREAM_ROWS, RedisLedgerStream};
pub use memo::RedisMemoStore;
pub use options::RedisOptions;

pub(crate) use connect::open;
pub(crate) use error::store_error;

/// The Redis stores a replica shares with the others, on one connection.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisStores {
    /// The memo store, for [`MemoLayer`](llm_context_layers::memo::MemoLayer).
    pub memo: RedisMemoStore,
    /// The artifact store, for offloading.
    pub artifacts: RedisArtifactStore,
    /// Where each session was cut, for cache-aware pruning
    /// ([`ContextPolicyLayer::with_cut_store`](crate::ContextPolicyLayer::with_cut_store)).
    pub cuts: RedisCutStore,
    /// Budget counters, for [`BudgetLayer::with_store`](crate::budget::BudgetLayer::with_store).
    pub budgets: RedisBudgetStore,
    /// The ledger of `serve`, shared by its replicas.
    pub ledger: RedisLedgerStream,
}

impl RedisStores {
    /// Connects with [`RedisOptions::default`]. `url` is `redis://[user:password@]host[:port][/db]`
    /// (or `redis+unix:///path`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects with these options.
    ///
    /// Fails only on a configuration error: a URL that is not valid or settings the
    /// server refuses ([`StoreErrorKind::Invalid`]), or credentials it refuses — a wrong
    /// password or user, or none where one is required
    /// ([`StoreErrorKind::Authentication`]). A server that cannot be reached within
    /// [`RedisOptions::connect_timeout`] is an outage, not an error: the stores start
    /// degraded (a `warn` event, `redis_unreachable`, says so; every call fails with
    /// [`StoreErrorKind::Unavailable`] or `Timeout`, which the memo and offload steps
    /// answer by calling the provider, within the memo's own store timeout) and connect
    /// as soon as the server is back. Use
    /// [`ping`](Self::ping) to require a live server.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self, StoreError> {
        let connect::Opened { conn, secret, twin } = open(url, &options).await?;
        let options = Arc::new(options);
        Ok(Self {
            memo: RedisMemoStore::with_secret(conn.clone(), Arc::clone(&options), secret.clone()),
            artifacts: RedisArtifactStore::with_secret(
                conn.clone(),
                Arc::clone(&options),
                secret.clone(),
            ),
            cuts: RedisCutStore::with_secret(conn.clone(), Arc::clone(&options), secret.clone()),
            ledger: RedisLedgerStream::with_secret(twin, Arc::clone(&options), secret.clone()),
            budgets: RedisBudgetStore::with_secret(conn, options, secret),
        })
    }

    /// Whether the server answers now (`PING`), for a readiness check or a caller that
    /// will not start degraded.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.memo.ping().await
    }
}

/// `value` as JSON, unless it is over `max` bytes ([`StoreErrorKind::TooLarge`]). `what`
/// names the value (`"artifact"`) and `bound` the limit (`"session"`) in the error.
pub(crate) fn encode_bounded<T: Serialize + ?Sized>(
    value: &T,
    what: &str,
    bound: &str,
    max: usize,
) -> Result<Vec<u8>, StoreError> {
    let bytes = serde_json::to_vec(value).map_err(|e| {
        StoreError::new(
            StoreErrorKind::Other,
            format!("cannot encode the {what}: {e}"),
        )
    })?;
    if bytes.len() > max {
        return Err(StoreError::new(
            StoreErrorKind::TooLarge,
            format!(
                "a {} byte {what} is over the {bound} bound of {max} bytes",
                bytes.len()
            ),
        ));
    }
    Ok(bytes)
}

/// A value read back from its JSON; [`StoreErrorKind::Corrupt`] when it does not decode.
/// `what` names it in the error (`"artifact 42"`).
pub(crate) fn decode_json<T: DeserializeOwned>(
    bytes: &[u8],
    what: impl std::fmt::Display,
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|e| {
        StoreError::new(
            StoreErrorKind::Corrupt,
            format!("redis {what} does not decode: {e}"),
        )
    })
}
