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
//! which reconnects by itself) and gives both stores on it:
//!
//! * [`RedisMemoStore`] — one key per memoized response, with a TTL; keys are namespaced
//!   by the tenant's scope key, as every memo key is.
//! * [`RedisArtifactStore`] — per tenant and session, bounded in count and bytes by a Lua
//!   script that writes and evicts in one atomic step.
//!
//! [`RedisStore`] holds context records and memory for many replicas sharing state:
//! compare-and-set and listing are Lua scripts, listing reads a per-tenant sorted-set
//! index (never `SCAN`). It implements [`ContextStore`](crate::durable::ContextStore) and
//! [`MemoryStore`](crate::durable::MemoryStore) and passes the same contract tests as the
//! in-memory and SQLite backends.
//!
//! Errors are [`StoreError`]s whose messages never carry the URL's password. When Redis
//! goes away, the memo layer serves from the provider and logs a warning until the
//! connection comes back.
//!
//! Tests of this module run against a real `redis-server`: `scripts/test.sh` installs
//! one where it is missing, starts it on a free port and sets `REDIS_URL`.

mod artifacts;
mod durable;
mod error;
pub(crate) mod keys;
mod memo;
mod options;

use std::sync::Arc;

use llm_context_layers::{StoreError, StoreErrorKind};
use redis_client::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use artifacts::{RedisArtifactStore, SessionUsage};
pub use durable::{DEFAULT_REDIS_NAMESPACE, RedisStore};
pub use memo::RedisMemoStore;
pub use options::RedisOptions;

pub(crate) use error::store_error;
use error::{redact_url, url_password};

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
        let (conn, secret) = open(url, &options).await?;
        let options = Arc::new(options);
        Ok(Self {
            memo: RedisMemoStore::with_secret(conn.clone(), Arc::clone(&options), secret.clone()),
            artifacts: RedisArtifactStore::with_secret(conn, options, secret),
        })
    }
}

/// Opens a multiplexed connection to `url` that reconnects by itself, with the timeouts
/// of `options`; returns it with the URL's password, which the stores scrub from their
/// errors. A direct probe comes first, so that a refused connection or a bad password is
/// reported as such rather than as the manager's retries timing out. Errors never show
/// the password; an unreadable URL is [`StoreErrorKind::Invalid`].
pub(crate) async fn open(
    url: &str,
    options: &RedisOptions,
) -> Result<(ConnectionManager, Option<Arc<str>>), StoreError> {
    let shown = redact_url(url);
    let secret: Option<Arc<str>> = url_password(url).map(Arc::from);
    let fail =
        |what: String, e: &redis_client::RedisError| store_error(&what, e, secret.as_deref());

    let client = redis_client::Client::open(url).map_err(|e| {
        let mut error = fail(format!("URL {shown} is not valid"), &e);
        error.kind = StoreErrorKind::Invalid;
        error
    })?;
    // One direct attempt first: its error says why (refused, bad password) instead of
    // the manager's retries ending in a timeout.
    let probe = tokio::time::timeout(
        options.connect_timeout(),
        client.get_multiplexed_async_connection(),
    )
    .await
    .map_err(|_| timed_out(&shown, options))?
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
    .map_err(|_| timed_out(&shown, options))?
    .map_err(|e| fail(format!("cannot connect to {shown}"), &e))?;
    Ok((conn, secret))
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

fn timed_out(shown: &str, options: &RedisOptions) -> StoreError {
    StoreError::new(
        StoreErrorKind::Timeout,
        format!(
            "cannot connect to {shown} within {:?}",
            options.connect_timeout()
        ),
    )
}
