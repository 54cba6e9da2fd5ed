//! [`RedisDurableStore`]: context records and memory shared by every replica.

use std::sync::Arc;

use async_trait::async_trait;
use llm_context_layers::Scope;
use llm_context_layers::durable::{ContextRecord, ContextStore, MemoryEntry, MemoryStore};
use llm_context_layers::store::{StoreError, StoreErrorKind, check_context_id, version_conflict};
use redis_client::aio::ConnectionManager;
use redis_client::{RedisError, Script};

use super::{RedisOptions, keys, open, store_error};

/// The key namespace when none is given.
pub const DEFAULT_REDIS_NAMESPACE: &str = "llmctx";

// Compare-and-set: commit only when the stored version is the expected one.
// KEYS[1] the record hash; ARGV[1] expected version, ARGV[2] the encoded record.
// Returns {1, new version} or {0, stored version}.
const SAVE: &str = r"
local found = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if found ~= tonumber(ARGV[1]) then
  return {0, found}
end
redis.call('HSET', KEYS[1], 'v', found + 1, 'r', ARGV[2])
return {1, found + 1}
";

// KEYS[1] the entry hash, KEYS[2] the tenant's index; ARGV[1] the key, ARGV[2] the JSON
// value, ARGV[3] the expiry in ms since the epoch ('' for none).
const PUT: &str = r"
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'e', ARGV[3])
if ARGV[3] == '' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIREAT', KEYS[1], ARGV[3])
end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
";

// KEYS[1] the entry hash, KEYS[2] the index; ARGV[1] the key, ARGV[2] now.
// Returns 1 when a live entry was removed.
const DELETE: &str = r"
local e = redis.call('HGET', KEYS[1], 'e')
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if not e then return 0 end
if e ~= '' and tonumber(e) <= tonumber(ARGV[2]) then return 0 end
return 1
";

