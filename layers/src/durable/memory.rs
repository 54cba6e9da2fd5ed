//! Agent memory: a tenant-scoped JSON key/value space with TTL, key rules, a value size
//! cap and prefix listing.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::model::Scope;
use crate::store::{StoreError, StoreErrorKind, system_now_ms};

/// One memory entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MemoryEntry {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Value,
    /// When it expires, in milliseconds since the Unix epoch; `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

impl MemoryEntry {
    /// An entry.
    pub fn new(key: impl Into<String>, value: Value, expires_at_ms: Option<u64>) -> Self {
        Self {
            key: key.into(),
            value,
            expires_at_ms,
        }
    }

    /// Whether the entry has expired at `now_ms` (an entry is gone from its expiry
    /// instant on).
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|exp| exp <= now_ms)
    }

    /// The value as a backend stores it: compact JSON. Its length is what
    /// [`MemoryLimits::max_value_bytes`] bounds.
    ///
    /// ```
    /// use llm_context_layers::durable::MemoryEntry;
    /// use serde_json::json;
    ///
    /// let entry = MemoryEntry::new("user/tz", json!({"tz": "Europe/Paris"}), Some(60_000));
    /// let bytes = entry.encode_value();
    /// assert_eq!(bytes, br#"{"tz":"Europe/Paris"}"#);
    /// assert_eq!(MemoryEntry::decode("user/tz", &bytes, Some(60_000))?, entry);
    /// # Ok::<(), llm_context_layers::StoreError>(())
    /// ```
    pub fn encode_value(&self) -> Vec<u8> {
        // A JSON value has string keys and finite numbers: serialising cannot fail.
        serde_json::to_vec(&self.value).expect("a JSON value serialises")
    }

    /// An entry read back from [`encode_value`](Self::encode_value)'s bytes, with its
    /// key and expiry as the backend kept them; [`StoreErrorKind::Corrupt`] when the
    /// bytes are not JSON.
    pub fn decode(
        key: impl Into<String>,
        value: &[u8],
        expires_at_ms: Option<u64>,
    ) -> Result<Self, StoreError> {
        let key = key.into();
        match serde_json::from_slice(value) {
            Ok(value) => Ok(Self::new(key, value, expires_at_ms)),
            Err(e) => Err(StoreError::new(
                StoreErrorKind::Corrupt,
                format!("memory entry {key:?} does not decode: {e}"),
            )),
        }
    }
}

/// Where memory entries are kept: in memory, in SQLite or in Redis. The rules (keys,
/// sizes, limits) are checked once, by [`Memory`]; a backend stores what it is given and
/// never returns an entry expired at the `now_ms` it is passed.
#[async_trait]
pub trait MemoryStore: Send + Sync + 'static {
    /// Stores `entry` for `scope`, replacing any entry of the same key.
    async fn put(&self, scope: &Scope, entry: MemoryEntry) -> Result<(), StoreError>;

    /// The entry `key` of `scope` unless absent or expired at `now_ms`.
    async fn get(
        &self,
        scope: &Scope,
        key: &str,
        now_ms: u64,
    ) -> Result<Option<MemoryEntry>, StoreError>;

    /// Removes the entry `key` of `scope`; whether a live one was there.
    async fn delete(&self, scope: &Scope, key: &str, now_ms: u64) -> Result<bool, StoreError>;

    /// Up to `limit` entries of `scope` with `from <= key` and, when `to` is given,
    /// `key < to` (byte order), ascending, none expired at `now_ms`.
    async fn range(
        &self,
        scope: &Scope,
        from: &str,
        to: Option<&str>,
        limit: usize,
        now_ms: u64,
    ) -> Result<Vec<MemoryEntry>, StoreError>;
}

/// The bounds [`Memory`] enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryLimits {
    /// The longest key, in characters. Default 256.
    pub max_key_chars: usize,
    /// The largest value, in bytes of compact JSON. Default 64 KiB.
    pub max_value_bytes: usize,
    /// The most entries one listing returns. Default 1,000.
    pub max_list: usize,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        Self {
            max_key_chars: 256,
            max_value_bytes: 64 * 1024,
            max_list: 1_000,
        }
    }
}

impl MemoryLimits {
    /// Sets `max_key_chars`.
    #[must_use]
    pub fn with_max_key_chars(mut self, n: usize) -> Self {
        self.max_key_chars = n;
        self
    }

    /// Sets `max_value_bytes`.
    #[must_use]
    pub fn with_max_value_bytes(mut self, n: usize) -> Self {
        self.max_value_bytes = n;
        self
    }

    /// Sets `max_list`.
    #[must_use]
    pub fn with_max_list(mut self, n: usize) -> Self {
        self.max_list = n;
        self
    }
}

type Clock = dyn Fn() -> u64 + Send + Sync;

