//! Single flight across replicas for [`RedisMemoStore`](super::RedisMemoStore): a lock
//! key per memo key, taken with `SET NX PX` under a short lease that its holder renews
//! while the provider call runs.
//!
//! ```text
//! {prefix}:flight:{scope key}:{digest hex}      the holder's random token, with a TTL
//! ```
//!
//! Every step is a Lua script, so that it is atomic on the server: "the answer, or the
//! lock, or neither" in one round trip (a waiter never leads once the answer is
//! stored), and renewal and release act only while the token is still the holder's (a
//! holder whose lease lapsed never extends or deletes its successor's).

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use llm_context_layers::StoreError;
use llm_context_layers::memo::{Claim, MemoLease};
use redis_client::Script;
use redis_client::aio::ConnectionManager;

use super::error::store_error;
use super::options::millis;

// KEYS[1] the memo entry, KEYS[2] the lock; ARGV[1] the token, ARGV[2] the lease in ms.
// Returns {1, answer}, {2, ''} when the lock was taken, {0, ''} when another holds it.
const CLAIM: &str = r"
local answer = redis.call('GET', KEYS[1])
if answer then return {1, answer} end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2, ''} end
return {0, ''}
";

// KEYS[1] the lock; ARGV[1] the token, ARGV[2] the lease in ms. 1 when renewed.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

// KEYS[1] the lock; ARGV[1] the token. 1 when released.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// The scripts, sent by hash (`EVALSHA`) and loaded again only when the server lost them.
pub(crate) struct FlightScripts {
    claim: Script,
    renew: Script,
    release: Script,
}

impl FlightScripts {
    pub(crate) fn new() -> Self {
        Self {
            claim: Script::new(CLAIM),
            renew: Script::new(RENEW),
            release: Script::new(RELEASE),
        }
    }
}

/// What one claim needs: where, for how long, and how to talk to the server.
pub(crate) struct Flight<'a> {
    pub(crate) conn: &'a ConnectionManager,
    pub(crate) scripts: &'a Arc<FlightScripts>,
    pub(crate) secret: Option<&'a Arc<str>>,
    pub(crate) memo_key: String,
    pub(crate) lock_key: String,
    pub(crate) lease: Duration,
}

impl Flight<'_> {
    /// The stored answer, or the lock under a fresh token, or [`Claim::Held`].
    pub(crate) async fn claim(self) -> Result<Claim, StoreError> {
        let token = token();
        let mut conn = self.conn.clone();
        let (outcome, answer): (i64, Vec<u8>) = self
            .scripts
            .claim
            .key(&self.memo_key)
            .key(&self.lock_key)
            .arg(&token)
            .arg(millis(self.lease))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| store_error("memo claim", &e, self.secret.map(|s| &**s)))?;
        Ok(match outcome {
            1 => Claim::Answered(Box::new(super::decode_json(
                &answer,
                format_args!("memo entry {}", self.memo_key),
            )?)),
            2 => Claim::Leader(Box::new(RedisLease {
                conn: self.conn.clone(),
                scripts: Arc::clone(self.scripts),
                secret: self.secret.cloned(),
                key: self.lock_key,
                token,
                lease: self.lease,
                released: AtomicBool::new(false),
            })),
            _ => Claim::Held,
        })
    }
}

/// A token no other claim uses, on this host or another: random (std's per-process
/// random hasher keys) and counted.
fn token() -> String {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let state = RandomState::new();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let a = state.hash_one((std::process::id(), nanos, n));
    let b = state.hash_one((n, nanos, std::process::id(), "second"));
    format!("{a:016x}{b:016x}")
}

/// The lease on one key's call. Dropped unreleased (the call was cancelled), it is
/// released in the background, so that waiters need not wait out the lease; when that
/// cannot run (no runtime any more), the lease lapses on its own.
struct RedisLease {
    conn: ConnectionManager,
    scripts: Arc<FlightScripts>,
    secret: Option<Arc<str>>,
    key: String,
    token: String,
    lease: Duration,
    released: AtomicBool,
}

impl RedisLease {
    fn error(&self, what: &str, e: &redis_client::RedisError) -> StoreError {
        store_error(what, e, self.secret.as_deref())
    }
}

#[async_trait]
impl MemoLease for RedisLease {
    fn renew_every(&self) -> Duration {
        // Three tries before it lapses.
        self.lease / 3
    }

    async fn renew(&self) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let renewed: i64 = self
            .scripts
            .renew
            .key(&self.key)
            .arg(&self.token)
            .arg(millis(self.lease))
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.error("memo lease renew", &e))?;
        Ok(renewed == 1)
    }

    async fn release(&self) -> Result<(), StoreError> {
        self.released.store(true, Ordering::Release);
        let mut conn = self.conn.clone();
        self.scripts
            .release
            .key(&self.key)
            .arg(&self.token)
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(|e| self.error("memo lease release", &e))
    }
}

impl Drop for RedisLease {
    fn drop(&mut self) {
        if self.released.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (mut conn, scripts) = (self.conn.clone(), Arc::clone(&self.scripts));
        let (key, token) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.token),
        );
        runtime.spawn(async move {
            // Best effort: if it fails, the lease lapses on its own.
            let _ = scripts
                .release
                .key(key)
                .arg(token)
                .invoke_async::<i64>(&mut conn)
                .await;
        });
    }
}