// Listing from the tenant's sorted-set index (all scores 0, so members are in byte
// order), never SCAN. Index members whose hash Redis has expired are removed on the way.
// KEYS[1] the index; ARGV[1] the entry key prefix, ARGV[2] min, ARGV[3] max (ZRANGEBYLEX
// syntax), ARGV[4] limit, ARGV[5] now. Returns a flat list: key, value, expiry, ...
const RANGE: &str = r"
local limit = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
local out, stale = {}, {}
local n, offset = 0, 0
while n < limit do
  local members = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[2], ARGV[3], 'LIMIT', offset, 256)
  if #members == 0 then break end
  for _, m in ipairs(members) do
    local f = redis.call('HMGET', ARGV[1] .. m, 'v', 'e')
    if not f[1] then
      stale[#stale + 1] = m
    elseif f[2] == '' or tonumber(f[2]) > now then
      out[#out + 1] = m
      out[#out + 1] = f[1]
      out[#out + 1] = f[2]
      n = n + 1
      if n >= limit then break end
    end
  end
  offset = offset + #members
end
for _, m in ipairs(stale) do
  redis.call('ZREM', KEYS[1], m)
end
return out
";

/// Context records and memory entries in Redis, for many replicas sharing one agent
/// state.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context::StoreError> {
/// use llm_context::durable::{ContextRecord, ContextStore};
/// use llm_context::redis::RedisDurableStore;
/// use llm_context::Scope;
///
/// let store = RedisDurableStore::connect("redis://127.0.0.1:6379/").await?.with_namespace("agents");
/// let record = ContextRecord::new();
/// let version = store.save(&Scope::org("acme"), "root", &record).await?;
/// assert_eq!(version, 1);
/// # Ok(()) }
/// ```
///
/// Layout, under a namespace (default `llmctx`): a context record is the hash
/// `NS:ctx:SCOPE:ID` (`v` the version, `r` the record); a memory entry is the hash
/// `NS:mem:SCOPE:KEY` (`v` the JSON value, `e` the expiry) with Redis's own expiry set
/// to the same instant, and each tenant has a sorted-set index `NS:memidx:SCOPE` that
/// listing reads (`ZRANGEBYLEX`), so a listing costs what it returns, not the size of
/// the keyspace. A scope key has exactly one `:`, so keys of different tenants never
/// collide.
///
/// Compare-and-set, put, delete and list are Lua scripts, each atomic on the server and
/// sent by its hash (`EVALSHA`), its text only when the server does not have it yet.
/// The listing script reads entry keys it builds itself, so it needs every key of a
/// tenant on one node (a single Redis, or a primary with replicas; not Redis Cluster).
#[derive(Clone)]
pub struct RedisDurableStore {
    conn: ConnectionManager,
    namespace: String,
    secret: Option<Arc<str>>,
    scripts: Arc<Scripts>,
}

/// The scripts, sent by hash (`EVALSHA`) and loaded again only when the server lost them.
struct Scripts {
    save: Script,
    put: Script,
    delete: Script,
    range: Script,
}

impl std::fmt::Debug for RedisDurableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDurableStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl RedisDurableStore {
    /// Connects to `url` (`redis://[user:password@]host[:port][/db]`) with
    /// [`RedisOptions::default`]'s timeouts: [`connect_with`](Self::connect_with).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to `url` with the connect and response timeouts of `options`, as
    /// [`RedisStores::connect_with`](super::RedisStores::connect_with) does: fails on a
    /// URL that is not valid or credentials the server refuses
    /// ([`StoreErrorKind::Authentication`]), and no error shows the URL's password. A
    /// server that cannot be reached is not an error here: the store starts without it
    /// (each call fails with [`StoreErrorKind::Unavailable`] meanwhile) and connects when
    /// it is back; [`ping`](Self::ping) tells whether it is. The connection is
    /// multiplexed and reconnects on its own; clones share it.
    ///
    /// The key prefix of `options` is not used: the keys are under the store's
    /// [namespace](Self::with_namespace), [`DEFAULT_REDIS_NAMESPACE`] unless set.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self, StoreError> {
        let opened = open(url, &options).await?;
        let mut store = Self::from_manager(opened.conn);
        store.secret = opened.secret;
        Ok(store)
    }

    /// A store over an existing connection.
    pub fn from_manager(conn: ConnectionManager) -> Self {
        Self {
            conn,
            namespace: DEFAULT_REDIS_NAMESPACE.to_owned(),
            secret: None,
            scripts: Arc::new(Scripts {
                save: Script::new(SAVE),
                put: Script::new(PUT),
                delete: Script::new(DELETE),
                range: Script::new(RANGE),
            }),
        }
    }

    /// Puts every key under `namespace` (for several applications on one Redis).
    #[must_use]
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Whether the server answers now (`PING`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        super::connect::ping(&self.conn, self.secret.as_deref()).await
    }

    fn error(&self, what: &str, e: &RedisError) -> StoreError {
        store_error(what, e, self.secret.as_deref())
    }
}

#[async_trait]
impl ContextStore for RedisDurableStore {
    async fn load(&self, scope: &Scope, id: &str) -> Result<Option<ContextRecord>, StoreError> {
        check_context_id(id)?;
        let mut conn = self.conn.clone();
        let (version, bytes): (Option<u64>, Option<Vec<u8>>) = redis_client::cmd("HMGET")
            .arg(keys::context(&self.namespace, scope, id))
            .arg("v")
            .arg("r")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error("context load", &e))?;
        match (version, bytes) {
            (Some(version), Some(bytes)) => ContextRecord::decode(&bytes, version).map(Some),
            _ => Ok(None),
        }
    }

    async fn save(
        &self,
        scope: &Scope,
        id: &str,
        record: &ContextRecord,
    ) -> Result<u64, StoreError> {
        check_context_id(id)?;
        let mut conn = self.conn.clone();
        let (committed, version): (u8, u64) = self
            .scripts
            .save
            .key(keys::context(&self.namespace, scope, id))
            .arg(record.version)
            .arg(record.encode())
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.error("context save", &e))?;
        if committed == 1 {
            Ok(version)
        } else {
            Err(version_conflict(id, record.version, version))
        }
    }

    async fn delete(&self, scope: &Scope, id: &str) -> Result<bool, StoreError> {
        check_context_id(id)?;
        let mut conn = self.conn.clone();
        let removed: u64 = redis_client::cmd("DEL")
            .arg(keys::context(&self.namespace, scope, id))
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error("context delete", &e))?;
        Ok(removed > 0)
    }
}