/// The memory API an agent's `memory.*` tools call: rules first, then the backend.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use llm_context_layers::durable::{LocalMemoryStore, Memory};
/// use llm_context_layers::{Scope, StoreErrorKind};
/// use serde_json::json;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), llm_context_layers::StoreError> {
/// let memory = Memory::new(Arc::new(LocalMemoryStore::new()));
/// let acme = Scope::org("acme");
/// memory.put(&acme, "user/lang", json!("fr"), None).await?;
/// memory.put(&acme, "user/tz", json!("Europe/Paris"), Some(Duration::from_secs(3600))).await?;
/// memory.put(&acme, "team/oncall", json!(["ana"]), None).await?;
///
/// let user: Vec<String> = memory.list(&acme, "user/", 10).await?.into_iter().map(|e| e.key).collect();
/// assert_eq!(user, ["user/lang", "user/tz"]);
/// assert_eq!(memory.get(&Scope::org("other"), "user/lang").await?, None);
///
/// // Keys starting with `_` are the system's.
/// let err = memory.put(&acme, "_index", json!(1), None).await.unwrap_err();
/// assert_eq!(err.kind, StoreErrorKind::Invalid);
/// # Ok(()) }
/// ```
///
/// Rules: a key is 1 to `max_key_chars` characters, has no control character and does
/// not start with `_` (reserved for the system); a value is at most `max_value_bytes` of
/// JSON; a listing returns at most `max_list` entries, in key order, and never a system
/// key. An entry with a TTL is gone — to `get` and to `list` alike — from its expiry on,
/// whether or not the backend has cleaned it up yet.
#[derive(Clone)]
pub struct Memory {
    store: Arc<dyn MemoryStore>,
    limits: MemoryLimits,
    clock: Arc<Clock>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Memory {
    /// Memory over `store`, with the default limits and the system clock.
    pub fn new(store: Arc<dyn MemoryStore>) -> Self {
        Self {
            store,
            limits: MemoryLimits::default(),
            clock: Arc::new(system_now_ms),
        }
    }

    /// Sets the limits.
    #[must_use]
    pub fn with_limits(mut self, limits: MemoryLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Reads the time (milliseconds since the Unix epoch) from `clock`: tests move time
    /// without sleeping.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The limits.
    pub fn limits(&self) -> MemoryLimits {
        self.limits
    }

    /// The backend.
    pub fn store(&self) -> &Arc<dyn MemoryStore> {
        &self.store
    }

    /// Stores `value` under `key`, for `ttl` when given (a zero TTL is refused: it would
    /// store something already gone).
    pub async fn put(
        &self,
        scope: &Scope,
        key: &str,
        value: Value,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.check_key(key)?;
        let mut entry = MemoryEntry::new(key, value, None);
        // Measured as the backend will store it.
        let bytes = entry.encode_value().len();
        if bytes > self.limits.max_value_bytes {
            return Err(StoreError::new(
                StoreErrorKind::TooLarge,
                format!(
                    "the value of {key:?} is {bytes} bytes of JSON; the limit is {}",
                    self.limits.max_value_bytes
                ),
            ));
        }
        entry.expires_at_ms = match ttl {
            Some(ttl) if ttl.is_zero() => {
                return Err(StoreError::new(
                    StoreErrorKind::Invalid,
                    format!("the TTL of {key:?} is zero; leave it out for no expiry"),
                ));
            }
            Some(ttl) => {
                let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
                Some((self.clock)().saturating_add(ms))
            }
            None => None,
        };
        self.store.put(scope, entry).await
    }

    /// The entry under `key`, unless absent or expired.
    pub async fn get(&self, scope: &Scope, key: &str) -> Result<Option<MemoryEntry>, StoreError> {
        self.check_key(key)?;
        self.store.get(scope, key, (self.clock)()).await
    }

    /// Removes `key`; whether a live entry was there.
    pub async fn delete(&self, scope: &Scope, key: &str) -> Result<bool, StoreError> {
        self.check_key(key)?;
        self.store.delete(scope, key, (self.clock)()).await
    }

    /// Up to `limit` (at most `max_list`) live entries whose key starts with `prefix`,
    /// in key order. An empty prefix lists every user key.
    pub async fn list(
        &self,
        scope: &Scope,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>, StoreError> {
        if prefix.starts_with('_') || prefix.chars().any(char::is_control) {
            return Err(StoreError::new(
                StoreErrorKind::Invalid,
                format!(
                    "cannot list prefix {prefix:?}: user keys never start with `_` or hold control characters"
                ),
            ));
        }
        let limit = limit.min(self.limits.max_list);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let now = (self.clock)();
        if !prefix.is_empty() {
            let to = prefix_end(prefix);
            return self
                .store
                .range(scope, prefix, to.as_deref(), limit, now)
                .await;
        }
        // Every key except the system's: below "_", then from the character after it.
        let mut out = self.store.range(scope, "", Some("_"), limit, now).await?;
        if out.len() < limit {
            let rest = self
                .store
                .range(scope, "`", None, limit - out.len(), now)
                .await?;
            out.extend(rest);
        }
        Ok(out)
    }

    fn check_key(&self, key: &str) -> Result<(), StoreError> {
        let invalid = |why: String| Err(StoreError::new(StoreErrorKind::Invalid, why));
        let chars = key.chars().count();
        if chars == 0 || chars > self.limits.max_key_chars {
            return invalid(format!(
                "a memory key must be 1 to {} characters, got {chars}",
                self.limits.max_key_chars
            ));
        }
        if key.starts_with('_') {
            return invalid(format!(
                "memory key {key:?} starts with `_`, which is reserved for the system"
            ));
        }
        if key.chars().any(char::is_control) {
            return invalid(format!("memory key {key:?} contains a control character"));
        }
        Ok(())
    }
}

/// The smallest string greater than every string that starts with `prefix`, or `None`
/// when there is none (`prefix` is all `char::MAX`). Strings compare by UTF-8 bytes, which
/// is code point order, so `[prefix, prefix_end(prefix))` is exactly the strings with that
/// prefix.
///
pub(crate) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(c as u32 + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_first_string_past_the_prefix() {
        assert_eq!(prefix_end("user/").as_deref(), Some("user0"));
        assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}")); // over the surrogates
        assert_eq!(prefix_end(""), None);
    }
}
