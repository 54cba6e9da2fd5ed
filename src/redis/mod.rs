//! Redis stores, so that a fleet of replicas shares one memo and one set of artifacts.
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
//! which reconnects by itself) and gives both stores on it:
//!
//! * [`RedisMemoStore`] — one key per memoized response, with a TTL; keys are namespaced
//!   by the tenant's scope key, as every memo key is.
//! * [`RedisArtifactStore`] — per tenant and session, bounded in count and bytes by a Lua
//!   script that writes and evicts in one atomic step.
//!
//! Errors are [`StoreError`]s whose messages never carry the URL's password. When Redis
//! goes away, the memo layer serves from the provider and logs a warning until the
//! connection comes back.
//!
//! Tests of this module run against a real `redis-server`: `scripts/test.sh` installs
//! one where it is missing, starts it on a free port and sets `REDIS_URL`.

mod artifacts;
mod error;
mod keys;
mod memo;
mod options;

use std::sync::Arc;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig};
use llm_context_layers::{StoreError, StoreErrorKind};

pub use artifacts::{RedisArtifactStore, SessionUsage};
pub use memo::RedisMemoStore;
pub use options::RedisOptions;

use error::{redact_url, store_error, url_password};

/// Reconnection tries after a lost connection, before a command fails; the next command
/// starts over. Few and short: the memo layer is waiting, bounded by its own timeout.
const RECONNECT_RETRIES: usize = 3;
const RECONNECT_MAX_DELAY: std::time::Duration = std::time::Duration::from_millis(500);

/// Both Redis stores, on one connection.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RedisStores {
    /// The memo store, for [`MemoLayer`](llm_context_layers::memo::MemoLayer).
    pub memo: RedisMemoStore,
    /// The artifact store, for offloading.
    pub artifacts: RedisArtifactStore,
}

impl RedisStores {
    /// Connects with [`RedisOptions::default`]. `url` is `redis://[user:password@]host[:port][/db]`
    /// (or `redis+unix:///path`).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects with these options. Fails when the URL is not valid or the server cannot
    /// be reached within [`RedisOptions::connect_timeout`].
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self, StoreError> {
        let shown = redact_url(url);
        let secret: Option<Arc<str>> = url_password(url).map(Arc::from);
        let fail = |what: String, e: &::redis::RedisError| store_error(&what, e, secret.as_deref());

        let client = ::redis::Client::open(url)
            .map_err(|e| fail(format!("URL {shown} is not valid"), &e))?;
        // One direct attempt first: its error says why (refused, bad password) instead of
        // the manager's retries ending in a timeout.
        let probe = tokio::time::timeout(
            options.connect_timeout(),
            client.get_multiplexed_async_connection(),
        )
        .await
        .map_err(|_| timed_out(&shown, &options))?
        .map_err(|e| fail(format!("cannot connect to {shown}"), &e))?;
        drop(probe);

        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.connect_timeout()))
            .set_response_timeout(Some(options.response_timeout()))
            .set_number_of_retries(RECONNECT_RETRIES)
            .set_max_delay(RECONNECT_MAX_DELAY);
        let conn = tokio::time::timeout(
            options.connect_timeout(),
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| timed_out(&shown, &options))?
        .map_err(|e| fail(format!("cannot connect to {shown}"), &e))?;

        let options = Arc::new(options);
        Ok(Self {
            memo: RedisMemoStore::with_secret(conn.clone(), Arc::clone(&options), secret.clone()),
            artifacts: RedisArtifactStore::with_secret(conn, options, secret),
        })
    }
}

fn timed_out(shown: &str, options: &RedisOptions) -> StoreError {
    StoreError::new(
        StoreErrorKind::Timeout,
        format!(
            "cannot connect to {shown} within {:?}",
            options.connect_timeout()
        ),
    )
}