/// An entry read back: its JSON value and its expiry as the scripts store it (ms since
/// the epoch, empty for none).
fn entry(key: impl Into<String>, value: &[u8], expiry: &[u8]) -> Result<MemoryEntry, StoreError> {
    let key = key.into();
    let expires_at_ms = if expiry.is_empty() {
        None
    } else {
        let parsed = std::str::from_utf8(expiry)
            .ok()
            .and_then(|e| e.parse::<u64>().ok());
        Some(parsed.ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Corrupt,
                format!(
                    "memory entry {key:?} has a bad expiry {:?}",
                    String::from_utf8_lossy(expiry)
                ),
            )
        })?)
    };
    MemoryEntry::decode(key, value, expires_at_ms)
}

#[async_trait]
impl MemoryStore for RedisDurableStore {
    async fn put(&self, scope: &Scope, entry: MemoryEntry) -> Result<(), StoreError> {
        let value = entry.encode_value();
        let expiry = entry
            .expires_at_ms
            .map(|e| e.to_string())
            .unwrap_or_default();
        let mut conn = self.conn.clone();
        self.scripts
            .put
            .key(keys::memory(&self.namespace, scope, &entry.key))
            .key(keys::memory_index(&self.namespace, scope))
            .arg(&entry.key)
            .arg(value)
            .arg(expiry)
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(|e| self.error("memory put", &e))
    }

    async fn get(
        &self,
        scope: &Scope,
        key: &str,
        now_ms: u64,
    ) -> Result<Option<MemoryEntry>, StoreError> {
        let mut conn = self.conn.clone();
        let (value, expiry): (Option<Vec<u8>>, Option<Vec<u8>>) = redis_client::cmd("HMGET")
            .arg(keys::memory(&self.namespace, scope, key))
            .arg("v")
            .arg("e")
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error("memory get", &e))?;
        let Some(value) = value else { return Ok(None) };
        let found = entry(key, &value, expiry.as_deref().unwrap_or_default())?;
        Ok((!found.is_expired(now_ms)).then_some(found))
    }

    async fn delete(&self, scope: &Scope, key: &str, now_ms: u64) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let live: i64 = self
            .scripts
            .delete
            .key(keys::memory(&self.namespace, scope, key))
            .key(keys::memory_index(&self.namespace, scope))
            .arg(key)
            .arg(now_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.error("memory delete", &e))?;
        Ok(live == 1)
    }

    async fn range(
        &self,
        scope: &Scope,
        from: &str,
        to: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<MemoryEntry>, StoreError> {
        let min = if from.is_empty() {
            "-".to_owned()
        } else {
            format!("[{from}")
        };
        let max = to.map_or_else(|| "+".to_owned(), |to| format!("({to}"));
        let mut conn = self.conn.clone();
        let flat: Vec<Vec<u8>> = self
            .scripts
            .range
            .key(keys::memory_index(&self.namespace, scope))
            .arg(keys::memory_prefix(&self.namespace, scope))
            .arg(min)
            .arg(max)
            .arg(limit)
            .arg(now_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.error("memory list", &e))?;
        flat.chunks_exact(3)
            .map(|c| entry(String::from_utf8_lossy(&c[0]), &c[1], &c[2]))
            .collect()
    }
}
