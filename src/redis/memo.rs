//! [`RedisMemoStore`]: memoized responses shared by every replica pointing at one Redis.

use std::sync::Arc;

use async_trait::async_trait;
use llm_context_layers::memo::{Claim, MemoKey, MemoStore};
use llm_context_layers::{ChatResponse, StoreError};
use redis_client::aio::ConnectionManager;

use super::error::store_error;
use super::flight::{Flight, FlightScripts};
use super::keys;
use super::options::{RedisOptions, millis};
use super::{decode_json, encode_bounded};

/// A [`MemoStore`] on Redis: one key per response, `SET … PX ttl`, named by tenant
/// (`{prefix}:memo:{scope key}:{digest}`).
///
/// Identical requests in flight at once in one tenant make one provider call across
/// every process sharing the Redis: the first takes a lock with a lease
/// ([`RedisOptions::flight_lease`], default 5 s) that it renews while its call runs, the
/// others poll for its answer. A failed call releases the lock at once; a process that
/// died stops renewing, so its lock lapses within the lease and a waiter takes over.
///
/// Entries expire after [`RedisOptions::memo_ttl`]; a response larger than
/// [`RedisOptions::max_memo_bytes`] is not stored ([`StoreErrorKind::TooLarge`](llm_context_layers::StoreErrorKind::TooLarge), which the
/// memo layer logs at debug level). The total is bounded by the server: give it a
/// `maxmemory` with a `volatile-lru` or `allkeys-lru` policy. Clones share one
/// connection, which reconnects by itself.
#[derive(Clone)]
pub struct RedisMemoStore {
    conn: ConnectionManager,
    options: Arc<RedisOptions>,
    secret: Option<Arc<str>>,
    flight: Arc<FlightScripts>,
}

impl std::fmt::Debug for RedisMemoStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisMemoStore")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisMemoStore {
    /// A store on an open connection.
    pub fn new(conn: ConnectionManager, options: RedisOptions) -> Self {
        Self::with_secret(conn, Arc::new(options), None)
    }

    pub(crate) fn with_secret(
        conn: ConnectionManager,
        options: Arc<RedisOptions>,
        secret: Option<Arc<str>>,
    ) -> Self {
        Self {
            conn,
            options,
            secret,
            flight: Arc::new(FlightScripts::new()),
        }
    }

    /// Whether the server answers now (`PING`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        super::connect::ping(&self.conn, self.secret.as_deref()).await
    }

    fn error(&self, what: &str, e: &redis_client::RedisError) -> StoreError {
        store_error(what, e, self.secret.as_deref())
    }
}

#[async_trait]
impl MemoStore for RedisMemoStore {
    async fn get(&self, key: &MemoKey) -> Result<Option<ChatResponse>, StoreError> {
        let mut conn = self.conn.clone();
        let bytes: Option<Vec<u8>> = redis_client::cmd("GET")
            .arg(keys::memo(self.options.key_prefix(), key))
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error("memo get", &e))?;
        bytes
            .map(|bytes| decode_json(&bytes, format_args!("memo entry for {key}")))
            .transpose()
    }

    async fn put(&self, key: &MemoKey, response: &ChatResponse) -> Result<(), StoreError> {
        let value = encode_bounded(response, "response", "memo", self.options.max_memo_bytes())?;
        let mut conn = self.conn.clone();
        redis_client::cmd("SET")
            .arg(keys::memo(self.options.key_prefix(), key))
            .arg(value)
            .arg("PX")
            .arg(millis(self.options.memo_ttl()))
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| self.error("memo put", &e))
    }

    async fn claim(&self, key: &MemoKey) -> Result<Claim, StoreError> {
        Flight {
            conn: &self.conn,
            scripts: &self.flight,
            secret: self.secret.as_ref(),
            memo_key: keys::memo(self.options.key_prefix(), key),
            lock_key: keys::flight(self.options.key_prefix(), key),
            lease: self.options.flight_lease(),
        }
        .claim()
        .await
    }
}
